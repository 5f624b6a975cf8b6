//! The backend contract: the few atomic primitives a lock service must provide, the values
//! that cross it, and the built-in backends. What an implementor (or a user who builds a
//! [`Locker`](crate::Locker) from a backend value) needs is here; the crate root holds the
//! user's API.
//!
//! Everything else — wait deadlines as the user states them, the watchdog, reentrancy, guards,
//! tracing — lives once in the core ([`Locker`](crate::Locker)).

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::sync::broadcast;

use crate::{Kept, LockMode, Result};

pub(crate) mod background;
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
mod cleanup;
#[cfg(feature = "etcd")]
pub(crate) mod etcd;
#[cfg(any(feature = "etcd", feature = "zookeeper", feature = "postgres"))]
mod grant_claim;
mod host_list;
#[cfg(feature = "memory")]
pub(crate) mod memory;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
#[cfg(feature = "redis")]
pub(crate) mod redis;
#[cfg(feature = "redlock")]
pub(crate) mod redlock;
#[cfg(any(feature = "etcd", feature = "zookeeper", feature = "postgres"))]
mod session_end;
#[cfg(any(feature = "etcd", feature = "zookeeper", feature = "postgres"))]
mod sessions;
#[cfg(any(
    feature = "redis",
    feature = "etcd",
    feature = "zookeeper",
    feature = "postgres"
))]
pub(crate) mod tls_files;
mod url;
pub(crate) mod url_text;
#[cfg(any(feature = "memory", feature = "redis"))]
mod waiters;
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
mod watched_key;
#[cfg(feature = "zookeeper")]
pub(crate) mod zookeeper;

pub use crate::key::{MAX_KEY_LEN, validate_key};
pub use crate::lease::{
    AcquireAllOutcome, AcquireOutcome, AcquireRequest, Lease, LostLease, OwnerId, ReleaseOutcome,
    RenewOutcome,
};
pub use crate::mode::LockKind;
#[cfg(feature = "etcd")]
pub use etcd::EtcdBackend;
#[cfg(feature = "memory")]
pub use memory::MemoryBackend;
#[cfg(feature = "postgres")]
pub use postgres::PostgresBackend;
#[cfg(feature = "redis")]
pub use redis::RedisBackend;
#[cfg(feature = "redlock")]
pub use redlock::RedLockBackend;
pub(crate) use url::connect;
pub use url::{BackendKind, BackendUrl};
#[cfg(feature = "zookeeper")]
pub use zookeeper::ZooKeeperBackend;

/// A lock service, seen through the operations dlock needs from it.
///
/// # Contract
///
/// Implementations must uphold, for every key:
///
/// * **Mutual exclusion.** While a lease is valid (its ttl, counted from
///   [`Lease::valid_from`], has not run out and it was not released) no
///   [`acquire`](Self::acquire) for the key returns [`AcquireOutcome::Acquired`] in a mode that
///   conflicts with it: an exclusive grant conflicts with every other grant, a shared grant
///   with exclusive ones, and a semaphore never has more than its limit of permits out.
/// * **Modes.** Only the modes [`Capabilities::supports`] claims are asked for (the core checks
///   before calling). Read-write locks are first come, first served: a shared request that
///   arrives while an exclusive one waits queues behind it. A semaphore stores its limit while
///   it has holders or waiters; a permit request naming another limit fails with
///   [`Error::PermitLimitMismatch`](crate::Error::PermitLimitMismatch). Each reader and each
///   permit is its own grant: its own owner, lease, renewal and release.
/// * **Waiting.** `acquire` waits in the backend's native way until the lock is granted or
///   `deadline` passes — try-and-notify (Redis, memory), enqueue-and-watch-the-predecessor
///   (etcd, ZooKeeper) or block-on-the-server (PostgreSQL) — never by polling at a fixed
///   interval where the service can notify. `deadline = None` waits without limit; a deadline
///   already in the past means **exactly one attempt**. At the deadline it returns
///   [`AcquireOutcome::Busy`].
/// * **Cancel safety.** Dropping an `acquire` future leaves nothing behind: no queued waiter, no
///   orphaned key that is not bounded by the request's ttl.
/// * **Fencing.** When [`Capabilities::fencing`] is not [`Fencing::None`], every grant whose
///   request asks for one ([`AcquireRequest::fencing`]) carries a token strictly greater than
///   every earlier grant's token for the same key. A backend may issue tokens unasked (when
///   they cost nothing); it must never fail a request for lack of one.
/// * **Owner checks.** [`renew`](Self::renew) and [`release`](Self::release) act only if the key
///   is still held by [`Lease::owner`]; otherwise they change nothing and say so.
/// * **Idempotent release.** Releasing the same lease twice is harmless: the second call returns
///   [`ReleaseOutcome::NotHeld`].
/// * **Timeouts.** No operation hangs on an unreachable server: each network round trip is
///   bounded by the configured operation timeout, giving [`Error::Timeout`](crate::Error::Timeout)
///   or [`Error::Unavailable`](crate::Error::Unavailable).
///
/// The trait is object-safe: a [`Locker`](crate::Locker) holds an `Arc<dyn LockBackend>`.
///
/// # Examples
///
/// Using a backend directly (normally the [`Locker`](crate::Locker) does this):
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
/// use std::time::{Duration, Instant};
/// use dlock_core::backend::{AcquireOutcome, AcquireRequest, LockBackend, MemoryBackend, OwnerId, ReleaseOutcome};
///
/// let backend = MemoryBackend::new();
/// let req = AcquireRequest::new("job", OwnerId::random("doc"), Duration::from_secs(5));
/// let AcquireOutcome::Acquired(lease) = backend.acquire(&req, Some(Instant::now())).await? else {
///     panic!("free lock not granted");
/// };
/// assert_eq!(backend.release(&lease).await?, ReleaseOutcome::Released);
/// assert_eq!(backend.release(&lease).await?, ReleaseOutcome::NotHeld);
/// # Ok(()) }
/// ```
#[async_trait]
pub trait LockBackend: Send + Sync + std::fmt::Debug + 'static {
    /// Acquires `req.key` for `req.owner`, waiting natively until `deadline`.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`](crate::Error::Unavailable) or
    /// [`Error::Timeout`](crate::Error::Timeout) when the service cannot be reached;
    /// [`Error::Refused`](crate::Error::Refused) when it answers with an error (e.g. the key
    /// holds a value of the wrong type). Busy is not an error here: it is
    /// [`AcquireOutcome::Busy`].
    async fn acquire(
        &self,
        req: &AcquireRequest,
        deadline: Option<Instant>,
    ) -> Result<AcquireOutcome>;

    /// Takes every request of `requests` in one step if every key is free for it, else
    /// none: one attempt, no waiting, cancel-safe as [`acquire`](Self::acquire). A lock set
    /// ([`Locker::lock_all`](crate::Locker::lock_all)) asks this first when
    /// [`Capabilities::together`] is set, with two or more requests sorted by key, keys
    /// distinct; when the set is busy, it takes the keys one at a time in that order.
    /// `Ok(None)` when this backend cannot take *this* set in one step (keys on different
    /// nodes or slots, a mode it does not take together): the core then takes it key by key.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire). `Ok(None)` by default.
    async fn acquire_together(
        &self,
        requests: &[AcquireRequest],
    ) -> Result<Option<AcquireAllOutcome>> {
        let _ = requests;
        Ok(None)
    }

    /// Owner-checked renewal of many leases, in as few round trips as the service allows
    /// (at most [`Capabilities::max_renew_batch`] are passed at once). Returns one outcome per
    /// lease, in order. A renewal extends the lease to `ttl` from the moment the request was
    /// sent; the core records that moment before calling.
    ///
    /// # Errors
    ///
    /// An error fails the whole batch; per-lease failures are [`RenewOutcome::Failed`].
    async fn renew(&self, leases: &[Lease]) -> Result<Vec<RenewOutcome>>;

    /// Owner-checked, idempotent release.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`](crate::Error::Unavailable) / [`Error::Timeout`](crate::Error::Timeout) when the
    /// service cannot be reached; the lease then runs out at its ttl.
    async fn release(&self, lease: &Lease) -> Result<ReleaseOutcome>;

    /// Owner-checked, idempotent release of several leases in one step, where the service
    /// allows: one outcome per lease, in order. A lock set's release asks this first when
    /// [`Capabilities::together`] is set, with two or more leases none of which is kept.
    /// `Ok(None)`, having changed nothing, when this backend cannot release *these* leases
    /// together: the core then releases them one by one.
    ///
    /// # Errors
    ///
    /// As [`release`](Self::release). `Ok(None)` by default.
    async fn release_together(&self, leases: &[Lease]) -> Result<Option<Vec<ReleaseOutcome>>> {
        let _ = leases;
        Ok(None)
    }

    /// Owner-checked release of an exclusive grant that leaves its key held for `keep` more,
    /// **by the server's clock**, as `kept` says: a record no process renews or releases, which
    /// outlives this client's session or process. Until it expires every acquire of the key
    /// answers [`AcquireOutcome::Busy`] (waiters are admitted within the server's expiry lag
    /// after), [`inspect`](Self::inspect) shows it as a holder with
    /// [`HolderInfo::kept`](crate::HolderInfo::kept) set, and
    /// [`force_release`](Self::force_release) removes it. [`ReleaseOutcome::NotHeld`], and
    /// nothing changed, when `lease.owner` does not hold the key (so a late call of an earlier
    /// holder cannot shorten a newer record). Only called when
    /// [`Capabilities::keeps`] is set, for [`LockMode::Exclusive`] leases.
    ///
    /// # Errors
    ///
    /// As [`release`](Self::release);
    /// [`Error::Unsupported`](crate::Error::Unsupported) by default.
    async fn release_keeping(
        &self,
        lease: &Lease,
        keep: Duration,
        kept: Kept,
    ) -> Result<ReleaseOutcome> {
        let _ = (lease, keep, kept);
        Err(crate::Error::Unsupported {
            backend: self.capabilities().name,
            operation: "release_keeping",
        })
    }

    /// Administrative break of a lock, whoever holds it (Redisson's `forceUnlock`). Returns
    /// whether a holder was removed. The holder finds out at its next renewal.
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`](crate::Error::Unsupported) by default.
    async fn force_release(&self, key: &str) -> Result<bool> {
        let _ = key;
        Err(crate::Error::Unsupported {
            backend: self.capabilities().name,
            operation: "force_release",
        })
    }

    /// Who holds the lock of full key `key` (every grant: owner, mode, fencing token, time
    /// left) and, where the service queues them, who waits — read in one consistent view
    /// where the service allows. For operators: [`LockInfo`](crate::LockInfo).
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`](crate::Error::Unsupported) by default.
    async fn inspect(&self, key: &str) -> Result<crate::LockInfo> {
        let _ = key;
        Err(crate::Error::Unsupported {
            backend: self.capabilities().name,
            operation: "inspect",
        })
    }

    /// Makes `lease`'s grant show `value` from now on (an election's leader proclaiming a new
    /// value), checked on the server against the grant: `Ok(false)`, nothing changed, when
    /// `lease.owner` no longer holds the key. Only called when [`Capabilities::election`] is
    /// set, for leases asked with a [`value`](AcquireRequest::value).
    ///
    /// # Errors
    ///
    /// The service's errors, as for [`renew`](Self::renew);
    /// [`Error::Unsupported`](crate::Error::Unsupported) by default.
    async fn proclaim(&self, lease: &Lease, value: &str) -> Result<bool> {
        let _ = (lease, value);
        Err(crate::Error::Unsupported {
            backend: self.capabilities().name,
            operation: "leader election",
        })
    }

    /// A stream that yields each time the holders of full key `key` may have changed (a
    /// grant, a release, an expiry, a new value), from the moment this returns, so an
    /// [`inspect`](Self::inspect) after it misses no change: the core's
    /// [`Locker::observe`](crate::Locker::observe) reads `inspect` once, then again after
    /// each item. It may yield when nothing changed, never stays silent over a change it can
    /// see; an item that is an error, or the stream's end, says it can no longer tell (the
    /// core then subscribes again). Only called when [`Capabilities::election`] is set.
    ///
    /// # Errors
    ///
    /// The service's errors when the subscription cannot be made;
    /// [`Error::Unsupported`](crate::Error::Unsupported) by default.
    async fn holder_changes(&self, key: &str) -> Result<HolderChanges> {
        let _ = key;
        Err(crate::Error::Unsupported {
            backend: self.capabilities().name,
            operation: "leader election",
        })
    }

    /// Losses the backend learned by itself (an etcd keepalive failed, a ZooKeeper session
    /// expired, a PostgreSQL connection dropped), for prompt notification. The core subscribes
    /// when a Locker is built. Pushing is an optimisation: a loss must also show at the next
    /// [`renew`](Self::renew) as [`RenewOutcome::NotOwner`]. `None` when the backend never
    /// pushes losses.
    fn lost_leases(&self) -> Option<broadcast::Receiver<LostLease>> {
        None
    }

    /// Ends this client's state on the server, for a [`Locker`](crate::Locker) that is shut
    /// down: sessions closed, leases revoked (with every key on them: queued waiters too),
    /// waiter marks withdrawn, and the backend's own background deletes awaited. Called once,
    /// after the core released every held lease; the core bounds it by the operation timeout.
    /// A backend must also do this, in the background, when it is dropped. A backend shared
    /// by several Lockers (through an `Arc`) is ended for all of them.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`](crate::Error::Unavailable) /
    /// [`Error::Timeout`](crate::Error::Timeout) when the service could not be told; what is
    /// left then ends at its ttl or session timeout. `Ok(())` by default (nothing to end).
    async fn shutdown(&self) -> Result<()> {
        Ok(())
    }

    /// What this backend can do.
    fn capabilities(&self) -> Capabilities;
}

#[async_trait]
impl<T: LockBackend + ?Sized> LockBackend for Arc<T> {
    async fn acquire(
        &self,
        req: &AcquireRequest,
        deadline: Option<Instant>,
    ) -> Result<AcquireOutcome> {
        (**self).acquire(req, deadline).await
    }
    async fn acquire_together(
        &self,
        requests: &[AcquireRequest],
    ) -> Result<Option<AcquireAllOutcome>> {
        (**self).acquire_together(requests).await
    }
    async fn renew(&self, leases: &[Lease]) -> Result<Vec<RenewOutcome>> {
        (**self).renew(leases).await
    }
    async fn release(&self, lease: &Lease) -> Result<ReleaseOutcome> {
        (**self).release(lease).await
    }
    async fn release_together(&self, leases: &[Lease]) -> Result<Option<Vec<ReleaseOutcome>>> {
        (**self).release_together(leases).await
    }
    async fn release_keeping(
        &self,
        lease: &Lease,
        keep: Duration,
        kept: Kept,
    ) -> Result<ReleaseOutcome> {
        (**self).release_keeping(lease, keep, kept).await
    }
    async fn force_release(&self, key: &str) -> Result<bool> {
        (**self).force_release(key).await
    }
    async fn inspect(&self, key: &str) -> Result<crate::LockInfo> {
        (**self).inspect(key).await
    }
    async fn proclaim(&self, lease: &Lease, value: &str) -> Result<bool> {
        (**self).proclaim(lease, value).await
    }
    async fn holder_changes(&self, key: &str) -> Result<HolderChanges> {
        (**self).holder_changes(key).await
    }
    fn lost_leases(&self) -> Option<broadcast::Receiver<LostLease>> {
        (**self).lost_leases()
    }
    async fn shutdown(&self) -> Result<()> {
        (**self).shutdown().await
    }
    fn capabilities(&self) -> Capabilities {
        (**self).capabilities()
    }
}

/// What [`LockBackend::holder_changes`] returns: one item each time the holders of a key may
/// have changed.
pub type HolderChanges = std::pin::Pin<Box<dyn futures_util::Stream<Item = Result<()>> + Send>>;

/// What kind of fencing token a backend issues.
///
/// # Examples
///
/// ```
/// use dlock_core::Locker;
/// use dlock_core::backend::Fencing;
/// assert_eq!(Locker::memory().capabilities().fencing, Fencing::Volatile);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fencing {
    /// No tokens ([`LockGuard::fencing_token`](crate::LockGuard::fencing_token) is `None`), e.g. RedLock.
    None,
    /// Strictly increasing while the service keeps its state (memory; Redis without
    /// `appendfsync always`): a restart may reuse tokens.
    Volatile,
    /// Strictly increasing across restarts and failover (etcd revision, ZooKeeper `czxid`).
    Durable,
}

/// What a backend can do; the core and the conformance suite adapt to it.
///
/// # Examples
///
/// ```
/// use dlock_core::backend::{Capabilities, Fencing};
/// let caps = Capabilities::new("memory").fair(true).fencing(Fencing::Volatile);
/// assert!(caps.fair);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// The backend's name, used in errors and tracing.
    pub name: &'static str,
    /// Waiters are granted the lock in arrival order.
    pub fair: bool,
    /// The kind of fencing token issued.
    pub fencing: Fencing,
    /// Leases stay alive by the backend's own means (an etcd keepalive, a ZooKeeper
    /// session). The core still calls [`LockBackend::renew`] every cadence; the backend answers
    /// from what it knows — at most a cheap batched check that the lock keys still exist, never
    /// a keepalive per lock — with `valid_from` set to its last successful keepalive's send
    /// time. The core releases a lease whose local deadline passed (`.watchdog(false)`, or
    /// keepalives failing) once its full ttl has run, since the server would not expire it on
    /// its own while the session lives.
    pub self_renewing: bool,
    /// The most leases [`LockBackend::renew`] accepts in one call.
    pub max_renew_batch: usize,
    /// Read-write locks: [`LockMode::Shared`] grants next to each other, queued fairly with
    /// [`LockMode::Exclusive`] ones (a reader that arrives after a waiting writer queues
    /// behind it).
    pub read_write: bool,
    /// Semaphores: [`LockMode::Permit`] grants, at most `limit` at once per key, the limit
    /// stored with the semaphore and checked on every acquire.
    pub semaphore: bool,
    /// [`LockBackend::release_keeping`]: a released exclusive lock can stay held on the
    /// server for a while (hold-at-least, a job's done record), by the server's clock.
    pub keeps: bool,
    /// [`LockBackend::acquire_together`] and [`LockBackend::release_together`]: a set of keys
    /// can be taken in one step (all or none) and released in one, for some sets at least.
    pub together: bool,
    /// Leader election ([`Locker::campaign`](crate::Locker::campaign)): exclusive grants carry
    /// a [`value`](AcquireRequest::value) that [`LockBackend::inspect`] shows (as the holder's
    /// `value`, or as its `owner` where the grant stores nothing else) and
    /// [`LockBackend::proclaim`] changes, and [`LockBackend::holder_changes`] tells when the
    /// holder may have changed. Needs fencing tokens (the term).
    pub election: bool,
}

impl Capabilities {
    /// Capabilities of a backend called `name`: unfair, no fencing, not self-renewing, one
    /// lease per renewal call. Adjust with the builder methods.
    #[must_use]
    pub const fn new(name: &'static str) -> Self {
        Self {
            name,
            fair: false,
            fencing: Fencing::None,
            self_renewing: false,
            max_renew_batch: 1,
            read_write: false,
            semaphore: false,
            keeps: false,
            together: false,
            election: false,
        }
    }

    /// Whether a lock can be taken in `mode` here (every backend takes exclusive locks).
    ///
    /// # Examples
    ///
    /// ```
    /// use dlock_core::LockMode;
    /// use dlock_core::backend::Capabilities;
    /// let caps = Capabilities::new("example").read_write(true);
    /// assert!(caps.supports(LockMode::Shared));
    /// assert!(!caps.supports(LockMode::Permit { limit: 2 }));
    /// ```
    #[must_use]
    pub const fn supports(&self, mode: LockMode) -> bool {
        match mode {
            LockMode::Exclusive => true,
            LockMode::Shared => self.read_write,
            LockMode::Permit { .. } => self.semaphore,
        }
    }

    /// Sets [`Capabilities::read_write`].
    #[must_use]
    pub const fn read_write(mut self, supported: bool) -> Self {
        self.read_write = supported;
        self
    }

    /// Sets [`Capabilities::semaphore`].
    #[must_use]
    pub const fn semaphore(mut self, supported: bool) -> Self {
        self.semaphore = supported;
        self
    }

    /// Whether a released lock in `mode` can be kept held here, for `operation` (named in
    /// the error).
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`](crate::Error::Unsupported) when this backend cannot keep a
    /// lock, or `mode` is not exclusive.
    pub(crate) const fn check_keeps(&self, mode: LockMode, operation: &'static str) -> Result<()> {
        if !self.keeps {
            return Err(crate::Error::Unsupported {
                backend: self.name,
                operation,
            });
        }
        if !matches!(mode, LockMode::Exclusive) {
            return Err(crate::Error::Unsupported {
                backend: self.name,
                operation: "keeping a shared lock or a permit held after its release",
            });
        }
        Ok(())
    }

    /// Sets [`Capabilities::together`].
    ///
    /// # Examples
    ///
    /// ```
    /// let caps = dlock_core::backend::Capabilities::new("example").together(true);
    /// assert!(caps.together);
    /// ```
    #[must_use]
    pub const fn together(mut self, together: bool) -> Self {
        self.together = together;
        self
    }

    /// Sets [`Capabilities::election`].
    ///
    /// # Examples
    ///
    /// ```
    /// use dlock_core::backend::{Capabilities, Fencing};
    /// let caps = Capabilities::new("example").fencing(Fencing::Durable).election(true);
    /// assert!(caps.election);
    /// ```
    #[must_use]
    pub const fn election(mut self, election: bool) -> Self {
        self.election = election;
        self
    }

    /// Sets [`Capabilities::keeps`].
    #[must_use]
    pub const fn keeps(mut self, keeps: bool) -> Self {
        self.keeps = keeps;
        self
    }

    /// Sets [`Capabilities::fair`].
    #[must_use]
    pub const fn fair(mut self, fair: bool) -> Self {
        self.fair = fair;
        self
    }

    /// Sets [`Capabilities::fencing`].
    #[must_use]
    pub const fn fencing(mut self, fencing: Fencing) -> Self {
        self.fencing = fencing;
        self
    }

    /// Sets [`Capabilities::self_renewing`].
    #[must_use]
    pub const fn self_renewing(mut self, self_renewing: bool) -> Self {
        self.self_renewing = self_renewing;
        self
    }

    /// Sets [`Capabilities::max_renew_batch`] (at least 1).
    #[must_use]
    pub const fn max_renew_batch(mut self, max: usize) -> Self {
        self.max_renew_batch = if max == 0 { 1 } else { max };
        self
    }
}
