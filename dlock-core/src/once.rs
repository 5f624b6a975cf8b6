//! Scheduled jobs that run once across the fleet: [`Locker::once`] runs a job's fire at most
//! once, whichever machines fire it and whatever their clocks say.
//!
//! The rule, on every backend that keeps a released lock
//! ([`Capabilities::keeps`](crate::backend::Capabilities::keeps)):
//!
//! * The key names the fire: `<job>@<fire>`, the fire being the scheduled instant of this run
//!   as the caller's scheduler computed it (`2026-11-25T02:00Z`). Every machine that fires
//!   the same run computes the same id, however late its clock or its process.
//! * The fire is taken **without waiting**: a fire another process is running is skipped
//!   ([`Skip::Running`]), never queued.
//! * Work that succeeds leaves a `done` record on the key for the retention (a day unless
//!   set), expiring **by the server's clock**, so a machine that fires the same id later
//!   skips it ([`Skip::Done`]).
//! * Work that fails, or whose lease is lost (the work is then cancelled), leaves no record:
//!   a machine that fires the same id later runs it again.
//!
//! No decision compares two hosts' clocks: a machine's clock only names the fire it computes.
//! Machines whose clocks differ by less than the retention each find the record of the first
//! one to run the fire.

use std::fmt;
use std::future::Future;
use std::time::{Duration, Instant};

use crate::current::CurrentLock;
use crate::meter::Meter;
use crate::{Error, Kept, LockInfo, LockMode, Locker, Result};

/// How long a fire's `done` record stays when [`OnceRequest::retention`] is not set: a day.
///
/// # Examples
///
/// ```
/// assert_eq!(dlock_core::DEFAULT_RETENTION.as_secs(), 24 * 3600);
/// ```
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(24 * 3600);

/// What became of one fire of a job ([`OnceRequest::run`]).
///
/// # Examples
///
/// ```
/// use dlock_core::{Once, Skip};
/// let ran: Once<u32> = Once::Ran(7);
/// assert_eq!(ran.ran(), Some(7));
/// assert!(Once::<u32>::Skipped(Skip::Done).is_skipped());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a skipped fire did not run the work"]
pub enum Once<T> {
    /// This process ran the work, which succeeded with this value.
    Ran(T),
    /// Another process runs this fire, or ran it: the work was not run here.
    Skipped(Skip),
}

impl<T> Once<T> {
    /// The work's value, if this process ran it.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(dlock_core::Once::Ran("report").ran(), Some("report"));
    /// ```
    pub fn ran(self) -> Option<T> {
        match self {
            Self::Ran(value) => Some(value),
            Self::Skipped(_) => None,
        }
    }

    /// Whether the work was skipped here.
    ///
    /// # Examples
    ///
    /// ```
    /// use dlock_core::{Once, Skip};
    /// assert!(Once::<()>::Skipped(Skip::Running).is_skipped());
    /// ```
    #[must_use]
    pub const fn is_skipped(&self) -> bool {
        matches!(self, Self::Skipped(_))
    }
}

/// Why a fire was skipped.
///
/// # Examples
///
/// ```
/// assert_eq!(dlock_core::Skip::Running.to_string(), "running");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Skip {
    /// Another process holds the fire: it runs the work now (or, with
    /// [`hold_at_least`](OnceRequest::hold_at_least), ran it a moment ago).
    Running,
    /// The fire was run to success within the retention.
    Done,
}

impl Skip {
    /// Why a busy fire is busy, from what [`Locker::inspect`] says of its key: [`Skip::Done`]
    /// when a holder is a success's record ([`Kept::Done`]), else [`Skip::Running`].
    ///
    /// # Examples
    ///
    /// ```
    /// use dlock_core::{HolderInfo, Kept, LockInfo, LockMode, Skip};
    /// let mut info = LockInfo::default();
    /// info.holders.push(HolderInfo::new("l:1", LockMode::Exclusive).with_kept(Some(Kept::Done)));
    /// assert_eq!(Skip::of(&info), Skip::Done);
    /// assert_eq!(Skip::of(&LockInfo::default()), Skip::Running);
    /// ```
    #[must_use]
    pub fn of(info: &LockInfo) -> Self {
        if info.holders.iter().any(|h| h.kept == Some(Kept::Done)) {
            Self::Done
        } else {
            Self::Running
        }
    }
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Running => "running",
            Self::Done => "done",
        })
    }
}

impl Locker {
    /// Starts one fire of a scheduled job, to be run at most once across every process:
    /// `job` names the job, `fire` the scheduled instant of this run as the scheduler computed
    /// it. The lock key is `<job>@<fire>`. See [`OnceRequest::run`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// use dlock_core::{Once, Skip};
    /// let locker = dlock_core::Locker::memory();
    /// let first = locker
    ///     .once("nightly-report", "2026-11-25T02:00Z")
    ///     .run(async { Ok::<_, dlock_core::Error>("sent") })
    ///     .await?;
    /// assert_eq!(first, Once::Ran("sent"));
    /// // Another machine fires the same run later: the done record makes it skip.
    /// let again = locker
    ///     .once("nightly-report", "2026-11-25T02:00Z")
    ///     .run(async { Ok::<_, dlock_core::Error>("sent twice") })
    ///     .await?;
    /// assert_eq!(again, Once::Skipped(Skip::Done));
    /// # Ok(()) }
    /// ```
    pub fn once(&self, job: &str, fire: impl fmt::Display) -> OnceRequest<'_> {
        self.once_of_key(format!("{job}@{fire}"), job)
    }

    /// Like [`once`](Self::once), for a fire whose whole key the caller built
    /// (`report:2026-11-25`): what the `dlock run --once` command line takes. Its metrics'
    /// `key` label is `*`.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let locker = dlock_core::Locker::memory();
    /// let ran = locker.once_key("report:2026-11-25").run(async { Ok::<_, dlock_core::Error>(1) }).await?;
    /// assert_eq!(ran.ran(), Some(1));
    /// # Ok(()) }
    /// ```
    pub fn once_key(&self, key: impl Into<String>) -> OnceRequest<'_> {
        self.once_of_key(key.into(), crate::meter::ANY_KEY)
    }

    /// A fire whose whole key is `key` (the attribute's rendered template), `job` naming the
    /// job in metrics.
    pub(crate) fn once_of_key(&self, key: String, job: &str) -> OnceRequest<'_> {
        OnceRequest {
            locker: self,
            key,
            job: job.to_owned(),
            ttl: None,
            retention: DEFAULT_RETENTION,
            hold_at_least: None,
            fencing: None,
        }
    }
}

/// One fire of a scheduled job being configured; [`run`](Self::run) it.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
/// use std::time::Duration;
/// let locker = dlock_core::Locker::memory();
/// let outcome = locker
///     .once("cleanup", 1_764_036_000) // the fire as Unix seconds
///     .ttl(Duration::from_secs(30))
///     .retention(Duration::from_secs(48 * 3600))
///     .run(async { Ok::<_, dlock_core::Error>(()) })
///     .await?;
/// assert!(!outcome.is_skipped());
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "a fire does nothing until it is `run`"]
pub struct OnceRequest<'a> {
    locker: &'a Locker,
    key: String,
    job: String,
    ttl: Option<Duration>,
    retention: Duration,
    hold_at_least: Option<Duration>,
    fencing: Option<bool>,
}

impl OnceRequest<'_> {
    /// The lease length while the work runs (renewed by the watchdog): how long a crashed
    /// runner keeps the fire from others. Defaults to the Locker's `ttl`.
    ///
    /// # Examples
    ///
    /// See [`OnceRequest`].
    pub const fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// How long a success's `done` record stays (by the server's clock): machines that fire
    /// the same id within it skip. It must outlast the clock skew between the machines and
    /// the latest a fire may come. Defaults to [`DEFAULT_RETENTION`].
    ///
    /// # Examples
    ///
    /// See [`OnceRequest`].
    pub const fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// See [`LockRequest::hold_at_least`](crate::LockRequest::hold_at_least): a run that
    /// ends sooner — failed too — keeps the fire taken that long after its grant. Of use
    /// when fire ids are not exact (a job fired every few seconds by drifting timers).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// use std::time::Duration;
    /// let locker = dlock_core::Locker::memory();
    /// let outcome = locker
    ///     .once("poll", "tick")
    ///     .hold_at_least(Duration::from_secs(5))
    ///     .run(async { Err::<(), _>(dlock_core::Error::ShutDown) })
    ///     .await;
    /// assert!(outcome.is_err());
    /// let retry = locker.once("poll", "tick").run(async { Ok::<_, dlock_core::Error>(()) }).await?;
    /// assert_eq!(retry, dlock_core::Once::Skipped(dlock_core::Skip::Running));
    /// # Ok(()) }
    /// ```
    pub const fn hold_at_least(mut self, hold_at_least: Duration) -> Self {
        self.hold_at_least = Some(hold_at_least);
        self
    }

    /// Asks for a fencing token, which the work reads from
    /// [`current_lock`](crate::current_lock) to fence the resource it writes. Defaults to the
    /// Locker's `fencing` setting.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let locker = dlock_core::Locker::memory();
    /// let token = locker
    ///     .once("export", "2026-11-25")
    ///     .fencing(true)
    ///     .run(async { Ok::<_, dlock_core::Error>(dlock_core::current_lock().and_then(|l| l.fencing_token())) })
    ///     .await?;
    /// assert!(token.ran().flatten().is_some());
    /// # Ok(()) }
    /// ```
    pub const fn fencing(mut self, fencing: bool) -> Self {
        self.fencing = Some(fencing);
        self
    }

    /// Runs `work` for this fire unless another process runs it or ran it to success within
    /// the retention:
    ///
    /// * The fire is taken with one attempt, never waiting. Busy: [`Once::Skipped`], with
    ///   [`Skip::Done`] when the key holds a success's record, else [`Skip::Running`] (one
    ///   more round trip, on the skip path only, to tell which).
    /// * `work` runs under the lock's watchdog, with the key and fencing token as the
    ///   [`current_lock`](crate::current_lock). If the lease is lost, `work` is dropped at
    ///   its next await point and [`Error::LeaseLost`] is returned: no record is left.
    /// * `Ok(value)`: the release leaves a `done` record for the retention;
    ///   [`Once::Ran`]`(value)`.
    /// * `Err(error)`: released without a record (unless
    ///   [`hold_at_least`](Self::hold_at_least) keeps it); the error is returned, and a later
    ///   fire of the same id runs the work again.
    ///
    /// Traced (`dlock: once`) and, with the `metrics` feature, counted in `dlock.once` by
    /// outcome.
    ///
    /// # Errors
    ///
    /// The work's error; [`Error::LeaseLost`] as above; the acquire's errors other than busy
    /// (the server unreachable, [`Error::Unsupported`] on a backend that cannot keep a
    /// released lock), each converted into `E`.
    ///
    /// # Examples
    ///
    /// See [`Locker::once`].
    pub async fn run<T, E, F>(self, work: F) -> Result<Once<T>, E>
    where
        F: Future<Output = Result<T, E>>,
        E: From<Error>,
    {
        let state = self.locker.state();
        let meter = Meter::new(state.capabilities.name, LockMode::Exclusive, &self.job);
        state
            .capabilities
            .check_keeps(LockMode::Exclusive, "once-per-fire jobs")?;
        let mut request = self
            .locker
            .lock(&self.key)
            .wait(Duration::ZERO)
            .reentrant(false)
            .key_template(&self.job);
        if let Some(ttl) = self.ttl {
            request = request.ttl(ttl);
        }
        if let Some(at_least) = self.hold_at_least {
            request = request.hold_at_least(at_least);
        }
        if let Some(fencing) = self.fencing {
            request = request.fencing(fencing);
        }
        let guard = match request.await {
            Ok(guard) => guard,
            Err(Error::Busy { .. }) => {
                let why = self.why_busy().await;
                meter.once(match why {
                    Skip::Running => "skipped_running",
                    Skip::Done => "skipped_done",
                });
                tracing::info!(key = %self.key, skipped = %why, "dlock: once: skipped");
                return Ok(Once::Skipped(why));
            }
            Err(error) => return Err(error.into()),
        };
        let current = CurrentLock::new(self.key.clone().into(), &guard);
        let output = match guard.run(current.scope(work)).await {
            Ok(output) => output,
            Err(lost) => {
                meter.once("failed");
                tracing::warn!(key = %self.key, error = %lost, "dlock: once: the lock was lost while the work ran; no done record");
                drop(guard);
                return Err(lost.into());
            }
        };
        match output {
            Ok(value) => {
                guard.keep_until(Some((Instant::now() + self.retention, Kept::Done)));
                guard.release_after(true).await?;
                meter.once("ran");
                tracing::info!(key = %self.key, "dlock: once: ran; done record left");
                Ok(Once::Ran(value))
            }
            Err(error) => {
                guard.release_after(false).await?;
                meter.once("failed");
                tracing::info!(key = %self.key, "dlock: once: the work failed; no done record");
                Err(error)
            }
        }
    }

    /// Why the fire was busy: a success's record on the key, or a run in progress (also
    /// when the service cannot be read: skipping is what a busy fire gets either way).
    async fn why_busy(&self) -> Skip {
        match self.locker.inspect(&self.key).await {
            Ok(info) => Skip::of(&info),
            Err(error) => {
                tracing::debug!(key = %self.key, %error, "dlock: once: could not tell why the fire is busy");
                Skip::Running
            }
        }
    }
}
