//! Leases: expiry, renewal, loss.

use std::time::{Duration, Instant};

use super::Target;
use super::support::{assert_between, key};
use crate::Error;
use crate::LostReason;
use crate::backend::LockBackend;
use crate::lease::{AcquireRequest, OwnerId, drift_margin};

/// A holder that vanishes without releasing keeps the lock for its ttl, not less (unless the
/// service frees a closed connection's locks at once), and then another client gets it: a crashed client (granted through the raw contract, then its
/// runtime shut down with nothing released — `Target::grant_then_crash`), and a guard leaked
/// with `mem::forget` with the watchdog off (the core releases it at its ttl).
pub async fn ttl_expiry_after_holder_vanishes<B: LockBackend + ?Sized>(target: &Target<B>) {
    let ttl = target.expect.ttl;
    let locker = target.locker().await;

    let vanished_key = key("vanished");
    let sent = Instant::now();
    let request = AcquireRequest::new(
        locker.backend_key(&vanished_key).unwrap(),
        OwnerId::random("crashed"),
        ttl,
    );
    assert!(
        target.grant_then_crash(request).await,
        "free key not granted"
    );
    let guard = locker
        .lock(&vanished_key)
        .wait(ttl * 4 + target.expect.expiry_lag + target.expect.slack)
        .await
        .expect("acquire after expiry");
    assert_between(
        "waiting out a crashed holder's ttl",
        sent.elapsed(),
        target.expect.crashed_holder_keeps(ttl),
        ttl + target.expect.expiry_lag + target.expect.slack,
    );
    drop(guard);

    let leaker = target.locker().await;
    let key = key("forgotten");
    let sent = Instant::now();
    let leaked = leaker.lock(&key).watchdog(false).await.expect("acquire");
    std::mem::forget(leaked);
    let _guard = locker
        .lock(&key)
        .wait(ttl * 4 + target.expect.slack)
        .await
        .expect("acquire after expiry");
    assert_between(
        "waiting out a forgotten guard's ttl",
        sent.elapsed(),
        ttl,
        ttl + target.expect.slack,
    );
}

/// With the watchdog on, a holder keeps the lock for 3.5 ttls and another client is refused
/// all along; after the release the other client gets it.
pub async fn watchdog_keeps_lock_past_three_ttls<B: LockBackend + ?Sized>(target: &Target<B>) {
    let ttl = target.expect.ttl;
    let (holder, other) = (target.locker().await, target.locker().await);
    let key = key("watchdog");
    let guard = holder.lock(&key).await.expect("acquire");
    let until = Instant::now() + ttl * 7 / 2;
    while Instant::now() < until {
        tokio::time::sleep(ttl / 2).await;
        assert!(guard.is_held(), "lease lost although the watchdog runs");
        match other.try_lock(&key).await {
            Err(Error::Busy { .. }) => {}
            other => panic!("another client got a renewed lock: {other:?}"),
        }
    }
    guard.release().await.expect("release after 3.5 ttls");
    other
        .try_lock(&key)
        .await
        .expect("free after release")
        .release()
        .await
        .expect("release");
}

/// With `.watchdog(false)` the lease runs out at its ttl: `lost()` resolves with
/// [`LostReason::Expired`] no earlier than the ttl minus the drift margin, and another client
/// gets the lock.
pub async fn lease_expires_without_watchdog<B: LockBackend + ?Sized>(target: &Target<B>) {
    let ttl = target.expect.ttl;
    let (holder, other) = (target.locker().await, target.locker().await);
    let key = key("no-watchdog");
    let sent = Instant::now();
    let guard = holder.lock(&key).watchdog(false).await.expect("acquire");
    let reason = guard.lost().await;
    assert_eq!(reason, LostReason::Expired);
    assert_between(
        "local expiry",
        sent.elapsed(),
        ttl - drift_margin(ttl),
        ttl + target.expect.slack,
    );
    assert!(!guard.is_held());
    let _next = other
        .lock(&key)
        .wait(ttl + target.expect.slack)
        .await
        .expect("free after expiry");
    assert!(
        matches!(guard.release().await, Err(Error::LeaseLost { .. })),
        "release of a lost lease must say so"
    );
}

/// The key is deleted behind the holder's back (an admin's
/// [`Locker::force_release`](crate::Locker::force_release) from another client): the
/// watchdog's next renewal finds it gone, and the work running under
/// [`LockGuard::run`](crate::LockGuard::run) is cancelled within a renewal period plus slack.
pub async fn lost_lease_cancels_work<B: LockBackend + ?Sized>(target: &Target<B>) {
    if !target.expect.force_release {
        return lease_expires_without_watchdog(target).await;
    }
    let ttl = target.expect.ttl;
    let holder = target.locker().await;
    let key = key("lost");
    let guard = holder.lock(&key).await.expect("acquire");
    let admin = target.locker().await;
    let work_done = std::sync::atomic::AtomicBool::new(false);
    let work = async {
        tokio::time::sleep(ttl * 10).await;
        work_done.store(true, std::sync::atomic::Ordering::SeqCst);
    };
    let delete = async {
        tokio::time::sleep(ttl / 2).await;
        assert!(
            admin.force_release(&key).await.expect("force_release"),
            "a holder was removed"
        );
        Instant::now()
    };
    let (outcome, deleted_at) = tokio::join!(guard.run(work), delete);
    match outcome {
        Err(Error::LeaseLost { reason, .. }) => assert_eq!(reason, LostReason::NotOwner),
        other => panic!("work was not cancelled on loss: {other:?}"),
    }
    assert!(!work_done.load(std::sync::atomic::Ordering::SeqCst));
    assert_between(
        "loss detection after deletion",
        deleted_at.elapsed(),
        Duration::ZERO,
        ttl / 3 + target.expect.slack,
    );
    assert!(!guard.is_held());
    assert!(matches!(
        guard.release().await,
        Err(Error::LeaseLost { .. })
    ));
}

/// A holder whose whole process freezes past its lease — a GC pause, swap, a stalled VM,
/// SIGSTOP — modelled by blocking the only thread of the runtime that runs its client, its
/// Locker and its watchdog: another client takes the lock meanwhile, and when the holder
/// thaws, the work under [`LockGuard::run`](crate::LockGuard::run) is never resumed past its
/// next await point — the caller gets [`Error::LeaseLost`] — even though nothing on the
/// frozen side noticed the loss before the work was polled again.
pub async fn paused_holder_never_resumes_its_work<B: LockBackend + ?Sized>(target: &Target<B>) {
    let ttl = target.expect.ttl;
    let pause = ttl * 2 + target.expect.slack;
    let key = key("paused");
    let make_locker = target.locker_maker();
    let (paused_tx, paused_rx) = tokio::sync::oneshot::channel();
    let holder_key = key.clone();
    let holder = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime for the holder");
        runtime.block_on(async move {
            let locker = make_locker().await;
            let guard = locker.lock(&holder_key).await.expect("acquire");
            let mut resumed = false;
            let outcome = guard
                .run(async {
                    tokio::time::sleep(ttl / 10).await; // the work is under way
                    paused_tx
                        .send(())
                        .expect("the scenario waits for the pause");
                    std::thread::sleep(pause); // the whole client freezes
                    tokio::task::yield_now().await; // the next await point
                    resumed = true;
                })
                .await;
            (outcome, resumed)
        })
    });
    paused_rx.await.expect("the holder starts its work");
    let rival = target.locker().await;
    let taken = rival
        .lock(&key)
        .wait(pause)
        .await
        .expect("the lock of a frozen holder frees at its ttl");
    let (outcome, resumed) = tokio::task::spawn_blocking(move || holder.join())
        .await
        .expect("join")
        .expect("the holder thread panicked");
    assert!(!resumed, "the work resumed after a pause past its lease");
    match outcome {
        Err(Error::LeaseLost { .. }) => {}
        other => panic!("the thawed holder was not told its lease is lost: {other:?}"),
    }
    assert!(
        taken.is_held(),
        "the rival lost the lock to the thawed holder"
    );
    taken.release().await.expect("release");
}

/// Dropping a guard releases in the background: a waiting client gets the lock promptly, and
/// the holder's watchdog stops renewing.
pub async fn dropped_guard_releases<B: LockBackend + ?Sized>(target: &Target<B>) {
    let (holder, waiter) = (target.locker().await, target.locker().await);
    let key = key("drop");
    let guard = holder
        .lock(&key)
        .ttl(Duration::from_secs(30))
        .await
        .expect("acquire");
    assert_eq!(holder.watched_leases(), 1);
    let waiting = tokio::spawn({
        let key = key.clone();
        async move {
            let guard = waiter.lock(&key).wait(Duration::from_secs(20)).await;
            (guard.map(drop), Instant::now())
        }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let dropped_at = Instant::now();
    drop(guard);
    let (acquired, at) = waiting.await.expect("waiter panicked");
    acquired.expect("the waiter gets the dropped lock");
    assert_between(
        "hand-over after drop",
        at - dropped_at,
        Duration::ZERO,
        target.expect.slack,
    );
    assert_eq!(
        holder.watched_leases(),
        0,
        "the watchdog still tracks a dropped lease"
    );
}
