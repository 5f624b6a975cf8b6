//! What the test binaries share, pulled in by each one the same way (`mod support;`): a
//! Locker connected as an application connects one, other programs run and signalled, a
//! condition waited for, and a fault-injecting decorator of the memory backend.

#![allow(dead_code, unreachable_pub, unused_imports)]

pub mod connect;
mod faulty;
pub mod processes;

pub use faulty::Faulty;

use std::time::{Duration, Instant};

/// The held lock `guards[index]`, whose key someone else deleted at `deleted_at`, is lost by
/// its next renewal (within a third of `ttl`, plus slack), and every other guard stays held.
pub async fn only_this_lock_is_lost(
    guards: &[dlock_core::LockGuard],
    index: usize,
    ttl: Duration,
    deleted_at: Instant,
) {
    tokio::time::timeout(ttl, guards[index].lost())
        .await
        .expect("the lock whose key was deleted is lost by the next renewal");
    assert!(deleted_at.elapsed() <= ttl / 3 + Duration::from_millis(500));
    let still_held = guards.iter().filter(|guard| guard.is_held()).count();
    assert_eq!(
        still_held,
        guards.len() - 1,
        "only the deleted key's lock is lost"
    );
}
