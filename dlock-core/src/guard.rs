//! [`LockGuard`]: proof of holding a lock, and the way to keep and give it up.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::LostReason;
use crate::hold::{Hold, ShareOwner};
use crate::lease_watch::LeaseWatch;
use crate::protected::Protected;
use crate::reentrancy::HolderId;
use crate::{LockMode, Result};

/// A held distributed lock.
///
/// While the guard lives the Locker's watchdog renews the lease (unless acquired with
/// `.watchdog(false)`). Dropping the guard releases the lock in the background without
/// blocking; [`release`](Self::release) releases it now and reports the outcome.
///
/// Guards of one task's nested acquires of the same key share one grant: the lock is released
/// when the last of them goes. Reentrancy is keyed on the tokio task that acquired (or
/// [adopted](HandOff::adopt)) the guard: futures polled concurrently inside one task (`join!`,
/// `select!`) re-enter each other's holds rather than exclude each other, and a guard moved to
/// another task still counts for the task that acquired it.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
/// let locker = dlock_core::Locker::memory();
/// let guard = locker.lock("invoice:7").await?;
/// assert!(guard.is_held());
/// assert_eq!(guard.key(), "invoice:7");
/// let token = guard.fencing_token().expect("memory issues tokens");
/// let result = guard.run(async { token * 2 }).await?;
/// assert_eq!(result, token * 2);
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping a LockGuard releases the lock at once"]
pub struct LockGuard {
    hold: Arc<Hold>,
    owner: ShareOwner,
    nested: bool,
    share_given_up: bool,
}

impl LockGuard {
    /// A guard holding one share of `hold` for `holder` (the current task).
    pub(crate) fn new(hold: Arc<Hold>, nested: bool, holder: HolderId) -> Self {
        let owner = Some(holder);
        hold.add_share(owner);
        Self {
            hold,
            owner,
            nested,
            share_given_up: false,
        }
    }

    /// The backend's grant this guard holds a share of.
    pub(crate) fn lease(&self) -> &crate::lease::Lease {
        self.hold.lease()
    }

    /// The key as the caller gave it (without the Locker's prefix).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let guard = dlock_core::Locker::memory().lock("order:42").await?;
    /// assert_eq!(guard.key(), "order:42");
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn key(&self) -> &str {
        self.hold.watch().user_key()
    }

    /// How this guard's grant holds the key. A read lock taken inside the same task's write
    /// lock shares the write grant, and reports [`LockMode::Exclusive`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// use dlock_core::LockMode;
    /// let locker = dlock_core::Locker::memory();
    /// assert_eq!(locker.read_lock("k").await?.mode(), LockMode::Shared);
    /// assert_eq!(locker.lock("k").await?.mode(), LockMode::Exclusive);
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn mode(&self) -> LockMode {
        self.hold.lease().mode
    }

    /// The fencing token of this grant: strictly greater than the token of every earlier
    /// grant of this key. `None` for backends without tokens (RedLock), and on Redis unless
    /// the lock was asked for one ([`LockRequest::fencing`](crate::LockRequest::fencing), or
    /// `fencing = true` in the [config](crate::DlockConfig::fencing)): there a token costs an
    /// `INCR` per grant.
    ///
    /// Pass it along with every write to the protected resource, and have the resource
    /// refuse writes whose token is lower than the highest it has seen:
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// struct Storage { highest_token: u64, value: String }
    /// impl Storage {
    ///     fn write(&mut self, token: u64, value: &str) -> Result<(), &'static str> {
    ///         if token < self.highest_token { return Err("stale fencing token"); }
    ///         self.highest_token = token;
    ///         self.value = value.to_owned();
    ///         Ok(())
    ///     }
    /// }
    /// let locker = dlock_core::Locker::memory();
    /// let mut storage = Storage { highest_token: 0, value: String::new() };
    /// let old = locker.lock("file").await?.fencing_token().unwrap(); // dropped: released
    /// let new = locker.lock("file").await?.fencing_token().unwrap();
    /// storage.write(new, "new holder").unwrap();
    /// assert!(storage.write(old, "old holder woke up").is_err());
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn fencing_token(&self) -> Option<u64> {
        self.hold.lease().fencing_token
    }

    /// `true` while the lease is valid: not reported lost, and its local conservative deadline
    /// (counted from the send time of the last successful acquire or renewal) not passed.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// use std::time::Duration;
    /// let locker = dlock_core::Locker::memory();
    /// let guard = locker.lock("k").ttl(Duration::from_millis(20)).watchdog(false).await?;
    /// assert!(guard.is_held());
    /// tokio::time::sleep(Duration::from_millis(30)).await;
    /// assert!(!guard.is_held());
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn is_held(&self) -> bool {
        let watch = self.hold.watch();
        watch.expire_if_due();
        watch.is_held()
    }

    /// When the lease runs out unless renewed: the local, conservative deadline (the grant's
    /// or last renewal's send time plus the ttl, less the drift margin), which moves forward
    /// with every renewal. Past it (or once the lease is lost) the guard no longer protects
    /// anything. An operator's view, and a bound for work that must finish under the lock:
    /// `expires_at() - Instant::now()` is what is left without another renewal.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// use std::time::{Duration, Instant};
    /// let locker = dlock_core::Locker::memory();
    /// let guard = locker.lock("k").ttl(Duration::from_secs(10)).await?;
    /// let left = guard.expires_at() - Instant::now();
    /// assert!(left > Duration::from_secs(9) && left <= Duration::from_secs(10));
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn expires_at(&self) -> Instant {
        self.hold.watch().deadline()
    }

    /// `true` for a guard obtained by re-entering a lock this task already held.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let locker = dlock_core::Locker::memory();
    /// let outer = locker.lock("k").await?;
    /// let inner = locker.lock("k").await?; // same task: re-enters
    /// assert!(!outer.is_nested() && inner.is_nested());
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub const fn is_nested(&self) -> bool {
        self.nested
    }

    /// Why the lease was lost, once it is.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// use std::time::Duration;
    /// let locker = dlock_core::Locker::memory();
    /// let guard = locker.lock("k").ttl(Duration::from_millis(20)).watchdog(false).await?;
    /// assert_eq!(guard.lost_reason(), None);
    /// guard.lost().await;
    /// assert_eq!(guard.lost_reason(), Some(dlock_core::LostReason::Expired));
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn lost_reason(&self) -> Option<LostReason> {
        let watch = self.hold.watch();
        watch.expire_if_due();
        watch.lost_reason()
    }

    /// A future that resolves, with the reason, when the lease is lost: when a renewal is
    /// refused or the backend reports the session gone, and by itself when the local deadline
    /// passes (it does not wait for the watchdog to notice). It never resolves while the lease
    /// is kept; it does not resolve on a normal release either (it is `'static`, so it can
    /// outlive the guard: then it stays pending).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// use std::time::Duration;
    /// let locker = dlock_core::Locker::memory();
    /// let guard = locker.lock("k").ttl(Duration::from_millis(50)).watchdog(false).await?;
    /// let reason = guard.lost().await; // nothing renews it: lost at its ttl
    /// assert_eq!(reason, dlock_core::LostReason::Expired);
    /// # Ok(()) }
    /// ```
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        let watch = self.watch();
        async move { watch.lost().await }
    }

    /// The lease's watch: the key as the caller gave it and the lease state, still readable
    /// after the guard is released.
    pub(crate) fn watch(&self) -> Arc<LeaseWatch> {
        Arc::clone(self.hold.watch())
    }

    /// Runs `work` while holding the lock: it is polled only while the lease is valid, and
    /// dropped as soon as the lease is lost — at the deadline by itself, not only when the
    /// watchdog gets to run, and never resumed after a pause past the lease (see
    /// [`Protected`] for what that does and does not cover).
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`](crate::Error::LeaseLost) if the lease is lost before `work`
    /// completes (or already was). A lease that ran out during the poll that completed `work`
    /// is reported by the release.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// use std::time::Duration;
    /// let locker = dlock_core::Locker::memory();
    /// let guard = locker.lock("k").ttl(Duration::from_millis(50)).watchdog(false).await?;
    /// let outcome = guard.run(tokio::time::sleep(Duration::from_secs(5))).await;
    /// assert!(matches!(outcome, Err(dlock_core::Error::LeaseLost { .. })));
    /// # Ok(()) }
    /// ```
    pub async fn run<F: Future>(&self, work: F) -> Result<F::Output> {
        self.protect(work).await
    }

    /// `work` as a future that runs only while this lock's lease is valid: what
    /// [`run`](Self::run) awaits, as a `'static` future (when `work` is) for code that keeps
    /// the guard next to it, such as a tower service's response future.
    ///
    /// # Examples
    ///
    /// See [`Protected`].
    pub fn protect<F: Future>(&self, work: F) -> Protected<F> {
        Protected::new(work, Box::new([self.watch()]))
    }

    /// Shares this hold with another task on purpose: the child task calls
    /// [`HandOff::adopt`] and gets its own guard, and its nested acquires of this key re-enter.
    /// The lock is released when the last guard of the hold goes.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let locker = dlock_core::Locker::memory();
    /// let guard = locker.lock("batch").await?;
    /// let hand_off = guard.hand_off();
    /// let child_locker = locker.clone();
    /// tokio::spawn(async move {
    ///     let shared = hand_off.adopt();
    ///     let nested = child_locker.try_lock("batch").await.expect("re-enters the shared hold");
    ///     assert!(nested.is_nested());
    ///     drop((nested, shared));
    /// })
    /// .await
    /// .unwrap();
    /// guard.release().await?; // the last guard: really releases
    /// # Ok(()) }
    /// ```
    pub fn hand_off(&self) -> HandOff {
        HandOff::of(Arc::clone(&self.hold))
    }

    /// Makes the release of this lock — the last guard's, or the drop's in the background —
    /// leave it held on the server for `keep` from now, by the server's clock, marked `kept`
    /// for [`inspect`](crate::Locker::inspect): a record that no process keeps alive, and that
    /// refuses every acquire until it expires. For a job that decides at its end how long its
    /// lock should stay taken; [`LockRequest::hold_at_least`](crate::LockRequest::hold_at_least)
    /// and [`Locker::once`](crate::Locker::once) are built on it. Replaces an earlier keep of
    /// the hold (its `hold_at_least` too). A lease lost meanwhile is not kept.
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`](crate::Error::Unsupported) on a backend that cannot keep a
    /// released lock ([`Capabilities::keeps`](crate::backend::Capabilities::keeps)), or for a
    /// shared lock or a permit.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// use std::time::Duration;
    /// use dlock_core::Kept;
    /// let locker = dlock_core::Locker::memory();
    /// let guard = locker.try_lock("import:2026-11-25").await?;
    /// // ... the import ran to success: nobody imports that day again for two days.
    /// guard.keep_after_release(Duration::from_secs(48 * 3600), Kept::Done)?;
    /// guard.release().await?;
    /// let info = locker.inspect("import:2026-11-25").await?;
    /// assert_eq!(info.holders[0].kept, Some(Kept::Done));
    /// # Ok(()) }
    /// ```
    pub fn keep_after_release(&self, keep: Duration, kept: crate::Kept) -> Result<()> {
        self.hold.check_keeps()?;
        self.keep_until(Some((Instant::now() + keep, kept)));
        Ok(())
    }

    /// Makes the release of this guard's hold leave the key held on the server until the
    /// instant given (see [`Hold::keep_until`]).
    pub(crate) fn keep_until(&self, keep: Option<(Instant, crate::Kept)>) {
        self.hold.keep_until(keep);
    }

    /// The hold behind this guard, weakly: what [`CurrentLock`](crate::CurrentLock) hands off
    /// without keeping the lock held past its body.
    pub(crate) fn weak_hold(&self) -> std::sync::Weak<Hold> {
        Arc::downgrade(&self.hold)
    }

    /// Releases the lock now. For a nested or shared guard, it only gives up this guard's
    /// share; the outermost release really releases.
    ///
    /// # Errors
    ///
    /// * [`Error::LeaseLost`](crate::Error::LeaseLost) if the lease was lost while held
    ///   (protected work may have overlapped another holder's).
    /// * [`Error::NotHolder`](crate::Error::NotHolder) if the backend says this grant no
    ///   longer holds the lock.
    /// * [`Error::Unavailable`](crate::Error::Unavailable) /
    ///   [`Error::Timeout`](crate::Error::Timeout) if the server could not be reached; the
    ///   lock then frees itself when its ttl runs out.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let locker = dlock_core::Locker::memory();
    /// let outer = locker.lock("k").await?;
    /// let inner = locker.lock("k").await?;
    /// inner.release().await?; // gives up the nested share only
    /// outer.release().await?; // really releases
    /// # Ok(()) }
    /// ```
    pub async fn release(self) -> Result<()> {
        let (hold, last) = self.give_up_share();
        if last {
            hold.release_now().await
        } else {
            hold.lost_error().map_or(Ok(()), Err)
        }
    }

    /// Gives up this guard's share of its hold: the hold, and whether that was its last
    /// share (then the caller releases it).
    pub(crate) fn give_up_share(mut self) -> (Arc<Hold>, bool) {
        let hold = Arc::clone(&self.hold);
        let last = hold.drop_share(self.owner);
        self.share_given_up = true;
        (hold, last)
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.share_given_up {
            // The last share's hold is released by `Hold`'s own drop, in the background.
            self.hold.drop_share(self.owner);
        }
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.key())
            .field("mode", &self.mode())
            .field("fencing_token", &self.fencing_token())
            .field("nested", &self.nested)
            .field("held", &self.is_held())
            .finish()
    }
}

/// A hold being shared with another task; see [`LockGuard::hand_off`].
#[must_use = "a HandOff does nothing until adopted; dropping it gives up its share"]
pub struct HandOff {
    hold: Arc<Hold>,
}

impl HandOff {
    /// A new share of `hold`, for a task to adopt.
    pub(crate) fn of(hold: Arc<Hold>) -> Self {
        hold.add_share(None);
        Self { hold }
    }

    /// Makes the current task a holder of the shared lock and returns its guard.
    ///
    /// # Examples
    ///
    /// See [`LockGuard::hand_off`].
    pub fn adopt(self) -> LockGuard {
        // The new share is added before this hand-off's share goes, so the hold never
        // reaches zero shares in between.
        LockGuard::new(Arc::clone(&self.hold), true, HolderId::current())
    }
}

impl Drop for HandOff {
    fn drop(&mut self) {
        self.hold.drop_share(None);
    }
}

impl fmt::Debug for HandOff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandOff")
            .field("key", &self.hold.watch().user_key())
            .finish()
    }
}
