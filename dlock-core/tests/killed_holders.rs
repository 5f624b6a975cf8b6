//! Fault tests with real processes, in every lock mode, on Redis (single server and Cluster),
//! RedLock (5 masters; its exclusive lock only), etcd (3 members), ZooKeeper (3 servers) and
//! PostgreSQL: a holder process is killed with SIGKILL —
//! nothing released, no goodbye — and what it held frees at its ttl for the one waiting in
//! this process; and the etcd or ZooKeeper leader is killed while a writer or readers hold and
//! a writer waits, without a grant lost or given twice.
//!
//! The holder is this very test binary, run again with `DLOCK_TEST_HOLDER` set: its
//! [`holder_process`] takes the lock, prints `HELD <token>` and waits to be killed.
//! Waiting for a condition polls it (with a limit); no assertion depends on a sleep being long
//! enough.

mod support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use dlock_core::backend::Fencing;
use dlock_core::{Error, LockMode, Locker};
use dlock_harness::{
    EtcdCluster, PostgresServer, RedisCluster, RedisNodes, RedisServer, ZkEnsemble,
};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// `<mode> <url>` for [`holder_process`]: `write`, `read` or `permits:<n>`.
const HOLDER: &str = "DLOCK_TEST_HOLDER";

/// The lock every test here contends on.
const KEY: &str = "payroll";

/// The ttl of every lock here: how long a killed holder's share may outlive it.
const TTL: Duration = Duration::from_secs(3);

/// How much later than its ttl a killed holder's lock may free: the backend's expiry
/// granularity (etcd's lease checks run every 500 ms; ZooKeeper expires sessions at the tick,
/// 500 ms in the harness) and one re-check.
const EXPIRY_SLACK: Duration = Duration::from_millis(1500);

async fn locker(url: &str, ttl: Duration) -> Locker {
    support::connect::locker_at(url, ttl, Duration::from_secs(2)).await
}

/// Whether locks here ask for fencing tokens: wherever the backend has them (not RedLock).
fn fenced(locker: &Locker) -> bool {
    locker.capabilities().fencing != Fencing::None
}

fn mode_of(spec: &str) -> LockMode {
    match spec {
        "write" => LockMode::Exclusive,
        "read" => LockMode::Shared,
        permits => LockMode::Permit {
            limit: permits
                .strip_prefix("permits:")
                .and_then(|n| n.parse().ok())
                .expect("write, read or permits:<n>"),
        },
    }
}

/// Not a test of its own: the body of the holder process the tests below start and kill.
/// Without `DLOCK_TEST_HOLDER` it does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_process() {
    let Ok(spec) = std::env::var(HOLDER) else {
        return;
    };
    let (mode, url) = spec.split_once(' ').expect("<mode> <url>");
    let locker = locker(url, TTL).await;
    let guard = locker
        .lock_as(KEY, mode_of(mode))
        .fencing(fenced(&locker))
        .await
        .expect("the holder process acquires");
    println!("HELD {}", guard.fencing_token().unwrap_or_default());
    std::future::pending::<()>().await;
}

/// A running holder process and the fencing token of what it holds.
struct Holder {
    child: Child,
    token: u64,
}

impl Holder {
    /// Starts a holder process of `mode` (as [`holder_process`] spells it) on `url`, and
    /// waits until it holds.
    async fn start(mode: &str, url: &str) -> Self {
        let mut child = Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "holder_process",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(HOLDER, format!("{mode} {url}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn the holder process");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let token = tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                let line = lines
                    .next_line()
                    .await
                    .expect("read")
                    .expect("the holder process exited before holding the lock");
                // libtest may print `test holder_process ... ` on the same line.
                if let Some((_, token)) = line.split_once("HELD ") {
                    break token.trim().parse().expect("token");
                }
            }
        })
        .await
        .expect("the holder process never held the lock");
        Self { child, token }
    }

    /// SIGKILLs the process and reaps it; when it was killed: the instant just before the
    /// signal, since a server that drops a dead client's locks at once (PostgreSQL's session
    /// locks) can grant the waiter before this thread runs again after the signal.
    async fn kill(mut self) -> Instant {
        let killed = Instant::now();
        self.child.start_kill().expect("SIGKILL the holder process");
        self.child.wait().await.expect("reap");
        killed
    }
}

/// A task that waits (up to 30 s) for `mode` on [`KEY`] and reports the outcome and when.
fn spawn_waiter(
    locker: &Locker,
    mode: LockMode,
) -> tokio::task::JoinHandle<(dlock_core::Result<dlock_core::LockGuard>, Instant)> {
    let locker = locker.clone();
    tokio::spawn(async move {
        let guard = locker
            .lock_as(KEY, mode)
            .fencing(fenced(&locker))
            .wait(Duration::from_secs(30))
            .await;
        (guard, Instant::now())
    })
}

/// A holder process of `holder_mode` is killed while this process waits for `waiter_mode`
/// (which it could not get while the holder lived): the waiter gets it no earlier than the
/// kill and within the ttl plus [`EXPIRY_SLACK`], with a higher fencing token. `others` are
/// held by this process all along (a renewed permit next to the killed one) and stay held.
async fn killed_holder_frees_at_its_ttl(
    url: &str,
    holder_mode: &str,
    waiter_mode: LockMode,
    others: &[LockMode],
) {
    let waiter = locker(url, TTL).await;
    let mut kept = Vec::new();
    for mode in others {
        kept.push(
            waiter
                .lock_as(KEY, *mode)
                .await
                .expect("this process's own"),
        );
    }
    let holder = Holder::start(holder_mode, url).await;
    let held_token = holder.token;
    let refused = waiter.lock_as(KEY, waiter_mode).wait(Duration::ZERO).await;
    assert!(
        matches!(refused, Err(Error::Busy { .. })),
        "granted next to the live holder: {refused:?}"
    );
    let waiting = spawn_waiter(&waiter, waiter_mode);
    let killed = holder.kill().await;
    let (guard, acquired) = waiting.await.expect("waiter");
    let guard = guard.expect("the waiter gets what the killed holder held");
    assert!(acquired >= killed, "granted before the holder was killed");
    let freed_after = acquired - killed;
    println!(
        "{holder_mode} of the killed holder freed {freed_after:?} after the kill (ttl {TTL:?})"
    );
    assert!(
        freed_after <= TTL + EXPIRY_SLACK,
        "a killed holder's {holder_mode} took {freed_after:?} to free (ttl {TTL:?})"
    );
    if fenced(&waiter) {
        assert!(guard.fencing_token().expect("asked for") > held_token);
    }
    for other in &kept {
        assert!(other.is_held(), "this process's own lock was lost");
    }
    guard.release().await.expect("release");
    for other in kept {
        other.release().await.expect("release");
    }
}

/// A reader process is killed: its share frees at its ttl and the waiting writer proceeds.
async fn killed_reader_lets_the_writer_in(url: &str) {
    killed_holder_frees_at_its_ttl(url, "read", LockMode::Exclusive, &[]).await;
}

/// One of two permits is held by a process that is killed, the other by this process (renewed
/// by its watchdog): the killed one's permit frees at its ttl for a third caller.
async fn killed_permit_holder_frees_its_permit(url: &str) {
    let permits = LockMode::Permit { limit: 2 };
    killed_holder_frees_at_its_ttl(url, "permits:2", permits, &[permits]).await;
}

/// A writer process is killed: its lock frees at its ttl for the waiting writer.
async fn killed_writer_lets_the_next_in(url: &str) {
    killed_holder_frees_at_its_ttl(url, "write", LockMode::Exclusive, &[]).await;
}

/// A killed reader, permit holder and writer, one after another on one service.
async fn killed_holders_of_every_mode(url: &str) {
    killed_reader_lets_the_writer_in(url).await;
    killed_permit_holder_frees_its_permit(url).await;
    killed_writer_lets_the_next_in(url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_single_killed_reader() {
    let server = RedisServer::start().await.expect("redis");
    killed_reader_lets_the_writer_in(&server.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_single_killed_permit_holder() {
    let server = RedisServer::start().await.expect("redis");
    killed_permit_holder_frees_its_permit(&server.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_single_killed_writer() {
    let server = RedisServer::start().await.expect("redis");
    killed_writer_lets_the_next_in(&server.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_killed_reader_and_permit_holder() {
    let cluster = RedisCluster::start(3).await.expect("redis cluster");
    killed_reader_lets_the_writer_in(&cluster.url()).await;
    killed_permit_holder_frees_its_permit(&cluster.url()).await;
}

/// RedLock has only the exclusive lock: a killed holder's keys expire on every master at its
/// ttl, and the waiter then gets a majority.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_killed_writer() {
    let nodes = RedisNodes::start(5).await.expect("redis-servers");
    killed_writer_lets_the_next_in(&nodes.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_killed_reader_permit_holder_and_writer() {
    let cluster = EtcdCluster::start(3).await.expect("etcd cluster");
    killed_holders_of_every_mode(&cluster.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_killed_reader_permit_holder_and_writer() {
    let ensemble = ZkEnsemble::start(3).await.expect("zookeeper ensemble");
    killed_holders_of_every_mode(&ensemble.url()).await;
}

/// PostgreSQL frees a killed process's locks as its connection closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_killed_reader_permit_holder_and_writer() {
    let server = PostgresServer::start().await.expect("postgres");
    killed_holders_of_every_mode(&server.url()).await;
}

/// A replicated lock service whose leader a test can kill.
trait Ensemble: Sync {
    fn url(&self) -> String;
    /// Kills the leader and waits for a new one; returns (old, new) member indexes.
    fn kill_leader(&self) -> impl Future<Output = (usize, usize)> + Send;
}

impl Ensemble for EtcdCluster {
    fn url(&self) -> String {
        Self::url(self)
    }
    async fn kill_leader(&self) -> (usize, usize) {
        let old = self.leader().await.expect("leader");
        self.member(old).kill().await.expect("kill leader");
        (old, self.leader().await.expect("a new leader"))
    }
}

impl Ensemble for ZkEnsemble {
    fn url(&self) -> String {
        Self::url(self)
    }
    async fn kill_leader(&self) -> (usize, usize) {
        let old = self.leader().await.expect("leader");
        self.member(old).kill().await.expect("kill leader");
        (old, self.leader().await.expect("a new leader"))
    }
}

/// The leader of `cluster` is killed while `holders` (one Locker each) hold [`KEY`] and a
/// writer of another Locker waits: the holders keep their leases through the election (their
/// guards are never lost, for two ttls after it), the writer gets nothing while they hold —
/// nor does a reader that comes after it — and once they released, the writer gets the lock
/// with a fencing token above all of theirs.
async fn leader_killed_while_held(cluster: &impl Ensemble, holders: &[LockMode]) {
    // Longer than a failover takes on a loaded 2-core machine: a new etcd leader once took
    // 6.4 s to be seen (election timeout 1 s) in a full-suite run, past a 6 s lease.
    let ttl = Duration::from_secs(10);
    let mut guards = Vec::new();
    for mode in holders {
        let holder = locker(&cluster.url(), ttl).await;
        guards.push(holder.lock_as(KEY, *mode).await.expect("holder"));
    }
    let tokens: Vec<u64> = guards
        .iter()
        .map(|guard| guard.fencing_token().expect("durable tokens"))
        .collect();
    let writer = locker(&cluster.url(), ttl).await;
    let waiting = spawn_waiter(&writer, LockMode::Exclusive);
    // Once the writer queued, a reader that comes later is refused (with shared holders, a
    // reader that comes earlier gets in, and leaves again).
    let late = locker(&cluster.url(), ttl).await;
    let give_up = Instant::now() + Duration::from_secs(5);
    loop {
        match late.read_lock(KEY).wait(Duration::ZERO).await {
            Err(Error::Busy { .. }) if holders.contains(&LockMode::Exclusive) => {
                tokio::time::sleep(Duration::from_millis(200)).await; // time to queue
                break;
            }
            Err(Error::Busy { .. }) => break,
            Ok(early) => early.release().await.expect("release"),
            Err(error) => panic!("late reader: {error}"),
        }
        assert!(Instant::now() < give_up, "the writer never queued");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let killed = Instant::now();
    let (old_leader, new_leader) = cluster.kill_leader().await;
    assert_ne!(new_leader, old_leader);
    println!("new leader elected {:?} after the kill", killed.elapsed());
    let hold_until = Instant::now() + ttl * 2;
    while Instant::now() < hold_until {
        for guard in &guards {
            assert!(
                guard.is_held(),
                "a holder's lease was lost across the failover: {:?}",
                guard.lost_reason()
            );
        }
        assert!(
            !waiting.is_finished(),
            "the writer got the lock while it was held"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let last = guards.pop().expect("a holder");
    for guard in guards {
        guard.release().await.expect("release");
    }
    let released = Instant::now();
    last.release().await.expect("release after the failover");
    let (granted, at) = waiting.await.expect("writer");
    let guard = granted.expect("the writer gets the lock once the holders left");
    assert!(
        at >= released,
        "the writer got in before the last holder left"
    );
    println!(
        "writer granted {:?} after the last holder left",
        at - released
    );
    let token = guard.fencing_token().expect("durable tokens");
    assert!(
        tokens.iter().all(|held| token > *held),
        "the writer's token {token} is not above the holders' {tokens:?}"
    );
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_leader_killed_while_a_writer_holds_and_another_waits() {
    let cluster = EtcdCluster::start(3).await.expect("etcd cluster");
    leader_killed_while_held(&cluster, &[LockMode::Exclusive]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_leader_killed_while_readers_hold_and_a_writer_waits() {
    let cluster = EtcdCluster::start(3).await.expect("etcd cluster");
    leader_killed_while_held(&cluster, &[LockMode::Shared, LockMode::Shared]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_leader_killed_while_a_writer_holds_and_another_waits() {
    let ensemble = ZkEnsemble::start(3).await.expect("zookeeper ensemble");
    leader_killed_while_held(&ensemble, &[LockMode::Exclusive]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_leader_killed_while_readers_hold_and_a_writer_waits() {
    let ensemble = ZkEnsemble::start(3).await.expect("zookeeper ensemble");
    leader_killed_while_held(&ensemble, &[LockMode::Shared, LockMode::Shared]).await;
}
