//! Reentrancy per tokio task, and explicit hand-off.

use std::time::Duration;

use super::Target;
use super::support::key;
use crate::Error;
use crate::backend::LockBackend;

/// The task that holds a key re-enters at once, without a round trip, with the same token;
/// the inner release does not release; the outermost does. Another task of the same Locker,
/// a spawned child, and another client all contend normally.
pub async fn reentrancy_is_per_task<B: LockBackend + ?Sized>(target: &Target<B>) {
    let (counting, locker) = target.counting_locker().await;
    let other_client = target.locker().await;
    let key = key("reentrant");

    let outer = locker.lock(&key).await.expect("outer acquire");
    assert!(!outer.is_nested());
    let before = counting.acquires();
    let inner = locker.try_lock(&key).await.expect("re-entry never waits");
    let innermost = locker
        .lock(&key)
        .ttl(Duration::from_secs(99))
        .await
        .expect("re-entry");
    assert_eq!(
        counting.acquires(),
        before,
        "re-entry made a backend round trip"
    );
    assert!(inner.is_nested() && innermost.is_nested());
    assert_eq!(inner.fencing_token(), outer.fencing_token());

    let same_locker = locker.clone();
    let spawned_key = key.clone();
    let spawned = tokio::spawn(async move { same_locker.try_lock(&spawned_key).await.map(drop) });
    assert!(
        matches!(spawned.await.expect("task"), Err(Error::Busy { .. })),
        "a spawned task inherited the hold"
    );
    assert!(matches!(
        other_client.try_lock(&key).await,
        Err(Error::Busy { .. })
    ));

    innermost.release().await.expect("inner release");
    inner.release().await.expect("inner release");
    assert_eq!(counting.releases(), 0, "an inner release released");
    assert!(
        matches!(other_client.try_lock(&key).await, Err(Error::Busy { .. })),
        "free before the outermost release"
    );
    outer.release().await.expect("outer release");
    assert_eq!(counting.releases(), 1);
    other_client
        .try_lock(&key)
        .await
        .expect("free after the outermost release")
        .release()
        .await
        .expect("release");

    // After the outermost release, the same task acquires anew (a new grant, not re-entry).
    let before = counting.acquires();
    let again = locker.try_lock(&key).await.expect("fresh acquire");
    assert!(!again.is_nested());
    assert_eq!(counting.acquires(), before + 1);
}

/// A hold handed off to a child task lets the child re-enter; the lock is released only
/// when both the parent's and the child's guards are gone.
pub async fn hand_off_shares_the_hold<B: LockBackend + ?Sized>(target: &Target<B>) {
    let locker = target.locker().await;
    let other_client = target.locker().await;
    let key = key("hand-off");
    let parent = locker.lock(&key).await.expect("acquire");
    let hand_off = parent.hand_off();
    let (child_locker, child_key) = (locker.clone(), key.clone());
    let (adopted_tx, adopted_rx) = tokio::sync::oneshot::channel();
    let (finish_tx, finish_rx) = tokio::sync::oneshot::channel::<()>();
    let child = tokio::spawn(async move {
        let shared = hand_off.adopt();
        let nested = child_locker
            .try_lock(&child_key)
            .await
            .expect("the child re-enters the handed-off hold");
        assert!(nested.is_nested());
        assert_eq!(nested.fencing_token(), shared.fencing_token());
        adopted_tx.send(()).expect("parent listening");
        finish_rx.await.expect("parent alive");
        drop(nested);
        shared.release().await
    });
    adopted_rx.await.expect("child adopted");
    parent.release().await.expect("parent's share");
    assert!(
        matches!(other_client.try_lock(&key).await, Err(Error::Busy { .. })),
        "released while the child still held it"
    );
    finish_tx.send(()).expect("child waiting");
    child
        .await
        .expect("child panicked")
        .expect("child's release");
    other_client
        .try_lock(&key)
        .await
        .expect("free after both released")
        .release()
        .await
        .expect("release");
}
