//! `dlock elect` as users run it, against a real redis-server: a command runs only while its
//! `dlock` leads (with its term and value in the environment), candidates take turns in the
//! order they came, `-n` gives up on a busy election with status 1, `--observe --json` prints
//! every leader as it changes, and a lead lost behind the leader's back stops its command
//! (status 75).

#[path = "support/dlock_cli.rs"]
mod dlock_cli;
#[path = "../../tests/support/processes.rs"]
mod processes;

use std::collections::HashMap;
use std::process::Stdio;

use dlock_cli::{LIMIT, dlock, exit_code, run, status, stderr};
use dlock_harness::RedisServer;
use processes::{signal, until};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout};

/// The next line `lines` prints, within the limit.
async fn next_line(lines: &mut Lines<BufReader<ChildStdout>>) -> String {
    tokio::time::timeout(LIMIT, lines.next_line())
        .await
        .expect("a line in time")
        .expect("read")
        .expect("a line, not the end")
}

/// `dlock elect args…` with its stdout piped.
fn elect(url: &str, args: &[&str]) -> (Child, Lines<BufReader<ChildStdout>>) {
    let mut child = dlock(url)
        .arg("elect")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("dlock runs");
    let lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    (child, lines)
}

/// What a leading `dlock elect` with no command prints, up to `DLOCK_BACKEND`.
async fn printed_env(lines: &mut Lines<BufReader<ChildStdout>>) -> HashMap<String, String> {
    let mut printed = HashMap::new();
    loop {
        let line = next_line(lines).await;
        let (name, value) = line.split_once('=').expect("NAME=value");
        printed.insert(name.to_owned(), value.to_owned());
        if name == "DLOCK_BACKEND" {
            return printed;
        }
    }
}

/// One `--observe --json` line: (leader, term), `None` when nobody leads.
async fn observed(lines: &mut Lines<BufReader<ChildStdout>>) -> Option<(String, u64)> {
    let line = next_line(lines).await;
    let seen: Value = serde_json::from_str(&line).expect("one JSON object a line");
    assert_eq!(seen["name"], "scheduler", "{line}");
    match (&seen["leader"], &seen["term"]) {
        (Value::String(leader), Value::Number(term)) => {
            Some((leader.clone(), term.as_u64().expect("a term")))
        }
        (Value::Null, Value::Null) => None,
        _ => panic!("an odd line: {line}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn candidates_take_turns_and_an_observer_sees_each_leader() {
    let server = RedisServer::start().await.expect("redis-server");
    let url = server.url();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("led");

    let (mut observer, mut seen) = elect(&url, &["--observe", "--json", "scheduler"]);
    assert_eq!(observed(&mut seen).await, None, "a leader of a new name");

    // node-a leads, holding the lead with no command.
    let (mut a, mut a_out) = elect(&url, &["scheduler", "node-a"]);
    let env = printed_env(&mut a_out).await;
    assert_eq!(env["DLOCK_LEADER"], "node-a");
    assert_eq!(env["DLOCK_BACKEND"], "redis");
    let term_a: u64 = env["DLOCK_TERM"].parse().expect("a term");
    assert_eq!(env["DLOCK_FENCING_TOKEN"], env["DLOCK_TERM"]);
    assert_eq!(
        observed(&mut seen).await,
        Some(("node-a".to_owned(), term_a))
    );

    // Busy: -n gives up at once with status 1.
    let busy = run(&url, &["elect", "-n", "scheduler", "node-c", "--", "true"]).await;
    assert_eq!(status(&busy), 1, "{}", stderr(&busy));
    assert!(
        stderr(&busy).contains("another leader"),
        "{}",
        stderr(&busy)
    );

    // node-b waits, then runs its command once node-a resigns (SIGTERM).
    let script = format!("echo \"$DLOCK_TERM $DLOCK_LEADER\" > '{}'", out.display());
    let (mut b, _b_out) = elect(&url, &["scheduler", "node-b", "--", "sh", "-c", &script]);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!out.exists(), "node-b's command ran while node-a led");
    signal(&a, "TERM");
    assert_eq!(exit_code(&mut a).await, 0, "a lead ends well on SIGTERM");
    assert_eq!(exit_code(&mut b).await, 0, "node-b's command's status");
    let written = std::fs::read_to_string(&out).expect("node-b's command ran");
    let (term_b, leader_b) = written.trim().split_once(' ').expect("TERM LEADER");
    let term_b: u64 = term_b.parse().expect("a term");
    assert_eq!(leader_b, "node-b");
    assert!(term_b > term_a, "term {term_b} after {term_a}");

    // The observer saw nobody (node-a resigned), node-b, and nobody again.
    let mut changes = Vec::new();
    while changes.last() != Some(&None) || changes.len() < 2 {
        changes.push(observed(&mut seen).await);
    }
    assert!(
        changes.contains(&Some(("node-b".to_owned(), term_b))),
        "the observer missed node-b: {changes:?}"
    );
    signal(&observer, "TERM");
    assert_eq!(exit_code(&mut observer).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lead_lost_behind_the_leaders_back_stops_its_command() {
    let server = RedisServer::start().await.expect("redis-server");
    let dir = tempfile::tempdir().expect("tempdir");
    let started = dir.path().join("started");
    let script = format!("touch '{}'; exec sleep 60", started.display());
    let (mut leader, _out) = elect(
        &server.url(),
        &[
            "--ttl",
            "3s",
            "--kill-after",
            "1s",
            "scheduler",
            "node-a",
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    until("the command starts", LIMIT, || started.exists()).await;
    // An operator breaks the lead: the next renewal finds it gone.
    let deleted = server
        .command(&["DEL", "{dlock:scheduler}"])
        .await
        .expect("DEL");
    assert_eq!(deleted.trim(), "1", "the leadership's key");
    assert_eq!(
        exit_code(&mut leader).await,
        75,
        "a lost lead stops the command"
    );
}
