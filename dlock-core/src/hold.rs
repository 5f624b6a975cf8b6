//! One backend grant, shared by the guards of its holder (nested and handed-off ones).
//!
//! The grant ends when the last guard goes: an explicit `release().await` releases inline,
//! a drop releases in the background.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::lease::{Lease, ReleaseOutcome};
use crate::lease_watch::LeaseWatch;
use crate::locker::LockerShared;
use crate::reentrancy::HolderId;
use crate::{Error, Result};

#[derive(Debug)]
pub(crate) struct Hold {
    locker: Arc<LockerShared>,
    lease: Lease,
    watch: Arc<LeaseWatch>,
    holders: Mutex<Vec<HolderId>>,
    released: AtomicBool,
}

impl Hold {
    pub(crate) fn new(locker: Arc<LockerShared>, lease: Lease, watch: Arc<LeaseWatch>) -> Self {
        Self {
            locker,
            lease,
            watch,
            holders: Mutex::new(Vec::new()),
            released: AtomicBool::new(false),
        }
    }

    pub(crate) fn full_key(&self) -> &str {
        &self.lease.key
    }

    pub(crate) fn lease(&self) -> &Lease {
        &self.lease
    }

    pub(crate) fn watch(&self) -> &Arc<LeaseWatch> {
        &self.watch
    }

    /// Lets `holder`'s nested acquires of this key re-enter this hold.
    pub(crate) fn add_holder(self: &Arc<Self>, holder: HolderId) {
        self.holders
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(holder);
        self.locker.reentrancy().register(holder, self);
    }

    /// The error a guard of this hold reports once the lease is lost.
    pub(crate) fn lost_error(&self) -> Option<Error> {
        if self.watch.check_deadline() {
            return None;
        }
        Some(Error::LeaseLost {
            key: self.watch.user_key().to_owned(),
            reason: self
                .watch
                .lost_reason()
                .unwrap_or(crate::LostReason::Expired),
        })
    }

    /// Releases the grant now (the caller owns the last reference).
    pub(crate) async fn release_now(self) -> Result<()> {
        self.released.store(true, Ordering::SeqCst);
        self.locker.watchdog().forget(&self.lease.owner);
        let lost = self.lost_error();
        let outcome = self.locker.release_lease(&self.lease).await;
        tracing::debug!(key = %self.watch.user_key(), ?outcome, "dlock: released");
        if let Some(lost) = lost {
            return Err(lost);
        }
        match outcome? {
            ReleaseOutcome::Released => Ok(()),
            ReleaseOutcome::NotHeld => Err(Error::NotHolder {
                key: self.watch.user_key().to_owned(),
            }),
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let holders =
            std::mem::take(&mut *self.holders.lock().unwrap_or_else(PoisonError::into_inner));
        self.locker
            .reentrancy()
            .forget_ended(&holders, &self.lease.key);
        if self.released.swap(true, Ordering::SeqCst) {
            return;
        }
        self.locker.watchdog().forget(&self.lease.owner);
        self.locker.release_in_background(self.lease.clone());
    }
}
