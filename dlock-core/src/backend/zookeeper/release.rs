//! Renew, release, force release, and the background work that deletes nodes given up.

use std::sync::Arc;
use std::time::Instant;

use zookeeper_client::Error as ZkError;

use super::errors::{from_zk, timed, timed_raw};
use super::keys;
use super::session::Session;
use super::{Inner, ZkGrant};
use crate::backend::cleanup::{Releasing, delete_until_gone};
use crate::backend::watched_key::Watched;
use crate::lease::{Lease, ReleaseOutcome, RenewOutcome};
use crate::{LockMode, Result};

/// The grants of one session renewed together, with their place in the answer.
type Batch<'a> = Vec<(usize, &'a ZkGrant)>;

/// How old, as a fraction of the ttl, a confirmation of the session may be for a renewal of
/// watched nodes: at most 1/20 of a lease's time is given up to share one request among
/// every renewal of the session meanwhile.
pub(super) const CONFIRMATION_AGE_DIVISOR: u32 = 20;

impl Inner {
    /// Renews every lease by its session. A node not watched yet (or any more) is read with
    /// an exists-watch — it must still exist with its `czxid` and this session as its owner;
    /// the lease then counts from when the read was sent, and the node is watched from then
    /// on ([`node_watch`](super::node_watch)). A watched node needs no read: the lease counts
    /// from the session's latest confirmation ([`Session::confirmed`]). A grant whose session
    /// ended, or whose node is gone, is given up and answered [`RenewOutcome::NotOwner`].
    pub(super) async fn renew(self: &Arc<Self>, leases: &[Lease]) -> Result<Vec<RenewOutcome>> {
        let mut outcomes: Vec<RenewOutcome> =
            leases.iter().map(|_| RenewOutcome::NotOwner).collect();
        let mut batches: Vec<(Arc<Session>, Batch<'_>)> = Vec::new();
        for (index, lease) in leases.iter().enumerate() {
            let Some(grant) = lease.extension::<ZkGrant>() else {
                continue;
            };
            let Some(session) = grant.live_session(self, &lease.owner) else {
                continue; // not held through this backend (released, lost, or someone else's)
            };
            if session.is_lost() || grant.watch.watched() == Watched::Deleted {
                tracing::debug!(path = %grant.path, "dlock: ZooKeeper lock node or session gone at renewal");
                self.give_up(grant, false);
                continue;
            }
            match batches.iter_mut().find(|(s, _)| Arc::ptr_eq(s, &session)) {
                Some((_, batch)) => batch.push((index, grant)),
                None => batches.push((session, vec![(index, grant)])),
            }
        }
        for (session, batch) in batches {
            let (watched, unwatched): (Batch<'_>, Batch<'_>) = batch
                .into_iter()
                .partition(|(_, grant)| grant.watch.watched() == Watched::Yes);
            if !watched.is_empty() {
                let max_age = session.effective_ttl() / CONFIRMATION_AGE_DIVISOR;
                let confirmed = session.confirmed(max_age, self.timeout).await;
                for (index, grant) in watched {
                    outcomes[index] = match &confirmed {
                        // Deleted while the confirmation was on its way (the server sends
                        // the event before the answer, and the watch saw it).
                        Ok(_) if grant.watch.watched() == Watched::Deleted => {
                            self.give_up(grant, false);
                            RenewOutcome::NotOwner
                        }
                        Ok(at) => RenewOutcome::Renewed {
                            valid_from: (*at).max(leases[index].valid_from),
                        },
                        Err(error) => RenewOutcome::Failed(error.copy_for_batch("zookeeper")),
                    };
                }
            }
            let sent = Instant::now();
            let reads = unwatched.iter().map(|(_, grant)| {
                timed(
                    self.timeout,
                    "renew",
                    session.client.check_and_watch_stat(&grant.path),
                )
            });
            let reads = futures_util::future::join_all(reads).await;
            for ((index, grant), read) in unwatched.into_iter().zip(reads) {
                outcomes[index] = match read {
                    Ok((Some(stat), watcher))
                        if stat.czxid == grant.czxid
                            && stat.ephemeral_owner == session.id
                            && !session.is_lost() =>
                    {
                        self.node_watches.watch(&grant.watch, watcher);
                        RenewOutcome::Renewed {
                            valid_from: sent.max(leases[index].valid_from),
                        }
                    }
                    Ok(_) => {
                        tracing::debug!(path = %grant.path, "dlock: ZooKeeper lock node gone at renewal");
                        self.give_up(grant, false);
                        RenewOutcome::NotOwner
                    }
                    Err(error) => RenewOutcome::Failed(error),
                };
            }
        }
        Ok(outcomes)
    }

    /// Gives `grant` up, if it was not already: deletes its node (when `delete`) and ends its
    /// use of the session.
    fn give_up(self: &Arc<Self>, grant: &ZkGrant, delete: bool) {
        if let Some(session) = grant.give_up() {
            let paths = if delete {
                vec![grant.path.clone()]
            } else {
                Vec::new()
            };
            self.finish_nodes(session, paths, Vec::new(), true);
        }
    }

    /// Deletes the lock node. Its path holds the acquire's uuid, so it can only be this
    /// grant's node.
    pub(super) async fn release(self: &Arc<Self>, lease: &Lease) -> Result<ReleaseOutcome> {
        let Some(grant) = lease.extension::<ZkGrant>() else {
            return Ok(ReleaseOutcome::NotHeld);
        };
        if grant.live_session(self, &lease.owner).is_none() {
            return self.release_remote(lease, grant).await;
        }
        let Some(session) = grant.give_up() else {
            return Ok(ReleaseOutcome::NotHeld); // given up meanwhile
        };
        // Until the delete is answered, the node is deleted in the background if this future
        // is dropped or the delete fails.
        let (inner, in_use) = (Arc::clone(self), Arc::clone(&session));
        let mut pending = Releasing::new(grant.path.clone(), move |left: Option<String>| {
            inner.finish_nodes(in_use, left.into_iter().collect(), Vec::new(), true);
        });
        if session.is_lost() {
            pending.confirmed();
            return Ok(ReleaseOutcome::NotHeld);
        }
        let deleted = self.delete(&session, &grant.path).await?;
        pending.confirmed();
        Ok(if deleted {
            ReleaseOutcome::Released
        } else {
            ReleaseOutcome::NotHeld
        })
    }

    /// A lease this backend does not hold (released before, or a forged copy): delete the
    /// node only if it still has the lease's `czxid` and (a lock node) holds its owner id, at
    /// the version read (nothing changed in between).
    async fn release_remote(
        self: &Arc<Self>,
        lease: &Lease,
        grant: &ZkGrant,
    ) -> Result<ReleaseOutcome> {
        let session = self.checkout(lease.ttl).await?;
        let _in_use = InUse(self, &session);
        async {
            let read = timed_raw(
                self.timeout,
                "release",
                session.client.get_data(&grant.path),
            )
            .await?;
            let (data, stat) = match read {
                Ok(found) => found,
                Err(ZkError::NoNode) => return Ok(ReleaseOutcome::NotHeld),
                Err(error) => return Err(from_zk(error)),
            };
            // A permit's node holds the semaphore's limit, a lock node its owner id, a
            // candidate's its value: the czxid alone names the grant then.
            let owner_matches = matches!(lease.mode, LockMode::Permit { .. })
                || !grant.data_is_owner
                || data == lease.owner.as_str().as_bytes();
            if stat.czxid != grant.czxid || !owner_matches {
                return Ok(ReleaseOutcome::NotHeld);
            }
            let delete = session.client.delete(&grant.path, Some(stat.version));
            Ok(match timed_raw(self.timeout, "release", delete).await? {
                Ok(()) => ReleaseOutcome::Released,
                Err(ZkError::NoNode | ZkError::BadVersion) => ReleaseOutcome::NotHeld,
                Err(error) => return Err(from_zk(error)),
            })
        }
        .await
    }

    /// Deletes the holders of lock `full_key`, whoever they are: the first node if it is a
    /// mutex or write node, else the readers before the first one; every permit of a
    /// semaphore of that name; and a record keeping the lock after its release.
    pub(super) async fn force_release(self: &Arc<Self>, full_key: &str) -> Result<bool> {
        let path = keys::lock_path(full_key)?;
        let session = self.checkout(self.timeout).await?;
        let _in_use = InUse(self, &session);
        async {
            let mut victims = Vec::new();
            let children = self.children(&session, &path).await?;
            victims.extend(
                keys::holders(&children)
                    .into_iter()
                    .map(|c| format!("{path}/{c}")),
            );
            if children.iter().any(|c| c == keys::SEMAPHORE_LEASES) {
                let leases = format!("{path}/{}", keys::SEMAPHORE_LEASES);
                let permits = self.children(&session, &leases).await?;
                victims.extend(permits.into_iter().map(|c| format!("{leases}/{c}")));
            }
            // A record keeping the lock after its release goes too.
            victims.push(super::kept::record_path(&path));
            let mut any = false;
            for victim in victims {
                any |= self.delete(&session, &victim).await?;
            }
            Ok(any)
        }
        .await
    }

    /// The children of `path` (none when it does not exist).
    pub(super) async fn children(&self, session: &Session, path: &str) -> Result<Vec<String>> {
        match timed_raw(
            self.timeout,
            "get children",
            session.client.list_children(path),
        )
        .await?
        {
            Ok(children) => Ok(children),
            Err(ZkError::NoNode) => Ok(Vec::new()),
            Err(error) => Err(from_zk(error)),
        }
    }

    /// Deletes, in the background, the nodes at `paths` and the nodes of `(dir, uuid)` (found
    /// by name: their create was sent, its answer not seen), retrying until they are gone or
    /// their session is; then ends one use of the session if `end_use`.
    pub(super) fn finish_nodes(
        self: &Arc<Self>,
        session: Arc<Session>,
        paths: Vec<String>,
        by_uuid: Vec<(String, String)>,
        end_use: bool,
    ) {
        if (paths.is_empty() && by_uuid.is_empty()) || session.is_lost() {
            if end_use {
                self.end_use(&session);
            }
            return;
        }
        let inner = Arc::clone(self);
        self.background.spawn(async move {
            let what = paths.first().map_or("a lock node", String::as_str);
            let (on, paths, by_uuid) = (&session, &paths, &by_uuid);
            let attempt = || async {
                inner.delete_nodes(on, paths, by_uuid).await?;
                Ok(None)
            };
            delete_until_gone("zookeeper", what, attempt, session.lost()).await;
            if end_use {
                inner.end_use(&session);
            }
        });
    }

    async fn delete_nodes(
        &self,
        session: &Session,
        paths: &[String],
        by_uuid: &[(String, String)],
    ) -> Result<()> {
        // Newest first: a permit's lease before the semaphore's mutex, as Curator does.
        for path in paths.iter().rev() {
            self.delete(session, path).await?;
        }
        for (dir, uuid) in by_uuid {
            for child in self.children(session, dir).await? {
                if keys::is_node_of(&child, uuid) {
                    self.delete(session, &format!("{dir}/{child}")).await?;
                }
            }
        }
        Ok(())
    }
}

/// One use of a session by an operation that is not a grant, ended when dropped (the
/// operation finished, failed, or its future was dropped).
pub(super) struct InUse<'a>(pub(super) &'a Arc<Inner>, pub(super) &'a Arc<Session>);

impl Drop for InUse<'_> {
    fn drop(&mut self) {
        self.0.end_use(self.1);
    }
}
