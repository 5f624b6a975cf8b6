//! Leader election on Curator's `LeaderSelector` layout: a candidate is a mutex node
//! (`_c_<uuid>-lock-<seq>`; with `?election=latch`, `LeaderLatch`'s `_c_<uuid>-latch-<seq>`)
//! whose data is its value (Curator's participant id), so the first
//! node in Curator's order leads and `getLeader()` / `getParticipants()` read its value. Here:
//! the proclaim (new data on the grant's own node) and the watch an observer follows.

use std::sync::Arc;

use zookeeper_client::{AddWatchMode, Error as ZkError, EventType};

use super::acquire::session_gone;
use super::errors::{from_zk, timed, timed_raw};
use super::keys;
use super::session::Session;
use super::{Inner, ZkGrant};
use crate::Result;
use crate::backend::HolderChanges;
use crate::lease::Lease;

impl Inner {
    /// Sets the grant's node data to `value`. The node's name holds the acquire's uuid and
    /// sequence number and it is ephemeral on the grant's session: only this grant's node
    /// can be there under that path.
    pub(super) async fn proclaim(self: &Arc<Self>, lease: &Lease, value: &str) -> Result<bool> {
        let Some(grant) = lease.extension::<ZkGrant>() else {
            return Ok(false);
        };
        let Some(session) = grant.live_session(self, &lease.owner) else {
            return Ok(false);
        };
        let set = session.client.set_data(&grant.path, value.as_bytes(), None);
        match timed_raw(self.timeout, "set data", set).await? {
            Ok(stat) => Ok(stat.czxid == grant.czxid),
            Err(ZkError::NoNode) => Ok(false),
            Err(error) => Err(from_zk(error)),
        }
    }

    /// One persistent recursive watch of the lock path (ZooKeeper 3.6's `addWatch`): every
    /// contender's node created or deleted, and every proclaim's new data, fire it, the path's
    /// own creation too. Set before this returns, and never re-armed (a one-shot watch
    /// re-set after each event would race the removal the client sends for the one it
    /// drops). Removed when the stream is dropped.
    pub(super) async fn holder_changes(self: &Arc<Self>, full_key: &str) -> Result<HolderChanges> {
        let path = keys::lock_path(full_key)?;
        let session = self.checkout(self.timeout).await?;
        let observing = Observing {
            inner: Arc::clone(self),
            session,
        };
        let watch = observing
            .session
            .client
            .watch(&path, AddWatchMode::PersistentRecursive);
        let watcher = timed(self.timeout, "add watch", watch).await?;
        // Ends after its first error: the core subscribes again (on a live session).
        Ok(Box::pin(futures_util::stream::unfold(
            Some((observing, watcher)),
            |state| async move {
                let (observing, mut watcher) = state?;
                let event = tokio::select! {
                    biased;
                    () = observing.session.lost() => None,
                    event = watcher.changed() => Some(event),
                };
                match event {
                    // After a terminal session event the watcher must not be polled again.
                    Some(event)
                        if event.event_type != EventType::Session
                            || !event.session_state.is_terminated() =>
                    {
                        Some((Ok(()), Some((observing, watcher))))
                    }
                    _ => Some((Err(session_gone(&observing.session)), None)),
                }
            },
        )))
    }
}

/// An observer's use of a session, given back when its stream is dropped.
struct Observing {
    inner: Arc<Inner>,
    session: Arc<Session>,
}

impl Drop for Observing {
    fn drop(&mut self) {
        self.inner.end_use(&self.session);
    }
}
