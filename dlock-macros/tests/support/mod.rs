//! Helpers shared by the behaviour tests.
#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use dlock_core::{Error, Locker};

/// Fails the test instead of hanging it when `future` does not finish within 10 s.
pub async fn within_10s<F: Future>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(10), future)
        .await
        .unwrap_or_else(|_| panic!("{what}: did not finish within 10s"))
}

/// Asserts that another task can take `key` right now, with one attempt (so it is not held,
/// not even by the calling task, whose nested acquire would re-enter).
pub async fn assert_free_now(locker: &Locker, key: &'static str) {
    let other = locker.clone();
    let outcome = tokio::spawn(async move { other.try_lock(key).await?.release().await })
        .await
        .expect("the probe task panicked");
    outcome.unwrap_or_else(|e| panic!("`{key}` should be free now: {e}"));
}

/// Asserts that another task gets `key` once it is released in the background (a dropped
/// guard), waiting for the release — never sleeping and hoping.
pub async fn assert_released(locker: &Locker, key: &'static str) {
    let other = locker.clone();
    let outcome = tokio::spawn(async move {
        other
            .lock(key)
            .wait(Duration::from_secs(5))
            .await?
            .release()
            .await
    })
    .await
    .expect("the probe task panicked");
    outcome.unwrap_or_else(|e| panic!("`{key}` should have been released: {e}"));
}

/// Asserts that another task cannot take `key` now (it is held).
pub async fn assert_held(locker: &Locker, key: &'static str) {
    let other = locker.clone();
    let outcome = tokio::spawn(async move { other.try_lock(key).await.map(drop) })
        .await
        .expect("the probe task panicked");
    assert!(
        matches!(outcome, Err(Error::Busy { .. })),
        "`{key}` should be held, got {outcome:?}"
    );
}
