//! One backend grant, shared by the guards of its holders (nested and handed-off ones).
//!
//! Every [`LockGuard`](crate::LockGuard) and unadopted [`HandOff`](crate::HandOff) is one
//! *share*, counted per holder. A holder's re-entry registration lasts while it has shares;
//! the grant is released by whoever gives up the last share — inline by an explicit
//! `release().await`, in the background on drop. If an inline release is cancelled half-way,
//! the hold's own drop still releases in the background.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::keeper::LeaseKeeper;
use crate::lease::{Lease, ReleaseOutcome};
use crate::lease_watch::LeaseWatch;
use crate::reentrancy::{HolderId, Reentrancy};
use crate::{Error, Kept, LockMode, Result};

/// Who owns a share: a task (or thread), or nobody yet (a hand-off in flight).
pub(crate) type ShareOwner = Option<HolderId>;

#[derive(Debug)]
pub(crate) struct Hold {
    keeper: Arc<LeaseKeeper>,
    reentrancy: Arc<Reentrancy<Self>>,
    lease: Lease,
    watch: Arc<LeaseWatch>,
    shares: Mutex<ShareCounts>,
    /// Until when, and why, the key stays held on the server once released.
    keep: Mutex<Option<(Instant, Kept)>>,
    released: AtomicBool,
}

impl Hold {
    pub(crate) fn new(
        keeper: Arc<LeaseKeeper>,
        reentrancy: Arc<Reentrancy<Self>>,
        lease: Lease,
        watch: Arc<LeaseWatch>,
    ) -> Self {
        Self {
            keeper,
            reentrancy,
            lease,
            watch,
            shares: Mutex::new(ShareCounts::default()),
            keep: Mutex::new(None),
            released: AtomicBool::new(false),
        }
    }

    pub(crate) const fn lease(&self) -> &Lease {
        &self.lease
    }

    pub(crate) const fn watch(&self) -> &Arc<LeaseWatch> {
        &self.watch
    }

    fn shares(&self) -> MutexGuard<'_, ShareCounts> {
        self.shares.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a share for `owner`; a holder's first share makes its nested acquires re-enter
    /// (a permit's never do).
    pub(crate) fn add_share(self: &Arc<Self>, owner: ShareOwner) {
        let first = { self.shares().add(owner) };
        let reenters = !matches!(self.lease.mode, LockMode::Permit { .. });
        if let (true, true, Some(holder)) = (first, reenters, owner) {
            self.reentrancy.register(holder, &self.lease.key, self);
        }
    }

    /// Makes the release leave the key held on the server until the instant given, as the
    /// [`Kept`] says (replacing an earlier such wish); `None`: release it outright.
    pub(crate) fn keep_until(&self, keep: Option<(Instant, Kept)>) {
        *self.keep.lock().unwrap_or_else(PoisonError::into_inner) = keep;
    }

    /// Whether this hold's release can keep the key held on the server.
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`] when the backend cannot keep a lock, or the hold is not
    /// exclusive.
    pub(crate) fn check_keeps(&self) -> Result<()> {
        self.keeper
            .backend()
            .capabilities()
            .check_keeps(self.lease.mode, "keep_after_release")
    }

    /// How much longer, and why, a release now should leave the key held: `None` when
    /// nothing is to be kept, the time is up, or the lease was lost (nothing of it is left
    /// to keep).
    fn left_to_keep(&self) -> Option<(Duration, Kept)> {
        let (until, kept) = (*self.keep.lock().unwrap_or_else(PoisonError::into_inner))?;
        let left = until.checked_duration_since(Instant::now())?;
        (left >= Duration::from_millis(1) && self.watch.lost_error().is_none())
            .then_some((left, kept))
    }

    /// Gives up one share of `owner`; returns `true` if it was the last share of all.
    pub(crate) fn drop_share(&self, owner: ShareOwner) -> bool {
        let (holder_done, last) = {
            let mut shares = self.shares();
            let holder_done = shares.remove_one(owner);
            (holder_done, shares.is_empty())
        };
        if let (true, Some(holder)) = (holder_done, owner) {
            self.reentrancy.forget(holder, &self.lease.key, self);
        }
        last
    }

    /// The error a guard of this hold reports once the lease is lost.
    pub(crate) fn lost_error(&self) -> Option<Error> {
        self.watch.lost_error()
    }

    /// Releases the grant now (the caller gave up the last share).
    pub(crate) async fn release_now(&self) -> Result<()> {
        let (lost, keep) = self.begin_release();
        let outcome = self.keeper.release_lease(&self.lease, keep).await;
        self.finish_release(lost, outcome)
    }

    /// Releases the grants of `holds` (their callers gave up the last shares) at once: the
    /// ones the release leaves nothing to keep for in one backend call where the backend can
    /// ([`LockBackend::release_together`](crate::backend::LockBackend::release_together)),
    /// every other one on its own, side by side. One result per hold, in order.
    pub(crate) async fn release_all_now(holds: &[Arc<Self>]) -> Vec<Result<()>> {
        let begun: Vec<_> = holds.iter().map(|hold| hold.begin_release()).collect();
        let together: Vec<usize> = (0..holds.len())
            .filter(|&at| begun[at].1.is_none())
            .collect();
        let mut outcomes: Vec<Option<Result<ReleaseOutcome>>> =
            holds.iter().map(|_| None).collect();
        if let (Some(first), true) = (holds.first(), together.len() >= 2) {
            let keeper = &first.keeper;
            if keeper.backend().capabilities().together {
                let leases: Vec<Lease> =
                    together.iter().map(|&at| holds[at].lease.clone()).collect();
                let answered = keeper
                    .bounded("release", keeper.backend().release_together(&leases))
                    .await;
                match answered {
                    Ok(Some(answers)) if answers.len() == together.len() => {
                        for (&at, answer) in together.iter().zip(answers) {
                            outcomes[at] = Some(Ok(answer));
                        }
                    }
                    Ok(_) => {} // not these leases: one by one
                    Err(error) => {
                        // Maybe applied: not sent again (a second try would say `NotHolder`).
                        let name = keeper.backend().capabilities().name;
                        for &at in &together {
                            outcomes[at] = Some(Err(error.copy_for_batch(name)));
                        }
                    }
                }
            }
        }
        let one_by_one = holds.iter().zip(&begun).zip(&outcomes).map(
            |((hold, (_, keep)), outcome)| async move {
                match outcome {
                    Some(_) => None,
                    None => Some(hold.keeper.release_lease(&hold.lease, *keep).await),
                }
            },
        );
        let released = futures_util::future::join_all(one_by_one).await;
        holds
            .iter()
            .zip(begun)
            .zip(outcomes.into_iter().zip(released))
            .map(|((hold, (lost, _)), (together, alone))| {
                let outcome = together
                    .or(alone)
                    .unwrap_or_else(|| unreachable!("released together or alone"));
                hold.finish_release(lost, outcome)
            })
            .collect()
    }

    /// The first half of a release: the watchdog lets go, and what the release must report
    /// (a loss) and keep is read before the watch learns of the release.
    fn begin_release(&self) -> (Option<Error>, Option<(Duration, Kept)>) {
        self.keeper.watchdog().forget(&self.lease.owner);
        let lost = self.lost_error();
        let keep = self.left_to_keep();
        self.watch.released();
        (lost, keep)
    }

    /// The second half of a release: the backend answered `outcome`.
    fn finish_release(&self, lost: Option<Error>, outcome: Result<ReleaseOutcome>) -> Result<()> {
        // Only now: if the release is dropped before this, `Drop` releases in the background.
        self.released.store(true, Ordering::SeqCst);
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
        let owners = self.shares().take_owners();
        for holder in owners.into_iter().flatten() {
            self.reentrancy.forget(holder, &self.lease.key, self);
        }
        if self.released.swap(true, Ordering::SeqCst) {
            return;
        }
        let keep = self.left_to_keep();
        self.watch.released();
        self.keeper.watchdog().forget(&self.lease.owner);
        self.keeper.release_in_background(self.lease.clone(), keep);
    }
}

/// Share counts per owner (nearly always one owner: the task that acquired).
#[derive(Debug, Default)]
struct ShareCounts(Vec<(ShareOwner, usize)>);

impl ShareCounts {
    /// Adds a share of `owner`; returns whether it is that owner's first.
    fn add(&mut self, owner: ShareOwner) -> bool {
        if let Some((_, count)) = self.0.iter_mut().find(|(o, _)| *o == owner) {
            *count += 1;
            return false;
        }
        self.0.push((owner, 1));
        true
    }

    /// Removes a share of `owner`; returns whether that owner has none left.
    fn remove_one(&mut self, owner: ShareOwner) -> bool {
        let Some(at) = self.0.iter().position(|(o, _)| *o == owner) else {
            return true;
        };
        self.0[at].1 -= 1;
        if self.0[at].1 > 0 {
            return false;
        }
        self.0.swap_remove(at);
        true
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Empties the counts, returning who had shares.
    fn take_owners(&mut self) -> Vec<ShareOwner> {
        self.0.drain(..).map(|(owner, _)| owner).collect()
    }
}
