//! LockGuard: auto traits, lost-lease signalling and cancellation, deadlines from send time.

mod support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use dlock_core::backend::MemoryBackend;
use dlock_core::{DlockConfig, Error, HandOff, LockGuard, Locker, LostReason};
use support::Faulty;

#[test]
fn guard_locker_and_futures_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>(_: &T) {}
    send_sync::<LockGuard>();
    send_sync::<HandOff>();
    send_sync::<Locker>();
    send_sync::<Error>();
    let locker = Locker::memory();
    send(&std::future::IntoFuture::into_future(locker.lock("k")));
    send(&locker.with_lock("k", async {}));
}

fn faulty_locker(ttl: Duration) -> (Arc<Faulty>, Locker) {
    let backend = Arc::new(Faulty::new(MemoryBackend::new()));
    let config = DlockConfig::default().with_ttl(ttl);
    let locker = Locker::with_config(backend.clone(), &config).unwrap();
    (backend, locker)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_renewals_lose_the_lease_at_the_local_deadline_and_cancel_work() {
    let ttl = Duration::from_millis(300);
    let (backend, locker) = faulty_locker(ttl);
    let sent = Instant::now();
    let guard = locker.lock("job").await.unwrap();
    backend.fail_renewals.store(true, Ordering::SeqCst);
    let outcome = guard.run(tokio::time::sleep(Duration::from_secs(30))).await;
    let elapsed = sent.elapsed();
    match outcome {
        Err(Error::LeaseLost { key, reason }) => {
            assert_eq!(key, "job");
            assert_eq!(reason, LostReason::Expired);
        }
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    // Lost no later than the ttl (+ scheduling), and not before the lease really could expire
    // minus the drift margin (1% + 2 ms).
    assert!(
        elapsed >= ttl - ttl / 100 - Duration::from_millis(2),
        "lost early: {elapsed:?}"
    );
    assert!(
        elapsed < ttl + Duration::from_millis(200),
        "lost late: {elapsed:?}"
    );
    assert!(
        backend.renew_batches.lock().unwrap().len() >= 2,
        "the watchdog retried the renewal"
    );
    assert!(!guard.is_held());
    assert_eq!(guard.lost_reason(), Some(LostReason::Expired));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_that_recovers_in_time_keeps_the_lease() {
    let ttl = Duration::from_millis(300);
    let (backend, locker) = faulty_locker(ttl);
    let guard = locker.lock("job").await.unwrap();
    backend.fail_renewals.store(true, Ordering::SeqCst);
    tokio::time::sleep(ttl / 2).await;
    backend.fail_renewals.store(false, Ordering::SeqCst);
    tokio::time::sleep(ttl * 2).await;
    assert!(
        guard.is_held(),
        "a retried renewal should have saved the lease"
    );
    guard.release().await.unwrap();
}

/// The deadline counts from when the acquire was *sent*: a reply that arrives late shortens
/// the usable lease by the delay instead of extending it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_counts_from_send_time_not_reply_time() {
    let ttl = Duration::from_millis(400);
    let (backend, locker) = faulty_locker(ttl);
    *backend.acquire_reply_delay.lock().unwrap() = ttl / 2;
    let sent = Instant::now();
    let guard = locker.lock("slow-reply").watchdog(false).await.unwrap();
    let replied = sent.elapsed();
    assert!(replied >= ttl / 2);
    guard.lost().await;
    let lost_after_send = sent.elapsed();
    assert!(
        lost_after_send < ttl + Duration::from_millis(100),
        "deadline measured from the reply: lost {lost_after_send:?} after sending, ttl {ttl:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_later_than_the_ttl_is_not_a_grant() {
    let ttl = Duration::from_millis(100);
    let (backend, locker) = faulty_locker(ttl);
    *backend.acquire_reply_delay.lock().unwrap() = ttl + Duration::from_millis(50);
    match locker.lock("too-late").await {
        Err(Error::LeaseLost { reason, .. }) => assert_eq!(reason, LostReason::Expired),
        other => panic!("expected LeaseLost for a reply after the ttl, got {other:?}"),
    }
    // The unusable grant is given back, not left to expire.
    *backend.acquire_reply_delay.lock().unwrap() = Duration::ZERO;
    let _next = locker
        .lock("too-late")
        .wait(Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(
        backend.releases.load(Ordering::SeqCst),
        1,
        "the late grant was not released"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_cancels_the_body_when_the_lease_is_broken() {
    let table = MemoryBackend::new();
    let config = DlockConfig::default().with_ttl(Duration::from_millis(300));
    let locker = Locker::with_config(Arc::new(table.clone()), &config).unwrap();
    let progress = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let body = {
        let progress = Arc::clone(&progress);
        async move {
            loop {
                progress.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    let breaker = async {
        tokio::time::sleep(Duration::from_millis(150)).await;
        dlock_core::backend::LockBackend::force_release(&table, "dlock:settle")
            .await
            .unwrap()
    };
    let (outcome, broke) = tokio::join!(locker.with_lock("settle", body), breaker);
    assert!(broke);
    assert!(
        matches!(
            outcome,
            Err(Error::LeaseLost {
                reason: LostReason::NotOwner,
                ..
            })
        ),
        "{outcome:?}"
    );
    let seen = progress.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        progress.load(Ordering::SeqCst),
        seen,
        "the body kept running after cancellation"
    );
}

#[tokio::test]
async fn lost_future_outlives_the_guard_and_stays_pending_after_release() {
    let locker = Locker::memory();
    let guard = locker.lock("k").await.unwrap();
    let lost = guard.lost();
    guard.release().await.unwrap();
    let pending = tokio::time::timeout(Duration::from_millis(50), lost).await;
    assert!(pending.is_err(), "a normal release is not a loss");
}

/// A loss the `lost()` future had not looked at yet still resolves it after the guard is
/// dropped (as a wrapper drops it when it cancels the protected work): found by the
/// ZooKeeper connection-cut test, where the watchdog marked the loss and the guard's drop
/// came before the waiting future's next poll.
#[tokio::test]
async fn a_loss_before_the_release_resolves_lost() {
    let locker = Locker::memory();
    let guard = locker
        .lock("k")
        .ttl(Duration::from_millis(30))
        .watchdog(false)
        .await
        .unwrap();
    let lost = guard.lost();
    while guard.is_held() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drop(guard);
    let reason = tokio::time::timeout(Duration::from_secs(5), lost)
        .await
        .expect("the loss is reported although the guard is gone");
    assert!(
        matches!(reason, dlock_core::LostReason::Expired),
        "{reason}"
    );
}

#[tokio::test]
async fn a_dropped_guard_is_released_in_the_background() {
    let backend = Arc::new(Faulty::new(MemoryBackend::new()));
    let locker = Locker::from_shared_backend(backend.clone());
    {
        let _guard = locker.lock("scoped").await.unwrap();
    }
    let other_task = locker.clone();
    let again = tokio::spawn(async move {
        other_task
            .lock("scoped")
            .wait(Duration::from_secs(2))
            .await
            .map(drop)
    });
    again
        .await
        .unwrap()
        .expect("released by drop (the default ttl is 30 s)");
    assert!(backend.releases.load(Ordering::SeqCst) >= 1);
}

/// An explicit release cancelled half-way (a timeout around it, the caller's future dropped)
/// still releases, in the background: the lock does not stay held until its ttl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_release_still_releases() {
    let table = MemoryBackend::new();
    let backend = Arc::new(Faulty::new(table.clone()));
    *backend.release_delay.lock().unwrap() = Duration::from_millis(50);
    let locker = Locker::from_shared_backend(backend.clone());
    let guard = locker.lock("k").await.unwrap();
    let cancelled = tokio::time::timeout(Duration::from_millis(10), guard.release()).await;
    assert!(
        cancelled.is_err(),
        "the release should still have been in flight"
    );
    let other = Locker::from_backend(table);
    let _next = other
        .lock("k")
        .wait(Duration::from_secs(2))
        .await
        .expect("the lock was left held after a cancelled release (default ttl: 30 s)");
}

/// Shared guards released at the same time: exactly one of them releases (inline), and both
/// report success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_releases_of_shared_guards_release_once() {
    for _ in 0..50 {
        let backend = Arc::new(Faulty::new(MemoryBackend::new()));
        let locker = Locker::from_shared_backend(backend.clone());
        let parent = locker.lock("k").await.unwrap();
        let child = tokio::spawn({
            let hand_off = parent.hand_off();
            async move { hand_off.adopt().release().await }
        });
        let (a, b) = tokio::join!(parent.release(), child);
        a.unwrap();
        b.unwrap().unwrap();
        assert_eq!(backend.releases.load(Ordering::SeqCst), 1);
        assert!(locker.try_lock("k").await.is_ok(), "released");
    }
}

/// A guard dropped in synchronous code, outside any runtime, is released on the runtime that
/// acquired it.
#[test]
fn a_guard_dropped_outside_a_runtime_is_released_on_the_acquiring_runtime() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let table = MemoryBackend::new();
    let locker = Locker::from_backend(table.clone());
    let guard = runtime.block_on(async { locker.lock("sync").await });
    drop(guard.unwrap()); // no runtime here
    let other = Locker::from_backend(table);
    runtime.block_on(async {
        let _next = other
            .lock("sync")
            .wait(Duration::from_secs(2))
            .await
            .expect("the dropped guard was never released");
    });
}
