//! [`Protected`]: work that runs only while its lock's lease is valid.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use crate::Result;
use crate::lease_watch::{FirstLost, LeaseWatch, first_lost};

pin_project! {
    /// Work running under a lock ([`LockGuard::protect`](crate::LockGuard::protect)): it is
    /// polled only while the lease is valid, and ends with [`Error::LeaseLost`] instead once
    /// the lease is lost.
    ///
    /// Every poll first compares the lease's local deadline with the clock, so work that was
    /// paused past its lease — a GC pause, swap, a stalled VM, a blocked runtime thread — is
    /// never resumed after the pause, even if nothing else has noticed the loss yet; and the
    /// loss wakes the task by itself (at the deadline, or when a renewal is refused), so work
    /// waiting on something else is dropped promptly. Work that *completes* in a poll during
    /// which the lease ran out returns its output; the loss is reported by the release that
    /// follows ([`LockGuard::release`](crate::LockGuard::release) returns `LeaseLost`).
    ///
    /// What no library can stop: code that keeps running *without reaching an await point*
    /// after the pause (the write that was already under way when the process froze). That
    /// is what fencing tokens are for — the protected resource refuses a write whose token is
    /// older than one it has seen ([`LockGuard::fencing_token`](crate::LockGuard::fencing_token)).
    ///
    /// Keep the guard alive while the work runs: once the guard is released the work is no
    /// longer protected, and it is stopped at the lease's last deadline.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// use std::time::Duration;
    /// let locker = dlock_core::Locker::memory();
    /// let guard = locker.lock("job").ttl(Duration::from_millis(50)).watchdog(false).await?;
    /// let outcome = guard
    ///     .protect(async {
    ///         std::thread::sleep(Duration::from_millis(80)); // the process freezes past the ttl
    ///         tokio::task::yield_now().await; // the next await point...
    ///         unreachable!("...is where the work stops");
    ///     })
    ///     .await;
    /// assert!(matches!(outcome, Err(dlock_core::Error::LeaseLost { .. })));
    /// # Ok(()) }
    /// ```
    #[must_use = "futures do nothing unless polled"]
    pub struct Protected<F> {
        #[pin]
        work: F,
        // The lock's lease, or every lease of a lock set: the work stops when any is lost.
        watches: Box<[Arc<LeaseWatch>]>,
        lost: FirstLost,
    }
}

impl<F> Protected<F> {
    /// `work`, stopped when any of `watches` is lost.
    pub(crate) fn new(work: F, watches: Box<[Arc<LeaseWatch>]>) -> Self {
        let lost = first_lost(&watches);
        Self {
            work,
            watches,
            lost,
        }
    }
}

impl<F: Future> Future for Protected<F> {
    type Output = Result<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Some(error) = this.watches.iter().find_map(|watch| watch.lost_error()) {
            return Poll::Ready(Err(error));
        }
        if let Poll::Ready((at, reason)) = this.lost.as_mut().poll(cx) {
            return Poll::Ready(Err(this.watches[at].lost_error_with(reason)));
        }
        this.work.poll(cx).map(Ok)
    }
}

impl<F> fmt::Debug for Protected<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys: Vec<&str> = self.watches.iter().map(|watch| watch.user_key()).collect();
        f.debug_struct("Protected")
            .field("keys", &keys)
            .field("held", &self.watches.iter().all(|watch| watch.is_held()))
            .finish_non_exhaustive()
    }
}
