//! Scheduled jobs: a released lock the server keeps held (hold-at-least, a fire's done
//! record) and once-per-fire runs. On a backend that cannot keep a released lock, each
//! scenario checks instead that asking for it fails with [`Error::Unsupported`] before any
//! round trip.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::Target;
use super::support::{assert_between, key};
use crate::backend::LockBackend;
use crate::lease::{AcquireOutcome, AcquireRequest, Lease, OwnerId, ReleaseOutcome, RenewOutcome};
use crate::{Error, Kept, LockGuard, Locker, Once, Skip};

/// Whether the target keeps released locks; if not, checks that asking for it is refused as
/// unsupported without a round trip.
async fn keeps<B: LockBackend + ?Sized>(target: &Target<B>) -> bool {
    if target.expect.capabilities.keeps {
        return true;
    }
    let (counting, locker) = target.counting_locker().await;
    let held = locker
        .lock(&key("unsupported"))
        .hold_at_least(Duration::from_secs(1))
        .await;
    assert!(
        matches!(held, Err(Error::Unsupported { .. })),
        "hold_at_least on a backend that cannot keep a lock: {held:?}"
    );
    let once = locker
        .once(&key("unsupported-job"), "fire")
        .run(async { Ok::<_, Error>(()) })
        .await;
    assert!(
        matches!(once, Err(Error::Unsupported { .. })),
        "once on a backend that cannot keep a lock: {once:?}"
    );
    assert_eq!(
        counting.acquires(),
        0,
        "an unsupported request made a round trip"
    );
    false
}

/// How long the scenarios keep a released lock: a few leases, so that a keep that is ignored
/// (released at once) or cut short (ended at the ttl) shows.
fn at_least<B: LockBackend + ?Sized>(target: &Target<B>) -> Duration {
    target.expect.ttl * 3
}

/// The latest a kept lock of `at_least` may admit the next holder after its grant's answer:
/// the service's expiry lag and the slack on top.
fn kept_until<B: LockBackend + ?Sized>(target: &Target<B>, at_least: Duration) -> Duration {
    at_least + target.expect.expiry_lag + target.expect.keep_rounding + target.expect.slack
}

/// Takes `key` through `holder` with `hold_at_least(at_least)`: the guard, when it was asked
/// for, and how long the answer took.
async fn take_kept(
    holder: &Locker,
    key: &str,
    at_least: Duration,
) -> (LockGuard, Instant, Duration) {
    let sent = Instant::now();
    let guard = holder
        .lock(key)
        .hold_at_least(at_least)
        .await
        .expect("acquire");
    (guard, sent, sent.elapsed())
}

/// `other` waits for `key`, kept `at_least` by a grant asked for at `sent` and answered
/// `answered` later: admitted no sooner than `at_least` after `sent`, and within the expiry
/// lag after the hold ends.
async fn admitted_after_the_hold<B: LockBackend + ?Sized>(
    target: &Target<B>,
    other: &Locker,
    key: &str,
    at_least: Duration,
    (sent, answered): (Instant, Duration),
    whose: &str,
) {
    let wait = kept_until(target, at_least) * 2;
    let _admitted = other
        .lock(key)
        .wait(wait)
        .await
        .expect("admitted after the hold");
    assert_between(
        &format!("a kept lock{whose} admitting the next holder"),
        sent.elapsed(),
        at_least,
        answered + kept_until(target, at_least),
    );
}

/// A lock taken with `hold_at_least` and released at once stays held on the server: another
/// client is refused, sees the record in `inspect`, and is admitted no sooner than
/// `hold_at_least` after the grant was asked for, and within the expiry lag after it ends. A
/// lock released after its `hold_at_least` passed is free at once.
pub async fn hold_at_least_keeps_a_released_lock<B: LockBackend + ?Sized>(target: &Target<B>) {
    if !keeps(target).await {
        return;
    }
    let at_least = at_least(target);
    let (holder, other) = (target.locker().await, target.locker().await);
    let key = key("at-least");
    let (guard, sent, answered) = take_kept(&holder, &key, at_least).await;
    guard.release().await.expect("release, keeping the lock");
    let refused = other.try_lock(&key).await;
    assert!(
        matches!(refused, Err(Error::Busy { .. })),
        "a lock kept after its release was taken: {refused:?}"
    );
    if target.expect.inspect {
        let info = other.inspect(&key).await.expect("inspect");
        assert!(
            info.holders
                .iter()
                .any(|holder| holder.kept == Some(Kept::AtLeast)),
            "inspect does not show the kept lock: {info:?}"
        );
    }
    admitted_after_the_hold(target, &other, &key, at_least, (sent, answered), "").await;

    // Held longer than asked: the release frees the lock at once.
    let key = super::support::key("at-least-passed");
    let guard = holder
        .lock(&key)
        .hold_at_least(target.expect.ttl / 3)
        .await
        .expect("acquire");
    tokio::time::sleep(target.expect.ttl / 3 + Duration::from_millis(5)).await;
    guard.release().await.expect("release");
    let free = other.try_lock(&key).await;
    assert!(
        free.is_ok(),
        "a lock held past its hold_at_least was kept: {free:?}"
    );
}

/// The kept lock needs no process: the holder's guard is dropped (released in the background)
/// and its Locker shut down — sessions closed, leases revoked — and the lock stays held until
/// `hold_at_least` after the grant.
pub async fn hold_at_least_outlives_the_holder<B: LockBackend + ?Sized>(target: &Target<B>) {
    if !keeps(target).await {
        return;
    }
    let at_least = at_least(target);
    let (holder, other) = (target.locker().await, target.locker().await);
    let key = key("outlived");
    let (guard, sent, answered) = take_kept(&holder, &key, at_least).await;
    drop(guard);
    holder.shutdown().await.expect("shutdown");
    drop(holder);
    let refused = other.try_lock(&key).await;
    assert!(
        matches!(refused, Err(Error::Busy { .. })),
        "the kept lock ended with its holder's Locker: {refused:?}"
    );
    let whose = " whose holder is gone";
    admitted_after_the_hold(target, &other, &key, at_least, (sent, answered), whose).await;
}

/// A waiter queued before the release that keeps the lock waits the keep out: the release
/// tells it so (on ZooKeeper, the node it watches is changed before it goes, in one
/// transaction), and it is admitted no sooner than `hold_at_least` after the grant was asked
/// for, and within the expiry lag after the hold ends.
pub async fn queued_waiter_waits_out_a_kept_release<B: LockBackend + ?Sized>(target: &Target<B>) {
    if !keeps(target).await {
        return;
    }
    let at_least = at_least(target);
    let (holder, other) = (target.locker().await, target.locker().await);
    let key = key("kept-before-a-waiter");
    let full_key = holder.backend_key(&key).expect("key");
    let (guard, sent, answered) = take_kept(&holder, &key, at_least).await;
    let release = async {
        target.until_queued(&full_key, 1).await;
        guard.release().await.expect("release, keeping the lock");
    };
    let whose = " with a waiter queued before its release";
    let admitted = admitted_after_the_hold(target, &other, &key, at_least, (sent, answered), whose);
    tokio::join!(admitted, release);
}

/// Keeping is owner-checked: a late release (kept or not) of an earlier holder changes
/// nothing — neither a newer kept record nor a live grant — and a kept record is no grant: its
/// own lease can neither renew, release nor keep it again.
pub async fn kept_lock_is_owner_checked<B: LockBackend + ?Sized>(target: &Target<B>) {
    if !keeps(target).await {
        return;
    }
    let (ttl, at_least) = (target.expect.ttl, at_least(target));
    let client = target.client().await;
    let locker = target.locker().await;
    let full_key = locker.backend_key(&key("owner-checked")).expect("key");
    let grant = async |name: &str| -> Lease {
        let request = AcquireRequest::new(full_key.as_str(), OwnerId::random(name), ttl);
        let deadline = Instant::now() + kept_until(target, at_least) * 2;
        match client
            .acquire(&request, Some(deadline))
            .await
            .expect("acquire")
        {
            AcquireOutcome::Acquired(lease) => lease,
            busy => panic!("{name} was not granted the lock: {busy:?}"),
        }
    };
    let earlier = grant("earlier").await;
    assert_eq!(
        client.release(&earlier).await.expect("release"),
        ReleaseOutcome::Released
    );
    let sent = Instant::now();
    let newer = grant("newer").await;
    let answered = sent.elapsed();
    let kept = client
        .release_keeping(&newer, at_least, Kept::AtLeast)
        .await
        .expect("release, keeping");
    assert_eq!(kept, ReleaseOutcome::Released);
    for late in [
        client.release(&earlier).await,
        client
            .release_keeping(&earlier, Duration::from_millis(1), Kept::AtLeast)
            .await,
        client.release(&newer).await,
        client
            .release_keeping(&newer, Duration::from_millis(1), Kept::Done)
            .await,
    ] {
        assert_eq!(
            late.expect("a late release"),
            ReleaseOutcome::NotHeld,
            "a late release touched a kept lock"
        );
    }
    let renewed = client
        .renew(std::slice::from_ref(&newer))
        .await
        .expect("renew");
    assert!(
        matches!(renewed[..], [RenewOutcome::NotOwner]),
        "a kept record was renewed: {renewed:?}"
    );
    let refused = AcquireRequest::new(full_key.as_str(), OwnerId::random("refused"), ttl);
    let outcome = client
        .acquire(&refused, Some(Instant::now()))
        .await
        .expect("acquire");
    assert!(
        matches!(outcome, AcquireOutcome::Busy { .. }),
        "a late release shortened a kept lock: {outcome:?}"
    );
    let next = grant("next").await;
    assert_between(
        "a kept lock admitting the next holder",
        sent.elapsed(),
        at_least,
        answered + kept_until(target, at_least),
    );
    let keep_by_another = client
        .release_keeping(&newer, at_least, Kept::Done)
        .await
        .expect("release, keeping");
    assert_eq!(
        keep_by_another,
        ReleaseOutcome::NotHeld,
        "a stale lease kept a live grant"
    );
    let renewed = client
        .renew(std::slice::from_ref(&next))
        .await
        .expect("renew");
    assert!(
        matches!(renewed[..], [RenewOutcome::Renewed { .. }]),
        "the live grant was touched by a stale keep: {renewed:?}"
    );
    assert_eq!(
        client.release(&next).await.expect("release"),
        ReleaseOutcome::Released
    );
}

/// The error of a job's work in these scenarios.
#[derive(Debug)]
enum JobError {
    Failed,
    Lock(Error),
}

impl From<Error> for JobError {
    fn from(error: Error) -> Self {
        Self::Lock(error)
    }
}

/// Three clients fire the same id at once: the work runs once, the others skip; a client that
/// fires it afterwards skips with [`Skip::Done`], and `inspect` shows the done record.
pub async fn once_runs_a_fire_once<B: LockBackend + ?Sized>(target: &Target<B>) {
    if !keeps(target).await {
        return;
    }
    let job = key("job");
    let mut lockers = Vec::new();
    for _ in 0..3 {
        lockers.push(target.locker().await);
    }
    // A quorum backend may split the votes of racing clients: nobody runs that fire (each sees
    // it running). Then a fresh fire is raced again; one of five must run.
    let races = if target.expect.split_votes { 5 } else { 1 };
    let mut ran_fire = None;
    for race in 0..races {
        let fire = format!("2026-11-25T02:0{race}Z");
        let runs = Arc::new(AtomicUsize::new(0));
        let start = Arc::new(tokio::sync::Barrier::new(lockers.len()));
        let fires: Vec<_> = lockers
            .iter()
            .cloned()
            .map(|locker| {
                let (job, fire, runs, start) = (
                    job.clone(),
                    fire.clone(),
                    Arc::clone(&runs),
                    Arc::clone(&start),
                );
                let busy_for = target.expect.slack;
                tokio::spawn(async move {
                    start.wait().await;
                    locker
                        .once(&job, &fire)
                        .run(async {
                            runs.fetch_add(1, Ordering::SeqCst);
                            // Long enough for the others to find the fire running.
                            tokio::time::sleep(busy_for).await;
                            Ok::<_, JobError>("report")
                        })
                        .await
                })
            })
            .collect();
        let mut ran = 0;
        for fired in fires {
            match fired.await.expect("a firing task panicked") {
                Ok(Once::Ran("report")) => ran += 1,
                Ok(Once::Skipped(Skip::Running | Skip::Done)) => {}
                other => panic!("a fire ended with {other:?}"),
            }
        }
        assert_eq!(
            runs.load(Ordering::SeqCst),
            ran,
            "the work ran without a Ran"
        );
        assert!(ran <= 1, "one fire ran {ran} times");
        if ran == 1 {
            ran_fire = Some(fire);
            break;
        }
    }
    let fire = ran_fire.unwrap_or_else(|| panic!("no fire ran, in {races} races"));
    let late = target.locker().await;
    let again = late
        .once(&job, &fire)
        .run(async { Ok::<_, JobError>("report") })
        .await;
    assert!(
        matches!(again, Ok(Once::Skipped(Skip::Done))),
        "a fire run to success was not skipped as done: {again:?}"
    );
    if target.expect.inspect {
        let info = late
            .inspect(&format!("{job}@{fire}"))
            .await
            .expect("inspect");
        assert!(
            info.holders.iter().any(|h| h.kept == Some(Kept::Done)),
            "inspect does not show the done record: {info:?}"
        );
    }
}

/// A fire whose work failed leaves no record, so a later client runs it; so does one whose
/// lock was lost while it ran (broken by an operator: the work is cancelled). A fire run to
/// success is then skipped as done, and its done record expires with its retention.
pub async fn once_runs_again_after_a_failure<B: LockBackend + ?Sized>(target: &Target<B>) {
    if !keeps(target).await {
        return;
    }
    let (first, second) = (target.locker().await, target.locker().await);
    let (job, fire) = (key("flaky"), "2026-11-25T03:00Z");
    let failed = first
        .once(&job, fire)
        .run(async { Err::<(), _>(JobError::Failed) })
        .await;
    assert!(matches!(failed, Err(JobError::Failed)), "{failed:?}");
    if target.expect.force_release {
        let breaker = target.locker().await;
        let broken = first.once(&job, fire).run(async {
            let broke = breaker.force_release(&format!("{job}@{fire}")).await;
            assert!(
                broke.expect("force_release"),
                "the running fire was not held"
            );
            std::future::pending::<Result<(), JobError>>().await
        });
        let lost = tokio::time::timeout(target.expect.ttl * 4 + target.expect.slack, broken)
            .await
            .expect("work whose lock was broken is cancelled");
        assert!(
            matches!(lost, Err(JobError::Lock(Error::LeaseLost { .. }))),
            "work whose lock was broken: {lost:?}"
        );
    }
    let retention = target.expect.ttl * 3;
    let sent = Instant::now();
    let ran = second
        .once(&job, fire)
        .retention(retention)
        .run(async { Ok::<_, JobError>(()) })
        .await;
    let answered = sent.elapsed();
    assert!(
        matches!(ran, Ok(Once::Ran(()))),
        "a failed fire did not run again: {ran:?}"
    );
    let skipped = first
        .once(&job, fire)
        .run(async { Ok::<_, JobError>(()) })
        .await;
    assert!(
        matches!(skipped, Ok(Once::Skipped(Skip::Done))),
        "{skipped:?}"
    );
    let _free = first
        .lock(&format!("{job}@{fire}"))
        .wait(kept_until(target, retention) * 2)
        .await
        .expect("the done record expires with its retention");
    assert_between(
        "a done record expiring",
        sent.elapsed(),
        retention,
        answered + kept_until(target, retention) + target.expect.slack,
    );
}
