//! Nested annotated calls in one task re-enter; the body reads its lock's key and fencing
//! token through `dlock_core::current_lock()`.

mod support;

use std::time::Duration;

use dlock_core::{CurrentLock, Error, Locker, current_lock, distributed_lock};

use support::{assert_free_now, assert_held};

fn current() -> CurrentLock {
    current_lock().expect("inside an annotated body")
}

#[distributed_lock(key = "order:<id>", locker = locker, wait = "0s")]
async fn inner(locker: &Locker, id: u64) -> Result<CurrentLock, Error> {
    // `wait = "0s"`: one attempt. Without reentrancy this would be Busy at once.
    Ok(current())
}

#[distributed_lock(key = "order:<id>", locker = locker)]
async fn outer(locker: &Locker, id: u64) -> Result<[CurrentLock; 3], Error> {
    let before = current();
    let nested = inner(locker, id).await?;
    // The nested call's release gave up its share only: still held.
    assert_held(locker, "order:1").await;
    let after = current();
    Ok([before, nested, after])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_call_with_the_same_key_re_enters() {
    let locker = Locker::memory();
    let [before, nested, after] = outer(&locker, 1).await.unwrap();
    assert_eq!(before.key(), "order:1");
    assert_eq!(
        nested, before,
        "the same grant: same key, same fencing token"
    );
    assert_eq!(after, before);
    assert_free_now(&locker, "order:1").await; // the outermost call released
}

#[distributed_lock(key = "invoice:<id>", locker = locker)]
async fn other_key(locker: &Locker, id: u64) -> Result<CurrentLock, Error> {
    Ok(current())
}

#[distributed_lock(key = "order:<id>", locker = locker)]
async fn shadowing(locker: &Locker, id: u64) -> Result<[CurrentLock; 3], Error> {
    let before = current();
    let nested = other_key(locker, id).await?;
    let after = current();
    Ok([before, nested, after])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_call_with_another_key_shadows_the_current_lock() {
    let locker = Locker::memory();
    let [before, nested, after] = shadowing(&locker, 2).await.unwrap();
    assert_eq!(before.key(), "order:2");
    assert_eq!(nested.key(), "invoice:2");
    assert_eq!(after, before, "the outer lock is current again");
}

#[distributed_lock(key = "file:<name>", locker = locker)]
async fn write(locker: &Locker, name: &str) -> Result<Option<u64>, Error> {
    tokio::task::yield_now().await;
    // Also visible from plain helper fns the body calls.
    Ok(token_from_a_helper())
}

fn token_from_a_helper() -> Option<u64> {
    current_lock().and_then(|lock| lock.fencing_token())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_body_sees_strictly_increasing_fencing_tokens() {
    let locker = Locker::memory();
    assert!(current_lock().is_none(), "not inside an annotated body");
    let mut last = 0;
    for _ in 0..5 {
        let token = write(&locker, "report.csv")
            .await
            .unwrap()
            .expect("memory issues tokens");
        assert!(token > last, "{token} after {last}");
        last = token;
    }
    // And it is the guard's token: a plain acquire afterwards gets the next one.
    let guard = locker.lock("file:report.csv").await.unwrap();
    assert!(guard.fencing_token().unwrap() > last);
    assert!(current_lock().is_none());
}

#[distributed_lock(key = "job:<id>", locker = locker)]
async fn spawns(locker: &Locker, id: u64) -> Result<(bool, bool), Error> {
    let here = current_lock().is_some();
    let in_child = tokio::spawn(async { current_lock().is_some() })
        .await
        .unwrap();
    Ok((here, in_child))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawned_tasks_do_not_see_the_current_lock() {
    // They do not hold it either (reentrancy is per task), so they must not be told they do.
    let locker = Locker::memory();
    assert_eq!(spawns(&locker, 3).await.unwrap(), (true, false));
}

#[distributed_lock(key = "order:<id>", locker = locker, wait = "100ms")]
async fn contend(locker: &Locker, id: u64) -> Result<(), Error> {
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_task_contends_instead_of_re_entering() {
    let locker = Locker::memory();
    let _held = locker.lock("order:4").await.unwrap();
    contend(&locker, 4).await.unwrap(); // this task holds it: re-enters
    let other = locker.clone();
    let outcome = tokio::spawn(async move { contend(&other, 4).await })
        .await
        .unwrap();
    assert!(
        matches!(outcome, Err(Error::Busy { waited, .. }) if waited >= Duration::from_millis(100)),
        "{outcome:?}"
    );
}

#[distributed_lock(key = "batch:<id>", locker = locker, wait = "0s")]
async fn batch_step(locker: &Locker, id: u64) -> Result<(), Error> {
    Ok(())
}

/// Spawns `batch_step` for the same key from inside the body, handing the hold off or not.
#[distributed_lock(key = "batch:<id>", locker = locker)]
async fn batch(locker: &Locker, id: u64, share: bool) -> Result<Result<(), Error>, Error> {
    let hand_off = if share {
        Some(current().hand_off().expect("the body's lock is held"))
    } else {
        None
    };
    let child = locker.clone();
    let step = tokio::spawn(async move {
        let _shared = hand_off.map(dlock_core::HandOff::adopt);
        batch_step(&child, id).await
    });
    Ok(step.await.expect("the step task panicked"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spawned_task_is_told_its_spawner_holds_the_lock_and_a_hand_off_shares_it() {
    let locker = Locker::memory();
    // Not shared: the spawned step is refused, and the error says the holder is this very
    // Locker and how to share the hold.
    let refused = batch(&locker, 1, false).await.unwrap().unwrap_err();
    assert!(
        matches!(
            refused,
            Error::Busy {
                by_this_locker: true,
                ..
            }
        ),
        "{refused:?}"
    );
    let message = refused.to_string();
    assert!(
        message.contains("held by this Locker") && message.contains("hand_off()"),
        "{message}"
    );
    // Shared through `current_lock()`'s hand-off: the step re-enters the body's hold.
    batch(&locker, 2, true).await.unwrap().unwrap();
    assert_free_now(&locker, "batch:2").await;
    // Once the body is over, its CurrentLock hands off nothing.
    let kept = outer(&locker, 1).await.unwrap();
    assert!(kept[0].hand_off().is_none());
}
