//! Running in production: a cap on how long a lock is held, and a Locker's graceful shutdown.

use std::time::{Duration, Instant};

use super::Target;
use super::support::{assert_between, key};
use crate::backend::LockBackend;
use crate::{Error, LostReason};

/// A lock taken with a `max_hold` of two ttls is renewed by the watchdog past its first ttl,
/// then, at its `max_hold`, lost with [`LostReason::MaxHold`] — the work under
/// [`LockGuard::run`](crate::LockGuard::run), which would never end, is cancelled — and
/// released: another client gets it at once rather than a ttl later.
pub async fn max_hold_ends_a_hold<B: LockBackend + ?Sized>(target: &Target<B>) {
    let (ttl, slack) = (target.expect.ttl, target.expect.slack);
    let max_hold = ttl * 2;
    let (holder, other) = (target.locker().await, target.locker().await);
    let key = key("max-hold");
    let guard = holder
        .lock(&key)
        .ttl(ttl)
        .max_hold(max_hold)
        .await
        .expect("acquire");
    let granted = Instant::now();
    let waiting = tokio::spawn({
        let key = key.clone();
        async move {
            let taken = other.lock(&key).wait(max_hold + ttl * 2).await;
            (taken.map(drop), Instant::now())
        }
    });
    let outcome = guard.run(std::future::pending::<()>()).await;
    let ended = Instant::now();
    match outcome {
        Err(Error::LeaseLost {
            reason: LostReason::MaxHold(cap),
            ..
        }) => assert_eq!(cap, max_hold),
        other => panic!("a stuck job kept its lock past max_hold: {other:?}"),
    }
    // Counted from the grant's request, so at most one acquire's round trip before `granted`.
    assert_between(
        "hold ended by max_hold",
        ended - granted,
        max_hold - slack.min(ttl / 2),
        max_hold + slack,
    );
    let (taken, at) = waiting.await.expect("waiter panicked");
    taken.expect("the other client gets the capped lock");
    assert_between(
        "hand-over after max_hold",
        at.saturating_duration_since(ended),
        Duration::ZERO,
        slack,
    );
    assert_eq!(guard.lost_reason(), Some(LostReason::MaxHold(max_hold)));
    assert!(matches!(
        guard.release().await,
        Err(Error::LeaseLost { .. })
    ));
}

/// [`Locker::shutdown`](crate::Locker::shutdown) releases every lock it holds — a mutex, and
/// where the backend has them a read lock and a permit — which another client then takes at
/// once; the guards report [`LostReason::Shutdown`], the watchdog watches nothing, and the
/// Locker refuses new locks with [`Error::ShutDown`].
pub async fn shutdown_releases_every_lock<B: LockBackend + ?Sized>(target: &Target<B>) {
    let (holder, other) = (target.locker().await, target.locker().await);
    let (mutex, shared, permits) = (
        key("shutdown-mutex"),
        key("shutdown-rw"),
        key("shutdown-sem"),
    );
    let ttl = Duration::from_secs(30);
    let mut guards = vec![holder.lock(&mutex).ttl(ttl).await.expect("lock")];
    if target.expect.capabilities.read_write {
        guards.push(holder.read_lock(&shared).ttl(ttl).await.expect("read lock"));
    }
    if target.expect.capabilities.semaphore {
        guards.push(
            holder
                .semaphore(&permits, 2)
                .ttl(ttl)
                .await
                .expect("permit"),
        );
    }
    assert_eq!(holder.watched_leases(), guards.len());
    holder.shutdown().await.expect("shutdown");
    for guard in &guards {
        assert_eq!(guard.lost_reason(), Some(LostReason::Shutdown), "{guard:?}");
    }
    assert_eq!(holder.watched_leases(), 0);
    assert!(
        matches!(holder.lock(&key("after")).await, Err(Error::ShutDown)),
        "a shut-down Locker took a lock"
    );
    // Free at once (tries, no waiting): released, not left to expire in 30 s.
    let taken = other.try_lock(&mutex).await.expect("the mutex is free");
    drop(taken);
    if target.expect.capabilities.read_write {
        let writer = other
            .write_lock(&shared)
            .wait(Duration::ZERO)
            .await
            .expect("no reader is left");
        drop(writer);
    }
    if target.expect.capabilities.semaphore {
        let first = other.semaphore(&permits, 2).wait(Duration::ZERO).await;
        let second = other.semaphore(&permits, 2).wait(Duration::ZERO).await;
        let both = (
            first.expect("a permit"),
            second.expect("both permits are free"),
        );
        drop(both);
    }
    drop(guards);
}

/// A Locker shut down while one of its acquires waits ends that acquire with
/// [`Error::ShutDown`] within the slack, and leaves no waiter behind: once the holder
/// releases, a third client takes the lock at once (nobody was handed it).
pub async fn shutdown_ends_waiting_acquires<B: LockBackend + ?Sized>(target: &Target<B>) {
    let (holder, leaving, third) = (
        target.locker().await,
        target.locker().await,
        target.locker().await,
    );
    let key = key("shutdown-waiter");
    let held = holder
        .lock(&key)
        .ttl(Duration::from_secs(30))
        .await
        .expect("lock");
    let waiting = tokio::spawn({
        let (leaving, key) = (leaving.clone(), key.clone());
        async move {
            let waited = leaving.lock(&key).wait(Duration::from_secs(30)).await;
            (waited.map(drop), Instant::now())
        }
    });
    target
        .until_queued(&format!("{}{key}", target.expect.prefix), 1)
        .await;
    let shut = Instant::now();
    leaving.shutdown().await.expect("shutdown");
    let (waited, answered) = waiting.await.expect("the waiter panicked");
    assert!(
        matches!(waited, Err(Error::ShutDown)),
        "a waiting acquire of a shut-down Locker: {waited:?}"
    );
    assert_between(
        "a waiting acquire ended by shutdown",
        answered.saturating_duration_since(shut),
        Duration::ZERO,
        target.expect.slack + target.expect.operation_timeout,
    );
    held.release().await.expect("release");
    let taken = third
        .lock(&key)
        .wait(target.expect.slack)
        .await
        .expect("the lock is free: the shut-down Locker's waiter is gone");
    drop(taken);
}

/// [`Locker::inspect`](crate::Locker::inspect) from a third client shows a free lock as
/// free; then the holder (exclusive, its fencing token, time left within its ttl); where the
/// service queues waiters, a waiting client; then the next holder; where the backend has
/// read-write locks, both readers of a read lock; and where it has semaphores, both permits
/// of one. A backend that does not claim it says `Unsupported`.
pub async fn inspect_shows_holders_and_waiters<B: LockBackend + ?Sized>(target: &Target<B>) {
    let (holder, waiter, admin) = (
        target.locker().await,
        target.locker().await,
        target.locker().await,
    );
    let key = key("inspect");
    match admin.inspect(&key).await {
        Err(Error::Unsupported { .. }) if !target.expect.inspect => return,
        Ok(info) if target.expect.inspect => assert!(info.is_free(), "{info:?}"),
        other => panic!(
            "inspect of a free lock, claimed: {}: {other:?}",
            target.expect.inspect
        ),
    }
    let ttl = Duration::from_secs(30);
    let guard = holder.lock(&key).ttl(ttl).await.expect("acquire");
    let info = admin.inspect(&key).await.expect("inspect");
    assert_eq!(info.holders.len(), 1, "{info:?}");
    let held = &info.holders[0];
    assert_eq!(held.mode, crate::LockMode::Exclusive);
    if let (Some(shown), Some(token)) = (held.fencing_token, guard.fencing_token()) {
        assert_eq!(shown, token);
    }
    if let Some(left) = held.expires_in {
        assert!(left <= ttl && left > ttl / 2, "{left:?} left of {ttl:?}");
    }
    let waiting = tokio::spawn({
        let key = key.clone();
        async move { waiter.lock(&key).wait(Duration::from_secs(10)).await }
    });
    if info.waiters.is_some() {
        let queued = async {
            loop {
                let info = admin.inspect(&key).await.expect("inspect");
                let waiters = info.waiters.unwrap_or_default();
                if let [only] = waiters.as_slice() {
                    assert_eq!(only.mode, crate::LockMode::Exclusive);
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(target.expect.slack * 8, queued)
            .await
            .expect("the waiting client never showed as a waiter");
    }
    guard.release().await.expect("release");
    let next = waiting
        .await
        .expect("waiter panicked")
        .expect("the waiter gets the lock");
    let info = admin.inspect(&key).await.expect("inspect");
    assert_eq!(info.holders.len(), 1, "{info:?}");
    assert_ne!(
        info.holders[0].owner, held.owner,
        "the new holder shows as the old one"
    );
    next.release().await.expect("release");
    if target.expect.capabilities.read_write {
        let shared = super::support::key("inspect-rw");
        let readers = (
            holder.read_lock(&shared).await.expect("read lock"),
            admin.read_lock(&shared).await.expect("read lock"),
        );
        let info = admin.inspect(&shared).await.expect("inspect");
        assert_eq!(info.holders.len(), 2, "{info:?}");
        assert!(
            info.holders
                .iter()
                .all(|h| h.mode == crate::LockMode::Shared)
        );
        drop(readers);
    }
    if target.expect.capabilities.semaphore {
        let semaphore = super::support::key("inspect-permits");
        let permits = (
            holder.semaphore(&semaphore, 2).await.expect("permit"),
            admin.semaphore(&semaphore, 2).await.expect("permit"),
        );
        let info = admin.inspect(&semaphore).await.expect("inspect");
        assert_eq!(info.holders.len(), 2, "{info:?}");
        assert!(
            info.holders
                .iter()
                .all(|h| h.mode == crate::LockMode::Permit { limit: 2 }),
            "{info:?}"
        );
        drop(permits);
    }
}
