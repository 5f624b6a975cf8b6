//! The end of a server session that holds grants — an etcd lease, a ZooKeeper session, a
//! PostgreSQL connection: recorded once, with why, and every grant on it reported lost to the
//! Locker (`LockBackend::lost_leases`). etcd reports its losses through renewals and uses
//! only the end and its reason.

use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::error::LostReason;
use crate::lease::{LostLease, OwnerId};

/// Whether a session ended, why, and the grants on it while it lives.
#[derive(Debug, Default)]
pub(crate) struct SessionEnd {
    ended: CancellationToken,
    reason: OnceLock<String>,
    /// The owners of the grants on the session; `None` once it ended.
    grants: Mutex<Option<HashSet<OwnerId>>>,
}

impl SessionEnd {
    pub(crate) fn new() -> Self {
        Self {
            grants: Mutex::new(Some(HashSet::new())),
            ..Self::default()
        }
    }

    fn grants(&self) -> MutexGuard<'_, Option<HashSet<OwnerId>>> {
        self.grants.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the session has ended.
    pub(crate) fn is_ended(&self) -> bool {
        self.ended.is_cancelled()
    }

    /// Resolves when the session has ended.
    pub(crate) async fn ended(&self) {
        self.ended.cancelled().await;
    }

    /// Why the session ended (or is ending), else `default`.
    pub(crate) fn reason_or(&self, default: impl FnOnce() -> String) -> String {
        self.reason.get().cloned().unwrap_or_else(default)
    }

    /// Whether a reason was given: the session ended or is being ended.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn has_reason(&self) -> bool {
        self.reason.get().is_some()
    }

    /// Gives the reason before the session ends (it is being closed); the first reason given
    /// stays.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn give_reason(&self, reason: impl Into<String>) {
        let _ = self.reason.set(reason.into());
    }

    /// Ends the session (the first reason given stays) and returns the grants that were on
    /// it: all of them to the first caller, none after.
    pub(crate) fn end(&self, reason: impl Into<String>) -> Vec<OwnerId> {
        self.give_reason(reason);
        let grants = self.grants().take();
        self.ended.cancel();
        grants.map(|g| g.into_iter().collect()).unwrap_or_default()
    }

    /// Records a grant, to be reported lost when the session ends. `false` if it has ended
    /// already: nobody will report the grant lost.
    #[cfg_attr(
        not(any(feature = "zookeeper", feature = "postgres")),
        allow(dead_code)
    )]
    pub(crate) fn add_grant(&self, owner: &OwnerId) -> bool {
        let mut grants = self.grants();
        let Some(grants) = grants.as_mut() else {
            return false;
        };
        grants.insert(owner.clone());
        true
    }

    /// Forgets a grant given up.
    #[cfg_attr(
        not(any(feature = "zookeeper", feature = "postgres")),
        allow(dead_code)
    )]
    pub(crate) fn remove_grant(&self, owner: &OwnerId) {
        if let Some(grants) = self.grants().as_mut() {
            grants.remove(owner);
        }
    }

    /// Ends the session and reports each of its grants lost on `losses`, with `reason` (the
    /// whole story: a reason given earlier stays the session's own); returns how many.
    #[cfg_attr(
        not(any(feature = "zookeeper", feature = "postgres")),
        allow(dead_code)
    )]
    pub(crate) fn end_and_report(
        &self,
        reason: impl Into<String>,
        losses: &broadcast::Sender<LostLease>,
    ) -> usize {
        let reason = reason.into();
        let owners = self.end(reason.clone());
        for owner in &owners {
            let _ = losses.send(LostLease {
                owner: owner.clone(),
                reason: LostReason::SessionLost(reason.clone()),
            });
        }
        owners.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_are_reported_once() {
        let end = SessionEnd::new();
        let (a, b) = (OwnerId::from_string("a"), OwnerId::from_string("b"));
        assert!(end.add_grant(&a) && end.add_grant(&b));
        end.remove_grant(&b);
        end.give_reason("closed by dlock");
        assert!(!end.is_ended() && end.has_reason());
        let (losses, mut lost) = broadcast::channel(8);
        assert_eq!(end.end_and_report("closed by dlock: EOF", &losses), 1);
        let first = lost.try_recv().expect("one loss");
        assert_eq!(first.owner, a);
        assert!(
            matches!(first.reason, LostReason::SessionLost(ref why) if why == "closed by dlock: EOF")
        );
        assert!(end.is_ended());
        assert_eq!(end.reason_or(String::new), "closed by dlock");
        assert_eq!(end.end_and_report("again", &losses), 0);
        assert!(!end.add_grant(&b), "a grant after the end is refused");
        assert!(lost.try_recv().is_err());
    }
}
