//! [`LockSetGuard`]: several locks held as one, taken by [`Locker::lock_all`](crate::Locker::lock_all).

use std::fmt;
use std::future::Future;

use crate::guard::LockGuard;
use crate::hold::Hold;
use crate::lease_watch::first_lost;
use crate::protected::Protected;
use crate::scope::release_verdict;
use crate::{Error, LostReason, Result};

/// The locks of a [lock set](crate::Locker::lock_all), held together: one guard for all of
/// them, in the canonical order they were taken (by full backend key).
///
/// Every member is renewed by the watchdog like any lock; the set is lost as soon as any
/// member is ([`lost`](Self::lost)), and [`run`](Self::run) stops its work then. Each member
/// has its own fencing token ([`fencing_token`](Self::fencing_token)): pass each resource the
/// token of its own key. Dropping the guard releases every member in the background, in
/// reverse order; [`release`](Self::release) releases them all at once and reports the
/// outcome.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
/// let locker = dlock_core::Locker::memory();
/// let accounts = locker.lock_all(["account:bob", "account:alice"]).await?;
/// let keys: Vec<&str> = accounts.keys().collect();
/// assert_eq!(keys, ["account:alice", "account:bob"]); // canonical order
/// let from = accounts.fencing_token("account:alice").expect("memory issues tokens");
/// accounts.run(async { /* move money, passing each account its token */ }).await?;
/// accounts.release().await?;
/// # let _ = from; Ok(()) }
/// ```
#[must_use = "dropping a LockSetGuard releases every lock of the set at once"]
pub struct LockSetGuard {
    /// In canonical order; released in reverse.
    members: Vec<LockGuard>,
}

impl LockSetGuard {
    /// The guard of the members, in canonical order.
    pub(crate) const fn new(members: Vec<LockGuard>) -> Self {
        Self { members }
    }

    /// The keys of the set as the caller gave them (without the Locker's prefix), in the
    /// canonical order they were taken in.
    ///
    /// # Examples
    ///
    /// See [`LockSetGuard`].
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.members.iter().map(LockGuard::key)
    }

    /// The guards of the members, in canonical order: a member's mode, token, deadline.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let locker = dlock_core::Locker::memory();
    /// let set = locker.lock_all(["b", "a"]).await?;
    /// assert!(set.guards().iter().all(|guard| guard.is_held()));
    /// # drop(set); Ok(()) }
    /// ```
    pub fn guards(&self) -> &[LockGuard] {
        &self.members
    }

    /// The guard of member `key` (as the caller gave it), if the set has it.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let locker = dlock_core::Locker::memory();
    /// let set = locker.lock_all(["a", "b"]).await?;
    /// assert_eq!(set.get("b").map(|guard| guard.key()), Some("b"));
    /// assert!(set.get("c").is_none());
    /// # drop(set); Ok(()) }
    /// ```
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&LockGuard> {
        self.members.iter().find(|guard| guard.key() == key)
    }

    /// The fencing token of member `key`; `None` if the set has no such key or its grant
    /// carries no token (see [`LockGuard::fencing_token`]).
    ///
    /// # Examples
    ///
    /// See [`LockSetGuard`].
    #[must_use]
    pub fn fencing_token(&self, key: &str) -> Option<u64> {
        self.get(key).and_then(LockGuard::fencing_token)
    }

    /// `true` while every member's lease is valid.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let set = dlock_core::Locker::memory().lock_all(["a", "b"]).await?;
    /// assert!(set.is_held());
    /// # drop(set); Ok(()) }
    /// ```
    #[must_use]
    pub fn is_held(&self) -> bool {
        self.members.iter().all(LockGuard::is_held)
    }

    /// A future that resolves, with the reason, when the first member's lease is lost (see
    /// [`LockGuard::lost`]); it stays pending while every member is kept.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// use std::time::Duration;
    /// let locker = dlock_core::Locker::memory();
    /// let set = locker.lock_all(["a", "b"]).ttl(Duration::from_millis(50)).watchdog(false).await?;
    /// assert_eq!(set.lost().await, dlock_core::LostReason::Expired);
    /// # Ok(()) }
    /// ```
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        let lost = first_lost(&self.watches());
        async move { lost.await.1 }
    }

    fn watches(&self) -> Box<[std::sync::Arc<crate::lease_watch::LeaseWatch>]> {
        self.members.iter().map(LockGuard::watch).collect()
    }

    /// Runs `work` while holding every lock of the set: it is dropped as soon as any
    /// member's lease is lost (see [`LockGuard::run`]).
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] naming the member that was lost.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let set = dlock_core::Locker::memory().lock_all(["a", "b"]).await?;
    /// assert_eq!(set.run(async { 7 }).await?, 7);
    /// # drop(set); Ok(()) }
    /// ```
    pub async fn run<F: Future>(&self, work: F) -> Result<F::Output> {
        self.protect(work).await
    }

    /// `work` as a future that runs only while every member's lease is valid: what
    /// [`run`](Self::run) awaits.
    ///
    /// # Examples
    ///
    /// See [`Protected`].
    pub fn protect<F: Future>(&self, work: F) -> Protected<F> {
        Protected::new(work, self.watches())
    }

    /// Releases every member now, all at once — in one round trip where the backend can
    /// ([`Capabilities::together`](crate::backend::Capabilities::together)) — and reports the
    /// first failure: a lost lease before anything else (see [`LockGuard::release`]). Every
    /// member is released whatever the others answer.
    ///
    /// # Errors
    ///
    /// As [`LockGuard::release`], for the first member that failed.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let locker = dlock_core::Locker::memory();
    /// locker.lock_all(["a", "b"]).await?.release().await?;
    /// assert!(locker.try_lock("a").await.is_ok());
    /// # Ok(()) }
    /// ```
    pub async fn release(mut self) -> Result<()> {
        let members = std::mem::take(&mut self.members);
        let mut last_shares = Vec::with_capacity(members.len());
        let mut errors: Vec<Error> = Vec::new();
        for (hold, last) in members.into_iter().rev().map(LockGuard::give_up_share) {
            if last {
                last_shares.push(hold);
            } else if let Some(lost) = hold.lost_error() {
                errors.push(lost); // a nested member: its outer hold stays
            }
        }
        errors.extend(
            Hold::release_all_now(&last_shares)
                .await
                .into_iter()
                .filter_map(Result::err),
        );
        let worst = errors
            .iter()
            .position(|error| matches!(error, Error::LeaseLost { .. }))
            .unwrap_or(0);
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.swap_remove(worst))
        }
    }

    /// Runs `work` under every lock of the set, then releases them, by the one rule of
    /// [`LockGuard::run_and_release`]: what `#[distributed_lock(keys = ..)]` does.
    ///
    /// # Errors
    ///
    /// As [`LockGuard::run_and_release`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let set = dlock_core::Locker::memory().lock_all(["sku:1", "sku:2"]).await?;
    /// let done: Result<u32, String> = set.run_and_release(async { Ok(2) }, Result::is_ok).await?;
    /// assert_eq!(done, Ok(2));
    /// # Ok(()) }
    /// ```
    pub async fn run_and_release<F: Future>(
        self,
        work: F,
        succeeded: impl FnOnce(&F::Output) -> bool,
    ) -> Result<F::Output> {
        let output = self.run(work).await?;
        self.release_after(succeeded(&output)).await?;
        Ok(output)
    }

    /// Releases every member after the work they protected finished, by the rule of
    /// [`LockGuard::release_after`].
    ///
    /// # Errors
    ///
    /// As [`LockGuard::release_after`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let set = dlock_core::Locker::memory().lock_all(["a", "b"]).await?;
    /// set.release_after(true).await?;
    /// # Ok(()) }
    /// ```
    pub async fn release_after(self, work_succeeded: bool) -> Result<()> {
        let keys = self.keys().collect::<Vec<_>>().join(", ");
        release_verdict(self.release().await, work_succeeded, &keys)
    }

    /// The member guards, to release or hand off one at a time; in canonical order.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let set = dlock_core::Locker::memory().lock_all(["a", "b"]).await?;
    /// let [a, b]: [_; 2] = set.into_guards().try_into().expect("two members");
    /// a.release().await?;
    /// assert!(b.is_held());
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn into_guards(mut self) -> Vec<LockGuard> {
        std::mem::take(&mut self.members)
    }
}

impl Drop for LockSetGuard {
    fn drop(&mut self) {
        // In reverse order of taking, each in the background (`LockGuard`'s drop).
        while let Some(member) = self.members.pop() {
            drop(member);
        }
    }
}

impl fmt::Debug for LockSetGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.members).finish()
    }
}
