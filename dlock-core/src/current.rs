//! [`current_lock`]: the key and fencing token of the lock a `#[distributed_lock]` body runs
//! under, read from inside the body without changing the fn's signature.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::sync::Weak;

use tokio::task::futures::TaskLocalFuture;

use crate::guard::{HandOff, LockGuard};
use crate::hold::Hold;

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
#[derive(Clone)]
pub struct CurrentLock {
    key: Cow<'static, str>,
    fencing_token: Option<u64>,
    /// Weak: a `CurrentLock` kept past the body does not keep the lock held.
    hold: Weak<Hold>,
}

impl CurrentLock {
    pub(crate) fn new(key: Cow<'static, str>, guard: &LockGuard) -> Self {
        Self {
            key,
            fencing_token: guard.fencing_token(),
            hold: guard.weak_hold(),
        }
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

    /// Shares the body's hold with a task it spawns, as [`LockGuard::hand_off`] does: the
    /// spawned task calls [`HandOff::adopt`], and its acquires of this key re-enter instead
    /// of waiting for the body that holds it (which would wait forever if the body awaits
    /// the task). `None` once the body's lock is released.
    ///
    /// # Examples
    ///
    #[cfg_attr(feature = "macros", doc = "```")]
    #[cfg_attr(not(feature = "macros"), doc = "```ignore")]
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// use dlock_core::{Error, Locker, current_lock, distributed_lock};
    ///
    /// #[distributed_lock(key = "batch:<id>", locker = Locker::memory())]
    /// async fn run_batch(id: u64) -> Result<(), Error> {
    ///     let hand_off = current_lock().and_then(|lock| lock.hand_off()).expect("in the body");
    ///     tokio::spawn(async move {
    ///         let _shared = hand_off.adopt(); // this task holds `batch:<id>` too
    ///         // ... work that may call other #[distributed_lock(key = "batch:<id>")] fns
    ///     })
    ///     .await
    ///     .expect("the task ran");
    ///     Ok(())
    /// }
    ///
    /// run_batch(7).await?;
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn hand_off(&self) -> Option<HandOff> {
        self.hold.upgrade().map(HandOff::of)
    }

    /// Runs `body` with `self` as the current lock (nested scopes shadow outer ones).
    pub(crate) fn scope<F: Future>(self, body: F) -> TaskLocalFuture<Self, F> {
        CURRENT.scope(self, body)
    }
}

impl fmt::Debug for CurrentLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CurrentLock")
            .field("key", &self.key)
            .field("fencing_token", &self.fencing_token)
            .finish_non_exhaustive()
    }
}

/// Two `CurrentLock`s are equal when they name the same key and fencing token.
impl PartialEq for CurrentLock {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key && self.fencing_token == other.fencing_token
    }
}

impl Eq for CurrentLock {}

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
