//! Read-write locks and semaphores on a real redis-server, beyond the conformance suite: where
//! the shares live, that each frees at its own ttl, that a writer's waiting mark makes later
//! readers wait and is withdrawn when the writer gives up or is cancelled, that waiters are
//! woken by the release channel (counted in the server's own statistics), and that renewals
//! of many shares go in one script.

mod support;

use std::time::{Duration, Instant};

use dlock_core::Locker;
use dlock_harness::RedisServer;
use support::processes::eventually;

async fn locker(server: &RedisServer, ttl: Duration) -> Locker {
    support::connect::locker_at(&server.url(), ttl, Duration::from_secs(2)).await
}

async fn command(server: &RedisServer, args: &[&str]) -> String {
    server.command(args).await.expect("redis command")
}

/// How many times Redis ran `command` since the last `CONFIG RESETSTAT`.
async fn calls(server: &RedisServer, command: &str) -> u64 {
    let stats = server.command(&["INFO", "commandstats"]).await.unwrap();
    stats
        .lines()
        .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().unwrap())
}

/// Waits until `server` answers `args` with `expected`.
async fn until_reply(server: &RedisServer, args: &[&str], expected: &str) {
    let what = format!("{args:?} answers {expected:?}");
    eventually(&what, Duration::from_secs(10), async || {
        command(server, args).await == expected
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shares_are_members_of_a_sorted_set_and_leave_nothing_behind() {
    let server = RedisServer::start().await.unwrap();
    let ttl = Duration::from_secs(30);
    let (a, b) = (locker(&server, ttl).await, locker(&server, ttl).await);

    let first = a.read_lock("prices").await.unwrap();
    let second = b.read_lock("prices").await.unwrap();
    assert_eq!(command(&server, &["TYPE", "{dlock:prices}"]).await, "zset");
    assert_eq!(command(&server, &["ZCARD", "{dlock:prices}"]).await, "2");
    let pttl: u64 = command(&server, &["PTTL", "{dlock:prices}"])
        .await
        .parse()
        .unwrap();
    assert!(
        (25_000..=30_000).contains(&pttl),
        "the set expires with its newest share: {pttl} ms"
    );

    let permits = [
        a.semaphore("pool", 3).await.unwrap(),
        b.semaphore("pool", 3).await.unwrap(),
    ];
    assert_eq!(command(&server, &["GET", "{dlock:pool}:limit"]).await, "3");
    assert_eq!(command(&server, &["ZCARD", "{dlock:pool}"]).await, "2");

    first.release().await.unwrap();
    second.release().await.unwrap();
    for permit in permits {
        permit.release().await.unwrap();
    }
    assert_eq!(
        command(&server, &["KEYS", "*"]).await,
        "",
        "every share, limit and mark is gone"
    );
}

/// Two permits of three: one renewed by its watchdog, one whose holder stopped renewing (its
/// guard forgotten, the watchdog off: a holder that vanished). A third caller waiting for a
/// permit gets one when the vanished one's ttl runs out, while the renewed one is still held —
/// each permit has its own expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_permit_frees_at_its_own_ttl_while_others_renew() {
    let server = RedisServer::start().await.unwrap();
    let ttl = Duration::from_millis(600);
    let (a, b) = (locker(&server, ttl).await, locker(&server, ttl).await);
    let renewed = a.semaphore("pool", 2).await.unwrap();
    let vanished = b.semaphore("pool", 2).watchdog(false).await.unwrap();
    std::mem::forget(vanished);
    let vanished_at = Instant::now();
    let third = b
        .semaphore("pool", 2)
        .wait(Duration::from_secs(10))
        .await
        .expect("the vanished permit frees");
    let waited = vanished_at.elapsed();
    println!("third permit granted {waited:?} after the second holder vanished (ttl {ttl:?})");
    assert!(waited >= ttl - Duration::from_millis(50), "granted early");
    assert!(renewed.is_held(), "the renewed permit is still held");
    assert_eq!(command(&server, &["ZCARD", "{dlock:pool}"]).await, "2");
    third.release().await.unwrap();
    renewed.release().await.unwrap();
}

/// A writer waits for a reader; a reader that asks after it waits for the writer. The writer
/// gives up (its wait runs out): its mark is withdrawn and the waiting reader is let in at
/// once — not when the mark would have expired (the writer's ttl is 30 s), and not before the
/// writer gave up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_behind_a_writer_that_gives_up_gets_in_at_once() {
    reader_behind_a_writer_that_leaves(Leave::GiveUp).await;
}

/// As above, but the writer's acquire is cancelled (its task aborted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_behind_a_cancelled_writer_gets_in_at_once() {
    reader_behind_a_writer_that_leaves(Leave::Cancelled).await;
}

enum Leave {
    GiveUp,
    Cancelled,
}

async fn reader_behind_a_writer_that_leaves(leave: Leave) {
    let server = RedisServer::start().await.unwrap();
    let ttl = Duration::from_secs(30);
    let (holder, writer, late) = (
        locker(&server, ttl).await,
        locker(&server, ttl).await,
        locker(&server, ttl).await,
    );
    let reading = holder.read_lock("ledger").await.unwrap();
    let writer_wait = match leave {
        Leave::GiveUp => Duration::from_millis(800),
        Leave::Cancelled => Duration::from_secs(20),
    };
    let waiting_writer = tokio::spawn(async move {
        let outcome = writer.write_lock("ledger").wait(writer_wait).await;
        (outcome.map(drop), Instant::now())
    });
    until_reply(&server, &["ZCARD", "{dlock:ledger}:writers"], "1").await;
    let late_reader = tokio::spawn(async move {
        let outcome = late.read_lock("ledger").wait(Duration::from_secs(10)).await;
        (outcome, Instant::now())
    });
    // The late reader finds the writer's mark and waits (it marks the lock waited for).
    until_reply(&server, &["EXISTS", "{dlock:ledger}:waited"], "1").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    if late_reader.is_finished() {
        let (outcome, _) = late_reader.await.unwrap();
        panic!("the late reader overtook the writer: {outcome:?}");
    }
    let writer_left = match leave {
        Leave::GiveUp => {
            let (outcome, at) = waiting_writer.await.unwrap();
            assert!(outcome.is_err(), "the writer gave up: {outcome:?}");
            at
        }
        Leave::Cancelled => {
            waiting_writer.abort();
            Instant::now()
        }
    };
    let (outcome, granted_at) = late_reader.await.unwrap();
    let guard = outcome.expect("the late reader gets in once the writer left");
    assert!(granted_at >= writer_left - Duration::from_millis(1));
    println!(
        "late reader let in {:?} after the writer left (its mark would live 30 s)",
        granted_at.saturating_duration_since(writer_left)
    );
    assert_eq!(
        command(&server, &["EXISTS", "{dlock:ledger}:writers"]).await,
        "0"
    );
    guard.release().await.unwrap();
    reading.release().await.unwrap();
}

/// Three readers hold; a writer (ttl 30 s: it would re-check at 15 s) waits. Only the last
/// reader's release publishes, and the writer gets the lock right after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_last_readers_release_publishes_and_wakes_the_writer() {
    let server = RedisServer::start().await.unwrap();
    let ttl = Duration::from_secs(30);
    let readers = locker(&server, ttl).await;
    let writer = locker(&server, ttl).await;
    let mut shares = Vec::new();
    for _ in 0..3 {
        shares.push(readers.read_lock("catalog").await.unwrap());
    }
    server.command(&["CONFIG", "RESETSTAT"]).await.unwrap();
    let waiting = tokio::spawn(async move {
        let guard = writer
            .write_lock("catalog")
            .wait(Duration::from_secs(10))
            .await;
        (guard, Instant::now())
    });
    until_reply(&server, &["ZCARD", "{dlock:catalog}:writers"], "1").await;
    let last = shares.pop().unwrap();
    for share in shares {
        share.release().await.unwrap();
    }
    assert_eq!(calls(&server, "publish").await, 0, "readers are still in");
    assert!(!waiting.is_finished(), "the writer got in next to a reader");
    let released = Instant::now();
    last.release().await.unwrap();
    let (guard, granted_at) = waiting.await.unwrap();
    let guard = guard.expect("the writer gets the lock after the last reader");
    println!(
        "writer granted {:?} after the last reader left",
        granted_at - released
    );
    assert_eq!(
        calls(&server, "publish").await,
        1,
        "the last release published"
    );
    guard.release().await.unwrap();
}

/// Forty read locks held by one Locker are renewed in one script per watchdog round, not one
/// per lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_of_many_shares_are_batched() {
    let server = RedisServer::start().await.unwrap();
    let ttl = Duration::from_millis(900); // renewed every 300 ms
    let readers = locker(&server, ttl).await;
    let mut shares = Vec::new();
    for key in 0..40 {
        shares.push(readers.read_lock(&format!("shelf:{key}")).await.unwrap());
    }
    server.command(&["CONFIG", "RESETSTAT"]).await.unwrap();
    let held_from = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let scripts = calls(&server, "evalsha").await;
    let rounds = held_from.elapsed().as_millis() / 300;
    println!("{scripts} renewal scripts in {rounds} watchdog rounds for 40 shares");
    assert!(scripts > 0, "the shares were renewed");
    assert!(
        u128::from(scripts) <= rounds + 2,
        "{scripts} renewal scripts for 40 shares over {rounds} rounds: not batched"
    );
    for share in shares {
        assert!(share.is_held());
        share.release().await.unwrap();
    }
}

/// A waiter with a short ttl does not shorten the waited-for mark a waiter with a long ttl
/// set: once the short one left, the release still publishes and wakes the long one at once
/// (its own re-check would come only at half its ttl, 15 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_waiter_does_not_shorten_a_long_waiters_mark() {
    let server = RedisServer::start().await.unwrap();
    let holder = locker(&server, Duration::from_secs(30)).await;
    let patient = locker(&server, Duration::from_secs(30)).await;
    let hasty = locker(&server, Duration::from_millis(500)).await;
    let permit = holder.semaphore("pool", 1).await.unwrap();
    let waiting = tokio::spawn(async move {
        let granted = patient
            .semaphore("pool", 1)
            .wait(Duration::from_secs(10))
            .await;
        (granted, Instant::now())
    });
    until_reply(&server, &["EXISTS", "{dlock:pool}:waited"], "1").await;
    let gave_up = hasty
        .semaphore("pool", 1)
        .wait(Duration::from_millis(200))
        .await;
    assert!(gave_up.is_err(), "{gave_up:?}");
    let pttl: i64 = command(&server, &["PTTL", "{dlock:pool}:waited"])
        .await
        .parse()
        .unwrap();
    assert!(pttl > 20_000, "the mark was shortened to {pttl} ms");
    tokio::time::sleep(Duration::from_millis(600)).await; // past the hasty waiter's ttl
    let released = Instant::now();
    permit.release().await.unwrap();
    let (granted, at) = waiting.await.unwrap();
    let guard = granted.expect("the patient waiter is woken by the release");
    println!(
        "patient waiter granted {:?} after the release",
        at - released
    );
    guard.release().await.unwrap();
}
