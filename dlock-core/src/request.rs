//! [`LockRequest`]: the builder `Locker::lock` returns.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::acquire::AcquireOptions;
use crate::guard::LockGuard;
use crate::mode::LockKind;
use crate::state::LockerState;
use crate::{LockMode, Result};

/// An acquire being configured; `.await` it to get a [`LockGuard`].
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
/// use std::time::Duration;
/// let locker = dlock_core::Locker::memory();
/// let guard = locker
///     .lock("cron:cleanup")
///     .ttl(Duration::from_secs(300))
///     .watchdog(false) // at most 5 minutes, even if the job hangs (ShedLock's lockAtMostFor)
///     .wait(Duration::ZERO) // skip this run if another node has it
///     .await?;
/// # drop(guard); Ok(()) }
/// ```
#[must_use = "a lock request does nothing until it is `.await`ed"]
#[derive(Debug)]
pub struct LockRequest<'a> {
    locker: &'a Arc<LockerState>,
    options: AcquireOptions<'a>,
}

impl<'a> LockRequest<'a> {
    pub(crate) const fn new(locker: &'a Arc<LockerState>, key: &'a str, mode: LockMode) -> Self {
        Self {
            locker,
            options: AcquireOptions {
                key,
                ttl: None,
                wait: None,
                watchdog: true,
                reentrant: true,
                fencing: None,
                max_hold: None,
                hold_at_least: None,
                mode,
                kind: LockKind::of(mode),
                key_template: None,
                value: None,
            },
        }
    }

    /// Marks an exclusive request as the write side of a read-write lock rather than a mutex
    /// (see [`AcquireRequest::kind`](crate::backend::AcquireRequest::kind)); other modes
    /// keep their kind.
    pub(crate) const fn writer(mut self) -> Self {
        if matches!(self.options.mode, LockMode::Exclusive) {
            self.options.kind = LockKind::ReadWrite;
        }
        self
    }

    /// Makes the grant show `value` to others (an election's candidate).
    pub(crate) const fn value(mut self, value: &'a str) -> Self {
        self.options.value = Some(value);
        self
    }

    /// Sets the recipe the grant belongs to (the attribute's `mode`).
    pub(crate) const fn kind(mut self, kind: LockKind) -> Self {
        self.options.kind = kind;
        self
    }

    /// The lease length: how long the lock outlives a crashed holder, and the renewal
    /// period's basis (the watchdog renews every ttl/3). Defaults to the Locker's `ttl`.
    /// Ignored when re-entering a lock this task already holds.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// use std::time::Duration;
    /// let locker = dlock_core::Locker::memory();
    /// let guard = locker.lock("k").ttl(Duration::from_secs(5)).await?;
    /// # drop(guard);
    /// # Ok(()) }
    /// ```
    pub const fn ttl(mut self, ttl: Duration) -> Self {
        self.options.ttl = Some(ttl);
        self
    }

    /// Gives up with [`Error::Busy`](crate::Error::Busy) after waiting `wait`;
    /// `Duration::ZERO` makes exactly one attempt. Defaults to the Locker's `wait`.
    ///
    /// The answer comes within `wait` plus at most [`WAIT_SLACK`](crate::WAIT_SLACK) (250 ms,
    /// or the operation timeout if shorter), whatever state the server is in: a server that
    /// stops answering gives [`Error::Timeout`](crate::Error::Timeout) then. One attempt
    /// (`Duration::ZERO`) is bounded by the operation timeout. An attempt still in flight when
    /// the caller gets its answer finishes in the background, and a grant it brings is
    /// released at once.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// use std::time::Duration;
    /// let locker = dlock_core::Locker::memory();
    /// let guard = locker.lock("k").wait(Duration::from_millis(500)).await?;
    /// # drop(guard);
    /// # Ok(()) }
    /// ```
    pub const fn wait(mut self, wait: Duration) -> Self {
        self.options.wait = Some(Some(wait));
        self
    }

    /// Waits until the lock is acquired, however long that takes.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let locker = dlock_core::Locker::memory();
    /// let guard = locker.lock("k").wait_forever().await?;
    /// # drop(guard);
    /// # Ok(()) }
    /// ```
    pub const fn wait_forever(mut self) -> Self {
        self.options.wait = Some(None);
        self
    }

    /// The longest this lock is held: after `max_hold` (counted from the grant) the watchdog
    /// stops renewing, the guard is lost with [`LostReason::MaxHold`](crate::LostReason::MaxHold)
    /// (the wrappers cancel the protected work) and the lock is released, so a stuck job
    /// cannot hold it forever. Defaults to the config's `max_hold` (none: renewed while the
    /// guard lives). A nested acquire of a lock this task holds keeps the outer one's cap.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// use std::time::Duration;
    /// let locker = dlock_core::Locker::memory();
    /// let guard = locker
    ///     .lock("nightly-report")
    ///     .ttl(Duration::from_secs(10))
    ///     .max_hold(Duration::from_secs(3600))
    ///     .await?;
    /// # drop(guard);
    /// # Ok(()) }
    /// ```
    pub const fn max_hold(mut self, max_hold: Duration) -> Self {
        self.options.max_hold = Some(max_hold);
        self
    }

    /// Keeps the lock held at least `hold_at_least` after it was granted (ShedLock's
    /// `lockAtLeastFor`): a release that comes sooner — the guard released or dropped, the
    /// process exiting after it — leaves the key held on the server for the rest of the time,
    /// **by the server's clock**, with no process needed to keep it. So a short job fired on
    /// several machines at about the same moment runs on one of them, whatever their clocks
    /// say. The rest is measured from when the grant's answer arrived, so the server holds
    /// the key at least that long after it granted it. A lease that was lost is not kept.
    /// Exclusive locks only; ignored when re-entering a lock this task already holds.
    ///
    /// # Errors
    ///
    /// The acquire fails with [`Error::Unsupported`](crate::Error::Unsupported) before any
    /// round trip on a backend that cannot keep a released lock
    /// ([`Capabilities::keeps`](crate::backend::Capabilities::keeps)) or for a shared lock or
    /// a permit.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// use std::time::Duration;
    /// let locker = dlock_core::Locker::memory();
    /// let guard = locker
    ///     .lock("cleanup")
    ///     .wait(Duration::ZERO)
    ///     .hold_at_least(Duration::from_secs(60))
    ///     .await?;
    /// guard.release().await?; // done in a moment, but the lock stays taken for a minute
    /// assert!(locker.try_lock("cleanup").await.is_err());
    /// # Ok(()) }
    /// ```
    pub const fn hold_at_least(mut self, hold_at_least: Duration) -> Self {
        self.options.hold_at_least = Some(hold_at_least);
        self
    }

    /// With `false`, nothing renews the lease: the lock expires at its ttl even if the guard
    /// is still alive, and the guard then reports it lost. Defaults to `true`.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// use std::time::Duration;
    /// let locker = dlock_core::Locker::memory();
    /// let guard = locker.lock("k").ttl(Duration::from_secs(60)).watchdog(false).await?;
    /// # drop(guard);
    /// # Ok(()) }
    /// ```
    pub const fn watchdog(mut self, renew: bool) -> Self {
        self.options.watchdog = renew;
        self
    }

    /// With `true`, the grant carries a fencing token
    /// ([`LockGuard::fencing_token`](crate::LockGuard::fencing_token) is `Some`) on every
    /// backend that can issue one. Defaults to the Locker's `fencing` setting
    /// ([`DlockConfig::fencing`](crate::DlockConfig::fencing), `false`).
    ///
    /// Memory and etcd tokens come with every grant anyway; on Redis a token costs an `INCR`
    /// per grant (pipelined with the `SET`, so no extra round trip, but 5–10 % of a busy
    /// server's lock throughput) and a counter key per lock name, kept forever. So Redis
    /// issues them only when asked, like Redisson's `RFencedLock` next to its `RLock`.
    ///
    /// # Errors
    ///
    /// The acquire fails with [`Error::Unsupported`](crate::Error::Unsupported) when the
    /// backend issues no tokens at all, and with [`Error::Config`](crate::Error::Config)
    /// when it would re-enter a hold of this task that was taken without a token.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let locker = dlock_core::Locker::memory();
    /// let guard = locker.lock("invoice:7").fencing(true).await?;
    /// let token = guard.fencing_token().expect("asked for");
    /// // Send `token` with every write; the store rejects a token lower than one it has seen.
    /// # let _ = token; drop(guard); Ok(()) }
    /// ```
    pub const fn fencing(mut self, fencing: bool) -> Self {
        self.options.fencing = Some(fencing);
        self
    }
}

impl LockRequest<'_> {
    /// With `false`, this acquire does not re-enter a hold the current task already has on
    /// the key: it contends like any other caller (Redisson's non-reentrant lock). Use it where
    /// one task runs independent units of work concurrently (a tower layer serving requests
    /// with `join!`). Acquires nested inside the guard it returns still re-enter it. Defaults
    /// to `true`.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// use std::time::Duration;
    /// let locker = dlock_core::Locker::memory();
    /// let first = locker.lock("k").await?;
    /// let second = locker.lock("k").reentrant(false).wait(Duration::from_millis(10)).await;
    /// assert!(matches!(second, Err(dlock_core::Error::Busy { .. })));
    /// # drop(first); Ok(()) }
    /// ```
    pub const fn reentrant(mut self, reentrant: bool) -> Self {
        self.options.reentrant = reentrant;
        self
    }
}

impl<'a> LockRequest<'a> {
    /// Names the template the key was built from (`order:<id>`): with the `metrics` feature,
    /// the `key` label of this lock's metrics, so that every order shares one time series.
    /// The attribute and the layer set it; without it the label is `*` (or the raw key, if
    /// [`DlockConfig::metrics_raw_keys`](crate::DlockConfig::metrics_raw_keys) says so).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let locker = dlock_core::Locker::memory();
    /// let id = 42;
    /// let key = format!("order:{id}");
    /// let guard = locker.lock(&key).key_template("order:<id>").await?;
    /// # drop(guard); Ok(()) }
    /// ```
    pub const fn key_template(mut self, template: &'a str) -> Self {
        self.options.key_template = Some(template);
        self
    }
}

impl<'a> IntoFuture for LockRequest<'a> {
    type Output = Result<LockGuard>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<LockGuard>> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move { self.locker.acquire(self.options).await })
    }
}
