//! The watchdog: one task per Locker, batched renewals, renewal stops with the guard.

mod support;

use std::sync::Arc;
use std::time::Duration;

use dlock_core::backend::MemoryBackend;
use dlock_core::{DlockConfig, Locker};
use support::Faulty;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_of_many_locks_are_batched_and_stop_when_guards_drop() {
    let ttl = Duration::from_millis(300);
    let backend = Arc::new(Faulty::new(MemoryBackend::new()));
    let config = DlockConfig::default().with_ttl(ttl);
    let locker = Locker::with_config(backend.clone(), &config).unwrap();
    let mut guards = Vec::new();
    for i in 0..20 {
        guards.push(locker.lock(&format!("batch:{i}")).await.unwrap());
    }
    assert_eq!(locker.watched_leases(), 20);
    tokio::time::sleep(ttl * 2).await;
    assert!(guards.iter().all(|g| g.is_held()));
    let batches = backend.renew_batches.lock().unwrap().clone();
    let renewed: usize = batches.iter().sum();
    assert!(
        renewed >= 20 * 4,
        "every lease renewed about every ttl/3: {batches:?}"
    );
    assert!(
        batches.len() * 4 <= renewed,
        "renewals were not batched (calls: {}, leases renewed: {renewed})",
        batches.len()
    );

    drop(guards);
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(locker.watched_leases(), 0);
    let calls = backend.renew_batches.lock().unwrap().len();
    tokio::time::sleep(ttl).await;
    assert_eq!(
        backend.renew_batches.lock().unwrap().len(),
        calls,
        "renewal continued after drop"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_cadence_follows_the_config() {
    let ttl = Duration::from_millis(600);
    let backend = Arc::new(Faulty::new(MemoryBackend::new()));
    let config = DlockConfig::default()
        .with_ttl(ttl)
        .with_watchdog_interval(Some(Duration::from_millis(50)));
    let locker = Locker::with_config(backend.clone(), &config).unwrap();
    let guard = locker.lock("fast").await.unwrap();
    tokio::time::sleep(Duration::from_millis(520)).await;
    let calls = backend.renew_batches.lock().unwrap().len();
    // 50 ms cadence over ~520 ms: about ten renewals, far more than the 1 of ttl/3.
    assert!(calls >= 6, "only {calls} renewals with a 50 ms cadence");
    guard.release().await.unwrap();
}

/// A Locker used from two runtimes one after the other (a global Locker across
/// `#[tokio::test]`s) still renews: the watchdog restarts on the new runtime.
#[test]
fn the_watchdog_survives_its_runtime() {
    let ttl = Duration::from_millis(200);
    let config = DlockConfig::default().with_ttl(ttl);
    let locker = Locker::with_config(Arc::new(MemoryBackend::new()), &config).unwrap();
    for _ in 0..2 {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let guard = locker.lock("cross-runtime").await.unwrap();
            tokio::time::sleep(ttl * 3).await;
            assert!(guard.is_held(), "no watchdog renewed the lease");
            guard.release().await.unwrap();
        });
    }
}

/// `expires_at` is the local deadline: a ttl (less the drift margin) after the grant, moved
/// forward by each renewal; without the watchdog it stays put.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expires_at_moves_with_renewals() {
    let ttl = Duration::from_millis(300);
    let locker = Locker::memory();
    let renewed = locker.lock("expiry:renewed").ttl(ttl).await.unwrap();
    let fixed = locker
        .lock("expiry:fixed")
        .ttl(ttl)
        .watchdog(false)
        .await
        .unwrap();
    let (first, fixed_at) = (renewed.expires_at(), fixed.expires_at());
    assert!(first <= std::time::Instant::now() + ttl);
    // Two renewals (every ttl/3) later.
    tokio::time::sleep(ttl * 2 / 3 + Duration::from_millis(50)).await;
    assert!(
        renewed.expires_at() >= first + ttl / 2,
        "renewals did not move the deadline: {:?} after the first",
        renewed.expires_at() - first
    );
    assert_eq!(fixed.expires_at(), fixed_at);
}

/// `max_hold` from the config applies to every lock, and a request's own overrides it; a
/// lock without a watchdog is released at its `max_hold` too when that comes before its ttl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_hold_from_config_and_request() {
    let config = DlockConfig::default()
        .with_ttl(Duration::from_millis(300))
        .with_max_hold(Some(Duration::from_millis(400)));
    let backend = Arc::new(MemoryBackend::new());
    let locker = Locker::with_config(backend.clone(), &config).unwrap();
    let by_config = locker.lock("cap:config").await.unwrap();
    let by_request = locker
        .lock("cap:request")
        .max_hold(Duration::from_millis(150))
        .watchdog(false)
        .await
        .unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(2), by_request.lost())
        .await
        .expect("the request's cap ended the hold");
    assert_eq!(
        reason,
        dlock_core::LostReason::MaxHold(Duration::from_millis(150))
    );
    assert!(by_config.is_held(), "the config's cap is longer");
    let reason = tokio::time::timeout(Duration::from_secs(2), by_config.lost())
        .await
        .expect("the config's cap ended the hold");
    assert_eq!(
        reason,
        dlock_core::LostReason::MaxHold(Duration::from_millis(400))
    );
    // Released, not left to expire (another Locker: this task's hold re-enters, and is lost).
    let other = Locker::with_config(backend, &config).unwrap();
    let other = other
        .lock("cap:config")
        .wait(Duration::from_millis(100)) // the ttl has 200 ms or more to run
        .await;
    assert!(other.is_ok(), "{other:?}");
    let zero = locker.lock("cap:zero").max_hold(Duration::ZERO).await;
    assert!(
        matches!(&zero, Err(dlock_core::Error::Config { field, .. }) if field == "max_hold"),
        "{zero:?}"
    );
}
