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
    let config = DlockConfig {
        ttl,
        ..DlockConfig::default()
    };
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
    let config = DlockConfig {
        ttl,
        watchdog_interval: Some(Duration::from_millis(50)),
        ..DlockConfig::default()
    };
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
    let config = DlockConfig {
        ttl,
        ..DlockConfig::default()
    };
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
