//! dlock's plain Redis layout (`?layout=plain`) and the real clients that write it: redis-py 8.1
//! (`Lock(name)`, from PyPI in the install script's virtualenv) and node-redlock 5
//! (`acquire([name])`, from npm) on one server, and node-redlock on three independent masters
//! against `redlock://…?layout=plain` — each waits for the other, one way at a time, then both
//! at once on a shared counter.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock_core::{DlockConfig, Error, Locker};
use dlock_harness::{NodeRedlock, RedisNodes, RedisPy, RedisServer, SharedCounter};

/// How long the other side is given to show that it does not get in.
const NOT_YET: Duration = Duration::from_millis(500);
/// A bound on anything that must happen (never reached when things work). A foreign holder's
/// key lives 30 s (the drivers' hold): a dlock waiter that only looked again at its expiry
/// would not get the lock within this.
const SURELY: Duration = Duration::from_secs(20);
/// The pause between a section's read and its write.
const PAUSE: Duration = Duration::from_millis(3);

/// A peer's driver: one command line in, answer lines out.
trait Peer {
    async fn send(&mut self, command: &str) -> dlock_harness::Result<()>;
    async fn next_line(&mut self, within: Duration) -> Option<String>;
}

impl Peer for RedisPy {
    async fn send(&mut self, command: &str) -> dlock_harness::Result<()> {
        Self::send(self, command).await
    }
    async fn next_line(&mut self, within: Duration) -> Option<String> {
        Self::next_line(self, within).await
    }
}

impl Peer for NodeRedlock {
    async fn send(&mut self, command: &str) -> dlock_harness::Result<()> {
        Self::send(self, command).await
    }
    async fn next_line(&mut self, within: Duration) -> Option<String> {
        Self::next_line(self, within).await
    }
}

async fn said(peer: &mut impl Peer, expected: &str) {
    let line = peer.next_line(SURELY).await;
    assert_eq!(line.as_deref(), Some(expected), "the peer's answer");
}

async fn silent(peer: &mut impl Peer) {
    let line = peer.next_line(NOT_YET).await;
    assert_eq!(line, None, "the peer got in while dlock held the lock");
}

async fn send(peer: &mut impl Peer, command: &str) {
    peer.send(command).await.expect("driver alive");
}

/// A Locker on `url` in the plain layout, whose keys are the names themselves (no prefix).
async fn locker(url: &str) -> Locker {
    let config = DlockConfig::default()
        .with_backend(dlock_core::BackendSpec::Url(format!("{url}?layout=plain")))
        .with_key_prefix(String::new())
        .with_ttl(Duration::from_secs(10));
    Locker::connect(&config).await.expect("connect")
}

/// The peer holds `key`, dlock waits for it and gets it once the peer releases (the peer's
/// release publishes nothing: dlock looks again on its own); then dlock holds, the peer's try
/// is refused and its wait ends when dlock releases.
async fn each_waits_for_the_other(peer: &mut impl Peer, locker: &Locker, key: &'static str) {
    send(peer, &format!("acquire p1 {key}")).await;
    said(peer, "acquired p1").await;
    let info = locker.inspect(key).await.expect("inspect");
    assert!(
        matches!(info.holders.as_slice(), [holder] if holder.mode == dlock_core::LockMode::Exclusive && holder.expires_in.is_some()),
        "inspect shows the peer's holder: {info:?}"
    );
    let busy = locker.lock(key).wait(NOT_YET).await;
    assert!(matches!(busy, Err(Error::Busy { .. })), "{busy:?}");
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move { locker.lock(key).wait(SURELY).await })
    };
    tokio::time::sleep(NOT_YET).await;
    assert!(!waiter.is_finished(), "dlock got in beside the peer");
    send(peer, "release p1").await;
    said(peer, "released p1").await;
    let released = Instant::now();
    // Well before the peer's key would have expired (30 s), and before the waiter's own
    // bound: a waiter that only looked again at the expiry would miss this.
    let guard = tokio::time::timeout(SURELY / 2, waiter)
        .await
        .expect("dlock saw the peer's release long before its key would have expired")
        .unwrap()
        .expect("dlock gets the lock the peer gave back");
    println!(
        "dlock got the lock {:?} after the peer released it",
        released.elapsed()
    );

    send(peer, &format!("try p2 {key}")).await;
    said(peer, "busy p2").await;
    send(peer, &format!("acquire p3 {key}")).await;
    silent(peer).await;
    guard.release().await.expect("release");
    said(peer, "acquired p3").await;
    send(peer, "release p3").await;
    said(peer, "released p3").await;
}

/// The peer's `workers` and dlock's tasks increment one counter at once under `key`.
async fn count_together(peer: &mut impl Peer, workers: usize, locker: &Locker, key: &'static str) {
    const TASKS: usize = 3;
    const ROUNDS: usize = 20;
    let counter = Arc::new(SharedCounter::new().expect("counter"));
    send(
        peer,
        &format!(
            "count {key} {workers} {ROUNDS} {} {}",
            counter.dir().display(),
            PAUSE.as_millis()
        ),
    )
    .await;
    // dlock starts once the peer wrote, so the two run at once (the peer has rounds left).
    tokio::time::timeout(SURELY, async {
        while counter.peer_writes() == 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("the peer's first write");
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (locker, counter) = (locker.clone(), counter.clone());
            tokio::spawn(async move {
                let mut overlaps = 0;
                for _ in 0..ROUNDS {
                    let guard = locker.lock(key).wait(SURELY).await.expect("dlock's turn");
                    overlaps += counter.write(PAUSE).await;
                    guard.release().await.expect("release");
                    // Work between locks, as a service does: the peer, which polls, gets turns.
                    tokio::time::sleep(PAUSE * 3).await;
                }
                overlaps
            })
        })
        .collect();
    let mut dlock_overlaps = 0;
    for task in tasks {
        dlock_overlaps += task.await.unwrap();
    }
    let line = peer.next_line(SURELY * 3).await;
    let peer_overlaps: u32 = line
        .as_deref()
        .and_then(|line| line.strip_prefix("counted "))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the peer's count: {line:?}"));
    let expected = ((TASKS + workers) * ROUNDS) as u64;
    println!(
        "count {} of {expected}, overlaps seen by dlock {dlock_overlaps}, by the peer {peer_overlaps}",
        counter.value()
    );
    assert_eq!(
        (dlock_overlaps, peer_overlaps),
        (0, 0),
        "holders at once (dlock, the peer)"
    );
    assert_eq!(counter.value(), expected, "lost increments");
    let turns = counter.turns();
    println!("{key}: the writers changed sides {turns} times");
    // p…d…p at least: dlock wrote between two of the peer's writes.
    assert!(turns >= 2, "the two sides did not take turns");
    assert!(
        locker
            .inspect(key)
            .await
            .expect("inspect")
            .holders
            .is_empty(),
        "nothing left held"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlock_and_redis_py_wait_for_each_other() {
    let server = RedisServer::start().await.expect("redis-server");
    let locker = locker(&server.url()).await;
    let mut redis_py = RedisPy::start(&server.url()).await.expect("redis-py");
    each_waits_for_the_other(&mut redis_py, &locker, "interop:py").await;

    // The lock is the key itself, a string holding the owner's token: nothing else is written.
    let guard = locker.lock("interop:py").await.expect("lock");
    let kind = server.command(&["TYPE", "interop:py"]).await.unwrap();
    let keys = server.command(&["DBSIZE"]).await.unwrap();
    assert_eq!((kind.as_str(), keys.as_str()), ("string", "1"));
    guard.release().await.expect("release");
    assert_eq!(server.command(&["DBSIZE"]).await.unwrap(), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_under_redis_py_and_dlock_loses_nothing() {
    let server = RedisServer::start().await.expect("redis-server");
    let locker = locker(&server.url()).await;
    let mut redis_py = RedisPy::start(&server.url()).await.expect("redis-py");
    count_together(&mut redis_py, 3, &locker, "interop:py-counter").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlock_and_node_redlock_wait_for_each_other_on_three_masters() {
    let masters = RedisNodes::start(3).await.expect("redis-servers");
    let locker = locker(&masters.url()).await;
    let mut redlock = NodeRedlock::start(&masters.urls())
        .await
        .expect("node-redlock");
    each_waits_for_the_other(&mut redlock, &locker, "interop:node").await;

    // Every master holds the plain key while dlock holds the lock.
    let guard = locker.lock("interop:node").await.expect("lock");
    for master in masters.nodes() {
        let kind = master.command(&["TYPE", "interop:node"]).await.unwrap();
        assert_eq!(kind, "string", "on {}", master.url());
    }
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_under_node_redlock_and_dlock_on_three_masters_loses_nothing() {
    let masters = RedisNodes::start(3).await.expect("redis-servers");
    let locker = locker(&masters.url()).await;
    let mut redlock = NodeRedlock::start(&masters.urls())
        .await
        .expect("node-redlock");
    count_together(&mut redlock, 3, &locker, "interop:node-counter").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlock_and_node_redlock_share_one_server() {
    let server = RedisServer::start().await.expect("redis-server");
    let locker = locker(&server.url()).await;
    let mut redlock = NodeRedlock::start(&[server.url()])
        .await
        .expect("node-redlock");
    each_waits_for_the_other(&mut redlock, &locker, "interop:node-one").await;
    count_together(&mut redlock, 3, &locker, "interop:node-one-counter").await;
}

/// A key that already holds the acquire's own owner — its earlier attempt's, landed after a
/// RedLock round stopped waiting for that master — is granted to it, not waited out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_takes_back_its_own_key_from_an_earlier_attempt() {
    use dlock_core::backend::{
        AcquireOutcome, AcquireRequest, BackendUrl, LockBackend, OwnerId, RedisBackend,
    };
    let server = RedisServer::start().await.expect("redis-server");
    let url = BackendUrl::parse(&format!("{}?layout=plain", server.url())).expect("URL");
    let backend = RedisBackend::connect(&url, Duration::from_secs(2))
        .await
        .expect("connect");
    let request = AcquireRequest::new("own", OwnerId::random("test"), Duration::from_secs(5));
    server
        .command(&["SET", "own", request.owner.as_str(), "PX", "60000"])
        .await
        .expect("SET");
    let outcome = backend
        .acquire(&request, Some(Instant::now()))
        .await
        .expect("acquire");
    assert!(
        matches!(outcome, AcquireOutcome::Acquired(_)),
        "{outcome:?}"
    );
    let left: u64 = server
        .command(&["PTTL", "own"])
        .await
        .unwrap()
        .parse()
        .unwrap();
    assert!(left <= 5000, "the grant's own ttl, {left} ms left");
    // Another owner's key is still waited for.
    let other = AcquireRequest::new("own", OwnerId::random("test"), Duration::from_secs(5));
    let outcome = backend
        .acquire(&other, Some(Instant::now()))
        .await
        .expect("acquire");
    assert!(
        matches!(outcome, AcquireOutcome::Busy { .. }),
        "{outcome:?}"
    );
}

/// What needs dlock's own layout is refused before any round trip: nothing reaches the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modes_of_dlocks_own_layout_are_unsupported_in_the_plain_one() {
    let server = RedisServer::start().await.expect("redis-server");
    let locker = locker(&server.url()).await;
    let before = server.command(&["INFO", "commandstats"]).await.unwrap();
    let refused = [
        locker.read_lock("m").await.err(),
        locker.semaphore("m", 2).await.err(),
        locker.lock("m").fencing(true).await.err(),
        locker
            .lock("m")
            .hold_at_least(Duration::from_secs(1))
            .await
            .err(),
        locker.campaign("m", "me").await.err(),
    ];
    for (index, error) in refused.into_iter().enumerate() {
        assert!(
            matches!(error, Some(Error::Unsupported { backend, .. }) if backend == "redis (layout=plain)"),
            "request {index}: {error:?}"
        );
    }
    let after = server.command(&["INFO", "commandstats"]).await.unwrap();
    let scripts = |stats: &str| {
        stats
            .lines()
            .filter(|line| line.starts_with("cmdstat_evalsha") || line.starts_with("cmdstat_set"))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(scripts(&before), scripts(&after), "a command was sent");
}
