//! `dlock run` leaves nothing behind when it ends, seen from the tools users run beside it:
//!
//! - A `dlock run --wait` that gives up while another holds the lock exits 1 and leaves no
//!   queue key: once the holder exits, `etcdctl lock` (etcd) or Curator's `InterProcessMutex`
//!   (ZooKeeper) gets the lock within a second, not after the given-up waiter's ttl.
//! - A `dlock run` killed with SIGKILL takes its command along (`PR_SET_PDEATHSIG`), rather
//!   than leaving it running unprotected once the lease runs out.
//! - `dlock run -x` takes the write side of a read-write lock: on ZooKeeper it is excluded by
//!   a Curator `InterProcessReadWriteLock` reader, and excludes one.
//!
//! Waiting for a condition polls it (with a limit); no assertion depends on a sleep being long
//! enough.

#[path = "support/dlock_cli.rs"]
mod dlock_cli;
#[path = "../../tests/support/processes.rs"]
mod processes;

use std::path::Path;
use std::time::{Duration, Instant};

use dlock_cli::{LIMIT, dlock, hold, run};
use dlock_harness::{Curator, EtcdServer, RedisServer, ZkServer};
use processes::{etcd_keys, etcdctl, signal, until};
use tokio::process::Child;

/// How soon after the holder's exit the next holder must have the lock: far below the
/// given-up waiter's 12 s ttl, which a leftover queue key would make it wait out.
const HANDOVER: Duration = Duration::from_secs(1);

/// Signals `holder` to release (SIGTERM) and waits for its exit; the moment it had exited.
async fn end_hold(mut holder: Child) -> Instant {
    signal(&holder, "TERM");
    let status = tokio::time::timeout(LIMIT, holder.wait())
        .await
        .expect("the holder exits in time")
        .expect("wait");
    assert_eq!(status.code(), Some(0), "the holder released and exited 0");
    Instant::now()
}

/// A `dlock run --wait 1s` on a held lock: exits 1 (busy).
async fn give_up_waiting(url: &str, key: &str) {
    let waiter = run(
        url,
        &[
            "run",
            "--key-prefix",
            "",
            "--ttl",
            "12s",
            "--wait",
            "1s",
            key,
            "true",
        ],
    )
    .await;
    assert_eq!(
        waiter.status.code(),
        Some(1),
        "a wait on a held lock gives up busy: {}",
        String::from_utf8_lossy(&waiter.stderr)
    );
}

/// The issue's reproduction: a holder, a `dlock run --wait 1s` that gives up, the holder
/// exits — and `etcdctl lock` has the lock within a second, then `dlock run -n` too. Before
/// `dlock` deleted its queue key and revoked its lease on the way out, both were refused for
/// about the given-up waiter's ttl.
#[tokio::test]
async fn a_given_up_wait_leaves_nothing_for_etcdctl() {
    let server = EtcdServer::start().await.expect("etcd");
    let (url, endpoint) = (server.url(), server.endpoint());

    let (holder, _) = hold(&url, &["--key-prefix", "", "--ttl", "12s"], "W").await;
    give_up_waiting(&url, "W").await;
    let left = etcd_keys(&endpoint, "W/").await;
    assert_eq!(
        left.len(),
        1,
        "only the holder's key is left after the waiter gave up: {left:?}"
    );
    let released = end_hold(holder).await;

    let next = etcdctl(&endpoint)
        .args(["lock", "W", "echo", "etcdctl-ran"])
        .output();
    let next = tokio::time::timeout(LIMIT, next)
        .await
        .expect("etcdctl lock ends")
        .expect("etcdctl (Debian package etcd-client) not found: run scripts/install-test-deps.sh");
    let waited = released.elapsed();
    assert!(next.status.success(), "{next:?}");
    assert!(String::from_utf8_lossy(&next.stdout).contains("etcdctl-ran"));
    assert!(
        waited < HANDOVER,
        "etcdctl lock got the lock {waited:?} after the holder exited: something of the \
         given-up waiter was left"
    );
    let again = run(&url, &["run", "--key-prefix", "", "-n", "W", "true"]).await;
    assert_eq!(
        again.status.code(),
        Some(0),
        "dlock run -n after everyone left: {}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(etcd_keys(&endpoint, "W/").await, Vec::<String>::new());
}

/// The same on ZooKeeper, with Curator's `InterProcessMutex` as the next holder.
#[tokio::test]
async fn a_given_up_wait_leaves_nothing_for_curator() {
    let server = ZkServer::start().await.expect("zookeeper");
    let url = server.url();
    let mut curator = Curator::start(&server.connect_string())
        .await
        .expect("Curator (run scripts/install-test-deps.sh)");

    let (holder, _) = hold(&url, &["--key-prefix", "", "--ttl", "12s"], "W").await;
    give_up_waiting(&url, "W").await;
    let released = end_hold(holder).await;
    curator.send("acquire c1 mutex /W").await.expect("send");
    let said = curator.next_line(LIMIT).await;
    let waited = released.elapsed();
    assert_eq!(said.as_deref(), Some("acquired c1"));
    assert!(
        waited < HANDOVER,
        "Curator got the lock {waited:?} after the holder exited: something of the given-up \
         waiter was left"
    );
    curator.send("release c1").await.expect("send");
    assert_eq!(
        curator.next_line(LIMIT).await.as_deref(),
        Some("released c1")
    );
}

/// Whether process `pid` runs (a zombie does not count: it has ended).
fn running(pid: &str) -> bool {
    let status = Path::new("/proc").join(pid.trim()).join("stat");
    std::fs::read_to_string(status).is_ok_and(|stat| {
        // `pid (comm) state …`: the state follows the last `)`.
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}

/// A `dlock run` killed with SIGKILL can neither stop its command nor renew the lease: the
/// kernel ends the command with it (`PR_SET_PDEATHSIG`), so nothing runs unprotected once
/// the lease runs out.
#[tokio::test]
async fn a_killed_dlock_takes_its_command_along() {
    let server = RedisServer::start().await.expect("redis-server");
    let dir = tempfile::tempdir().expect("tempdir");
    let pid_file = dir.path().join("pid");
    let mut dlock_run = dlock(&server.url())
        .args([
            "run",
            "orphan",
            "sh",
            "-c",
            r#"echo $$ > "$0"; exec sleep 300"#,
        ])
        .arg(&pid_file)
        .spawn()
        .expect("dlock runs");
    until("the command started", LIMIT, || {
        std::fs::read_to_string(&pid_file).is_ok_and(|pid| pid.ends_with('\n'))
    })
    .await;
    let pid = std::fs::read_to_string(&pid_file).expect("pid");
    assert!(running(&pid), "the command runs under the lock");

    signal(&dlock_run, "KILL");
    let _ = dlock_run.wait().await;
    until(
        "the command ended with dlock",
        Duration::from_secs(10),
        || !running(&pid),
    )
    .await;
}

/// `dlock run -x` is the write side of Curator's `InterProcessReadWriteLock`: refused while a
/// Curator reader holds the path, granted once it has left, and while it holds, a Curator
/// reader waits.
#[tokio::test]
async fn write_flag_excludes_curator_readers() {
    let server = ZkServer::start().await.expect("zookeeper");
    let url = server.url();
    let mut curator = Curator::start(&server.connect_string())
        .await
        .expect("Curator (run scripts/install-test-deps.sh)");

    curator.send("acquire r1 read /rw").await.expect("send");
    assert_eq!(
        curator.next_line(LIMIT).await.as_deref(),
        Some("acquired r1")
    );
    let refused = run(&url, &["run", "--key-prefix", "", "-x", "-n", "rw", "true"]).await;
    assert_eq!(
        refused.status.code(),
        Some(1),
        "dlock -x got the write lock while Curator read: {}",
        String::from_utf8_lossy(&refused.stderr)
    );
    curator.send("release r1").await.expect("send");
    assert_eq!(
        curator.next_line(LIMIT).await.as_deref(),
        Some("released r1")
    );

    let (writer, printed) = hold(&url, &["--key-prefix", "", "-x", "-n"], "rw").await;
    assert_eq!(printed.get("DLOCK_KEY").map(String::as_str), Some("rw"));
    curator.send("acquire r2 read /rw").await.expect("send");
    assert_eq!(
        curator.next_line(Duration::from_millis(500)).await,
        None,
        "Curator read while dlock -x held the write lock"
    );
    end_hold(writer).await;
    assert_eq!(
        curator.next_line(LIMIT).await.as_deref(),
        Some("acquired r2")
    );
    curator.send("release r2").await.expect("send");
    assert_eq!(
        curator.next_line(LIMIT).await.as_deref(),
        Some("released r2")
    );
}
