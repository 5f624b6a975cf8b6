//! [`Locker`]: the handle applications lock through.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use crate::backend::{Capabilities, LockBackend};
use crate::config::DlockConfig;
use crate::lock_set::{LockSetRequest, SetMember};
use crate::mode::LockKind;
use crate::request::LockRequest;
use crate::state::LockerState;
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
    state: Arc<LockerState>,
}

impl fmt::Debug for Locker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.state.fmt(f)
    }
}

static GLOBAL: RwLock<Option<Locker>> = RwLock::new(None);

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
    /// let config = DlockConfig::default().with_ttl(Duration::from_secs(5));
    /// let locker = Locker::with_config(Arc::new(MemoryBackend::new()), &config).unwrap();
    /// assert_eq!(locker.config().ttl, Duration::from_secs(5));
    /// ```
    pub fn with_config(backend: Arc<dyn LockBackend>, config: &DlockConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self::build(backend, config.clone()))
    }

    fn build(backend: Arc<dyn LockBackend>, config: DlockConfig) -> Self {
        Self {
            state: Arc::new(LockerState::new(backend, config)),
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
    pub async fn connect(config: &DlockConfig) -> Result<Self> {
        let url = config.validated_url()?;
        let backend = crate::backend::connect(&url, config.operation_timeout).await?;
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

    /// The state every clone of this Locker shares, for the recipes built on it.
    pub(crate) const fn state(&self) -> &Arc<LockerState> {
        &self.state
    }

    /// Starts building an acquire of `key`: set `.ttl(..)`, `.wait(..)`, `.watchdog(..)`,
    /// then `.await` it for a [`LockGuard`](crate::LockGuard).
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
        LockRequest::new(&self.state, key, LockMode::Exclusive)
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
        LockRequest::new(&self.state, key, LockMode::Shared)
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
        LockRequest::new(&self.state, key, LockMode::Exclusive).writer()
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
        LockRequest::new(&self.state, key, LockMode::Permit { limit: permits })
    }

    /// Starts building an acquire of `key` in `mode`, chosen at run time: what
    /// [`write_lock`](Self::write_lock) (exclusive), [`read_lock`](Self::read_lock) (shared)
    /// and [`semaphore`](Self::semaphore) (a permit) build. An exclusive lock taken here is the
    /// write side of a read-write lock; it excludes [`lock`](Self::lock)'s mutex like any
    /// writer, and differs from it only where a backend's peers lay the two out differently
    /// (ZooKeeper: Curator's `__WRIT__` and `lock-` nodes).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// use dlock_core::LockMode;
    /// let locker = dlock_core::Locker::memory();
    /// let read_only = true;
    /// let mode = if read_only { LockMode::Shared } else { LockMode::Exclusive };
    /// let guard = locker.lock_as("catalog", mode).await?;
    /// assert_eq!(guard.mode(), LockMode::Shared);
    /// # Ok(()) }
    /// ```
    pub fn lock_as<'a>(&'a self, key: &'a str, mode: LockMode) -> LockRequest<'a> {
        LockRequest::new(&self.state, key, mode).writer()
    }

    /// Starts building an acquire of several keys as one set (two accounts of a transfer,
    /// the items of an order): all of them or none, under **one** wait for the set, held by
    /// one [`LockSetGuard`](crate::LockSetGuard) whose work stops when any member is lost.
    ///
    /// The keys are taken in one canonical order — their full backend keys, sorted, each
    /// once — whatever order the caller names them in, so two sets sharing keys never wait
    /// for each other in a circle. Where the backend can take several keys in one step
    /// ([`Capabilities::together`]), a free set is taken in one round trip. If a key is busy
    /// past the wait, or an acquire fails or is cancelled, the keys already taken are released,
    /// last first: nothing of the set is kept.
    ///
    /// **Keys this task already holds**: a key of the set that this task holds re-enters. A
    /// set that would have to *wait* for a key sorting before one this task already holds
    /// could deadlock (another task may hold the first and wait for the second), so it is
    /// refused at once with [`Error::LockOrder`] naming both keys; take the earlier key
    /// first, or all of them in one set. Permits the task holds are not counted (they are
    /// not re-entered, and not tracked per task): a task holding a permit should not wait for
    /// a set.
    ///
    /// # Errors
    ///
    /// [`Error::Busy`] naming the key still busy when the wait ran out; [`Error::LockOrder`]
    /// as above; [`Error::Config`] for an empty set; every error of [`lock`](Self::lock).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let locker = dlock_core::Locker::memory();
    /// let (from, to) = ("account:bob", "account:alice");
    /// let accounts = locker.lock_all([from, to]).await?; // alice is taken first
    /// accounts.run(async { /* move the money */ }).await?;
    /// accounts.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn lock_all<K: AsRef<str>>(&self, keys: impl IntoIterator<Item = K>) -> LockSetRequest<'_> {
        self.lock_all_as(keys.into_iter().map(|key| (key, LockMode::Exclusive)))
            .mutex()
    }

    /// Like [`lock_all`](Self::lock_all), for the read locks of several read-write locks.
    ///
    /// # Errors
    ///
    /// As [`lock_all`](Self::lock_all); [`Error::Unsupported`] on a backend without
    /// read-write locks.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let locker = dlock_core::Locker::memory();
    /// let prices = locker.read_lock_all(["price:1", "price:2"]).await?;
    /// # drop(prices); Ok(()) }
    /// ```
    pub fn read_lock_all<K: AsRef<str>>(
        &self,
        keys: impl IntoIterator<Item = K>,
    ) -> LockSetRequest<'_> {
        self.lock_all_as(keys.into_iter().map(|key| (key, LockMode::Shared)))
    }

    /// Like [`lock_all`](Self::lock_all), each key in its own mode: the read and write sides
    /// of read-write locks ([`LockMode::Exclusive`] is a key's write lock, as in
    /// [`lock_as`](Self::lock_as)), or permits. A key named twice is held once, in the
    /// stronger mode (a read and a write lock make a write lock).
    ///
    /// # Errors
    ///
    /// As [`lock_all`](Self::lock_all); [`Error::Config`] for a key named both as a permit
    /// and as a lock.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// use dlock_core::LockMode;
    /// let locker = dlock_core::Locker::memory();
    /// // Rebuild the report from two sources that others may read at the same time.
    /// let set = locker
    ///     .lock_all_as([("report:7", LockMode::Exclusive), ("source:a", LockMode::Shared), ("source:b", LockMode::Shared)])
    ///     .await?;
    /// assert_eq!(set.get("source:a").map(|guard| guard.mode()), Some(LockMode::Shared));
    /// # drop(set); Ok(()) }
    /// ```
    pub fn lock_all_as<K: AsRef<str>>(
        &self,
        keys: impl IntoIterator<Item = (K, LockMode)>,
    ) -> LockSetRequest<'_> {
        let members = keys
            .into_iter()
            .map(|(key, mode)| SetMember {
                key: key.as_ref().to_owned(),
                mode,
                kind: match mode {
                    LockMode::Exclusive => LockKind::ReadWrite,
                    other => LockKind::of(other),
                },
            })
            .collect();
        LockSetRequest::new(&self.state, members)
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
    /// is lost, and releases — by the [scope rule](crate::LockGuard::run_and_release) every
    /// wrapper uses: a release that cannot reach the server after `work` finished is traced,
    /// and `work`'s output returned (the lock frees itself at its ttl).
    ///
    /// # Errors
    ///
    /// Any acquire error; [`Error::LeaseLost`] if the lease was lost before `work` finished or
    /// the release found it lost.
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
        guard.run_and_release(work, |_| true).await
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
        self.state.keeper.backend()
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
        self.state.capabilities
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
        &self.state.config
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
        self.state.keeper.watchdog().watched()
    }

    /// Who holds `key`'s lock — each grant's owner, mode, fencing token and time left — and,
    /// where the service queues waiters, who waits: an operator's view
    /// ([`LockInfo`](crate::LockInfo)), **never for check-then-act** (it may have changed by
    /// the time it is read; to act only on a free lock, try to take it).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidKey`] for a bad key; [`Error::Unsupported`] on a backend without it;
    /// [`Error::Timeout`] / [`Error::Unavailable`] when the server does not answer within
    /// the operation timeout.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let locker = dlock_core::Locker::memory();
    /// assert!(locker.inspect("order:42").await?.is_free());
    /// let guard = locker.read_lock("order:42").await?;
    /// let info = locker.inspect("order:42").await?;
    /// assert_eq!(info.holders[0].mode, dlock_core::LockMode::Shared);
    /// assert!(info.holders[0].expires_in.is_some());
    /// # drop(guard);
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self, key: &str) -> Result<crate::LockInfo> {
        self.state.inspect(key).await
    }

    /// Breaks `key`'s lock whoever holds it (Redisson's `forceUnlock`), for an operator
    /// clearing a lock whose holder is stuck: every holder's grant of the key is deleted —
    /// the readers or permits too. A holder learns at its next renewal (within a third of
    /// its ttl): its guard is lost and the wrappers cancel its work. Returns whether there
    /// was anything to delete. Never part of a program's normal locking: the holder may still
    /// be working until it notices.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidKey`] for a bad key; [`Error::Unsupported`] on a backend without it
    /// (PostgreSQL: a session's advisory lock can only be ended by ending the session);
    /// [`Error::Timeout`] / [`Error::Unavailable`] when the server does not answer within
    /// the operation timeout.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let locker = dlock_core::Locker::memory();
    /// let stuck = locker.lock("nightly-report").await?;
    /// assert!(locker.force_release("nightly-report").await?);
    /// assert!(!locker.force_release("nightly-report").await?); // nothing left
    /// let next = locker.try_lock("nightly-report").await?;
    /// # drop((stuck, next));
    /// # Ok(()) }
    /// ```
    pub async fn force_release(&self, key: &str) -> Result<bool> {
        self.state.force_release(key).await
    }

    /// Releases every lock this Locker holds and stops its watchdog, for a graceful
    /// shutdown (call it from the service's signal handler, after it stopped taking work).
    /// Each held guard is lost with [`LostReason::Shutdown`](crate::LostReason::Shutdown) first,
    /// so work still running under [`LockGuard::run`](crate::LockGuard::run), the attribute
    /// or the layer is cancelled before its lock is given up. Acquires after this fail with
    /// [`Error::ShutDown`]; clones of this Locker share its state, so they are shut down too.
    /// Then it ends what this Locker keeps on the server — etcd leases revoked (every key on
    /// them deleted: held locks and queued waiters alike), ZooKeeper sessions and PostgreSQL
    /// connections closed — after the releases it left to the background (dropped guards,
    /// late grants) have finished, each step within the operation timeout: a process that
    /// calls this and exits leaves nothing for the next holder to wait out. (Dropping the
    /// last handle of a Locker does the same, in the background.)
    ///
    /// # Errors
    ///
    /// The first release that failed (each gets the operation timeout; they run at once),
    /// or the service's failure to end the session; every other lock was still released, and
    /// whatever could not be ended expires at its ttl.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let locker = dlock_core::Locker::memory();
    /// let guard = locker.lock("k").await?;
    /// locker.shutdown().await?;
    /// assert_eq!(guard.lost_reason(), Some(dlock_core::LostReason::Shutdown));
    /// assert!(matches!(locker.lock("k").await, Err(dlock_core::Error::ShutDown)));
    /// # Ok(()) }
    /// ```
    pub async fn shutdown(&self) -> Result<()> {
        self.state.shutdown().await
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
        crate::key::full_key(&self.state.config.key_prefix, key).map(|full| full.to_string())
    }
}
