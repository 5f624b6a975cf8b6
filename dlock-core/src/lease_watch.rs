//! The live state of one granted lease, shared by its guards and the watchdog.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::lease::drift_margin;
use crate::meter::Meter;
use crate::{Error, LostReason};

/// Deadline bookkeeping and the lost signal of one lease.
#[derive(Debug)]
pub(crate) struct LeaseWatch {
    /// The full key (shared with the lease); the user's key starts at `user_key_at`.
    full_key: Arc<str>,
    user_key_at: usize,
    ttl: Duration,
    deadline: Mutex<Instant>,
    /// Set once, when the lease is lost; `lost_signal` wakes whoever waits for it.
    reason: OnceLock<LostReason>,
    lost_signal: Notify,
    /// Set when the grant was given back: from then on nothing waits for a loss.
    released: AtomicBool,
    /// The lock's metrics, and when it was granted.
    meter: Meter,
    granted_at: Instant,
    /// Set when the hold ended (lost or released), so it is counted once.
    ended: AtomicBool,
}

impl LeaseWatch {
    /// A watch whose local deadline is `valid_from + ttl - drift`, for the lock whose full
    /// key is `full_key` (the user's key being its suffix after `prefix_len` bytes), counted
    /// as held in `meter` from now on.
    pub(crate) fn new(
        full_key: Arc<str>,
        prefix_len: usize,
        ttl: Duration,
        valid_from: Instant,
        meter: Meter,
    ) -> Self {
        meter.held();
        Self {
            meter,
            granted_at: Instant::now(),
            ended: AtomicBool::new(false),
            user_key_at: prefix_len.min(full_key.len()),
            full_key,
            ttl,
            deadline: Mutex::new(Self::deadline_from(ttl, valid_from)),
            reason: OnceLock::new(),
            lost_signal: Notify::new(),
            released: AtomicBool::new(false),
        }
    }

    fn deadline_from(ttl: Duration, sent_at: Instant) -> Instant {
        sent_at + ttl.saturating_sub(drift_margin(ttl))
    }

    /// The lock's metrics.
    pub(crate) const fn meter(&self) -> &Meter {
        &self.meter
    }

    /// Counts the end of the hold, once: lost or released.
    fn ended(&self, outcome: &'static str) {
        if !self.ended.swap(true, Ordering::SeqCst) {
            self.meter.hold_ended(outcome, self.granted_at.elapsed());
        }
    }

    pub(crate) fn user_key(&self) -> &str {
        self.full_key
            .get(self.user_key_at..)
            .unwrap_or(&self.full_key)
    }

    /// The local conservative deadline.
    pub(crate) fn deadline(&self) -> Instant {
        *self.deadline.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a successful renewal whose request was sent at `sent_at`. A renewal that
    /// answers after the deadline already passed does not revive the lease (fail closed).
    pub(crate) fn renewed(&self, sent_at: Instant) {
        self.expire_if_due();
        if self.is_held() {
            let mut deadline = self.deadline.lock().unwrap_or_else(PoisonError::into_inner);
            *deadline = (*deadline).max(Self::deadline_from(self.ttl, sent_at));
        }
    }

    /// Marks the lease lost ([`LostReason::Expired`]) if its local deadline has passed and
    /// it is not lost already. Call it before [`is_held`](Self::is_held) to take the clock
    /// into account.
    pub(crate) fn expire_if_due(&self) {
        if self.reason.get().is_none() && Instant::now() >= self.deadline() {
            self.mark_lost(LostReason::Expired);
        }
    }

    /// Whether the lease is not known lost (as of the last [`expire_if_due`](Self::expire_if_due)
    /// or reported loss).
    pub(crate) fn is_held(&self) -> bool {
        self.reason.get().is_none()
    }

    /// The error for this lease if it is lost now (its deadline checked against the clock
    /// first): what every guard and wrapper reports once the lease is lost.
    pub(crate) fn lost_error(&self) -> Option<Error> {
        self.expire_if_due();
        self.lost_reason()
            .map(|reason| self.lost_error_with(reason))
    }

    /// The error for this lease, lost for `reason`.
    pub(crate) fn lost_error_with(&self, reason: LostReason) -> Error {
        Error::LeaseLost {
            key: self.user_key().to_owned(),
            reason,
        }
    }

    /// Marks the lease lost (the first reason wins) and wakes everyone waiting on it.
    pub(crate) fn mark_lost(&self, reason: LostReason) {
        if self.reason.set(reason).is_ok()
            && let Some(reason) = self.reason.get()
        {
            self.meter.lost(reason);
            self.ended("lost");
            // A shutdown is asked for; every other loss means work ran or may run unprotected.
            if *reason == LostReason::Shutdown {
                tracing::debug!(key = %self.user_key(), %reason, "dlock: lease lost");
            } else {
                tracing::warn!(key = %self.user_key(), %reason, "dlock: lease lost");
            }
        }
        self.lost_signal.notify_waiters();
    }

    /// Why the lease was lost, once it is.
    pub(crate) fn lost_reason(&self) -> Option<LostReason> {
        self.reason.get().cloned()
    }

    /// Records that the grant was given back: [`lost`](Self::lost) stays pending from now on.
    pub(crate) fn released(&self) {
        self.ended("released");
        self.released.store(true, Ordering::SeqCst);
        self.lost_signal.notify_waiters();
    }

    /// Resolves when the lease is lost, with the reason: when something reports the loss, or
    /// by itself when the local deadline passes (whatever else runs or not). Never resolves
    /// when the grant was released before it was lost.
    pub(crate) async fn lost(&self) -> LostReason {
        loop {
            let notified = self.lost_signal.notified();
            tokio::pin!(notified);
            // Registered before looking, so a loss right after the look still wakes us.
            notified.as_mut().enable();
            // A loss stands even if the grant was given back after it (a guard dropped as
            // its work was cancelled): only a release before any loss keeps this pending.
            if let Some(reason) = self.lost_reason() {
                return reason;
            }
            if self.released.load(Ordering::SeqCst) {
                return std::future::pending().await;
            }
            self.expire_if_due();
            if let Some(reason) = self.lost_reason() {
                return reason;
            }
            // Wakes at the deadline as it is now; a renewal meanwhile moves it, and the next
            // turn of the loop sleeps until the new one.
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep_until(self.deadline().into()) => {}
            }
        }
    }
}

/// A future that resolves when the first of `watches` is lost: which one, and why.
pub(crate) type FirstLost = std::pin::Pin<Box<dyn Future<Output = (usize, LostReason)> + Send>>;

/// Resolves when the first of `watches` is lost (a lock set is lost with any member).
pub(crate) fn first_lost(watches: &[Arc<LeaseWatch>]) -> FirstLost {
    if let [watch] = watches {
        let watch = Arc::clone(watch);
        return Box::pin(async move { (0, watch.lost().await) });
    }
    let each = watches.iter().enumerate().map(|(at, watch)| {
        let watch = Arc::clone(watch);
        Box::pin(async move { (at, watch.lost().await) })
    });
    let mut each: Vec<_> = each.collect();
    Box::pin(std::future::poll_fn(move |cx| {
        each.iter_mut()
            .find_map(|lost| match lost.as_mut().poll(cx) {
                std::task::Poll::Ready(found) => Some(found),
                std::task::Poll::Pending => None,
            })
            .map_or(std::task::Poll::Pending, std::task::Poll::Ready)
    }))
}
