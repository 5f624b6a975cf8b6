//! [`LockSetRequest`]: the builder [`Locker::lock_all`](crate::Locker::lock_all) returns.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::mode::LockKind;
use crate::set_guard::LockSetGuard;
use crate::state::LockerState;
use crate::{LockMode, Result};

/// One key of a set, as the caller named it.
#[derive(Debug, Clone)]
pub(crate) struct SetMember {
    pub(crate) key: String,
    pub(crate) mode: LockMode,
    pub(crate) kind: LockKind,
}

/// What a [`LockSetRequest`] asks for: the settings every member shares.
#[derive(Debug)]
pub(crate) struct SetOptions<'a> {
    pub(crate) members: Vec<SetMember>,
    pub(crate) ttl: Option<Duration>,
    /// `None`: the Locker's default; `Some(None)`: until acquired.
    pub(crate) wait: Option<Option<Duration>>,
    pub(crate) watchdog: bool,
    pub(crate) fencing: Option<bool>,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) key_template: Option<&'a str>,
}

/// A lock set being configured; `.await` it to get a [`LockSetGuard`]. The settings apply
/// to every key of the set; the wait is **one** deadline for the whole set.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
/// use std::time::Duration;
/// let locker = dlock_core::Locker::memory();
/// let set = locker
///     .lock_all(["sku:7", "sku:3", "sku:7"]) // sorted, duplicates merged
///     .ttl(Duration::from_secs(10))
///     .wait(Duration::from_millis(300)) // for the whole set, not per key
///     .await?;
/// assert_eq!(set.keys().collect::<Vec<_>>(), ["sku:3", "sku:7"]);
/// # drop(set); Ok(()) }
/// ```
#[must_use = "a lock set request does nothing until it is `.await`ed"]
#[derive(Debug)]
pub struct LockSetRequest<'a> {
    locker: &'a Arc<LockerState>,
    options: SetOptions<'a>,
}

impl<'a> LockSetRequest<'a> {
    pub(crate) const fn new(locker: &'a Arc<LockerState>, members: Vec<SetMember>) -> Self {
        Self {
            locker,
            options: SetOptions {
                members,
                ttl: None,
                wait: None,
                watchdog: true,
                fencing: None,
                max_hold: None,
                key_template: None,
            },
        }
    }

    /// Makes the exclusive members mutexes rather than write locks ([`Locker::lock_all`](crate::Locker::lock_all)).
    pub(crate) fn mutex(mut self) -> Self {
        for member in &mut self.options.members {
            if member.mode == LockMode::Exclusive {
                member.kind = LockKind::Mutex;
            }
        }
        self
    }

    /// Every member's lease length (see [`LockRequest::ttl`](crate::LockRequest::ttl)).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// use std::time::Duration;
    /// let set = dlock_core::Locker::memory().lock_all(["a", "b"]).ttl(Duration::from_secs(5)).await?;
    /// # drop(set); Ok(()) }
    /// ```
    pub const fn ttl(mut self, ttl: Duration) -> Self {
        self.options.ttl = Some(ttl);
        self
    }

    /// Gives up with [`Error::Busy`](crate::Error::Busy), naming the key still busy, once
    /// `wait` has passed since the call, for the **whole set**: the keys are taken one after
    /// another, each waiting only for what is left. The answer comes within `wait` plus
    /// [`WAIT_SLACK`](crate::WAIT_SLACK), and nothing of the set is kept then.
    /// `Duration::ZERO` makes one attempt per key. Defaults to the Locker's `wait`.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// use std::time::Duration;
    /// let locker = dlock_core::Locker::memory();
    /// let held = locker.lock("b").await?;
    /// let other = locker.clone();
    /// let busy = tokio::spawn(async move {
    ///     other.lock_all(["a", "b"]).wait(Duration::from_millis(50)).await.map(drop)
    /// });
    /// assert!(matches!(busy.await.unwrap(), Err(dlock_core::Error::Busy { key, .. }) if key == "b"));
    /// assert!(locker.try_lock("a").await.is_ok(), "nothing of the set was kept");
    /// # drop(held); Ok(()) }
    /// ```
    pub const fn wait(mut self, wait: Duration) -> Self {
        self.options.wait = Some(Some(wait));
        self
    }

    /// Waits until every key is acquired, however long that takes.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let set = dlock_core::Locker::memory().lock_all(["a", "b"]).wait_forever().await?;
    /// # drop(set); Ok(()) }
    /// ```
    pub const fn wait_forever(mut self) -> Self {
        self.options.wait = Some(None);
        self
    }

    /// With `false`, nothing renews the members' leases (see
    /// [`LockRequest::watchdog`](crate::LockRequest::watchdog)).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let set = dlock_core::Locker::memory().lock_all(["a", "b"]).watchdog(false).await?;
    /// # drop(set); Ok(()) }
    /// ```
    pub const fn watchdog(mut self, enabled: bool) -> Self {
        self.options.watchdog = enabled;
        self
    }

    /// Whether every member's grant must carry a fencing token (see
    /// [`LockRequest::fencing`](crate::LockRequest::fencing)).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let set = dlock_core::Locker::memory().lock_all(["a", "b"]).fencing(true).await?;
    /// assert!(set.fencing_token("a").is_some() && set.fencing_token("b").is_some());
    /// # drop(set); Ok(()) }
    /// ```
    pub const fn fencing(mut self, fencing: bool) -> Self {
        self.options.fencing = Some(fencing);
        self
    }

    /// The longest the set is held (see [`LockRequest::max_hold`](crate::LockRequest::max_hold)).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// use std::time::Duration;
    /// let set = dlock_core::Locker::memory().lock_all(["a"]).max_hold(Duration::from_secs(60)).await?;
    /// # drop(set); Ok(()) }
    /// ```
    pub const fn max_hold(mut self, max_hold: Duration) -> Self {
        self.options.max_hold = Some(max_hold);
        self
    }

    /// The template the keys were built from, as the metrics' `key` label (see
    /// [`LockRequest::key_template`](crate::LockRequest::key_template)).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let set = dlock_core::Locker::memory().lock_all(["sku:1", "sku:2"]).key_template("sku:<sku>").await?;
    /// # drop(set); Ok(()) }
    /// ```
    pub const fn key_template(mut self, template: &'a str) -> Self {
        self.options.key_template = Some(template);
        self
    }
}

impl<'a> IntoFuture for LockSetRequest<'a> {
    type Output = Result<LockSetGuard>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<LockSetGuard>> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move { self.locker.acquire_set(self.options).await })
    }
}
