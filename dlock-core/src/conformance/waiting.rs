//! Waiting: deadlines, wake-ups, fairness, cancellation.

use std::future::IntoFuture as _;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::Target;
use super::support::{assert_between, key};
use crate::backend::LockBackend;
use crate::{Error, Locker};

const LONG_TTL: Duration = Duration::from_secs(30);

/// A waiter gives up with [`Error::Busy`] after its wait, not earlier and not much later.
pub async fn wait_deadline_is_honoured<B: LockBackend + ?Sized>(target: &Target<B>) {
    let (holder, waiter) = (target.locker().await, target.locker().await);
    let key = key("deadline");
    let _held = holder.lock(&key).ttl(LONG_TTL).await.expect("acquire");
    let wait = target.expect.ttl;
    let started = Instant::now();
    match waiter.lock(&key).wait(wait).await {
        Err(Error::Busy {
            key: k,
            waited,
            retry_after,
            by_this_locker,
        }) => {
            assert_eq!(k, key);
            assert!(
                !by_this_locker,
                "another Locker holds `{key}`, not the waiter's"
            );
            assert!(waited >= wait, "reported waiting {waited:?} < {wait:?}");
            if let Some(retry_after) = retry_after {
                assert!(
                    retry_after <= LONG_TTL,
                    "retry_after {retry_after:?} beyond the holder's ttl"
                );
            }
        }
        other => panic!("expected Busy, got {other:?}"),
    }
    assert_between(
        "waiting for a held lock",
        started.elapsed(),
        wait,
        wait + target.expect.slack,
    );
}

/// `try_lock` on a held key answers Busy at once.
pub async fn try_lock_does_not_wait<B: LockBackend + ?Sized>(target: &Target<B>) {
    let (holder, other) = (target.locker().await, target.locker().await);
    let key = key("try");
    let _held = holder.lock(&key).ttl(LONG_TTL).await.expect("acquire");
    let started = Instant::now();
    assert!(matches!(
        other.try_lock(&key).await,
        Err(Error::Busy { .. })
    ));
    assert_between(
        "try_lock on a held key",
        started.elapsed(),
        Duration::ZERO,
        target.expect.slack,
    );
}

/// A waiter acquires within the slack of the release although the holder's lease still had
/// about 30 s to run: it was woken by the release, not by the ttl or a slow poll.
pub async fn waiter_woken_promptly_on_release<B: LockBackend + ?Sized>(target: &Target<B>) {
    let (holder, waiter) = (target.locker().await, target.locker().await);
    let key = key("wake");
    for _ in 0..3 {
        let held = holder.lock(&key).ttl(LONG_TTL).await.expect("acquire");
        let waiting = tokio::spawn({
            let (waiter, key) = (waiter.clone(), key.clone());
            async move {
                let guard = waiter.lock(&key).wait(LONG_TTL / 2).await;
                let at = Instant::now();
                (guard.map(drop), at)
            }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let released_at = Instant::now();
        held.release().await.expect("release");
        let (acquired, at) = waiting.await.expect("waiter panicked");
        acquired.expect("the waiter gets the lock");
        assert_between(
            "wake-up after release",
            at - released_at,
            Duration::ZERO,
            target.expect.slack,
        );
    }
}

/// With a fair backend, five waiters that queued one after another get the lock in that
/// order; otherwise all of them get it eventually.
pub async fn waiters_are_served_in_order<B: LockBackend + ?Sized>(target: &Target<B>) {
    let holder = target.locker().await;
    let key = key("fifo");
    let held = holder.lock(&key).ttl(LONG_TTL).await.expect("acquire");
    let full_key = holder.backend_key(&key).unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for index in 0..5 {
        let locker = target.locker().await;
        let (key, order) = (key.clone(), Arc::clone(&order));
        waiters.push(tokio::spawn(async move {
            let guard = locker
                .lock(&key)
                .wait(LONG_TTL)
                .await
                .expect("waiter acquires");
            order
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(index);
            tokio::time::sleep(Duration::from_millis(5)).await;
            guard.release().await.expect("release");
        }));
        // Let this waiter enqueue before the next one arrives.
        target.until_queued(&full_key, index + 1).await;
    }
    held.release().await.expect("release");
    for waiter in waiters {
        waiter.await.expect("waiter panicked");
    }
    let order = order.lock().unwrap_or_else(PoisonError::into_inner).clone();
    if target.expect.capabilities.fair {
        assert_eq!(
            order,
            [0, 1, 2, 3, 4],
            "a fair backend served waiters out of order"
        );
    } else {
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(
            sorted,
            [0, 1, 2, 3, 4],
            "some waiter never got the lock: {order:?}"
        );
    }
}

/// With a fair backend, the order holds across processes: sixteen waiters in four Lockers
/// (four each, arriving in turn from each Locker) get the lock in the order they queued, not
/// Locker by Locker; otherwise all of them get it eventually. Each holder keeps the lock a
/// moment, so a Locker whose waiter just released could take it again if it were let.
pub async fn waiters_of_many_lockers_are_served_in_order<B: LockBackend + ?Sized>(
    target: &Target<B>,
) {
    const LOCKERS: usize = 4;
    const WAITERS: usize = 16;
    let holder = target.locker().await;
    let key = key("fifo-lockers");
    let held = holder.lock(&key).ttl(LONG_TTL).await.expect("acquire");
    let full_key = holder.backend_key(&key).unwrap();
    let mut lockers = Vec::new();
    for _ in 0..LOCKERS {
        lockers.push(target.locker().await);
    }
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for index in 0..WAITERS {
        let locker = lockers[index % LOCKERS].clone();
        let (key, order) = (key.clone(), Arc::clone(&order));
        waiters.push(tokio::spawn(async move {
            let guard = locker
                .lock(&key)
                .wait(LONG_TTL * 2)
                .await
                .expect("waiter acquires");
            order
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(index);
            tokio::time::sleep(Duration::from_millis(5)).await;
            guard.release().await.expect("release");
        }));
        target.until_queued(&full_key, index + 1).await;
    }
    held.release().await.expect("release");
    for waiter in waiters {
        waiter.await.expect("waiter panicked");
    }
    let order = order.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let expected: Vec<usize> = (0..WAITERS).collect();
    if target.expect.capabilities.fair {
        assert_eq!(
            order, expected,
            "a fair backend served the waiters of several Lockers out of order"
        );
    } else {
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(
            sorted, expected,
            "some waiter never got the lock: {order:?}"
        );
    }
}

/// Acquires cancelled while waiting (a timeout dropping the future, an aborted task) leave
/// nothing behind: after the holder releases, a newcomer gets the lock at once, and the
/// cancelled Lockers watch no lease.
pub async fn cancelled_wait_leaves_nothing_behind<B: LockBackend + ?Sized>(target: &Target<B>) {
    let (holder, cancelled, newcomer) = (
        target.locker().await,
        target.locker().await,
        target.locker().await,
    );
    let key = key("cancel");
    let held = holder.lock(&key).ttl(LONG_TTL).await.expect("acquire");

    let timed_out = tokio::time::timeout(
        Duration::from_millis(100),
        cancelled.lock(&key).wait_forever().into_future(),
    )
    .await;
    assert!(timed_out.is_err(), "the lock was granted while held");
    let aborted = tokio::spawn({
        let (cancelled, key) = (cancelled.clone(), key.clone());
        async move { cancelled.lock(&key).wait_forever().await.map(drop) }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    aborted.abort();
    assert!(
        aborted.await.is_err_and(|e| e.is_cancelled()),
        "the aborted acquire completed"
    );

    held.release().await.expect("release");
    let started = Instant::now();
    let guard = newcomer
        .lock(&key)
        .wait(Duration::from_secs(5))
        .await
        .expect("nothing left queued ahead");
    assert_between(
        "acquire after cancelled waiters",
        started.elapsed(),
        Duration::ZERO,
        target.expect.slack,
    );
    assert_eq!(
        cancelled.watched_leases(),
        0,
        "a cancelled acquire left a lease behind"
    );
    guard.release().await.expect("release");
}

/// A waiter that gives up leaves nothing on the server for the next holder to wait out —
/// no queue key, waiter mark or session holding the lock — whether its process then shuts
/// its Locker down or simply stops running it. Client A holds K; B waits 300 ms and hears
/// Busy; B's Locker is shut down, or (second round) B's runtime is dropped with the Locker
/// still alive, as a process that goes on without it; A releases; C's `try_lock` gets K at
/// once. The long ttl shows a leftover: it would keep K for 30 s.
pub async fn given_up_waiter_leaves_nothing_behind<B: LockBackend + ?Sized>(target: &Target<B>) {
    for shut_down in [true, false] {
        let (holder, newcomer) = (target.locker().await, target.locker().await);
        let key = key(if shut_down {
            "gave-up-shut-down"
        } else {
            "gave-up-runtime-dropped"
        });
        let held = holder.lock(&key).ttl(LONG_TTL).await.expect("acquire");
        let give_up = |waiter: Locker| {
            let key = key.clone();
            async move {
                let waited = waiter
                    .lock(&key)
                    .ttl(LONG_TTL)
                    .wait(Duration::from_millis(300))
                    .await;
                assert!(
                    matches!(waited, Err(Error::Busy { .. })),
                    "a wait on a held lock: {waited:?}"
                );
                waiter
            }
        };
        // Kept alive to the end: what it left must not depend on its drop.
        let _waiter = if shut_down {
            let waiter = give_up(target.locker().await).await;
            waiter.shutdown().await.expect("shutdown");
            waiter
        } else {
            // Its own runtime on its own thread, dropped at once after the Busy answer:
            // nothing it would have finished in the background runs.
            tokio::task::block_in_place(|| {
                std::thread::scope(|scope| {
                    scope
                        .spawn(|| {
                            let runtime = tokio::runtime::Builder::new_current_thread()
                                .enable_all()
                                .build()
                                .expect("a runtime");
                            let waiter =
                                runtime.block_on(async { give_up(target.locker().await).await });
                            drop(runtime);
                            waiter
                        })
                        .join()
                        .expect("the waiter's thread")
                })
            })
        };
        held.release().await.expect("release");
        let taken = newcomer.try_lock(&key).await;
        assert!(
            taken.is_ok(),
            "the lock was not free at once after its holder released and its waiter gave up \
             ({}): {taken:?}",
            if shut_down {
                "then shut down"
            } else {
                "then its runtime was dropped"
            }
        );
        drop(taken);
    }
}
