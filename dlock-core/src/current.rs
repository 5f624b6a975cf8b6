//! [`current_lock`]: the key and fencing token of the lock a `#[distributed_lock]` body runs
//! under, read from inside the body without changing the fn's signature.

use std::borrow::Cow;
use std::future::Future;

use tokio::task::futures::TaskLocalFuture;

tokio::task_local! {
    static CURRENT: CurrentLock;
}

/// The lock held around the innermost `#[distributed_lock]` body running on this task: its key
/// and fencing token. Returned by [`current_lock`].
///
/// # Examples
///
#[cfg_attr(feature = "macros", doc = "```")]
#[cfg_attr(not(feature = "macros"), doc = "```ignore")]
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
/// use dlock_core::{Error, distributed_lock};
///
/// #[distributed_lock(key = "invoice:<id>", locker = dlock_core::Locker::memory())]
/// async fn bill(id: u64) -> Result<u64, Error> {
///     let lock = dlock_core::current_lock().expect("inside the body");
///     assert_eq!(lock.key(), format!("invoice:{id}"));
///     Ok(lock.fencing_token().expect("the memory backend issues tokens"))
/// }
///
/// let token = bill(7).await?;
/// assert!(token > 0);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentLock {
    key: Cow<'static, str>,
    fencing_token: Option<u64>,
}

impl CurrentLock {
    pub(crate) const fn new(key: Cow<'static, str>, fencing_token: Option<u64>) -> Self {
        Self { key, fencing_token }
    }

    /// The key as the attribute formatted it (without the Locker's prefix), e.g. `"order:42"`.
    ///
    /// # Examples
    ///
    /// See [`CurrentLock`].
    #[must_use]
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The grant's fencing token ([`LockGuard::fencing_token`](crate::LockGuard::fencing_token)):
    /// pass it with every write to the protected resource. `None` for backends without tokens.
    ///
    /// # Examples
    ///
    /// See [`CurrentLock`].
    #[must_use]
    pub const fn fencing_token(&self) -> Option<u64> {
        self.fencing_token
    }

    /// Runs `body` with `self` as the current lock (nested scopes shadow outer ones).
    pub(crate) fn scope<F: Future>(self, body: F) -> TaskLocalFuture<Self, F> {
        CURRENT.scope(self, body)
    }
}

/// The lock held around the `#[distributed_lock]` body that is running now, if any: its key
/// and fencing token.
///
/// It is set for the body's future and everything that future awaits — helper fns called from
/// the body see it too — but not for tasks the body spawns (they do not hold the lock either).
/// A nested `#[distributed_lock]` call shadows it for its own body, then the outer lock is
/// current again. Outside any annotated body it is `None`.
///
/// # Examples
///
#[cfg_attr(feature = "macros", doc = "```")]
#[cfg_attr(not(feature = "macros"), doc = "```ignore")]
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
/// use dlock_core::{Error, Locker, current_lock, distributed_lock};
///
/// /// The protected resource checks the token: it refuses writes older than one it has seen.
/// fn write_to_ledger(account: &str) -> Result<(), Error> {
///     let token = current_lock().and_then(|lock| lock.fencing_token());
///     println!("writing {account} with fencing token {token:?}");
///     Ok(())
/// }
///
/// #[distributed_lock(key = "account:<name>", locker = Locker::memory())]
/// async fn settle(name: &str) -> Result<(), Error> {
///     write_to_ledger(name) // sees the lock: called from the body
/// }
///
/// settle("alice").await?;
/// assert!(current_lock().is_none(), "not inside an annotated body");
/// # Ok(()) }
/// ```
#[must_use]
pub fn current_lock() -> Option<CurrentLock> {
    CURRENT.try_with(Clone::clone).ok()
}
