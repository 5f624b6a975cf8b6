//! Scheduled jobs: a fire run with [`Locker::once`](dlock_core::Locker::once) and a fire
//! skipped as done, each next to the plain lock a user would otherwise take (a `try_lock` and
//! its release; a `try_lock` that finds the key busy), so the ratio is what the done record
//! costs on each backend.

use std::time::{Duration, Instant};

use dlock_core::{Error, Once, Skip};

use crate::scenarios::{MAX_PAIRS, Paired, Settings, median, paired, timed_tasks};
use crate::stats::{Samples, median_run};
use crate::target::Target;

const TTL: Duration = Duration::from_secs(30);

/// One task, N fires each run once (a fresh fire id each time; the work does nothing), against
/// N `try_lock` + release cycles on fresh keys. A run writes the done record in its release.
pub(crate) async fn once_run(target: &Target, s: &Settings) -> crate::stats::Row {
    let locker = target.locker(TTL).await;
    let ops = s.uncontended_ops;
    let runs = paired!(
        s,
        |rep| {
            timed_tasks!(1, ops, |_t| locker.clone(), |locker, _t, i| {
                let ran = locker
                    .once("bench:job", format!("{rep}:{i}"))
                    .run(async { Ok::<_, Error>(()) })
                    .await
                    .expect("once");
                assert!(matches!(ran, Once::Ran(())), "{ran:?}");
            })
        },
        {
            timed_tasks!(1, ops, |_t| locker.clone(), |locker, _t, i| {
                let guard = locker
                    .try_lock(&format!("bench:job-floor:{rep}:{i}"))
                    .await
                    .expect("try_lock");
                guard.release().await.expect("release");
            })
        },
        { None }
    );
    runs.row(
        target.name(),
        "once, run",
        "vs try_lock + release on fresh keys".to_owned(),
    )
}

/// One task, N fires already run (skipped as done), against N `try_lock`s of a key another
/// Locker holds (busy). A skip learns why from `inspect`: one more round trip.
pub(crate) async fn once_skip(target: &Target, s: &Settings) -> crate::stats::Row {
    let (locker, holder) = (target.locker(TTL).await, target.locker(TTL).await);
    let ops = s.uncontended_ops;
    for i in 0..ops {
        let _ran = locker
            .once("bench:done", i.to_string())
            .run(async { Ok::<_, Error>(()) })
            .await
            .expect("a fire run before the skips");
    }
    let held = holder
        .lock("bench:held")
        .await
        .expect("hold the floor's key");
    let runs = paired!(
        s,
        |_rep| {
            timed_tasks!(1, ops, |_t| locker.clone(), |locker, _t, i| {
                let skipped = locker
                    .once("bench:done", i.to_string())
                    .run(async { Ok::<_, Error>(()) })
                    .await
                    .expect("once");
                assert!(matches!(skipped, Once::Skipped(Skip::Done)), "{skipped:?}");
            })
        },
        {
            timed_tasks!(1, ops, |_t| locker.clone(), |locker, _t, _i| {
                let busy = locker.try_lock("bench:held").await;
                assert!(matches!(busy, Err(Error::Busy { .. })), "{busy:?}");
            })
        },
        { None }
    );
    held.release().await.expect("release");
    runs.row(
        target.name(),
        "once, skip",
        "vs try_lock of a held key".to_owned(),
    )
}
