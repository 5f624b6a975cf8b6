//! Mutual exclusion under contention.

use std::sync::Arc;
use std::time::Duration;

use super::Target;
use super::support::{UnsafeCounter, key};
use crate::Error;
use crate::backend::LockBackend;

/// 8 tasks on 2 Lockers (two clients of the service) each take one key 25 times and do a
/// non-atomic read-sleep-write under it. Any overlap loses an update or is seen on entry.
/// On a backend with fencing, half the tasks ask for tokens and half do not (grants with and
/// without tokens interleave on one key), and every token is greater than the one before.
pub async fn mutual_exclusion_read_sleep_write<B: LockBackend + ?Sized>(target: &Target<B>) {
    const TASKS: usize = 8;
    const ROUNDS: usize = 25;
    let lockers = [target.locker().await, target.locker().await];
    let key = key("exclusion");
    let counter = Arc::new(UnsafeCounter::default());
    let mut tasks = Vec::new();
    for worker in 0..TASKS {
        let locker = lockers[worker % 2].clone();
        let key = key.clone();
        let counter = Arc::clone(&counter);
        let fencing = target.expect.fencing() && worker % 2 == 0;
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = locker.lock(&key).fencing(fencing).await.expect("acquire");
                let token = guard.fencing_token();
                if fencing {
                    assert!(token.is_some(), "asked for a fencing token, got none");
                }
                guard
                    .run(counter.increment(worker, token, Duration::from_millis(1)))
                    .await
                    .expect("lease kept during a 1 ms critical section");
                guard.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        task.await.expect("worker panicked");
    }
    assert_eq!(counter.overlaps(), [], "two holders were inside at once");
    assert_eq!(
        counter.stale_tokens(),
        [],
        "a holder's token was not above its predecessor's"
    );
    assert_eq!(
        counter.value(),
        (TASKS * ROUNDS) as u64,
        "updates were lost"
    );
}

/// Five clients race with `try_lock` on one free key: exactly one wins. Where votes can
/// split ([`Expectations::split_votes`](super::Expectations::split_votes), RedLock), a race
/// may have no winner, never two; then it is run again on a new key, and one of five races
/// must have its winner.
pub async fn try_lock_race_has_one_winner<B: LockBackend + ?Sized>(target: &Target<B>) {
    let races = if target.expect.split_votes { 5 } else { 1 };
    for race in 0..races {
        let winners = try_lock_race(target, &key(&format!("race-{race}"))).await;
        assert!(winners <= 1, "{winners} try_locks won at once");
        if winners == 1 {
            return;
        }
    }
    panic!("exactly one try_lock may win: none did, in {races} races");
}

/// Five Lockers `try_lock` `key` at once; how many won.
async fn try_lock_race<B: LockBackend + ?Sized>(target: &Target<B>, key: &str) -> usize {
    let mut lockers = Vec::new();
    for _ in 0..5 {
        lockers.push(target.locker().await);
    }
    let start = Arc::new(tokio::sync::Barrier::new(lockers.len()));
    let tried = Arc::new(tokio::sync::Barrier::new(lockers.len()));
    let tasks: Vec<_> = lockers
        .into_iter()
        .map(|locker| {
            let key = key.to_owned();
            let (start, tried) = (Arc::clone(&start), Arc::clone(&tried));
            tokio::spawn(async move {
                start.wait().await;
                let outcome = locker.try_lock(&key).await;
                // The winner keeps its guard until everyone has tried.
                tried.wait().await;
                outcome
            })
        })
        .collect();
    let mut winners = 0;
    for task in tasks {
        match task.await.expect("racer panicked") {
            Ok(_guard) => winners += 1,
            Err(Error::Busy { .. }) => {}
            Err(other) => panic!("unexpected error: {other}"),
        }
    }
    winners
}
