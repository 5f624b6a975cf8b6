//! Helpers for tests that run other programs: `etcdctl`, signals, waiting for a condition.

#![allow(dead_code, unreachable_pub)]

use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

/// Polls `condition` every few milliseconds until it holds; panics after `limit`.
pub async fn until(what: &str, limit: Duration, mut condition: impl FnMut() -> bool) {
    let give_up = Instant::now() + limit;
    while !condition() {
        assert!(Instant::now() < give_up, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Polls the async `condition` every few milliseconds until it holds; panics after `limit`.
pub async fn eventually(what: &str, limit: Duration, mut condition: impl AsyncFnMut() -> bool) {
    let give_up = Instant::now() + limit;
    while !condition().await {
        assert!(Instant::now() < give_up, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Sends `signal` (`TERM`, `KILL`, …) to `child` with kill(1).
pub fn signal(child: &Child, signal: &str) {
    let pid = child.id().expect("running").to_string();
    let status = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid])
        .status()
        .expect("kill");
    assert!(status.success(), "kill -{signal} {pid}");
}

/// `etcdctl --endpoints=<endpoint>` (API v3), killed if dropped.
pub fn etcdctl(endpoint: &str) -> Command {
    let mut command = Command::new("etcdctl");
    command
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"))
        .kill_on_drop(true);
    command
}

/// The keys under `prefix`, read with etcdctl.
pub async fn etcd_keys(endpoint: &str, prefix: &str) -> Vec<String> {
    let output = etcdctl(endpoint)
        .args(["get", prefix, "--prefix", "--keys-only"])
        .output()
        .await
        .expect("etcdctl (Debian package etcd-client) not found: run scripts/install-test-deps.sh");
    assert!(output.status.success(), "etcdctl get failed: {output:?}");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|line| !line.is_empty())
        .map(str::to_owned)
        .collect()
}
