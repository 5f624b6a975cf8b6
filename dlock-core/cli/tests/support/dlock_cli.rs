//! Running the `dlock` binary in tests: a command with a clean environment, a run to its
//! end, a hold, and the status and messages of what ran.

#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::process::{Output, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The binary under test, built by cargo for this test.
pub const DLOCK: &str = env!("CARGO_BIN_EXE_dlock");

/// The most any `dlock` here may take before it is considered hung.
pub const LIMIT: Duration = Duration::from_secs(60);

/// `dlock` with `url` as `DLOCK_URL` and a 2 s operation timeout, and no other `DLOCK_*`
/// variable from the test's own environment.
pub fn dlock(url: &str) -> Command {
    let mut command = Command::new(DLOCK);
    for (name, _) in std::env::vars() {
        if name.starts_with("DLOCK_") {
            command.env_remove(name);
        }
    }
    command
        .env("DLOCK_URL", url)
        .env("DLOCK_OPERATION_TIMEOUT", "2s")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

/// Runs `dlock args…` to its end; its output.
pub async fn run(url: &str, args: &[&str]) -> Output {
    let output = dlock(url).args(args).output();
    tokio::time::timeout(LIMIT, output)
        .await
        .unwrap_or_else(|_| panic!("dlock {args:?} hung"))
        .expect("dlock runs")
}

pub fn status(output: &Output) -> i32 {
    output.status.code().expect("dlock exits, not killed")
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// `dlock run args… KEY` with no command: holds the lock until signalled. Returns the process
/// and what it printed (`DLOCK_KEY`, `DLOCK_FENCING_TOKEN`, `DLOCK_BACKEND`) once it holds.
pub async fn hold(url: &str, args: &[&str], key: &str) -> (Child, HashMap<String, String>) {
    let mut child = dlock(url)
        .arg("run")
        .args(args)
        .arg(key)
        .stdout(Stdio::piped())
        .spawn()
        .expect("dlock runs");
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    let mut printed = HashMap::new();
    let read = async {
        while let Some(line) = lines.next_line().await.expect("read") {
            let (name, value) = line.split_once('=').expect("NAME=value");
            printed.insert(name.to_owned(), value.to_owned());
            if name == "DLOCK_BACKEND" {
                return;
            }
        }
        panic!("dlock run {key} exited before holding");
    };
    tokio::time::timeout(LIMIT, read)
        .await
        .expect("dlock run holds in time");
    (child, printed)
}

/// Waits for `child` to exit; its status code.
pub async fn exit_code(child: &mut Child) -> i32 {
    let status = tokio::time::timeout(LIMIT, child.wait())
        .await
        .expect("dlock exits in time")
        .expect("wait");
    status.code().expect("dlock exits, not killed")
}
