//! A grant's claim on the session it lives on (a ZooKeeper session, a PostgreSQL
//! connection), given up exactly once: by the release, or by the drop of the lease's last
//! copy, whichever comes first.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use crate::lease::OwnerId;

/// The claim of one grant made by backend state `B` on session `S`.
pub(crate) struct GrantClaim<B, S>(Mutex<Option<Claim<B, S>>>);

/// What a claim holds until it is given up.
pub(crate) struct Claim<B, S> {
    /// The backend that made the grant (gone: its sessions are gone too).
    pub(crate) backend: Weak<B>,
    pub(crate) session: Arc<S>,
    pub(crate) owner: OwnerId,
}

impl<B, S> GrantClaim<B, S> {
    pub(crate) fn new(backend: &Arc<B>, session: Arc<S>, owner: OwnerId) -> Self {
        Self(Mutex::new(Some(Claim {
            backend: Arc::downgrade(backend),
            session,
            owner,
        })))
    }

    fn claim(&self) -> MutexGuard<'_, Option<Claim<B, S>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The grant's session if `backend` made it for `owner` and it is not given up yet.
    pub(crate) fn live(&self, backend: &Arc<B>, owner: &OwnerId) -> Option<Arc<S>> {
        self.claim()
            .as_ref()
            .filter(|claim| {
                std::ptr::eq(claim.backend.as_ptr(), Arc::as_ptr(backend)) && claim.owner == *owner
            })
            .map(|claim| Arc::clone(&claim.session))
    }

    /// Gives the claim up: what it held to the first caller, `None` after.
    pub(crate) fn give_up(&self) -> Option<Claim<B, S>> {
        self.claim().take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_is_live_for_its_backend_and_owner_and_given_up_once() {
        let (backend, other) = (Arc::new(1_u8), Arc::new(2_u8));
        let owner = OwnerId::from_string("a");
        let claim = GrantClaim::new(&backend, Arc::new("session"), owner.clone());
        assert!(claim.live(&backend, &owner).is_some());
        assert!(claim.live(&other, &owner).is_none());
        assert!(claim.live(&backend, &OwnerId::from_string("b")).is_none());
        assert_eq!(claim.give_up().map(|c| *c.session), Some("session"));
        assert!(claim.give_up().is_none() && claim.live(&backend, &owner).is_none());
    }
}
