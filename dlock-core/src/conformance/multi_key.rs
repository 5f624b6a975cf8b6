//! Lock sets ([`Locker::lock_all`](crate::Locker::lock_all)): all or none, one canonical
//! order, one deadline, nothing left behind, and the rule for keys the task already holds.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::Target;
use super::support::{UnsafeCounter, assert_between, key};
use crate::backend::LockBackend;
use crate::{Error, Locker};

/// A held lock's ttl that outlives every scenario: a leftover would show as a busy key.
const LONG_TTL: Duration = Duration::from_secs(30);

/// Names `count` keys of one scenario run, sorting in the order given.
fn keys(name: &str, count: usize) -> Vec<String> {
    let base = key(name);
    (0..count).map(|at| format!("{base}:{at}")).collect()
}

/// Whether `locker` can take every one of `keys` at once (each released again).
async fn all_free(locker: &Locker, keys: &[String]) -> bool {
    for key in keys {
        match locker.try_lock(key).await {
            Ok(guard) => guard.release().await.expect("release"),
            Err(Error::Busy { .. }) => return false,
            Err(other) => panic!("try_lock of `{key}`: {other}"),
        }
    }
    true
}

/// A set with one busy key takes nothing: with one attempt and with a wait, the caller hears
/// Busy naming that key, and every other key of the set is free at once afterwards; a set
/// that is free is taken whole, each member with its own token where the backend issues them,
/// in one backend call where the backend takes sets together (and released in one).
pub async fn lock_set_takes_all_or_none<B: LockBackend + ?Sized>(target: &Target<B>) {
    let (holder, taker, other) = (
        target.locker().await,
        target.fenced_locker().await,
        target.locker().await,
    );
    let keys = keys("all-or-none", 3);
    let busy = holder.lock(&keys[1]).ttl(LONG_TTL).await.expect("acquire");
    for wait in [Duration::ZERO, Duration::from_millis(100)] {
        let shuffled = [&keys[2], &keys[1], &keys[0]];
        let refused = taker.lock_all(shuffled).wait(wait).await;
        match refused {
            Err(Error::Busy { ref key, .. }) => assert_eq!(key, &keys[1], "the busy key named"),
            other => panic!("a set with a busy key, wait {wait:?}: {other:?}"),
        }
        assert_eq!(taker.watched_leases(), 0, "a refused set kept a lease");
        let free = [keys[0].clone(), keys[2].clone()];
        assert!(
            all_free(&other, &free).await,
            "a refused set left a key taken (wait {wait:?})"
        );
    }
    busy.release().await.expect("release");
    let set = taker
        .lock_all([&keys[2], &keys[0], &keys[1], &keys[0]])
        .await
        .expect("a free set");
    let taken: Vec<&str> = set.keys().collect();
    assert_eq!(
        taken,
        [&keys[0], &keys[1], &keys[2]],
        "canonical order, once each"
    );
    assert!(set.is_held());
    if target.expect.fencing() {
        for key in &keys {
            assert!(set.fencing_token(key).is_some(), "no token for `{key}`");
        }
    }
    assert!(!all_free(&other, &keys[..1]).await, "a member was not held");
    set.release().await.expect("release");
    assert!(
        all_free(&other, &keys).await,
        "a released set left a key taken"
    );

    let (counting, counted) = target.counting_locker().await;
    let set = counted.lock_all(&keys).await.expect("a free set");
    let expected = if target.expect.sets_in_one_call {
        1
    } else {
        keys.len()
    };
    assert_eq!(
        counting.acquires(),
        expected,
        "backend calls for a free set"
    );
    set.release().await.expect("release");
    assert_eq!(
        counting.releases(),
        expected,
        "backend calls for a set's release"
    );
    assert!(
        all_free(&other, &keys).await,
        "a set released at once left a key taken"
    );
}

/// A key kept after its release (`hold_at_least`) is busy for a set as for a lock: a set
/// including it takes nothing while the record lives, on the backend's one-step path too.
pub async fn lock_set_takes_no_kept_key<B: LockBackend + ?Sized>(target: &Target<B>) {
    if !target.expect.capabilities.keeps {
        return;
    }
    let (keeper, taker, other) = (
        target.locker().await,
        target.locker().await,
        target.locker().await,
    );
    let keys = keys("kept-set", 3);
    let kept = keeper
        .lock(&keys[1])
        .hold_at_least(LONG_TTL)
        .await
        .expect("acquire");
    kept.release().await.expect("release keeping the key");
    for wait in [Duration::ZERO, Duration::from_millis(100)] {
        let refused = taker.lock_all(&keys).wait(wait).await;
        assert!(
            matches!(refused, Err(Error::Busy { ref key, .. }) if key == &keys[1]),
            "a set with a kept key, wait {wait:?}: {refused:?}"
        );
        let free = [keys[0].clone(), keys[2].clone()];
        assert!(
            all_free(&other, &free).await,
            "a refused set left a key taken"
        );
    }
    assert!(
        keeper.force_release(&keys[1]).await.unwrap_or(true),
        "the kept record was not there to remove"
    );
}

/// Two clients lock the same two keys, naming them in opposite orders, 200 rounds each, with
/// a wait bound: every round completes (no deadlock), and the read-sleep-write on each key's
/// resource never overlaps.
pub async fn lock_sets_in_opposite_orders_never_deadlock<B: LockBackend + ?Sized>(
    target: &Target<B>,
) {
    const ROUNDS: usize = 200;
    let keys = keys("opposite", 2);
    let counters: Arc<[UnsafeCounter; 2]> = Arc::default();
    let bound = Duration::from_secs(10).max(target.expect.slack * 20);
    let mut workers = Vec::new();
    for worker in 0..2 {
        let locker = target.locker().await;
        let (keys, counters) = (keys.clone(), Arc::clone(&counters));
        workers.push(tokio::spawn(async move {
            let named = if worker == 0 {
                [&keys[0], &keys[1]]
            } else {
                [&keys[1], &keys[0]]
            };
            for round in 0..ROUNDS {
                let set = match locker.lock_all(named).wait(bound).await {
                    Ok(set) => set,
                    Err(error) => panic!("worker {worker}, round {round}: {error}"),
                };
                for counter in counters.iter() {
                    counter
                        .increment(worker, None, Duration::from_millis(1))
                        .await;
                }
                set.release().await.expect("release");
            }
        }));
    }
    for worker in workers {
        worker.await.expect("a worker panicked");
    }
    for (key, counter) in keys.iter().zip(counters.iter()) {
        assert_eq!(
            counter.overlaps(),
            Vec::new(),
            "two holders of `{key}` at once"
        );
        assert_eq!(
            counter.value(),
            2 * ROUNDS as u64,
            "lost updates on `{key}`"
        );
    }
}

/// The wait is one deadline for the set, not one per key: another client holds all four
/// keys and frees the first three one after another, each shortly before the rest of the
/// wait would run out; the set's caller hears Busy (naming the fourth) within its wait plus
/// slack, where a wait per key would have taken nearly twice as long.
pub async fn lock_set_wait_covers_the_whole_set<B: LockBackend + ?Sized>(target: &Target<B>) {
    let (holder, taker) = (target.locker().await, target.locker().await);
    let keys = keys("deadline", 4);
    let wait = Duration::from_millis(300).max(target.expect.slack * 2);
    let mut held = Vec::new();
    for key in &keys {
        held.push(holder.lock(key).ttl(LONG_TTL).await.expect("acquire"));
    }
    let last = held.pop().expect("four keys");
    let started = Instant::now();
    let free_three = async {
        for (at, guard) in held.into_iter().enumerate() {
            let step = wait * 3 * u32::try_from(at + 1).expect("small") / 10;
            tokio::time::sleep_until((started + step).into()).await;
            guard.release().await.expect("release");
        }
    };
    let (outcome, ()) = tokio::join!(taker.lock_all(&keys).wait(wait).into_future(), free_three);
    let elapsed = started.elapsed();
    match outcome {
        Err(Error::Busy { ref key, .. }) => assert_eq!(key, &keys[3], "the key still busy"),
        other => panic!("a set whose last key stays held: {other:?}"),
    }
    assert_between(
        "a lock set's wait",
        elapsed,
        wait,
        wait + target.expect.slack,
    );
    assert_eq!(taker.watched_leases(), 0, "the set kept a lease after Busy");
    last.release().await.expect("release");
    assert!(all_free(&holder, &keys).await, "the set left a key taken");
}

/// Waiters for members of a held set (each on one key, from other Lockers) are woken by the
/// set's release: each gets its key within the slack of it, not at the set's ttl.
pub async fn set_release_wakes_waiters_of_each_member<B: LockBackend + ?Sized>(target: &Target<B>) {
    let holder = target.locker().await;
    let keys = keys("set-wake", 3);
    for _ in 0..2 {
        let set = holder.lock_all(&keys).ttl(LONG_TTL).await.expect("acquire");
        let mut waiting = Vec::new();
        for key in &keys {
            let (waiter, key) = (target.locker().await, key.clone());
            waiting.push(tokio::spawn(async move {
                let guard = waiter.lock(&key).wait(LONG_TTL / 2).await;
                let at = Instant::now();
                (guard, at)
            }));
        }
        // Time for every waiter to queue (one that has not yet just takes its key at once).
        tokio::time::sleep(Duration::from_millis(100)).await;
        let released_at = Instant::now();
        set.release().await.expect("release");
        for waiter in waiting {
            let (acquired, at) = waiter.await.expect("waiter panicked");
            acquired
                .expect("each waiter gets its key")
                .release()
                .await
                .expect("release");
            assert_between(
                "a member's waiter woken by the set's release",
                at - released_at,
                Duration::ZERO,
                target.expect.slack,
            );
        }
    }
}

/// A set whose acquire is cancelled at any point — before it sends anything, while it asks,
/// after it took some keys and waits for the next — leaves nothing on the server: once the
/// holder lets go, a newcomer takes the whole set within the slack.
pub async fn cancelled_lock_set_leaves_nothing_behind<B: LockBackend + ?Sized>(target: &Target<B>) {
    let (holder, cancelled, newcomer) = (
        target.locker().await,
        target.locker().await,
        target.locker().await,
    );
    let slack = target.expect.slack;
    for after in [
        Duration::ZERO,
        Duration::from_millis(1),
        Duration::from_millis(5),
        Duration::from_millis(20),
        slack,
    ] {
        let keys = keys("cancel-set", 3);
        let last = holder.lock(&keys[2]).ttl(LONG_TTL).await.expect("acquire");
        let aborted = tokio::spawn({
            let (cancelled, keys) = (cancelled.clone(), keys.clone());
            async move {
                let set = cancelled.lock_all(&keys).ttl(LONG_TTL).wait_forever().await;
                set.map(drop)
            }
        });
        tokio::time::sleep(after).await;
        aborted.abort();
        assert!(
            aborted.await.is_err_and(|e| e.is_cancelled()),
            "the set was granted while a key was held"
        );
        last.release().await.expect("release");
        // A slack per key and one for the cancelled set's background clean-up (on a busy
        // etcd cluster a commit can take hundreds of ms); a leftover holds for LONG_TTL.
        let bound = slack * u32::try_from(keys.len() + 1).expect("three keys");
        let started = Instant::now();
        let set = newcomer
            .lock_all(&keys)
            .wait(bound)
            .await
            .unwrap_or_else(|e| panic!("a set cancelled after {after:?} left something: {e}"));
        assert_between(
            "taking a set after a cancelled one",
            started.elapsed(),
            Duration::ZERO,
            bound,
        );
        set.release().await.expect("release");
    }
    assert_eq!(
        cancelled.watched_leases(),
        0,
        "a cancelled set left a lease in its Locker"
    );
}

/// One member of a held set is lost (deleted behind its back; where the backend cannot,
/// its lease runs out): the set's `lost()` resolves, and the work under `run` is cancelled
/// with [`Error::LeaseLost`] naming that member.
pub async fn losing_one_member_cancels_the_set_work<B: LockBackend + ?Sized>(target: &Target<B>) {
    let ttl = target.expect.ttl;
    let (holder, admin) = (target.locker().await, target.locker().await);
    let keys = keys("lose-one", 3);
    let watchdog = target.expect.force_release;
    let set = holder
        .lock_all(&keys)
        .watchdog(watchdog)
        .await
        .expect("acquire");
    let work_done = AtomicBool::new(false);
    let work = async {
        tokio::time::sleep(ttl * 10).await;
        work_done.store(true, Ordering::SeqCst);
    };
    let lose = async {
        tokio::time::sleep(ttl / 2).await;
        if watchdog {
            assert!(
                admin.force_release(&keys[1]).await.expect("force_release"),
                "a holder was removed"
            );
        }
        Instant::now()
    };
    let lost = set.lost();
    let (outcome, lost_at) = tokio::join!(set.run(work), lose);
    match outcome {
        Err(Error::LeaseLost { ref key, .. }) if !watchdog || key == &keys[1] => {}
        other => panic!("the set's work was not cancelled by its lost member: {other:?}"),
    }
    assert!(!work_done.load(Ordering::SeqCst), "the work ran to its end");
    assert_between(
        "loss of a member",
        lost_at.elapsed(),
        Duration::ZERO,
        ttl / 3 + ttl + target.expect.slack,
    );
    tokio::time::timeout(target.expect.slack, lost)
        .await
        .expect("the set's lost() did not resolve");
    assert!(!set.is_held());
    assert!(
        matches!(set.release().await, Err(Error::LeaseLost { .. })),
        "releasing a set with a lost member must say so"
    );
}

/// A task holding a key may lock a set that includes it (that member re-enters) or keys
/// sorting before it that are free; but a set that would have to wait for a key sorting
/// before one the task holds is refused at once with [`Error::LockOrder`] naming both, and
/// keeps nothing. Waiting for keys sorting *after* every held one is allowed.
pub async fn lock_set_behind_a_held_key_is_refused<B: LockBackend + ?Sized>(target: &Target<B>) {
    let (task, other) = (target.locker().await, target.locker().await);
    let keys = keys("order", 3);
    let held = task.lock(&keys[2]).ttl(LONG_TTL).await.expect("acquire");
    let blocker = other.lock(&keys[0]).ttl(LONG_TTL).await.expect("acquire");

    let started = Instant::now();
    let refused = task.lock_all(&keys).wait(Duration::from_secs(10)).await;
    match refused {
        Err(Error::LockOrder {
            ref key,
            held: ref holding,
        }) => {
            assert_eq!((key, holding), (&keys[0], &keys[2]), "the keys named");
        }
        other => panic!("a set waiting behind a held key: {other:?}"),
    }
    assert_between(
        "refusing a set behind a held key",
        started.elapsed(),
        Duration::ZERO,
        target.expect.slack,
    );
    assert!(
        all_free(&other, &keys[1..2]).await,
        "a refused set kept a key"
    );
    blocker.release().await.expect("release");

    let set = task
        .lock_all(&keys)
        .await
        .expect("free keys before a held one");
    assert!(
        set.get(&keys[2]).is_some_and(crate::LockGuard::is_nested),
        "the held key re-enters"
    );
    set.release().await.expect("release");
    assert!(
        held.is_held(),
        "the outer hold ended with the set's re-entry"
    );
    held.release().await.expect("release");

    // A held key that cannot re-enter (a read lock asked to write) fails the set before any
    // other key is taken.
    if target.expect.capabilities.read_write {
        let reader = task.read_lock(&keys[1]).await.expect("read lock");
        let upgrade = task.lock_all(&keys).await;
        assert!(
            matches!(upgrade, Err(Error::LockUpgrade { ref key }) if key == &keys[1]),
            "a set upgrading a held read lock: {upgrade:?}"
        );
        let others = [keys[0].clone(), keys[2].clone()];
        assert!(
            all_free(&other, &others).await,
            "a set refused for its upgrade kept a key"
        );
        reader.release().await.expect("release");
    }

    // Holding the first key, the task may wait for the last.
    let first = task.lock(&keys[0]).ttl(LONG_TTL).await.expect("acquire");
    let blocker = other.lock(&keys[2]).ttl(LONG_TTL).await.expect("acquire");
    let waited = task.lock_all(&keys).wait(Duration::from_millis(100)).await;
    assert!(
        matches!(waited, Err(Error::Busy { ref key, .. }) if key == &keys[2]),
        "a set after every held key waits: {waited:?}"
    );
    assert!(
        first.is_held(),
        "the set's failure released the task's own hold"
    );
    blocker.release().await.expect("release");
    first.release().await.expect("release");
}
