//! The one acquire → run → release policy, used by [`Locker::with_lock`](crate::Locker::with_lock),
//! `#[distributed_lock]` and `dlock-tower`'s layer: [`LockGuard::run_and_release`], and
//! [`LockGuard::release_after`], whose docs hold the one rule for a release that fails after
//! the work finished (a [lock set](crate::LockSetGuard)'s scope follows the same rule).

use std::future::Future;

use crate::guard::LockGuard;
use crate::{Error, Result};

impl LockGuard {
    /// Runs `work` under this lock, then releases it, and returns `work`'s output unless the
    /// lock stopped protecting it — by the rule of [`release_after`](Self::release_after), with
    /// `succeeded` saying whether an output counts as a success (e.g. [`Result::is_ok`]).
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] if the lease was lost while `work` ran; [`Error::LeaseLost`] or
    /// [`Error::NotHolder`] if the release found the lock gone after a successful `work`.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let locker = dlock_core::Locker::memory();
    /// let guard = locker.lock("stock:sku-1").await?;
    /// let saved: Result<u32, String> = guard
    ///     .run_and_release(async { Ok(42) }, Result::is_ok)
    ///     .await?;
    /// assert_eq!(saved, Ok(42));
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

    /// Releases this lock after the work it protected finished, and says whether that work's
    /// result may be reported: `Ok(())` — report it; `Err(error)` — report `error` instead
    /// (the lock had stopped protecting a successful result), by the rule below. For code
    /// that drives its own future, such as a tower service's response future; otherwise use
    /// [`run_and_release`](Self::run_and_release).
    ///
    /// # Which result is reported
    ///
    /// * The lease was lost while the work ran: the work is dropped at its next await point and
    ///   the caller gets [`Error::LeaseLost`]; the guard's drop releases in the background (a
    ///   failure there is traced at `warn`).
    /// * The work finished and the release reports that the lock had stopped protecting it
    ///   ([`Error::LeaseLost`], [`Error::NotHolder`]): a **successful** result may have
    ///   overlapped another holder's work, so the caller gets that error instead; a **failed**
    ///   result is returned as it is (with a `warn` trace): the failure is the news.
    /// * Any other release error (the server unreachable, a timeout): the work finished while the
    ///   lease was valid, so its result is returned, with a `warn` trace; the lock frees itself
    ///   when its ttl runs out.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] or [`Error::NotHolder`] when `work_succeeded` and the release
    /// found the lock lost or gone.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// use std::time::Duration;
    /// let locker = dlock_core::Locker::memory();
    /// let guard = locker.lock("k").ttl(Duration::from_millis(20)).watchdog(false).await?;
    /// tokio::time::sleep(Duration::from_millis(30)).await; // work that overran the lease
    /// let verdict = guard.release_after(true).await;
    /// assert!(matches!(verdict, Err(dlock_core::Error::LeaseLost { .. })));
    /// # Ok(()) }
    /// ```
    pub async fn release_after(self, work_succeeded: bool) -> Result<()> {
        let watch = self.watch(); // for the key in a warning, after the guard is gone
        let released = self.release().await;
        release_verdict(released, work_succeeded, watch.user_key())
    }
}

/// What a scope reports after the release of its lock (of `key`, or of a lock set's member
/// `key`) answered `released`, by the rule of [`LockGuard::release_after`].
pub(crate) fn release_verdict(released: Result<()>, work_succeeded: bool, key: &str) -> Result<()> {
    let Err(error) = released else {
        return Ok(());
    };
    match error {
        Error::LeaseLost { .. } | Error::NotHolder { .. } if work_succeeded => Err(error),
        Error::LeaseLost { .. } | Error::NotHolder { .. } => {
            tracing::warn!(
                key,
                %error,
                "dlock: the lock stopped protecting work that failed; returning the work's failure"
            );
            Ok(())
        }
        _ => {
            tracing::warn!(
                key,
                %error,
                "dlock: release after the work finished failed; the lock will expire at its ttl"
            );
            Ok(())
        }
    }
}
