//! The one error type of dlock, and its `Result` alias.

use std::time::Duration;

use crate::lease::LostReason;

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
///     Err(Error::Busy { key, .. }) => assert_eq!(key, "order:42"),
///     other => panic!("expected Busy, got {other:?}"),
/// }
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The lock was held by someone else for the whole time the caller was willing to wait.
    #[error("lock `{key}` is busy (gave up after waiting {waited:?})")]
    Busy {
        /// The user key (without the Locker's prefix).
        key: String,
        /// How long the caller waited before giving up.
        waited: Duration,
        /// The holder's remaining lease, when the backend knows it (a good `Retry-After`).
        retry_after: Option<Duration>,
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

    /// The backend (its server or client library) failed.
    #[error("{backend} backend error: {source}")]
    Backend {
        /// The backend's name, e.g. `"redis"`.
        backend: &'static str,
        /// The underlying error.
        #[source]
        source: BoxError,
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
}

impl Error {
    /// Builds an [`Error::Backend`] from any client-library error.
    ///
    /// # Examples
    ///
    /// ```
    /// let err = dlock_core::Error::backend("redis", std::io::Error::other("connection reset"));
    /// assert!(err.to_string().contains("connection reset"));
    /// ```
    pub fn backend(backend: &'static str, source: impl Into<BoxError>) -> Self {
        Self::Backend {
            backend,
            source: source.into(),
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

    /// `true` for errors worth retrying later: busy, timeouts and backend failures.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(dlock_core::Error::NoGlobalLocker.is_retryable() == false);
    /// ```
    #[must_use]
    pub const fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::Busy { .. } | Self::Timeout { .. } | Self::Backend { .. }
        )
    }
}
