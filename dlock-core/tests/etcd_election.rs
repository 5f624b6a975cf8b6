//! Leader election on etcd against the real peer, both ways: `etcdctl elect` (Go's
//! `concurrency.Election`) and dlock campaign for the same name, each sees the other lead
//! (`leader`, `observe`; `etcdctl elect -l`), and each takes over when the other resigns.

mod support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use dlock_core::{Leader, Locker};
use dlock_harness::EtcdServer;
use futures_util::StreamExt;
use support::processes::{etcdctl, signal};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;
use tokio::sync::mpsc::UnboundedReceiver;

/// A Locker without a key prefix: its names are etcdctl's.
async fn locker(server: &EtcdServer) -> Locker {
    let config = support::connect::config_at(
        &server.url(),
        Duration::from_secs(10),
        Duration::from_secs(2),
    )
    .with_key_prefix(String::new());
    support::connect::locker_with(&config).await
}

/// `etcdctl elect <args>`, its stdout's lines sent on the receiver as they come (drained to
/// the end: a Go program writing to a closed pipe dies of SIGPIPE without resigning).
fn etcdctl_elect(server: &EtcdServer, args: &[&str]) -> (Child, UnboundedReceiver<String>) {
    let mut child = etcdctl(&server.endpoint())
        .arg("elect")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("etcdctl (Debian package etcd-client) not found: run scripts/install-test-deps.sh");
    let stdout = child.stdout.take().expect("piped stdout");
    let (lines_tx, lines_rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let _ = lines_tx.send(line);
        }
    });
    (child, lines_rx)
}

/// The next two lines etcdctl prints for a leader (its key, then its value), within 5 s.
async fn leader_lines(lines: &mut UnboundedReceiver<String>, what: &str) -> (String, String) {
    tokio::time::timeout(Duration::from_secs(5), async {
        let key = lines.recv().await.expect("etcdctl printed a key");
        let value = lines.recv().await.expect("etcdctl printed a value");
        (key, value)
    })
    .await
    .unwrap_or_else(|_| panic!("etcdctl did not print {what} within 5 s"))
}

/// `etcdctl elect` leads: dlock's `leader` and observer show its proposal and a term, a dlock
/// campaign waits, and once etcdctl resigns (SIGINT) the dlock candidate leads — promptly,
/// with a greater term — and its observer shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlock_sees_an_etcdctl_leader_and_takes_over_when_it_resigns() {
    let server = EtcdServer::start().await.expect("etcd");
    let name = "scheduler";
    let (etcdctl_leader, mut printed) = etcdctl_elect(&server, &[name, "etcdctl-node"]);
    let (key, value) = leader_lines(&mut printed, "its own leadership").await;
    assert!(key.starts_with("scheduler/"), "etcdctl printed {key:?}");
    assert_eq!(value, "etcdctl-node");

    let observer = locker(&server).await;
    // The observer runs on its own: it must be told of each change while it waits.
    let (seen_tx, mut leaders) = tokio::sync::mpsc::unbounded_channel();
    let observing = tokio::spawn({
        let observer = observer.clone();
        async move {
            let mut changes = Box::pin(observer.observe(name));
            while let Some(leader) = changes.next().await {
                if seen_tx.send(leader.expect("observe")).is_err() {
                    return;
                }
            }
        }
    });
    let seen = leaders.recv().await.expect("observer");
    let etcdctl_term = match seen {
        Some(Leader {
            ref value, term, ..
        }) if value == "etcdctl-node" && term > 0 => term,
        other => panic!("dlock's observer saw {other:?}, not etcdctl's leader"),
    };
    assert_eq!(observer.leader(name).await.expect("leader"), seen);

    let candidate = locker(&server).await;
    let campaign = tokio::spawn(async move {
        let leading = candidate.campaign(name, "dlock-node").await;
        (leading, Instant::now(), candidate)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !campaign.is_finished(),
        "dlock was elected while etcdctl leads"
    );

    let resigned = Instant::now();
    signal(&etcdctl_leader, "INT");
    let (leading, elected, _candidate) = campaign.await.expect("campaign");
    let leading = leading.expect("dlock is elected after etcdctl resigned");
    assert!(
        elected - resigned < Duration::from_secs(3),
        "elected {:?} after etcdctl resigned: by its lease's end, not its resign",
        elected - resigned
    );
    assert!(
        leading.term() > etcdctl_term,
        "term {} after {etcdctl_term}",
        leading.term()
    );
    let next = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if let Some(leader) = leaders.recv().await.expect("observer") {
                return leader;
            }
        }
    })
    .await
    .expect("dlock's observer saw the new leader");
    assert_eq!(
        (next.value.as_str(), next.term),
        ("dlock-node", leading.term())
    );
    leading.resign().await.expect("resign");
    observing.abort();
}

/// dlock leads: `etcdctl elect -l` prints dlock's value (and its proclaimed one), an
/// `etcdctl elect` candidate waits, and once dlock resigns it leads, which dlock's `leader`
/// shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_sees_a_dlock_leader_and_takes_over_when_it_resigns() {
    let server = EtcdServer::start().await.expect("etcd");
    let name = "compactor";
    let dlock = locker(&server).await;
    let mut leading = dlock.campaign(name, "dlock-node").await.expect("campaign");

    let (observer, mut observed) = etcdctl_elect(&server, &["-l", name]);
    let (key, value) = leader_lines(&mut observed, "dlock's leadership").await;
    assert!(key.starts_with("compactor/"), "etcdctl printed {key:?}");
    assert_eq!(value, "dlock-node", "etcdctl elect -l");

    leading
        .proclaim("dlock-node, draining")
        .await
        .expect("proclaim");
    let (_, value) = leader_lines(&mut observed, "dlock's proclaimed value").await;
    assert_eq!(
        value, "dlock-node, draining",
        "etcdctl elect -l after the proclaim"
    );

    let (candidate, mut elected) = etcdctl_elect(&server, &[name, "etcdctl-node"]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        elected.try_recv().is_err(),
        "etcdctl was elected while dlock leads"
    );
    let dlock_term = leading.term();
    let resigned = Instant::now();
    leading.resign().await.expect("resign");
    let (key, value) = leader_lines(&mut elected, "its own leadership").await;
    println!(
        "etcdctl elected {:?} after dlock resigned",
        resigned.elapsed()
    );
    assert!(key.starts_with("compactor/"), "etcdctl printed {key:?}");
    assert_eq!(value, "etcdctl-node");
    let (_, value) = leader_lines(&mut observed, "etcdctl's leadership").await;
    assert_eq!(
        value, "etcdctl-node",
        "etcdctl elect -l after dlock resigned"
    );
    let leader = dlock.leader(name).await.expect("leader").expect("a leader");
    assert_eq!(leader.value, "etcdctl-node");
    assert!(
        leader.term > dlock_term,
        "term {} after {dlock_term}",
        leader.term
    );

    for mut child in [candidate, observer] {
        signal(&child, "INT");
        child.wait().await.expect("etcdctl exits");
    }
}
