//! Read-write locks and semaphores, for the backends whose capabilities claim them. On a
//! backend that does not, each scenario checks instead that asking for the mode fails with
//! [`Error::Unsupported`] before any round trip.

use std::future::IntoFuture as _;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::Target;
use super::support::{Occupancy, TornPair, assert_between, key};
use crate::backend::LockBackend;
use crate::lease::{AcquireRequest, OwnerId};
use crate::{Error, LockMode};

/// How long a waiter that must not get in is given to show that it does not.
const NOT_YET: Duration = Duration::from_millis(100);

/// Whether `mode` runs on this target; if not, checks that asking for it is refused as
/// unsupported without a round trip.
async fn runs<B: LockBackend + ?Sized>(target: &Target<B>, mode: LockMode) -> bool {
    let supported = match mode {
        LockMode::Exclusive => true,
        LockMode::Shared => target.expect.capabilities.read_write,
        LockMode::Permit { .. } => target.expect.capabilities.semaphore,
    };
    if supported {
        return true;
    }
    let (counting, locker) = target.counting_locker().await;
    let key = key("unsupported");
    let outcome = match mode {
        LockMode::Permit { limit } => locker.semaphore(&key, limit).await,
        _ => locker.read_lock(&key).await,
    };
    assert!(
        matches!(outcome, Err(Error::Unsupported { .. })),
        "a {mode} lock on a backend without it: {outcome:?}"
    );
    assert_eq!(
        counting.acquires(),
        0,
        "an unsupported mode made a round trip"
    );
    false
}

/// Three readers on three clients hold one key at once: each waits, holding its read lock,
/// until all three hold theirs (a barrier that only opens if they overlap).
pub async fn readers_overlap<B: LockBackend + ?Sized>(target: &Target<B>) {
    const READERS: usize = 3;
    if !runs(target, LockMode::Shared).await {
        return;
    }
    let key = key("readers");
    let all_in = Arc::new(tokio::sync::Barrier::new(READERS));
    let mut tasks = Vec::new();
    for _ in 0..READERS {
        let locker = target.locker().await;
        let (key, all_in) = (key.clone(), Arc::clone(&all_in));
        let bound = target.expect.slack * 8;
        tasks.push(tokio::spawn(async move {
            let guard = locker.read_lock(&key).wait(bound).await.expect("read lock");
            assert_eq!(guard.mode(), LockMode::Shared);
            tokio::time::timeout(bound, all_in.wait())
                .await
                .expect("readers did not all hold the lock at once");
            guard.release().await.expect("release");
        }));
    }
    for task in tasks {
        task.await.expect("reader panicked");
    }
}

/// Two writers and four readers on two clients share a resource of two fields that a writer
/// updates one after the other with a pause between; one writer takes the plain mutex
/// (`lock`), which excludes readers and writers like a write lock. A reader that sees them differ, or
/// change while it reads, overlapped a writer; a writer that finds them different on entry
/// overlapped another writer; a lost update shows in the count.
pub async fn writer_excludes_readers_and_writers<B: LockBackend + ?Sized>(target: &Target<B>) {
    const WRITERS: usize = 2;
    const READERS: usize = 4;
    const ROUNDS: u64 = 8;
    if !runs(target, LockMode::Shared).await {
        return;
    }
    let lockers = [target.locker().await, target.locker().await];
    let key = key("rw-exclusion");
    let pair = Arc::new(TornPair::default());
    let mut tasks = Vec::new();
    for worker in 0..WRITERS + READERS {
        let locker = lockers[worker % 2].clone();
        let (key, pair) = (key.clone(), Arc::clone(&pair));
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let writer = worker < WRITERS;
                let guard = if worker == 0 {
                    locker.lock(&key).await
                } else if writer {
                    locker.write_lock(&key).await
                } else {
                    locker.read_lock(&key).await
                }
                .expect("acquire");
                let pause = Duration::from_millis(2);
                let work = async {
                    if writer {
                        pair.write(pause).await;
                    } else {
                        pair.read(pause).await;
                    }
                };
                guard.run(work).await.expect("lease kept");
                guard.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        task.await.expect("worker panicked");
    }
    assert_eq!(pair.torn_reads(), 0, "a reader overlapped a writer");
    assert_eq!(pair.torn_writes(), 0, "two writers overlapped");
    assert_eq!(pair.writes(), WRITERS as u64 * ROUNDS, "a write was lost");
}

/// Two readers hold a key; a writer queues; a third reader arrives after the writer. The
/// writer gets in once the two readers leave, and the late reader only after the writer:
/// readers that keep overlapping cannot starve a writer.
pub async fn waiting_writer_is_not_starved<B: LockBackend + ?Sized>(target: &Target<B>) {
    if !runs(target, LockMode::Shared).await {
        return;
    }
    let key = key("starve");
    let full_key = target.locker().await.backend_key(&key).unwrap();
    let (first, second) = (target.locker().await, target.locker().await);
    let r1 = first.read_lock(&key).await.expect("first reader");
    let r2 = second.read_lock(&key).await.expect("second reader");
    let events = Arc::new(Mutex::new(Vec::<&'static str>::new()));
    let log = |events: &Arc<Mutex<Vec<&'static str>>>, what| {
        events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(what);
    };

    let writer = tokio::spawn({
        let (locker, key, events) = (target.locker().await, key.clone(), Arc::clone(&events));
        async move {
            let guard = locker
                .write_lock(&key)
                .wait_forever()
                .await
                .expect("writer");
            log(&events, "writer in");
            tokio::time::sleep(Duration::from_millis(20)).await;
            log(&events, "writer out");
            guard.release().await.expect("writer release");
        }
    });
    target.until_queued(&full_key, 1).await;
    let late_reader = tokio::spawn({
        let (locker, key, events) = (target.locker().await, key.clone(), Arc::clone(&events));
        async move {
            let guard = locker
                .read_lock(&key)
                .wait_forever()
                .await
                .expect("late reader");
            log(&events, "late reader in");
            guard.release().await.expect("late reader release");
        }
    });
    target.until_share_queued(&full_key, 2).await;
    tokio::time::sleep(NOT_YET).await;
    assert_eq!(
        *events.lock().unwrap_or_else(PoisonError::into_inner),
        Vec::<&str>::new(),
        "someone got in next to the two readers while a writer waited"
    );
    r1.release().await.expect("release");
    r2.release().await.expect("release");
    tokio::time::timeout(target.expect.slack * 8, writer)
        .await
        .expect("the writer never got in")
        .expect("writer panicked");
    tokio::time::timeout(target.expect.slack * 8, late_reader)
        .await
        .expect("the late reader never got in")
        .expect("late reader panicked");
    assert_eq!(
        *events.lock().unwrap_or_else(PoisonError::into_inner),
        ["writer in", "writer out", "late reader in"],
        "the reader that came after the waiting writer went first"
    );
}

/// Six tasks on two clients take permits of a semaphore of 2, three times each, and stay a
/// tenth of the target's slack (at least 5 ms: long next to a grant's round trips, which on
/// ZooKeeper are Curator's five, two of them fsynced writes). The number inside, counted under
/// a local mutex on entry and exit, never exceeds 2 — and reaches 2 (permits do overlap).
pub async fn semaphore_never_exceeds_its_limit<B: LockBackend + ?Sized>(target: &Target<B>) {
    const LIMIT: u32 = 2;
    const TASKS: usize = 6;
    if !runs(target, LockMode::Permit { limit: LIMIT }).await {
        return;
    }
    let lockers = [target.locker().await, target.locker().await];
    let key = key("semaphore");
    let stay = (target.expect.slack / 10).max(Duration::from_millis(5));
    let occupancy = Arc::new(Occupancy::default());
    let start = Arc::new(tokio::sync::Barrier::new(TASKS));
    let mut tasks = Vec::new();
    for worker in 0..TASKS {
        let locker = lockers[worker % 2].clone();
        let (key, occupancy, start) = (key.clone(), Arc::clone(&occupancy), Arc::clone(&start));
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            for _ in 0..3 {
                let permit = locker.semaphore(&key, LIMIT).await.expect("permit");
                assert_eq!(permit.mode(), LockMode::Permit { limit: LIMIT });
                permit.run(occupancy.stay(stay)).await.expect("lease kept");
                permit.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        task.await.expect("worker panicked");
    }
    assert!(
        occupancy.most() <= LIMIT as usize,
        "{} permits were out at once, the limit is {LIMIT}",
        occupancy.most()
    );
    assert_eq!(occupancy.most(), LIMIT as usize, "permits never overlapped");
}

/// A permit granted to a client that then crashes (`Target::grant_then_crash`) frees at its
/// ttl, not before (unless the service frees a closed connection's locks at once), and a
/// waiting caller gets it then.
pub async fn vanished_permit_frees_at_its_ttl<B: LockBackend + ?Sized>(target: &Target<B>) {
    let mode = LockMode::Permit { limit: 1 };
    if !runs(target, mode).await {
        return;
    }
    let ttl = target.expect.ttl;
    let locker = target.locker().await;
    let key = key("vanished-permit");
    let sent = Instant::now();
    let request = AcquireRequest::new(
        locker.backend_key(&key).unwrap(),
        OwnerId::random("crashed"),
        ttl,
    )
    .with_mode(mode);
    assert!(
        target.grant_then_crash(request).await,
        "free permit not granted"
    );
    let permit = locker
        .semaphore(&key, 1)
        .wait(ttl * 4 + target.expect.slack)
        .await
        .expect("permit after the vanished holder's ttl");
    assert_between(
        "waiting out a vanished permit's ttl",
        sent.elapsed(),
        target.expect.crashed_holder_keeps(ttl),
        ttl + target.expect.expiry_lag + target.expect.slack,
    );
    permit.release().await.expect("release");
}

/// A semaphore in use keeps its limit: a caller naming another gets an error naming both
/// numbers and the key. Once nobody holds or waits, the next caller sets the limit afresh.
pub async fn semaphore_limit_mismatch_is_an_error<B: LockBackend + ?Sized>(target: &Target<B>) {
    if !runs(target, LockMode::Permit { limit: 2 }).await {
        return;
    }
    let (first, second) = (target.locker().await, target.locker().await);
    let key = key("limit");
    let permit = first.semaphore(&key, 2).await.expect("permit");
    match second.semaphore(&key, 3).wait(Duration::ZERO).await {
        Err(Error::PermitLimitMismatch {
            key: named,
            stored,
            requested,
        }) => {
            assert_eq!((named.as_str(), stored, requested), (key.as_str(), 2, 3));
        }
        other => panic!("another limit for a semaphore in use: {other:?}"),
    }
    let message = second
        .semaphore(&key, 3)
        .wait(Duration::ZERO)
        .await
        .expect_err("mismatch")
        .to_string();
    assert!(
        message.contains('2') && message.contains('3') && message.contains(&key),
        "the error does not name both limits and the key: {message}"
    );
    permit.release().await.expect("release");
    let afresh = second
        .semaphore(&key, 3)
        .wait(Duration::ZERO)
        .await
        .expect("an unused semaphore takes a new limit");
    afresh.release().await.expect("release");
}

/// In one task: a read lock inside the write lock re-enters it (no round trip, the write
/// grant's token); a write lock inside only a read lock fails at once with
/// [`Error::LockUpgrade`] instead of waiting for itself.
pub async fn downgrade_reenters_and_upgrade_errors<B: LockBackend + ?Sized>(target: &Target<B>) {
    if !runs(target, LockMode::Shared).await {
        return;
    }
    let (counting, locker) = target.counting_locker().await;
    let other = target.locker().await;

    let key = key("downgrade");
    let writer = locker.write_lock(&key).await.expect("write lock");
    let before = counting.acquires();
    let reader = locker
        .read_lock(&key)
        .wait(Duration::ZERO)
        .await
        .expect("read inside write");
    assert_eq!(
        counting.acquires(),
        before,
        "the downgrade made a round trip"
    );
    assert!(reader.is_nested());
    assert_eq!(reader.fencing_token(), writer.fencing_token());
    assert!(
        matches!(
            other.read_lock(&key).wait(Duration::ZERO).await,
            Err(Error::Busy { .. })
        ),
        "another client read while the write lock was held"
    );
    reader.release().await.expect("inner release");
    writer.release().await.expect("outer release");

    let key = super::support::key("upgrade");
    let reader = locker.read_lock(&key).await.expect("read lock");
    let upgrade = tokio::time::timeout(
        target.expect.slack * 8,
        locker.write_lock(&key).wait_forever().into_future(),
    )
    .await
    .expect("an upgrade waited for itself");
    assert!(
        matches!(upgrade, Err(Error::LockUpgrade { key: ref named }) if *named == key),
        "write inside read: {upgrade:?}"
    );
    assert!(reader.is_held(), "the failed upgrade cost the read lock");
    reader.release().await.expect("release");
}

/// A reader waiting behind a writer and a permit waiting on a full semaphore are cancelled
/// (one timed out, one aborted); once the holders release, a newcomer gets each at once.
pub async fn cancelled_reader_or_permit_leaves_nothing_behind<B: LockBackend + ?Sized>(
    target: &Target<B>,
) {
    let (holder, cancelled, newcomer) = (
        target.locker().await,
        target.locker().await,
        target.locker().await,
    );
    if target.expect.capabilities.read_write {
        let key = key("cancel-reader");
        let writer = holder.write_lock(&key).await.expect("write lock");
        let timed_out = tokio::time::timeout(
            NOT_YET,
            cancelled.read_lock(&key).wait_forever().into_future(),
        )
        .await;
        assert!(
            timed_out.is_err(),
            "a read lock was granted next to a writer"
        );
        writer.release().await.expect("release");
        let started = Instant::now();
        let again = newcomer
            .write_lock(&key)
            .wait(Duration::from_secs(5))
            .await
            .expect("nothing left queued ahead");
        assert_between(
            "write lock after a cancelled reader",
            started.elapsed(),
            Duration::ZERO,
            target.expect.slack,
        );
        again.release().await.expect("release");
    } else {
        runs(target, LockMode::Shared).await;
    }
    if target.expect.capabilities.semaphore {
        let key = key("cancel-permit");
        let permit = holder.semaphore(&key, 1).await.expect("permit");
        let aborted = tokio::spawn({
            let (cancelled, key) = (cancelled.clone(), key.clone());
            async move { cancelled.semaphore(&key, 1).wait_forever().await.map(drop) }
        });
        tokio::time::sleep(NOT_YET).await;
        aborted.abort();
        assert!(
            aborted.await.is_err_and(|e| e.is_cancelled()),
            "a permit was granted past the limit"
        );
        permit.release().await.expect("release");
        let started = Instant::now();
        let again = newcomer
            .semaphore(&key, 1)
            .wait(Duration::from_secs(5))
            .await
            .expect("nothing left queued ahead");
        assert_between(
            "permit after a cancelled waiter",
            started.elapsed(),
            Duration::ZERO,
            target.expect.slack,
        );
        again.release().await.expect("release");
    } else {
        runs(target, LockMode::Permit { limit: 1 }).await;
    }
    assert_eq!(
        cancelled.watched_leases(),
        0,
        "a cancelled acquire left a lease behind"
    );
}

/// Fencing tokens strictly increase in grant order across the modes of one key: a write
/// lock, two overlapping read locks, a write lock; and across the permits of a semaphore.
pub async fn tokens_increase_across_modes<B: LockBackend + ?Sized>(target: &Target<B>) {
    if !target.expect.fencing() {
        return;
    }
    let (a, b) = (target.fenced_locker().await, target.fenced_locker().await);
    let token = |guard: &crate::LockGuard| guard.fencing_token().expect("asked for a token");
    if runs(target, LockMode::Shared).await {
        let key = key("rw-tokens");
        let w1 = a.write_lock(&key).await.expect("write");
        let t1 = token(&w1);
        w1.release().await.expect("release");
        let r1 = a.read_lock(&key).await.expect("read");
        let r2 = b.read_lock(&key).await.expect("read");
        let (t2, t3) = (token(&r1), token(&r2));
        assert!(t1 < t2 && t2 < t3, "tokens {t1}, {t2}, {t3} not increasing");
        r1.release().await.expect("release");
        r2.release().await.expect("release");
        let w2 = b.write_lock(&key).await.expect("write");
        let t4 = token(&w2);
        assert!(t3 < t4, "write token {t4} not above the readers' {t3}");
        w2.release().await.expect("release");
    }
    if runs(target, LockMode::Permit { limit: 2 }).await {
        let key = key("permit-tokens");
        let p1 = a.semaphore(&key, 2).await.expect("permit");
        let p2 = b.semaphore(&key, 2).await.expect("permit");
        let (t1, t2) = (token(&p1), token(&p2));
        p1.release().await.expect("release");
        let p3 = a.semaphore(&key, 2).await.expect("permit");
        let t3 = token(&p3);
        assert!(
            t1 < t2 && t2 < t3,
            "permit tokens {t1}, {t2}, {t3} not increasing"
        );
        p2.release().await.expect("release");
        p3.release().await.expect("release");
    }
}
