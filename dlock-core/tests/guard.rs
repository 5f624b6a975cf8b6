//! LockGuard: auto traits, lost-lease signalling and cancellation, deadlines from send time.

mod support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use dlock_core::{DlockConfig, Error, HandOff, LockGuard, Locker, LostReason, MemoryBackend};
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
    let config = DlockConfig {
        ttl,
        ..DlockConfig::default()
    };
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_cancels_the_body_when_the_lease_is_broken() {
    let table = MemoryBackend::new();
    let config = DlockConfig {
        ttl: Duration::from_millis(300),
        ..DlockConfig::default()
    };
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
        dlock_core::LockBackend::force_release(&table, "dlock:settle")
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

#[tokio::test]
async fn guards_release_on_drop_even_outside_explicit_release() {
    let backend = Arc::new(Faulty::new(MemoryBackend::new()));
    let locker = Locker::from_shared_backend(backend.clone());
    {
        let _guard = locker.lock("scoped").await.unwrap();
    }
    // The background release runs on this runtime; yield until it did.
    for _ in 0..100 {
        if backend.releases.load(Ordering::SeqCst) == 1 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(backend.releases.load(Ordering::SeqCst), 1);
    let _again = locker.try_lock("scoped").await.expect("released by drop");
}
