//! dlock and real kazoo 2.11 (Python's ZooKeeper client, from PyPI in the virtualenv
//! `scripts/install-test-deps.sh` makes) on the same ZooKeeper paths: dlock waits for kazoo's
//! `Lock`, `ReadLock` and `WriteLock` nodes (`<uuid>__lock__<seq>`, `__rlock__`), and kazoo,
//! given `extra_lock_patterns`, waits for dlock's — one way at a time, then both at once on a
//! shared counter.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock_core::{DlockConfig, Error, LockMode, Locker};
use dlock_harness::{Kazoo, SharedCounter, ZkServer};

/// How long the other side is given to show that it does not get in.
const NOT_YET: Duration = Duration::from_millis(500);
/// A bound on anything that must happen (never reached when things work).
const SURELY: Duration = Duration::from_secs(30);
/// The pause between a section's read and its write (or second read).
const PAUSE: Duration = Duration::from_millis(3);

/// A standalone server, a Locker on it whose keys are the paths themselves (no prefix), and a
/// kazoo client.
async fn setup() -> (ZkServer, Locker, Kazoo) {
    let server = ZkServer::start().await.expect("zookeeper");
    let config = DlockConfig::default()
        .with_backend(dlock_core::BackendSpec::Url(server.url()))
        .with_key_prefix(String::new())
        .with_ttl(Duration::from_secs(10));
    let locker = Locker::connect(&config).await.expect("connect");
    let kazoo = Kazoo::start(&server.connect_string())
        .await
        .expect("kazoo driver");
    (server, locker, kazoo)
}

async fn said(kazoo: &mut Kazoo, expected: &str) {
    let line = kazoo.next_line(SURELY).await;
    assert_eq!(line.as_deref(), Some(expected), "kazoo's answer");
}

async fn silent(kazoo: &mut Kazoo) {
    let line = kazoo.next_line(NOT_YET).await;
    assert_eq!(line, None, "kazoo got in while dlock held the lock");
}

async fn send(kazoo: &mut Kazoo, command: &str) {
    kazoo.send(command).await.expect("kazoo driver alive");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlock_and_kazoos_lock_wait_for_each_other() {
    let (_server, locker, mut kazoo) = setup().await;
    let key = "interop/kazoo-mutex";

    send(&mut kazoo, "acquire k1 lock /interop/kazoo-mutex").await;
    said(&mut kazoo, "acquired k1").await;
    let info = locker.inspect(key).await.expect("inspect");
    assert!(
        matches!(info.holders.as_slice(), [k1] if k1.mode == LockMode::Exclusive && k1.owner == "kazoo-k1"),
        "inspect shows kazoo's holder: {info:?}"
    );
    let busy = locker.lock(key).wait(NOT_YET).await;
    assert!(matches!(busy, Err(Error::Busy { .. })), "{busy:?}");
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move { locker.lock(key).wait(SURELY).await })
    };
    tokio::time::sleep(NOT_YET).await;
    assert!(!waiter.is_finished(), "dlock got in beside kazoo");
    send(&mut kazoo, "release k1").await;
    said(&mut kazoo, "released k1").await;
    let released = Instant::now();
    let guard = waiter
        .await
        .unwrap()
        .expect("dlock gets the lock kazoo gave back");
    println!(
        "dlock got the lock {:?} after kazoo released it",
        released.elapsed()
    );

    send(&mut kazoo, "try k2 lock /interop/kazoo-mutex").await;
    said(&mut kazoo, "busy k2").await;
    send(&mut kazoo, "acquire k3 lock /interop/kazoo-mutex").await;
    silent(&mut kazoo).await;
    guard.release().await.expect("release");
    said(&mut kazoo, "acquired k3").await;
    send(&mut kazoo, "release k3").await;
    said(&mut kazoo, "released k3").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlock_and_kazoos_read_write_lock_share_reads_and_exclude_writes() {
    let (_server, locker, mut kazoo) = setup().await;
    let key = "interop/kazoo-rw";

    // A kazoo reader and a dlock reader hold together, and a kazoo reader joins a dlock one.
    send(&mut kazoo, "acquire r1 read /interop/kazoo-rw").await;
    said(&mut kazoo, "acquired r1").await;
    let reader = locker
        .read_lock(key)
        .wait(SURELY)
        .await
        .expect("a dlock reader next to a kazoo reader");
    send(&mut kazoo, "release r1").await;
    said(&mut kazoo, "released r1").await;
    send(&mut kazoo, "try r2 read /interop/kazoo-rw").await;
    said(&mut kazoo, "acquired r2").await;
    // Both readers exclude a writer on either side.
    // (dlock's writer in a task of its own: this task holds a read lock, and a write lock
    // here would be an upgrade.)
    send(&mut kazoo, "try w1 write /interop/kazoo-rw").await;
    said(&mut kazoo, "busy w1").await;
    let other_task = locker.clone();
    let busy = tokio::spawn(async move { other_task.write_lock(key).wait(NOT_YET).await })
        .await
        .unwrap();
    assert!(matches!(busy, Err(Error::Busy { .. })), "{busy:?}");
    reader.release().await.expect("release");
    send(&mut kazoo, "release r2").await;
    said(&mut kazoo, "released r2").await;

    // A kazoo writer excludes dlock readers, and dlock's writer waits for it.
    send(&mut kazoo, "acquire w2 write /interop/kazoo-rw").await;
    said(&mut kazoo, "acquired w2").await;
    let busy = locker.read_lock(key).wait(NOT_YET).await;
    assert!(matches!(busy, Err(Error::Busy { .. })), "{busy:?}");
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move { locker.write_lock(key).wait(SURELY).await })
    };
    tokio::time::sleep(NOT_YET).await;
    assert!(
        !waiter.is_finished(),
        "dlock's writer got in beside kazoo's"
    );
    send(&mut kazoo, "release w2").await;
    said(&mut kazoo, "released w2").await;

    // A dlock writer excludes kazoo readers and writers.
    let writer = waiter.await.unwrap().expect("dlock writer after kazoo's");
    send(&mut kazoo, "acquire r3 read /interop/kazoo-rw").await;
    silent(&mut kazoo).await;
    writer.release().await.expect("release");
    said(&mut kazoo, "acquired r3").await;
    send(&mut kazoo, "release r3").await;
    said(&mut kazoo, "released r3").await;
}

/// kazoo's threads and dlock's tasks increment one counter at once, under one lock: `lock`
/// (kazoo's `Lock` and dlock's mutex) or `rw` (read-write locks; a third of the rounds write).
async fn count_together(mode: &str, key: &'static str) {
    const TASKS: usize = 3;
    const ROUNDS: usize = 20;
    let (_server, locker, mut kazoo) = setup().await;
    let counter = Arc::new(SharedCounter::new().expect("counter"));
    send(
        &mut kazoo,
        &format!(
            "count {mode} /{key} {TASKS} {ROUNDS} {} {}",
            counter.dir().display(),
            PAUSE.as_millis()
        ),
    )
    .await;
    // dlock starts once kazoo wrote, so the two run at once (kazoo has rounds left).
    tokio::time::timeout(SURELY, async {
        while counter.peer_writes() == 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("kazoo's first write");
    let mut tasks = Vec::new();
    let mut writes = 0;
    for task in 0..TASKS {
        let (locker, counter, mode) = (locker.clone(), counter.clone(), mode.to_owned());
        let plan: Vec<bool> = (0..ROUNDS)
            .map(|round| mode == "lock" || (task + round) % 3 == 0)
            .collect();
        writes += plan.iter().filter(|write| **write).count();
        tasks.push(tokio::spawn(async move {
            let mut overlaps = 0;
            for write in plan {
                let request = match (mode.as_str(), write) {
                    ("lock", _) => locker.lock(key),
                    (_, true) => locker.write_lock(key),
                    (_, false) => locker.read_lock(key),
                };
                let guard = request.wait(SURELY).await.expect("dlock's turn");
                overlaps += if write {
                    counter.write(PAUSE).await
                } else {
                    counter.read(PAUSE).await
                };
                guard.release().await.expect("release");
            }
            overlaps
        }));
    }
    let mut dlock_overlaps = 0;
    for task in tasks {
        dlock_overlaps += task.await.unwrap();
    }
    let line = kazoo.next_line(SURELY * 4).await;
    let kazoo_overlaps: u32 = line
        .as_deref()
        .and_then(|line| line.strip_prefix("counted "))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("kazoo's count: {line:?}"));
    let expected = 2 * writes as u64;
    println!(
        "{mode}: count {} of {expected}, overlaps seen by dlock {dlock_overlaps}, by kazoo {kazoo_overlaps}",
        counter.value()
    );
    assert_eq!(
        (dlock_overlaps, kazoo_overlaps),
        (0, 0),
        "holders at once (dlock, kazoo)"
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
async fn a_counter_under_kazoos_lock_and_dlocks_mutex_loses_nothing() {
    count_together("lock", "interop/kazoo-counter").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_under_kazoos_and_dlocks_read_write_locks_loses_nothing() {
    count_together("rw", "interop/kazoo-rw-counter").await;
}
