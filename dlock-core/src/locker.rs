//! [`Locker`]: the handle applications lock through.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use crate::backend::{BackendKind, Capabilities, Fencing, LockBackend};
use crate::backend_url::BackendUrl;
use crate::config::DlockConfig;
use crate::guard::LockGuard;
use crate::hold::Hold;
use crate::lease::{AcquireOutcome, AcquireRequest, Lease, OwnerId, ReleaseOutcome};
use crate::lease_watch::LeaseWatch;
use crate::reentrancy::{HolderId, Reentrancy};
use crate::request::LockRequest;
use crate::watchdog::Watchdog;
use crate::{Error, LockMode, Result};

/// A cheap-to-clone handle over one lock backend, with the defaults of every lock taken
/// through it (key prefix, ttl, wait, watchdog cadence, operation timeout).
///
/// One watchdog task per Locker renews all leases held through it. Reentrancy is tracked per
/// Locker and per tokio task: the task that holds a key may lock it again through the same
/// Locker (or a clone) and gets a nested guard at once.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
/// use std::time::Duration;
/// use dlock_core::Locker;
///
/// let locker = Locker::memory();
/// let guard = locker.lock("order:42").ttl(Duration::from_secs(10)).await?;
/// // ... work on order 42; the watchdog renews the lease every 10s/3 ...
/// guard.release().await?;
///
/// let receipt = locker.with_lock("order:42", async { "paid" }).await?;
/// assert_eq!(receipt, "paid");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Locker {
    shared: Arc<LockerShared>,
}

/// The state behind every clone of one Locker.
pub(crate) struct LockerShared {
    /// 128 random bits in hex, drawn once: the scope of this Locker's owner ids.
    id: String,
    /// How many grants this Locker asked for: the other half of an owner id.
    grants: AtomicU64,
    backend: Arc<dyn LockBackend>,
    capabilities: Capabilities,
    config: DlockConfig,
    reentrancy: Reentrancy,
    watchdog: Watchdog,
}

impl Drop for LockerShared {
    fn drop(&mut self) {
        self.watchdog.shutdown();
    }
}

impl fmt::Debug for LockerShared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Locker")
            .field("id", &self.id)
            .field("backend", &self.capabilities.name)
            .field("key_prefix", &self.config.key_prefix)
            .field("ttl", &self.config.ttl)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for Locker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.shared.fmt(f)
    }
}

static GLOBAL: RwLock<Option<Locker>> = RwLock::new(None);

/// The most an acquire that waits (`wait(d)`, `d > 0`) may answer after its wait ran out,
/// whatever the server does (capped by the operation timeout): time for the last attempt's
/// round trip and for giving up a queued place.
///
/// # Examples
///
/// ```
/// assert_eq!(dlock_core::WAIT_SLACK, std::time::Duration::from_millis(250));
/// ```
pub const WAIT_SLACK: Duration = Duration::from_millis(250);

impl Locker {
    /// A Locker over a fresh, private in-process lock table, with default settings.
    ///
    /// # Examples
    ///
    /// ```
    /// let locker = dlock_core::Locker::memory();
    /// assert_eq!(locker.capabilities().name, "memory");
    /// ```
    #[cfg(feature = "memory")]
    #[must_use]
    pub fn memory() -> Self {
        Self::from_backend(crate::backend::MemoryBackend::new())
    }

    /// A Locker over `backend` with default settings.
    ///
    /// # Examples
    ///
    /// ```
    /// let locker = dlock_core::Locker::from_backend(dlock_core::backend::MemoryBackend::new());
    /// # drop(locker);
    /// ```
    #[must_use]
    pub fn from_backend(backend: impl LockBackend) -> Self {
        Self::from_shared_backend(Arc::new(backend))
    }

    /// A Locker over a backend shared with others, with default settings.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use dlock_core::Locker;
    /// use dlock_core::backend::{LockBackend, MemoryBackend};
    /// let backend: Arc<dyn LockBackend> = Arc::new(MemoryBackend::new());
    /// let locker = Locker::from_shared_backend(backend);
    /// # drop(locker);
    /// ```
    #[must_use]
    pub fn from_shared_backend(backend: Arc<dyn LockBackend>) -> Self {
        Self::build(backend, DlockConfig::default())
    }

    /// A Locker over `backend` with the settings of `config` (its `backend` is not used).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] if `config` is invalid.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::{sync::Arc, time::Duration};
    /// use dlock_core::{DlockConfig, Locker};
    /// use dlock_core::backend::MemoryBackend;
    /// let config = DlockConfig { ttl: Duration::from_secs(5), ..Default::default() };
    /// let locker = Locker::with_config(Arc::new(MemoryBackend::new()), &config).unwrap();
    /// assert_eq!(locker.config().ttl, Duration::from_secs(5));
    /// ```
    pub fn with_config(backend: Arc<dyn LockBackend>, config: &DlockConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self::build(backend, config.clone()))
    }

    fn build(backend: Arc<dyn LockBackend>, config: DlockConfig) -> Self {
        let capabilities = backend.capabilities();
        let id = OwnerId::random("locker").as_str()["locker:".len()..].to_owned();
        let watchdog = Watchdog::new(Arc::clone(&backend), config.operation_timeout);
        Self {
            shared: Arc::new(LockerShared {
                id,
                grants: AtomicU64::new(0),
                backend,
                capabilities,
                config,
                reentrancy: Reentrancy::default(),
                watchdog,
            }),
        }
    }

    /// Connects to the backend `config.backend` names, with `config`'s settings.
    ///
    /// `memory://name` selects a process-wide in-memory table: every Locker connected to the
    /// same name shares it, like clients of one server.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for invalid settings or a backend this build does not include (the
    /// message names the cargo feature); [`Error::Unavailable`] / [`Error::Timeout`] when the
    /// server cannot be reached within the operation timeout.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// use dlock_core::{DlockConfig, Locker};
    /// let config = DlockConfig::from_env()?; // DLOCK_URL=... or memory:// by default
    /// let locker = Locker::connect(&config).await?;
    /// # drop(locker); Ok(()) }
    /// ```
    #[cfg_attr(
        not(any(feature = "redis", feature = "etcd")),
        allow(clippy::unused_async)
    )]
    #[cfg_attr(
        not(any(feature = "memory", feature = "redis", feature = "etcd")),
        allow(unreachable_code, unused_variables)
    )]
    pub async fn connect(config: &DlockConfig) -> Result<Self> {
        config.validate()?;
        let url = BackendUrl::parse(&config.backend.to_url())?;
        let backend: Arc<dyn LockBackend> = match url.kind() {
            #[cfg(feature = "memory")]
            BackendKind::Memory => Arc::new(crate::backend::MemoryBackend::shared_table(
                url.memory_table_name(),
            )),
            #[cfg(feature = "redis")]
            BackendKind::Redis | BackendKind::RedisCluster => Arc::new(
                crate::backend::RedisBackend::connect(&url, config.operation_timeout).await?,
            ),
            #[cfg(feature = "etcd")]
            BackendKind::Etcd => Arc::new(
                crate::backend::EtcdBackend::connect(&url, config.operation_timeout).await?,
            ),
            other => {
                return Err(Error::config(
                    "url",
                    url.as_str(),
                    format!("backend `{other}` is not available in this build"),
                ));
            }
        };
        Ok(Self::build(backend, config.clone()))
    }

    /// [`connect`](Self::connect) with the default settings and `url`.
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let a = dlock_core::Locker::connect_url("memory://shared-doc").await?;
    /// let b = dlock_core::Locker::connect_url("memory://shared-doc").await?;
    /// let _held = a.lock("k").await?;
    /// assert!(b.try_lock("k").await.is_err(), "same table: b is another client");
    /// # Ok(()) }
    /// ```
    pub async fn connect_url(url: &str) -> Result<Self> {
        Self::connect(&DlockConfig {
            backend: crate::BackendSpec::Url(url.to_owned()),
            ..DlockConfig::default()
        })
        .await
    }

    /// Makes this Locker the process-wide default, used by `#[distributed_lock]` without a
    /// `locker = ...` argument. Replaces any earlier one.
    ///
    /// # Examples
    ///
    /// ```
    /// dlock_core::Locker::memory().install_global();
    /// assert!(dlock_core::Locker::global().is_ok());
    /// ```
    pub fn install_global(&self) {
        *GLOBAL.write().unwrap_or_else(PoisonError::into_inner) = Some(self.clone());
    }

    /// The process-wide default Locker.
    ///
    /// # Errors
    ///
    /// [`Error::NoGlobalLocker`] before [`install_global`](Self::install_global).
    ///
    /// # Examples
    ///
    /// See [`install_global`](Self::install_global).
    pub fn global() -> Result<Self> {
        GLOBAL
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or(Error::NoGlobalLocker)
    }

    /// Starts building an acquire of `key`: set `.ttl(..)`, `.wait(..)`, `.watchdog(..)`,
    /// then `.await` it for a [`LockGuard`].
    ///
    /// By default it waits as long as the Locker's configured `wait` (until acquired unless
    /// configured otherwise), with the configured ttl and the watchdog on.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// use std::time::Duration;
    /// let locker = dlock_core::Locker::memory();
    /// let guard = locker
    ///     .lock("nightly-report")
    ///     .ttl(Duration::from_secs(60))
    ///     .wait(Duration::from_secs(5))
    ///     .await?;
    /// # drop(guard); Ok(()) }
    /// ```
    pub fn lock<'a>(&'a self, key: &'a str) -> LockRequest<'a> {
        LockRequest::new(self, key, LockMode::Exclusive)
    }

    /// Starts building an acquire of the read side of the read-write lock `key`: readers hold
    /// it side by side, never next to a writer. A reader that arrives while a writer waits
    /// queues behind the writer, so readers never starve writers.
    ///
    /// A task that holds the write lock of `key` gets its read lock at once (a nested guard of
    /// the write grant). The backend must support read-write locks
    /// ([`Capabilities::read_write`]).
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock); [`Error::Unsupported`] on a backend without read-write locks.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let locker = dlock_core::Locker::memory();
    /// let first = locker.read_lock("catalog").await?;
    /// let other = locker.clone();
    /// // Another task reads at the same time:
    /// tokio::spawn(async move { other.read_lock("catalog").await.map(drop) }).await.unwrap()?;
    /// # drop(first); Ok(()) }
    /// ```
    pub fn read_lock<'a>(&'a self, key: &'a str) -> LockRequest<'a> {
        LockRequest::new(self, key, LockMode::Shared)
    }

    /// Starts building an acquire of the write side of the read-write lock `key`: held alone,
    /// with no reader and no other writer. The same as [`lock`](Self::lock): a plain lock and
    /// a write lock of one key exclude each other.
    ///
    /// A task that holds only the read lock of `key` gets [`Error::LockUpgrade`] at once: it
    /// would wait for itself.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock); [`Error::LockUpgrade`] as above.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let locker = dlock_core::Locker::memory();
    /// let writer = locker.write_lock("catalog").await?;
    /// let reader = locker.read_lock("catalog").await?; // same task: re-enters (downgrade)
    /// assert!(reader.is_nested());
    /// # drop((reader, writer)); Ok(()) }
    /// ```
    pub fn write_lock<'a>(&'a self, key: &'a str) -> LockRequest<'a> {
        LockRequest::new(self, key, LockMode::Exclusive)
    }

    /// Starts building an acquire of one of `permits` permits of the semaphore `key`: at most
    /// `permits` guards hold it at once, across every client of the backend. Every caller of
    /// one semaphore must name the same number; a permit of a vanished holder frees at its
    /// ttl. Permits do not re-enter: a task asking twice takes two.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock); [`Error::PermitLimitMismatch`] when the semaphore is in use
    /// with another number of permits; [`Error::Config`] for zero permits;
    /// [`Error::Unsupported`] on a backend without semaphores.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// use std::time::Duration;
    /// let locker = dlock_core::Locker::memory();
    /// let a = locker.semaphore("pdf-renderers", 2).await?;
    /// let b = locker.semaphore("pdf-renderers", 2).await?;
    /// let third = locker.semaphore("pdf-renderers", 2).wait(Duration::ZERO).await;
    /// assert!(matches!(third, Err(dlock_core::Error::Busy { .. })));
    /// # drop((a, b)); Ok(()) }
    /// ```
    pub fn semaphore<'a>(&'a self, key: &'a str, permits: u32) -> LockRequest<'a> {
        LockRequest::new(self, key, LockMode::Permit { limit: permits })
    }

    /// Like [`lock`](Self::lock), but makes exactly one attempt: it never waits.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let locker = dlock_core::Locker::memory();
    /// let first = locker.try_lock("k").await?;
    /// let other_task = locker.clone();
    /// let second = tokio::spawn(async move { other_task.try_lock("k").await.map(drop) });
    /// assert!(matches!(second.await.unwrap(), Err(dlock_core::Error::Busy { .. })));
    /// # drop(first); Ok(()) }
    /// ```
    pub fn try_lock<'a>(&'a self, key: &'a str) -> LockRequest<'a> {
        self.lock(key).wait(Duration::ZERO)
    }

    /// Acquires `key` with the defaults, runs `work` under the lock, cancels it if the lease
    /// is lost, and releases.
    ///
    /// # Errors
    ///
    /// Any acquire error; [`Error::LeaseLost`] if the lease was lost before `work` finished.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let locker = dlock_core::Locker::memory();
    /// let total = locker.with_lock("stock:sku-1", async { 40 + 2 }).await?;
    /// assert_eq!(total, 42);
    /// # Ok(()) }
    /// ```
    pub async fn with_lock<F: Future>(&self, key: &str, work: F) -> Result<F::Output> {
        let guard = self.lock(key).await?;
        let output = guard.run(work).await?;
        guard.release().await?;
        Ok(output)
    }

    /// The backend this Locker uses.
    ///
    /// # Examples
    ///
    /// ```
    /// let locker = dlock_core::Locker::memory();
    /// assert_eq!(locker.backend().capabilities().name, "memory");
    /// ```
    #[must_use]
    pub fn backend(&self) -> &Arc<dyn LockBackend> {
        &self.shared.backend
    }

    /// What the backend can do.
    ///
    /// # Examples
    ///
    /// ```
    /// let caps = dlock_core::Locker::memory().capabilities();
    /// assert!(caps.fair);
    /// ```
    #[must_use]
    pub fn capabilities(&self) -> Capabilities {
        self.shared.capabilities
    }

    /// The settings this Locker was built with.
    ///
    /// # Examples
    ///
    /// ```
    /// let locker = dlock_core::Locker::memory();
    /// assert_eq!(locker.config().key_prefix, "dlock:");
    /// ```
    #[must_use]
    pub fn config(&self) -> &DlockConfig {
        &self.shared.config
    }

    /// How many leases the watchdog is keeping or watching now (one per held grant).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let locker = dlock_core::Locker::memory();
    /// let guard = locker.lock("k").await?;
    /// assert_eq!(locker.watched_leases(), 1);
    /// guard.release().await?;
    /// assert_eq!(locker.watched_leases(), 0);
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn watched_leases(&self) -> usize {
        self.shared.watchdog.watched()
    }

    /// The key a backend stores for the user key `key` (the prefix added).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidKey`] for an empty, oversized or control-character key.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(dlock_core::Locker::memory().backend_key("a").unwrap(), "dlock:a");
    /// ```
    pub fn backend_key(&self, key: &str) -> Result<String> {
        crate::key::full_key(&self.shared.config.key_prefix, key).map(|full| full.to_string())
    }

    /// Takes a lock as `options` describe: checks the request, re-enters a hold of this task
    /// where the mode allows, else asks the backend (within the wait) and keeps the grant.
    pub(crate) async fn acquire(&self, options: AcquireOptions<'_>) -> Result<LockGuard> {
        let checked = self.check(&options)?;
        let holder = HolderId::current();
        if options.reentrant
            && let Some(guard) = self.reenter(&options, &checked, holder)?
        {
            return Ok(guard);
        }
        let started = Instant::now();
        let lease = self.grant(&options, checked, started).await?;
        self.keep(&options, lease, holder, started)
    }

    /// Validates `options` against the settings and the backend, before any round trip.
    fn check(&self, options: &AcquireOptions<'_>) -> Result<Checked> {
        let shared = &self.shared;
        let full_key = crate::key::full_key(&shared.config.key_prefix, options.key)?;
        let ttl = options.ttl.unwrap_or(shared.config.ttl);
        if ttl < Duration::from_millis(10) {
            return Err(Error::config(
                "ttl",
                humantime::format_duration(ttl).to_string(),
                "must be at least 10ms",
            ));
        }
        if options.mode == (LockMode::Permit { limit: 0 }) {
            return Err(Error::config(
                "permits",
                "0",
                "a semaphore needs at least one permit",
            ));
        }
        if !shared.capabilities.supports(options.mode) {
            return Err(Error::Unsupported {
                backend: shared.capabilities.name,
                operation: match options.mode {
                    LockMode::Permit { .. } => "semaphores",
                    _ => "read-write locks",
                },
            });
        }
        let fencing = options.fencing.unwrap_or(shared.config.fencing);
        if fencing && shared.capabilities.fencing == Fencing::None {
            return Err(Error::Unsupported {
                backend: shared.capabilities.name,
                operation: "fencing tokens",
            });
        }
        Ok(Checked {
            full_key,
            ttl,
            fencing,
        })
    }

    /// A nested guard on the hold this task has on the key, if the mode re-enters it: any
    /// lock inside a write lock (a read lock there is a downgrade), a read lock inside a read
    /// lock. Permits never re-enter.
    ///
    /// # Errors
    ///
    /// [`Error::LockUpgrade`] for a write lock inside this task's read lock; the hold's
    /// [`Error::LeaseLost`] once it is lost; [`Error::Config`] for a fencing token asked of a
    /// hold taken without one.
    fn reenter(
        &self,
        options: &AcquireOptions<'_>,
        checked: &Checked,
        holder: HolderId,
    ) -> Result<Option<LockGuard>> {
        if matches!(options.mode, LockMode::Permit { .. }) {
            return Ok(None);
        }
        let Some(hold) = self.shared.reentrancy.find(holder, &checked.full_key) else {
            return Ok(None);
        };
        if let Some(lost) = hold.lost_error() {
            return Err(lost);
        }
        if hold.lease().mode == LockMode::Shared && options.mode == LockMode::Exclusive {
            return Err(Error::LockUpgrade {
                key: options.key.to_owned(),
            });
        }
        if checked.fencing && hold.lease().fencing_token.is_none() {
            return Err(Error::config(
                "fencing",
                "true",
                format!(
                    "this task already holds `{}` without a fencing token, and a nested \
                     acquire shares that grant: ask for the token on the outermost one",
                    options.key
                ),
            ));
        }
        tracing::trace!(key = options.key, mode = %options.mode, "dlock: re-entered");
        Ok(Some(LockGuard::new(hold, true, holder)))
    }

    /// Asks the backend for a new grant, within the caller's wait counted from `started`.
    ///
    /// # Errors
    ///
    /// [`Error::Busy`] when the wait ran out; the backend's errors, bounded in time.
    async fn grant(
        &self,
        options: &AcquireOptions<'_>,
        checked: Checked,
        started: Instant,
    ) -> Result<Lease> {
        let shared = &self.shared;
        let grant = shared.grants.fetch_add(1, Ordering::Relaxed) + 1;
        let request = AcquireRequest::new(
            checked.full_key,
            OwnerId::numbered(&shared.id, grant),
            checked.ttl,
        )
        .with_fencing(checked.fencing)
        .with_mode(options.mode);
        let wait = options.wait.unwrap_or(shared.config.wait);
        let outcome = match wait {
            Some(wait) => {
                // One attempt is one operation; a wait gets a short slack past its end.
                let slack = if wait.is_zero() {
                    shared.config.operation_timeout
                } else {
                    WAIT_SLACK.min(shared.config.operation_timeout)
                };
                let deadline = started + wait;
                self.acquire_by(request, deadline, deadline + slack).await
            }
            None => {
                let outcome = shared.backend.acquire(&request, None).await;
                if outcome.as_ref().is_err_and(may_have_been_applied) {
                    shared.release_once_answered(Lease::new(&request, Instant::now()));
                }
                outcome
            }
        };
        match outcome.map_err(|error| for_the_caller(error, options.key))? {
            AcquireOutcome::Acquired(lease) => Ok(lease),
            AcquireOutcome::Busy { retry_after } => Err(Error::Busy {
                key: options.key.to_owned(),
                waited: started.elapsed(),
                retry_after,
            }),
        }
    }

    /// Puts a fresh grant under the watchdog and wraps it in this task's guard.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] when the grant came too late to be used safely (it is released in
    /// the background).
    fn keep(
        &self,
        options: &AcquireOptions<'_>,
        lease: Lease,
        holder: HolderId,
        started: Instant,
    ) -> Result<LockGuard> {
        let shared = &self.shared;
        // The backend may grant less than asked (a negotiated session timeout): trust the
        // shorter of the two.
        let ttl = lease.ttl.min(options.ttl.unwrap_or(shared.config.ttl));
        let watch = Arc::new(LeaseWatch::new(
            Arc::clone(&lease.key),
            shared.config.key_prefix.len(),
            ttl,
            lease.valid_from,
        ));
        let cadence = options.watchdog.then(|| self.cadence(ttl));
        shared
            .watchdog
            .watch(lease.clone(), Arc::clone(&watch), cadence);
        let hold = Arc::new(Hold::new(Arc::clone(shared), lease, watch));
        let guard = LockGuard::new(hold, false, holder);
        tracing::debug!(
            key = options.key,
            mode = %options.mode,
            fencing_token = guard.fencing_token(),
            waited_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
            "dlock: acquired"
        );
        if let Some(reason) = guard.lost_reason() {
            // Granted, but the reply came too late to use it safely; dropping the guard
            // releases the grant in the background.
            return Err(Error::LeaseLost {
                key: options.key.to_owned(),
                reason,
            });
        }
        Ok(guard)
    }

    /// The backend's acquire of `request`, waiting natively until `deadline`, answered by
    /// `answer_by` whatever the server does ([`Error::Timeout`] then). An attempt still in
    /// flight at `answer_by` goes on in the background for at most the operation timeout,
    /// and whatever it was granted is released: a late grant is never left to its ttl.
    async fn acquire_by(
        &self,
        request: AcquireRequest,
        deadline: Instant,
        answer_by: Instant,
    ) -> Result<AcquireOutcome> {
        let unconfirmed = Lease::new(&request, Instant::now());
        let shared = Arc::clone(&self.shared);
        let mut attempt =
            Box::pin(async move { shared.backend.acquire(&request, Some(deadline)).await });
        if let Ok(outcome) = tokio::time::timeout_at(answer_by.into(), attempt.as_mut()).await {
            if outcome.as_ref().is_err_and(may_have_been_applied) {
                self.shared.release_once_answered(unconfirmed);
            }
            return outcome;
        }
        let shared = Arc::clone(&self.shared);
        let key = Arc::clone(&unconfirmed.key);
        let spawned = self.shared.watchdog.spawn(async move {
            let finished = tokio::time::timeout(shared.config.operation_timeout, attempt).await;
            // A grant that came too late, or a request that may still be applied after this
            // (an owner-checked release of a grant that never was changes nothing).
            match finished {
                Ok(Ok(AcquireOutcome::Acquired(lease))) => shared.release_once_answered(lease),
                Ok(Ok(AcquireOutcome::Busy { .. })) => {}
                Ok(Err(error)) if !may_have_been_applied(&error) => {}
                Ok(Err(_)) | Err(_) => shared.release_once_answered(unconfirmed),
            }
        });
        if !spawned {
            tracing::debug!(%key, "dlock: no runtime to finish a late acquire; a late grant expires at its ttl");
        }
        Err(self.timeout("acquire"))
    }

    fn cadence(&self, ttl: Duration) -> Duration {
        match self.shared.config.watchdog_interval {
            Some(interval) if interval <= ttl / 2 => interval,
            _ => ttl / 3,
        }
    }

    fn timeout(&self, operation: &'static str) -> Error {
        Error::Timeout {
            backend: self.shared.capabilities.name,
            operation,
            after: self.shared.config.operation_timeout,
        }
    }
}

/// A backend's error as the caller should see it: keys named as the caller gave them.
fn for_the_caller(error: Error, user_key: &str) -> Error {
    match error {
        Error::PermitLimitMismatch {
            stored, requested, ..
        } => Error::PermitLimitMismatch {
            key: user_key.to_owned(),
            stored,
            requested,
        },
        other => other,
    }
}

/// What [`Locker::check`] found valid in a request.
struct Checked {
    full_key: Arc<str>,
    ttl: Duration,
    fencing: bool,
}

/// Whether an acquire that failed with `error` may still have been granted on the server (the
/// request was sent, and no answer came back), so its owner's grant must be released.
fn may_have_been_applied(error: &Error) -> bool {
    error.kind() == crate::ErrorKind::Unavailable
}

/// What [`LockRequest`] passes to [`Locker::acquire`].
#[derive(Debug)]
pub(crate) struct AcquireOptions<'a> {
    pub(crate) key: &'a str,
    pub(crate) ttl: Option<Duration>,
    /// `None`: the Locker's default; `Some(None)`: until acquired.
    pub(crate) wait: Option<Option<Duration>>,
    pub(crate) watchdog: bool,
    /// Whether a hold of the current task on the key is re-entered.
    pub(crate) reentrant: bool,
    /// Whether the grant must carry a fencing token; `None`: the Locker's default.
    pub(crate) fencing: Option<bool>,
    /// How the key is held.
    pub(crate) mode: LockMode,
}

impl LockerShared {
    pub(crate) const fn reentrancy(&self) -> &Reentrancy {
        &self.reentrancy
    }

    pub(crate) const fn watchdog(&self) -> &Watchdog {
        &self.watchdog
    }

    /// Owner-checked release, bounded by the operation timeout.
    pub(crate) async fn release_lease(&self, lease: &Lease) -> Result<ReleaseOutcome> {
        let timeout = self.config.operation_timeout;
        tokio::time::timeout(timeout, self.backend.release(lease))
            .await
            .unwrap_or_else(|_| {
                Err(Error::Timeout {
                    backend: self.capabilities.name,
                    operation: "release",
                    after: timeout,
                })
            })
    }

    /// Releases `lease` — a grant the caller never got, or may have been made after the
    /// caller heard of a failure — from a spawned task, trying again until the backend
    /// answers or the lease would have run out anyway: a server that stops answering while
    /// the acquire is in flight may apply it when it comes back.
    pub(crate) fn release_once_answered(self: &Arc<Self>, lease: Lease) {
        let shared = Arc::clone(self);
        let key = Arc::clone(&lease.key);
        let spawned = self.watchdog.spawn(async move {
            let expires = lease.valid_from + lease.ttl;
            let mut pause = Duration::from_millis(50);
            loop {
                match shared.release_lease(&lease).await {
                    Ok(outcome) => {
                        tracing::debug!(key = %lease.key, ?outcome, "dlock: released a grant its caller did not get");
                        return;
                    }
                    Err(error) if Instant::now() + pause < expires => {
                        tracing::debug!(key = %lease.key, %error, "dlock: releasing an unconfirmed grant; trying again");
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_secs(1));
                    }
                    Err(error) => {
                        tracing::warn!(key = %lease.key, %error, "dlock: could not release an unconfirmed grant; it expires at its ttl");
                        return;
                    }
                }
            }
        });
        if !spawned {
            tracing::debug!(%key, "dlock: no runtime to release an unconfirmed grant; it expires at its ttl");
        }
    }

    /// Releases `lease` from a spawned task (a guard was dropped). Without a runtime the
    /// lease simply runs out at its ttl.
    pub(crate) fn release_in_background(self: &Arc<Self>, lease: Lease) {
        let shared = Arc::clone(self);
        let key = lease.key.clone();
        let spawned = self.watchdog.spawn(async move {
            match shared.release_lease(&lease).await {
                Ok(outcome) => {
                    tracing::debug!(key = %lease.key, ?outcome, "dlock: released on drop");
                }
                Err(error) => tracing::warn!(
                    key = %lease.key,
                    %error,
                    "dlock: release on drop failed; the lease will expire at its ttl"
                ),
            }
        });
        if !spawned {
            tracing::debug!(%key, "dlock: guard dropped with no runtime known; the lease will expire at its ttl");
        }
    }
}
