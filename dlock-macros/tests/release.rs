//! Every way out of an annotated fn releases the lock: return, early return, `?`, a panic, the
//! caller dropping the future; busy after `wait`; the body cancelled when the lease is lost;
//! what a failed release after the body means.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use dlock_core::backend::{
    AcquireOutcome, AcquireRequest, Capabilities, Lease, LockBackend, LostLease, MemoryBackend,
    ReleaseOutcome, RenewOutcome,
};
use dlock_core::{Error, Locker, distributed_lock};
use tokio::sync::{broadcast, oneshot};

use support::{assert_free_now, assert_held, assert_released, within_10s};

#[derive(Debug)]
enum AppError {
    Lock(Error),
    Parse(std::num::ParseIntError),
    Refused,
}

impl From<Error> for AppError {
    fn from(error: Error) -> Self {
        Self::Lock(error)
    }
}

impl From<std::num::ParseIntError> for AppError {
    fn from(error: std::num::ParseIntError) -> Self {
        Self::Parse(error)
    }
}

#[distributed_lock(key = "order:1", locker = locker)]
async fn parse_amount(locker: &Locker, amount: &str) -> Result<u32, AppError> {
    let amount: u32 = amount.parse()?;
    if amount == 0 {
        return Err(AppError::Refused);
    }
    if amount == 1 {
        return Ok(1);
    }
    Ok(amount * 2)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_after_ok_early_return_and_question_mark() {
    let locker = Locker::memory();
    assert_eq!(parse_amount(&locker, "21").await.unwrap(), 42);
    assert_free_now(&locker, "order:1").await;

    assert_eq!(
        parse_amount(&locker, "1").await.unwrap(),
        1,
        "early `return Ok`"
    );
    assert_free_now(&locker, "order:1").await;

    let err = parse_amount(&locker, "0").await.unwrap_err();
    assert!(
        matches!(err, AppError::Refused),
        "early `return Err`: {err:?}"
    );
    assert_free_now(&locker, "order:1").await;

    let err = parse_amount(&locker, "forty").await.unwrap_err();
    assert!(
        matches!(&err, AppError::Parse(e) if e.to_string().contains("invalid digit")),
        "`?`: {err:?}"
    );
    assert_free_now(&locker, "order:1").await;
    assert_eq!(
        locker.watched_leases(),
        0,
        "released inline, before the fn returned"
    );
}

#[distributed_lock(key = "order:<id>", locker = locker)]
async fn explode(locker: &Locker, id: u64, entered: oneshot::Sender<()>) -> Result<(), Error> {
    entered.send(()).unwrap();
    tokio::task::yield_now().await;
    panic!("the body of order {id} panicked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_after_a_panic() {
    let locker = Locker::memory();
    let (entered, entered_rx) = oneshot::channel();
    let caller = locker.clone();
    let task = tokio::spawn(async move { explode(&caller, 2, entered).await });
    entered_rx.await.expect("the body ran");
    let join = within_10s("panicking task", task).await;
    assert!(join.unwrap_err().is_panic());
    assert_released(&locker, "order:2").await;
}

#[distributed_lock(key = "order:<id>", locker = locker)]
async fn hang(locker: &Locker, id: u64, entered: oneshot::Sender<()>) -> Result<(), Error> {
    entered.send(()).unwrap();
    std::future::pending::<()>().await;
    unreachable!("order {id}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_when_the_caller_drops_the_future() {
    let locker = Locker::memory();

    // Dropped in the calling task (a `select!` that takes the other branch).
    let (entered, entered_rx) = oneshot::channel();
    tokio::select! {
        _ = hang(&locker, 3, entered) => unreachable!(),
        _ = entered_rx => {}
    }
    assert_released(&locker, "order:3").await;

    // Dropped with its task (`abort`).
    let (entered, entered_rx) = oneshot::channel();
    let caller = locker.clone();
    let task = tokio::spawn(async move { hang(&caller, 3, entered).await });
    entered_rx.await.expect("the body ran");
    assert_held(&locker, "order:3").await;
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    assert_released(&locker, "order:3").await;
}

#[distributed_lock(key = "order:<id>", locker = locker, wait = "50ms")]
async fn impatient(locker: &Locker, id: u64, ran: &Mutex<bool>) -> Result<(), AppError> {
    *ran.lock().unwrap() = true;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_after_wait_without_running_the_body() {
    let locker = Locker::memory();
    let held = locker.lock("order:4").await.unwrap(); // held by this task
    let ran = Arc::new(Mutex::new(false));
    let (caller, ran_in_task) = (locker.clone(), Arc::clone(&ran));
    let started = Instant::now();
    let outcome = tokio::spawn(async move { impatient(&caller, 4, &ran_in_task).await })
        .await
        .unwrap();
    match outcome {
        Err(AppError::Lock(Error::Busy { key, waited, .. })) => {
            assert_eq!(key, "order:4");
            assert!(waited >= Duration::from_millis(50), "waited {waited:?}");
        }
        other => panic!("expected Busy, got {other:?}"),
    }
    assert!(started.elapsed() >= Duration::from_millis(50));
    assert!(
        !*ran.lock().unwrap(),
        "the body must not run without the lock"
    );
    held.release().await.unwrap();
    // Free again: the same call now succeeds.
    impatient(&locker, 4, &ran).await.unwrap();
    assert!(*ran.lock().unwrap());
}

/// Sets its flag when dropped: proves the body's future was dropped (cancelled).
struct DropFlag(Arc<Mutex<bool>>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        *self.0.lock().unwrap() = true;
    }
}

#[derive(Debug, Default)]
struct Progress {
    started: bool,
    finished: bool,
}

#[distributed_lock(key = "order:<id>", locker = locker, ttl = "200ms", watchdog = false)]
async fn outlive_the_lease(
    locker: &Locker,
    id: u64,
    progress: &Mutex<Progress>,
    dropped: DropFlag,
) -> Result<(), AppError> {
    let _dropped = dropped;
    progress.lock().unwrap().started = true;
    tokio::time::sleep(Duration::from_secs(30)).await; // far past the 200ms lease
    progress.lock().unwrap().finished = true;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_body_is_cancelled_when_the_lease_is_lost() {
    let locker = Locker::memory();
    let progress = Mutex::new(Progress::default());
    let dropped = Arc::new(Mutex::new(false));
    let started = Instant::now();
    let outcome = within_10s(
        "the body outliving its lease",
        outlive_the_lease(&locker, 5, &progress, DropFlag(Arc::clone(&dropped))),
    )
    .await;
    match outcome {
        Err(AppError::Lock(Error::LeaseLost { key, .. })) => assert_eq!(key, "order:5"),
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "returned at the lease's end"
    );
    let progress = std::mem::take(&mut *progress.lock().unwrap());
    assert!(progress.started && !progress.finished, "{progress:?}");
    assert!(*dropped.lock().unwrap(), "the body's future was dropped");
    assert_released(&locker, "order:5").await;
}

#[distributed_lock(key = "job:<id>", locker = locker, ttl = "100ms", max_hold = "300ms")]
async fn stuck_job(locker: &Locker, id: u64, dropped: DropFlag) -> Result<(), AppError> {
    let _dropped = dropped;
    std::future::pending::<()>().await; // never ends by itself
    Ok(())
}

/// `max_hold` ends a body the watchdog would otherwise keep renewing forever: cancelled with
/// `LeaseLost` (reason `MaxHold`) after its cap, well past the ttl, and the lock is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_hold_cancels_a_stuck_body() {
    let locker = Locker::memory();
    let dropped = Arc::new(Mutex::new(false));
    let started = Instant::now();
    let outcome = within_10s(
        "a stuck body under max_hold",
        stuck_job(&locker, 8, DropFlag(Arc::clone(&dropped))),
    )
    .await;
    match outcome {
        Err(AppError::Lock(Error::LeaseLost { key, reason })) => {
            assert_eq!(key, "job:8");
            assert_eq!(
                reason,
                dlock_core::LostReason::MaxHold(Duration::from_millis(300))
            );
        }
        other => panic!("expected LeaseLost at max_hold, got {other:?}"),
    }
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "ended at {:?}, before its max_hold: the watchdog did not keep it past its ttl",
        started.elapsed()
    );
    assert!(*dropped.lock().unwrap(), "the body's future was dropped");
    assert_released(&locker, "job:8").await;
}

#[distributed_lock(key = "order:<id>", locker = locker, ttl = "200ms", watchdog = false)]
async fn block_past_the_lease(locker: &Locker, id: u64, fail: bool) -> Result<u64, AppError> {
    // Blocks the thread (never yields), so `run` cannot cancel it: the body completes, and the
    // loss is only seen at release.
    std::thread::sleep(Duration::from_millis(400));
    if fail { Err(AppError::Refused) } else { Ok(id) }
}

#[tokio::test(flavor = "current_thread")]
async fn a_lease_lost_before_release_turns_success_into_lease_lost() {
    let locker = Locker::memory();
    match block_past_the_lease(&locker, 6, false).await {
        Err(AppError::Lock(Error::LeaseLost { key, .. })) => assert_eq!(key, "order:6"),
        other => panic!("a body that succeeded unprotected must not report success: {other:?}"),
    }
    // A body that failed keeps its own error.
    match block_past_the_lease(&locker, 6, true).await {
        Err(AppError::Refused) => {}
        other => panic!("expected the body's error, got {other:?}"),
    }
}

#[distributed_lock(key = "order:<id>", locker = locker, watchdog = false)]
async fn lock_deleted_under_the_body(locker: &Locker, id: u64) -> Result<u64, Error> {
    // An operator deletes the lock while the body runs.
    let full_key = locker.backend_key(&format!("order:{id}"))?;
    assert!(locker.backend().force_release(&full_key).await?);
    Ok(id)
}

#[tokio::test(flavor = "current_thread")]
async fn a_lock_gone_at_release_is_not_holder() {
    let locker = Locker::memory();
    match lock_deleted_under_the_body(&locker, 7).await {
        Err(Error::NotHolder { key }) => assert_eq!(key, "order:7"),
        other => panic!("expected NotHolder, got {other:?}"),
    }
}

/// The memory backend, except that every release fails like an unreachable server.
#[derive(Debug, Default)]
struct UnreachableOnRelease(MemoryBackend);

#[async_trait]
impl LockBackend for UnreachableOnRelease {
    async fn acquire(
        &self,
        req: &AcquireRequest,
        deadline: Option<std::time::Instant>,
    ) -> dlock_core::Result<AcquireOutcome> {
        self.0.acquire(req, deadline).await
    }

    async fn renew(&self, leases: &[Lease]) -> dlock_core::Result<Vec<RenewOutcome>> {
        self.0.renew(leases).await
    }

    async fn release(&self, _lease: &Lease) -> dlock_core::Result<ReleaseOutcome> {
        Err(Error::unavailable(
            "flaky",
            std::io::Error::other("connection reset"),
        ))
    }

    fn lost_leases(&self) -> Option<broadcast::Receiver<LostLease>> {
        self.0.lost_leases()
    }

    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }
}

#[distributed_lock(key = "order:<id>", locker = locker)]
async fn settle(locker: &Locker, id: u64) -> Result<u64, Error> {
    Ok(id * 10)
}

#[tokio::test(flavor = "current_thread")]
async fn a_release_the_backend_fails_keeps_the_bodys_result() {
    let locker = Locker::from_backend(UnreachableOnRelease::default());
    // The body finished under a valid lease: its result stands (the failure is logged, and
    // the lock expires at its ttl).
    assert_eq!(settle(&locker, 8).await.unwrap(), 80);
}
