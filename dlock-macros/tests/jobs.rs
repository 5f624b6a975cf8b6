//! `#[distributed_lock(once = ..)]`: a scheduled job fired by two service instances at the
//! same moment runs once; the other instance skips it (`Ok(None)`), and so does an instance
//! that fires it after it succeeded. Without `once` — the newcomer's first try — both run.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use dlock_core::backend::MemoryBackend;
use dlock_core::{DlockConfig, Error, Locker, distributed_lock};

/// Two instances of a service: Lockers over one lock service (one table of the memory
/// backend; the conformance suite runs the same rule on every networked backend).
fn two_instances() -> (Locker, Locker) {
    let table = MemoryBackend::new(); // clones share the table
    let instance =
        || Locker::with_config(Arc::new(table.clone()), &DlockConfig::default()).expect("locker");
    (instance(), instance())
}

#[distributed_lock(key = "report:<day>", ttl = "10s", once = "48h", locker = locker)]
async fn report(locker: &Locker, day: &str, runs: &AtomicU32) -> Result<Option<u32>, Error> {
    let _ = day;
    let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
    // Long enough for the other instance to fire while this one runs.
    tokio::time::sleep(Duration::from_millis(200)).await;
    Ok(Some(run))
}

#[distributed_lock(key = "plain:<day>", ttl = "10s", locker = locker)]
async fn plain(locker: &Locker, day: &str, runs: &AtomicU32) -> Result<(), Error> {
    let _ = day;
    runs.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(200)).await;
    Ok(())
}

#[tokio::test]
async fn two_instances_firing_a_once_job_run_it_once() {
    let (a, b) = two_instances();
    let runs = AtomicU32::new(0);
    let (first, second) = tokio::join!(
        report(&a, "2026-11-25", &runs),
        report(&b, "2026-11-25", &runs)
    );
    let (first, second) = (first.expect("fire"), second.expect("fire"));
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the job ran {first:?} {second:?}"
    );
    assert!(
        matches!((first, second), (Some(1), None) | (None, Some(1))),
        "one instance runs, the other skips: {first:?} {second:?}"
    );
    let late = report(&b, "2026-11-25", &runs).await.expect("fire");
    assert_eq!(late, None, "a fire run to success was run again");
    let next_day = report(&b, "2026-11-26", &runs).await.expect("fire");
    assert_eq!(next_day, Some(2), "another fire is another run");
}

/// What the newcomer saw: without `once`, the default wait is forever, so the second
/// instance waits for the first and then runs the same job again.
#[tokio::test]
async fn without_once_both_instances_run_the_job() {
    let (a, b) = two_instances();
    let runs = AtomicU32::new(0);
    let (first, second) = tokio::join!(
        plain(&a, "2026-11-25", &runs),
        plain(&b, "2026-11-25", &runs)
    );
    first.expect("run");
    second.expect("run");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}
