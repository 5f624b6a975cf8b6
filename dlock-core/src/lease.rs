//! The values that cross the backend contract: requests, leases and outcomes.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::LostReason;
use crate::mode::{LockKind, LockMode};

/// A unique identity for one grant of a lock. A [`Locker`](crate::Locker) makes its own:
/// its id (128 random bits, drawn once) and the number of the grant, counted up per Locker.
///
/// Backends store it as the lock's value and compare it on renew and release, so only the
/// grant that set it can extend or free the lock. It is never a timestamp or a thread id.
///
/// # Examples
///
/// ```
/// use dlock_core::backend::OwnerId;
/// let a = OwnerId::random("locker-1");
/// let b = OwnerId::random("locker-1");
/// assert_ne!(a, b);
/// assert!(a.as_str().starts_with("locker-1:"));
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct OwnerId(Arc<str>);

impl OwnerId {
    /// A fresh owner id: `<scope>:<32 hex digits of randomness>`.
    #[must_use]
    pub fn random(scope: &str) -> Self {
        let bits: u128 = rand::random();
        Self(format!("{scope}:{bits:032x}").into())
    }

    /// `<scope>:<n in hex>`: a Locker's owner ids, its random id as the scope.
    pub(crate) fn numbered(scope: &str, n: u64) -> Self {
        Self(format!("{scope}:{n:x}").into())
    }

    /// Wraps an id received from elsewhere (e.g. read back from a server).
    #[must_use]
    pub fn from_string(id: impl Into<Arc<str>>) -> Self {
        Self(id.into())
    }

    /// The id as stored by backends.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OwnerId({})", self.0)
    }
}

impl fmt::Display for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The safety margin subtracted from every lease: clocks on two machines may run at slightly
/// different rates (RedLock's analysis uses 1 % of the ttl plus 2 ms).
#[must_use]
pub(crate) fn drift_margin(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// What the core asks a backend to grant.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use dlock_core::backend::{AcquireRequest, OwnerId};
/// let req = AcquireRequest::new("dlock:order:42", OwnerId::random("doc"), Duration::from_secs(10));
/// assert_eq!(&*req.key, "dlock:order:42");
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AcquireRequest {
    /// The full key (the Locker's prefix included), already validated. Shared, not copied,
    /// by the leases granted for it.
    pub key: Arc<str>,
    /// The identity this grant will carry.
    pub owner: OwnerId,
    /// The lease length: how long a crashed holder keeps the lock.
    pub ttl: Duration,
    /// Whether the grant must carry a fencing token. A backend whose tokens cost extra work
    /// (Redis: an `INCR` per grant and a counter key per lock name) issues one only when
    /// asked; one whose tokens come free (memory, etcd) always does. `true` unless set
    /// otherwise with [`with_fencing`](Self::with_fencing).
    pub fencing: bool,
    /// How the key is to be held. The core asks only for modes the backend's
    /// [`Capabilities`](crate::backend::Capabilities) claim.
    pub mode: LockMode,
    /// The recipe the grant belongs to: a mutex, a read-write lock (either side) or a
    /// semaphore. Every backend makes a mutex and a writer exclude each other; one whose peers
    /// lay the recipes out differently matches on it (ZooKeeper: Curator's `lock-`,
    /// `__READ__`/`__WRIT__` and `lease-` nodes). [`LockKind::of`] the mode unless set with
    /// [`with_kind`](Self::with_kind).
    pub kind: LockKind,
    /// What the grant shows others as its holder's value, where it is a candidate's in an
    /// election ([`Locker::campaign`](crate::Locker::campaign)): the etcd key's value, the
    /// ZooKeeper node's data. `None` for a lock. The core sets it only on a backend whose
    /// [`Capabilities::election`](crate::backend::Capabilities::election) is set.
    pub value: Option<Arc<str>>,
}

impl AcquireRequest {
    /// A request for `key` by `owner` with lease length `ttl`, asking for a fencing token.
    #[must_use]
    pub fn new(key: impl Into<Arc<str>>, owner: OwnerId, ttl: Duration) -> Self {
        Self {
            key: key.into(),
            owner,
            ttl,
            fencing: true,
            mode: LockMode::Exclusive,
            kind: LockKind::Mutex,
            value: None,
        }
    }

    /// Sets [`value`](Self::value): what the grant shows others as its holder's value.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use dlock_core::backend::{AcquireRequest, OwnerId};
    /// let req = AcquireRequest::new("k", OwnerId::random("doc"), Duration::from_secs(1))
    ///     .with_value(Some("node-a".into()));
    /// assert_eq!(req.value.as_deref(), Some("node-a"));
    /// ```
    #[must_use]
    pub fn with_value(mut self, value: Option<Arc<str>>) -> Self {
        self.value = value;
        self
    }

    /// Sets [`mode`](Self::mode) (exclusive unless set), and the [`kind`](Self::kind) that
    /// mode belongs to ([`LockKind::of`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use dlock_core::LockMode;
    /// use dlock_core::backend::{AcquireRequest, OwnerId};
    /// let req = AcquireRequest::new("k", OwnerId::random("doc"), Duration::from_secs(1))
    ///     .with_mode(LockMode::Shared);
    /// assert_eq!(req.mode, LockMode::Shared);
    /// ```
    #[must_use]
    pub const fn with_mode(mut self, mode: LockMode) -> Self {
        self.mode = mode;
        self.kind = LockKind::of(mode);
        self
    }

    /// Sets [`kind`](Self::kind): the recipe the grant belongs to (after
    /// [`with_mode`](Self::with_mode), which sets the mode's own kind).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use dlock_core::backend::{AcquireRequest, LockKind, OwnerId};
    /// // The write side of a read-write lock:
    /// let req = AcquireRequest::new("k", OwnerId::random("doc"), Duration::from_secs(1))
    ///     .with_kind(LockKind::ReadWrite);
    /// assert_eq!(req.kind, LockKind::ReadWrite);
    /// ```
    #[must_use]
    pub const fn with_kind(mut self, kind: LockKind) -> Self {
        self.kind = kind;
        self
    }

    /// Sets [`fencing`](Self::fencing): whether the grant must carry a fencing token.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use dlock_core::backend::{AcquireRequest, OwnerId};
    /// let req = AcquireRequest::new("k", OwnerId::random("doc"), Duration::from_secs(1))
    ///     .with_fencing(false);
    /// assert!(!req.fencing);
    /// ```
    #[must_use]
    pub const fn with_fencing(mut self, fencing: bool) -> Self {
        self.fencing = fencing;
        self
    }
}

/// A granted lock, as a backend reports it.
///
/// `valid_from` is the backend's conservative lower bound for when the lease's ttl started
/// counting: the local [`Instant`] at which the request that granted (or last extended) it was
/// **sent**, never when the reply arrived. The core derives the local deadline from it.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, Instant};
/// use dlock_core::backend::{AcquireRequest, Lease, OwnerId};
/// let req = AcquireRequest::new("k", OwnerId::random("doc"), Duration::from_secs(1));
/// let lease = Lease::new(&req, Instant::now()).with_fencing_token(7);
/// assert_eq!(lease.fencing_token, Some(7));
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct Lease {
    /// The full key.
    pub key: Arc<str>,
    /// The identity of this grant.
    pub owner: OwnerId,
    /// The lease length.
    pub ttl: Duration,
    /// The mode it was granted in (the request's).
    pub mode: LockMode,
    /// Strictly increasing per key across grants, when the backend has one.
    pub fencing_token: Option<u64>,
    /// Send time of the request that started the current lease period.
    pub valid_from: Instant,
    /// Backend-private data for this grant (an etcd lease id, a ZooKeeper node path, a
    /// PostgreSQL connection). The core never looks inside.
    pub extension: Option<Arc<dyn Any + Send + Sync>>,
}

impl Lease {
    /// A lease for `req`, valid from `valid_from`, without fencing token or extension.
    #[must_use]
    pub fn new(req: &AcquireRequest, valid_from: Instant) -> Self {
        Self {
            key: req.key.clone(),
            owner: req.owner.clone(),
            ttl: req.ttl,
            mode: req.mode,
            fencing_token: None,
            valid_from,
            extension: None,
        }
    }

    /// Sets the fencing token.
    #[must_use]
    pub const fn with_fencing_token(mut self, token: u64) -> Self {
        self.fencing_token = Some(token);
        self
    }

    /// Attaches backend-private data.
    #[must_use]
    pub fn with_extension(mut self, extension: Arc<dyn Any + Send + Sync>) -> Self {
        self.extension = Some(extension);
        self
    }

    /// The backend-private data, if it is a `T`.
    #[must_use]
    pub fn extension<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.extension.as_deref()?.downcast_ref()
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("key", &self.key)
            .field("owner", &self.owner)
            .field("ttl", &self.ttl)
            .field("mode", &self.mode)
            .field("fencing_token", &self.fencing_token)
            .field("valid_from", &self.valid_from)
            .field("extension", &self.extension.is_some())
            .finish()
    }
}

/// The result of an acquire that ran until its deadline.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
/// use std::time::{Duration, Instant};
/// use dlock_core::backend::{AcquireOutcome, AcquireRequest, LockBackend, MemoryBackend, OwnerId};
/// let backend = MemoryBackend::new();
/// let req = |who| AcquireRequest::new("k", OwnerId::random(who), Duration::from_secs(5));
/// let first = backend.acquire(&req("a"), Some(Instant::now())).await?;
/// assert!(matches!(first, AcquireOutcome::Acquired(_)));
/// let second = backend.acquire(&req("b"), Some(Instant::now())).await?;
/// assert!(matches!(second, AcquireOutcome::Busy { retry_after: Some(_) }));
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum AcquireOutcome {
    /// The lock is ours.
    Acquired(Lease),
    /// Someone else held it until the deadline.
    Busy {
        /// The holder's remaining lease, if the backend knows it.
        retry_after: Option<Duration>,
    },
}

/// The result of [`LockBackend::acquire_together`](crate::backend::LockBackend::acquire_together):
/// every key of the set taken in one step, or none.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
/// use std::time::Duration;
/// use dlock_core::backend::{AcquireAllOutcome, AcquireRequest, LockBackend, MemoryBackend, OwnerId};
/// let backend = MemoryBackend::new();
/// let set = [
///     AcquireRequest::new("a", OwnerId::random("doc"), Duration::from_secs(5)),
///     AcquireRequest::new("b", OwnerId::random("doc"), Duration::from_secs(5)),
/// ];
/// let Some(AcquireAllOutcome::Acquired(leases)) = backend.acquire_together(&set).await? else {
///     panic!("two free keys not taken together");
/// };
/// assert_eq!(leases.len(), 2);
/// let again = backend.acquire_together(&set).await?;
/// assert!(matches!(again, Some(AcquireAllOutcome::Busy { index: 0, .. })));
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum AcquireAllOutcome {
    /// Every key is ours: one lease per request, in the requests' order.
    Acquired(Vec<Lease>),
    /// The request at `index` was busy (the first one found), and nothing was taken.
    Busy {
        /// Which request found its key busy.
        index: usize,
        /// Its holder's remaining lease, if the backend knows it.
        retry_after: Option<Duration>,
    },
}

/// The result of renewing one lease.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
/// use std::time::{Duration, Instant};
/// use dlock_core::backend::{AcquireOutcome, AcquireRequest, LockBackend, MemoryBackend, OwnerId, RenewOutcome};
/// let backend = MemoryBackend::new();
/// let req = AcquireRequest::new("k", OwnerId::random("a"), Duration::from_secs(5));
/// let AcquireOutcome::Acquired(lease) = backend.acquire(&req, None).await? else { unreachable!() };
/// let outcomes = backend.renew(&[lease]).await?;
/// assert!(matches!(outcomes[..], [RenewOutcome::Renewed { .. }]));
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum RenewOutcome {
    /// Extended: the lease now runs its ttl from `valid_from`.
    Renewed {
        /// When the request that extended the lease was **sent** (for a backend that keeps
        /// leases alive itself: its last successful keepalive's send time). The core's local
        /// deadline becomes `valid_from + ttl - drift`.
        valid_from: Instant,
    },
    /// The key is gone or held by another owner: the lease is lost for good.
    NotOwner,
    /// This lease could not be renewed this time (the core retries until the local deadline).
    Failed(crate::Error),
}

/// The result of an owner-checked release.
///
/// # Examples
///
/// See [`LockBackend`](crate::backend::LockBackend).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReleaseOutcome {
    /// The lock was held by this owner and is now free.
    Released,
    /// The lock was not held by this owner (already released, expired, or taken by another).
    /// Nothing was changed.
    NotHeld,
}

/// A loss a backend learned by itself, pushed to the core.
///
/// # Examples
///
/// ```
/// use dlock_core::LostReason;
/// use dlock_core::backend::{LostLease, OwnerId};
/// let loss = LostLease { owner: OwnerId::random("x"), reason: LostReason::SessionLost("session expired".into()) };
/// assert!(loss.reason.to_string().contains("session expired"));
/// ```
#[derive(Debug, Clone)]
pub struct LostLease {
    /// The grant that is lost.
    pub owner: OwnerId,
    /// Why.
    pub reason: LostReason,
}

#[cfg(test)]
mod tests {
    use super::OwnerId;

    #[test]
    fn numbered_owner_ids_are_the_scope_and_the_number_in_hex() {
        for (n, hex) in [
            (0, "0"),
            (1, "1"),
            (15, "f"),
            (16, "10"),
            (0xdead_beef, "deadbeef"),
            (u64::MAX, "ffffffffffffffff"),
        ] {
            assert_eq!(
                OwnerId::numbered("scope", n).as_str(),
                format!("scope:{hex}")
            );
        }
    }
}
