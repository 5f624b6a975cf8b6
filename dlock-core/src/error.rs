//! The one error type of dlock, and its `Result` alias.

use std::fmt;
use std::future::Future;
use std::time::Duration;

/// The end of [`Error::Busy`]'s message when the holder is the caller's own Locker.
const fn busy_holder_hint(by_this_locker: bool) -> &'static str {
    if by_this_locker {
        "; it is held by this Locker, by another task of this process (or by this task \
         without reentrancy): a task that waits for a lock its spawner holds waits forever; \
         pass `guard.hand_off()` to the spawned task (in a #[distributed_lock] fn: \
         `current_lock()` and its `hand_off()`)"
    } else {
        ""
    }
}

/// A boxed error from a backend's client library.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// `Result` with dlock's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong when taking, keeping or releasing a distributed lock.
///
/// The variants name outcomes a caller can act on; match on them (the enum is
/// `#[non_exhaustive]`, so keep a `_` arm).
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use std::time::Duration;
/// use dlock_core::{Error, Locker};
///
/// let locker = Locker::memory();
/// let _held = locker.lock("order:42").await.unwrap();
/// // Another task (the holding task itself would re-enter):
/// let rival = locker.clone();
/// let attempt = tokio::spawn(async move {
///     rival.lock("order:42").wait(Duration::from_millis(10)).await.map(drop)
/// });
/// match attempt.await.unwrap() {
///     Err(error @ Error::Busy { .. }) => {
///         // The holder is this Locker, in another task: the message says how to share it.
///         assert!(error.to_string().contains("held by this Locker"), "{error}");
///     }
///     other => panic!("expected Busy, got {other:?}"),
/// }
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The lock was held by someone else for the whole time the caller was willing to wait.
    #[error("lock `{key}` is busy (gave up after waiting {waited:?}){}", busy_holder_hint(*.by_this_locker))]
    Busy {
        /// The user key (without the Locker's prefix).
        key: String,
        /// How long the caller waited before giving up.
        waited: Duration,
        /// The holder's remaining lease, when the backend knows it (a good `Retry-After`).
        retry_after: Option<Duration>,
        /// The holder is this very Locker: another task of this process (or the same task,
        /// through a non-reentrant acquire). A task waiting for a lock its spawner holds would
        /// wait forever; the message says how to share the hold instead.
        by_this_locker: bool,
    },

    /// The lease was lost while the caller believed it held the lock: a renewal was refused,
    /// the local deadline passed without a successful renewal, or the backend reported the
    /// session gone. Work done under the lock may have overlapped another holder's.
    #[error("lease on lock `{key}` was lost: {reason}")]
    LeaseLost {
        /// The user key.
        key: String,
        /// Why the lease is considered lost.
        reason: LostReason,
    },

    /// The caller tried to release a lock it does not hold (any more).
    #[error("not the holder of lock `{key}`")]
    NotHolder {
        /// The user key.
        key: String,
    },

    /// The current task holds only the read lock of `key` and asked for its write lock. Waiting
    /// would wait for itself (the write lock needs the task's own read lock gone), so the
    /// request fails at once. Release the read lock first, or take the write lock from the
    /// start (a read lock inside a write lock re-enters).
    #[error(
        "this task holds the read lock of `{key}` and asked for its write lock, which would wait \
         for itself: release the read lock first"
    )]
    LockUpgrade {
        /// The user key.
        key: String,
    },

    /// A [lock set](crate::Locker::lock_all) would have to wait for `key` while the current
    /// task holds `held`, which sorts after it: another task taking both in the canonical
    /// order could hold `key` and wait for `held`, and neither would end. The set is refused
    /// at once (only when `key` is busy: a free key is simply taken), and nothing of it is
    /// kept. Take `key` before `held`, or both in one `lock_all`.
    #[error(
        "a lock set would wait for `{key}` while this task holds `{held}`, which sorts after \
         it and could deadlock: take `{key}` first, or both in one `lock_all`"
    )]
    LockOrder {
        /// The busy key of the set (the user key).
        key: String,
        /// The key this task already holds that sorts after it (the user key).
        held: String,
    },

    /// A semaphore is in use with another number of permits than this caller named. Every
    /// caller of one semaphore must name the same limit.
    #[error("semaphore `{key}` has {stored} permits; this caller asked for one of {requested}")]
    PermitLimitMismatch {
        /// The user key (backends report the full key; the Locker gives the caller's).
        key: String,
        /// The limit the semaphore was created with.
        stored: u32,
        /// The limit this caller named.
        requested: u32,
    },

    /// The key is empty, too long, or contains characters no backend can store safely.
    #[error("invalid lock key `{key}`: {reason}")]
    InvalidKey {
        /// The offending key (possibly truncated for display).
        key: String,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// A configuration value is invalid. Names the field and the value.
    #[error("invalid config `{field}` = `{value}`: {reason}")]
    Config {
        /// The config field (or environment variable) at fault.
        field: String,
        /// The value given.
        value: String,
        /// Why it was rejected.
        reason: String,
    },

    /// The lock service could not be reached or could not serve the request now: connection
    /// refused, reset or closed, no leader, a cluster that is down or failing over. Worth
    /// retrying later ([`Error::is_retryable`]).
    #[error("{backend} backend unavailable: {source}")]
    Unavailable {
        /// The backend's name, e.g. `"redis"`.
        backend: &'static str,
        /// The client library's error, for logs.
        #[source]
        source: BoxError,
    },

    /// The lock service answered, and refused: bad credentials, no permission, a key of
    /// another type where the lock lives, a request it does not understand. Retrying the same
    /// request will not help; the deployment or the configuration needs a look.
    #[error("{backend} backend refused the request: {source}")]
    Refused {
        /// The backend's name.
        backend: &'static str,
        /// The client library's error, for logs.
        #[source]
        source: BoxError,
    },

    /// The lock was granted, but fewer replicas than asked for (a Sentinel URL's
    /// `min_replicas`) acknowledged the grant within `replica_timeout`: the grant was given
    /// back rather than handed over, since a failover could lose it. Worth retrying
    /// ([`Error::is_retryable`]); replication stays asynchronous, so even an acknowledged
    /// grant can be lost in a failover (fencing tokens catch that where the data lives).
    #[error(
        "lock `{key}`: only {acked} of {wanted} replicas acknowledged the grant within {waited:?}; it was given back"
    )]
    NotReplicated {
        /// The lock's key.
        key: String,
        /// Replicas that acknowledged.
        acked: u32,
        /// Replicas asked for.
        wanted: u32,
        /// How long the grant waited for them.
        waited: Duration,
    },

    /// A backend operation did not complete within the configured operation timeout.
    #[error("{backend} {operation} timed out after {after:?}")]
    Timeout {
        /// The backend's name.
        backend: &'static str,
        /// The operation, e.g. `"acquire"` or `"renew"`.
        operation: &'static str,
        /// The timeout that elapsed.
        after: Duration,
    },

    /// [`Locker::global`](crate::Locker::global) was called before a Locker was installed.
    #[error("no global Locker installed: call `Locker::install_global` at start-up")]
    NoGlobalLocker,

    /// The backend does not support this operation.
    #[error("{backend} backend does not support {operation}")]
    Unsupported {
        /// The backend's name.
        backend: &'static str,
        /// The unsupported operation.
        operation: &'static str,
    },

    /// The Locker was shut down ([`Locker::shutdown`](crate::Locker::shutdown)): it takes no
    /// more locks.
    #[error("the Locker was shut down; it takes no more locks")]
    ShutDown,
}

/// What kind of failure an [`Error`] is, for callers that decide by category: retry, give
/// up, alert. See [`Error::kind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The lock is held by someone else ([`Error::Busy`]).
    Busy,
    /// The lock stopped protecting the caller: the lease or session is gone
    /// ([`Error::LeaseLost`], [`Error::NotHolder`]).
    LeaseLost,
    /// The lock service could not be reached or did not answer in time, or this Locker was
    /// shut down ([`Error::Unavailable`], [`Error::Timeout`], [`Error::ShutDown`]).
    Unavailable,
    /// The lock service refused the request: credentials, permissions, a foreign key
    /// ([`Error::Refused`]).
    Refused,
    /// The backend cannot do what was asked ([`Error::Unsupported`]).
    Unsupported,
    /// The caller's input or set-up is wrong: a key, a config value, no global Locker, a
    /// lock upgrade, a semaphore limit that differs from its other callers'
    /// ([`Error::InvalidKey`], [`Error::Config`], [`Error::NoGlobalLocker`],
    /// [`Error::LockUpgrade`], [`Error::LockOrder`], [`Error::PermitLimitMismatch`]).
    InvalidInput,
}

/// Awaits `work` for at most `after`: [`Error::Timeout`] naming `backend` and `operation` if
/// it has not finished by then (the one time bound every backend request runs under).
pub(crate) async fn within<T>(
    backend: &'static str,
    operation: &'static str,
    after: Duration,
    work: impl Future<Output = T>,
) -> Result<T> {
    tokio::time::timeout(after, work)
        .await
        .map_err(|_| Error::timeout(backend, operation, after))
}

impl Error {
    /// Builds an [`Error::Timeout`]: `backend`'s `operation` did not finish within `after`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use dlock_core::{Error, ErrorKind};
    /// let err = Error::timeout("redis", "acquire", Duration::from_secs(2));
    /// assert_eq!(err.kind(), ErrorKind::Unavailable);
    /// assert_eq!(err.to_string(), "redis acquire timed out after 2s");
    /// ```
    #[must_use]
    pub const fn timeout(backend: &'static str, operation: &'static str, after: Duration) -> Self {
        Self::Timeout {
            backend,
            operation,
            after,
        }
    }

    /// Builds an [`Error::Unavailable`] from a client-library error.
    ///
    /// # Examples
    ///
    /// ```
    /// use dlock_core::{Error, ErrorKind};
    /// let err = Error::unavailable("redis", std::io::Error::other("connection reset"));
    /// assert_eq!(err.kind(), ErrorKind::Unavailable);
    /// assert!(err.to_string().contains("connection reset"));
    /// ```
    pub fn unavailable(backend: &'static str, source: impl Into<BoxError>) -> Self {
        Self::Unavailable {
            backend,
            source: source.into(),
        }
    }

    /// Builds an [`Error::Refused`] from a client-library error.
    ///
    /// # Examples
    ///
    /// ```
    /// use dlock_core::{Error, ErrorKind};
    /// let err = Error::refused("redis", "WRONGTYPE Operation against a key holding the wrong kind of value");
    /// assert_eq!(err.kind(), ErrorKind::Refused);
    /// assert!(!err.is_retryable());
    /// ```
    pub fn refused(backend: &'static str, source: impl Into<BoxError>) -> Self {
        Self::Refused {
            backend,
            source: source.into(),
        }
    }

    /// A copy of a backend's error, for each lease of a batch the error failed (the source
    /// is kept as text): a timeout stays a timeout, a refusal a refusal, anything else is
    /// unavailable.
    pub(crate) fn copy_for_batch(&self, backend: &'static str) -> Self {
        match self {
            Self::Timeout {
                backend,
                operation,
                after,
            } => Self::Timeout {
                backend,
                operation,
                after: *after,
            },
            Self::Refused { .. } => Self::refused(backend, self.to_string()),
            other => Self::unavailable(backend, other.to_string()),
        }
    }

    /// Builds an [`Error::Config`] naming `field` and `value`.
    ///
    /// # Examples
    ///
    /// ```
    /// let err = dlock_core::Error::config("ttl", "0s", "must be positive");
    /// assert_eq!(err.to_string(), "invalid config `ttl` = `0s`: must be positive");
    /// ```
    pub fn config(
        field: impl Into<String>,
        value: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        Self::Config {
            field: field.into(),
            value: value.into(),
            reason: reason.into(),
        }
    }

    /// The category of this error.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use dlock_core::{ErrorKind, Locker};
    /// let locker = Locker::memory();
    /// let _held = locker.lock("report").await.unwrap();
    /// let rival = locker.clone();
    /// let error = tokio::spawn(async move { rival.try_lock("report").await.map(drop) })
    ///     .await
    ///     .unwrap()
    ///     .unwrap_err();
    /// match error.kind() {
    ///     ErrorKind::Busy => { /* someone else runs the report: skip it */ }
    ///     ErrorKind::Unavailable => { /* retry later */ }
    ///     other => panic!("{other:?}: {error}"),
    /// }
    /// # }
    /// ```
    #[must_use]
    pub const fn kind(&self) -> ErrorKind {
        match self {
            Self::Busy { .. } => ErrorKind::Busy,
            Self::LeaseLost { .. } | Self::NotHolder { .. } => ErrorKind::LeaseLost,
            Self::Unavailable { .. }
            | Self::Timeout { .. }
            | Self::NotReplicated { .. }
            | Self::ShutDown => ErrorKind::Unavailable,
            Self::Refused { .. } => ErrorKind::Refused,
            Self::Unsupported { .. } => ErrorKind::Unsupported,
            Self::InvalidKey { .. }
            | Self::Config { .. }
            | Self::NoGlobalLocker
            | Self::LockUpgrade { .. }
            | Self::LockOrder { .. }
            | Self::PermitLimitMismatch { .. } => ErrorKind::InvalidInput,
        }
    }

    /// `true` only for transient failures, worth the same call again later: busy, unavailable,
    /// timed out.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(!dlock_core::Error::NoGlobalLocker.is_retryable());
    /// ```
    #[must_use]
    pub const fn is_retryable(&self) -> bool {
        matches!(self.kind(), ErrorKind::Busy | ErrorKind::Unavailable)
            && !matches!(self, Self::ShutDown)
    }
}

/// Why a lease is considered lost.
///
/// # Examples
///
/// ```
/// use dlock_core::LostReason;
/// assert_eq!(LostReason::NotOwner.to_string(), "the backend says another owner holds the key or it is gone");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostReason {
    /// A renewal found the key gone or owned by someone else.
    NotOwner,
    /// The local conservative deadline passed without a successful renewal.
    Expired,
    /// The lock was held for its `max_hold` ([`LockRequest::max_hold`](crate::LockRequest::max_hold)):
    /// the watchdog stopped renewing it and released it, whatever the work was doing.
    MaxHold(Duration),
    /// [`Locker::shutdown`](crate::Locker::shutdown) released it.
    Shutdown,
    /// The backend reported the session or lease that kept the lock gone (an etcd lease
    /// expired or revoked, a ZooKeeper session expired, a PostgreSQL connection closed); the
    /// text says which, for logs.
    SessionLost(String),
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotOwner => {
                f.write_str("the backend says another owner holds the key or it is gone")
            }
            Self::Expired => f.write_str("the lease expired locally without a successful renewal"),
            Self::MaxHold(cap) => write!(
                f,
                "it was held for its max_hold of {}",
                humantime::format_duration(*cap)
            ),
            Self::Shutdown => f.write_str("the Locker was shut down"),
            Self::SessionLost(why) => write!(f, "the session that kept it is gone: {why}"),
        }
    }
}
