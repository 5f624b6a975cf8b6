//! Reentrancy rules beyond the conformance suite: the `join!` sharp edge, code outside tasks,
//! Lockers as separate clients, and re-entering a lost hold.

use std::time::Duration;

use dlock_core::backend::MemoryBackend;
use dlock_core::{Error, Locker};

#[tokio::test]
async fn nested_acquire_in_one_task_reenters_and_outermost_release_releases() {
    let locker = Locker::memory();
    let outer = locker.lock("order:1").await.unwrap();
    let inner = locker.lock("order:1").wait(Duration::ZERO).await.unwrap();
    assert!(inner.is_nested());
    inner.release().await.unwrap();
    let other = locker.clone();
    let contender = tokio::spawn(async move { other.try_lock("order:1").await.map(drop) });
    assert!(matches!(contender.await.unwrap(), Err(Error::Busy { .. })));
    outer.release().await.unwrap();
    let other = locker.clone();
    let contender = tokio::spawn(async move { other.try_lock("order:1").await.map(drop) });
    contender
        .await
        .unwrap()
        .expect("free after the outermost release");
}

/// The documented sharp edge: both branches of one `join!` run in the same task, so the
/// second re-enters the first's hold instead of waiting for it.
#[tokio::test]
async fn branches_of_one_join_share_the_task_and_therefore_the_hold() {
    let locker = Locker::memory();
    let (a, b) = tokio::join!(locker.lock("shared"), locker.lock("shared"));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(
        a.is_nested() as u8 + b.is_nested() as u8,
        1,
        "exactly one of them re-entered"
    );
    assert_eq!(a.fencing_token(), b.fencing_token());
}

/// Outside any task (the body of `block_on`) the thread is the holder.
#[test]
fn code_outside_a_task_reenters_per_thread() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let locker = Locker::memory();
        let outer = locker.lock("main").await.unwrap();
        let inner = locker
            .try_lock("main")
            .await
            .expect("re-enters on the same thread");
        assert!(inner.is_nested());
        let other = locker.clone();
        let spawned = tokio::spawn(async move { other.try_lock("main").await.map(drop) });
        assert!(matches!(spawned.await.unwrap(), Err(Error::Busy { .. })));
        drop((inner, outer));
    });
}

/// Two Lockers are two clients, even over one table and in one task: they exclude each other.
#[tokio::test]
async fn separate_lockers_do_not_share_holds() {
    let table = MemoryBackend::new();
    let (a, b) = (
        Locker::from_backend(table.clone()),
        Locker::from_backend(table),
    );
    let _held = a.lock("k").await.unwrap();
    assert!(matches!(b.try_lock("k").await, Err(Error::Busy { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_entering_a_lost_hold_reports_the_loss() {
    let locker = Locker::memory();
    let outer = locker
        .lock("short")
        .ttl(Duration::from_millis(50))
        .watchdog(false)
        .await
        .unwrap();
    outer.lost().await;
    match locker.try_lock("short").await {
        Err(Error::LeaseLost { key, .. }) => assert_eq!(key, "short"),
        other => panic!("expected LeaseLost when re-entering a lost hold, got {other:?}"),
    }
    drop(outer);
    // The local deadline runs a drift margin ahead of the server's expiry: wait that out.
    let fresh = locker
        .lock("short")
        .wait(Duration::from_millis(100))
        .await
        .expect("acquire anew");
    assert!(!fresh.is_nested());
}

#[tokio::test]
async fn the_global_locker_is_installed_once_and_shared() {
    let locker = Locker::memory();
    locker.install_global();
    let global = Locker::global().unwrap();
    let _held = global.lock("global").await.unwrap();
    let nested = locker
        .try_lock("global")
        .await
        .expect("the global is the same Locker");
    assert!(nested.is_nested());
}

/// After handing its hold off and dropping its own guard, the parent task no longer holds
/// the key: its next acquire contends instead of re-entering the child's hold.
#[tokio::test]
async fn a_holder_that_gave_up_its_share_no_longer_reenters() {
    let locker = Locker::memory();
    let parent = locker.lock("job").await.unwrap();
    let hand_off = parent.hand_off();
    let (adopted_tx, adopted_rx) = tokio::sync::oneshot::channel();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let child = tokio::spawn(async move {
        let guard = hand_off.adopt();
        adopted_tx.send(()).unwrap();
        done_rx.await.unwrap();
        guard.release().await
    });
    adopted_rx.await.unwrap();
    drop(parent);
    assert!(
        matches!(locker.try_lock("job").await, Err(Error::Busy { .. })),
        "the parent re-entered a hold only the child has"
    );
    done_tx.send(()).unwrap();
    child.await.unwrap().unwrap();
    let fresh = locker
        .try_lock("job")
        .await
        .expect("free after the child's release");
    assert!(!fresh.is_nested());
}
