//! Renew, release, force release, and the background work that deletes keys given up.

use std::sync::Arc;

use std::time::{Duration, Instant};

use etcd_client::{
    Compare, CompareOp, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
};

use super::keys::LockName;
use super::session::{self, Session};
use super::{Delete, EtcdGrant, Inner};
use crate::backend::cleanup::{Releasing, delete_until_gone};
use crate::backend::watched_key::Watched;
use crate::lease::{Lease, ReleaseOutcome, RenewOutcome};
use crate::{Error, Kept, Result};

impl Inner {
    /// Answers from the keepalives. A key not watched yet (or any more) is first checked, in
    /// one transaction for the batch, to exist still with its create revision, and then
    /// watched for its deletion from the revision read ([`key_watch`](super::key_watch)); a
    /// watched key needs no request. A grant whose session is lost, or whose key is gone, is
    /// given up and answered [`RenewOutcome::NotOwner`].
    pub(super) async fn renew(self: &Arc<Self>, leases: &[Lease]) -> Result<Vec<RenewOutcome>> {
        let mut outcomes: Vec<Option<RenewOutcome>> = Vec::with_capacity(leases.len());
        let mut checks = Vec::new();
        for (index, lease) in leases.iter().enumerate() {
            let grant = lease.extension::<EtcdGrant>();
            match grant.and_then(|grant| Some((grant, grant.live_session(self, &lease.owner)?))) {
                Some((grant, session)) if !session.is_lost() => match grant.watch.watched() {
                    Watched::Yes => outcomes.push(Some(RenewOutcome::Renewed {
                        valid_from: session.last_ok().max(lease.valid_from),
                    })),
                    Watched::No => {
                        checks.push((index, grant, session));
                        outcomes.push(None);
                    }
                    Watched::Deleted => {
                        tracing::debug!(key = %grant.key, "dlock: etcd lock key deleted");
                        self.give_up(grant, Delete::Nothing);
                        outcomes.push(Some(RenewOutcome::NotOwner));
                    }
                },
                Some((grant, _lost)) => {
                    self.give_up(grant, Delete::Nothing);
                    outcomes.push(Some(RenewOutcome::NotOwner));
                }
                // Not held through this backend (released, lost, or someone else's).
                None => outcomes.push(Some(RenewOutcome::NotOwner)),
            }
        }
        if !checks.is_empty() {
            let gets: Vec<TxnOp> = checks
                .iter()
                .map(|(_, grant, _)| {
                    TxnOp::get(grant.key.as_str(), Some(GetOptions::new().with_keys_only()))
                })
                .collect();
            let reply = self.txn("renew", Txn::new().and_then(gets)).await?;
            let read_at = reply.header().map_or(0, |header| header.revision());
            let ranges: Vec<_> = reply
                .op_responses()
                .into_iter()
                .map(|op| match op {
                    TxnOpResponse::Get(mut get) => get.take_kvs(),
                    _ => Vec::new(),
                })
                .collect();
            if ranges.len() != checks.len() {
                return Err(Error::refused(
                    "etcd",
                    "the renewal transaction returned the wrong number of results",
                ));
            }
            for ((index, grant, session), kvs) in checks.into_iter().zip(ranges) {
                let exists = kvs
                    .iter()
                    .any(|kv| kv.create_revision() == grant.create_revision);
                outcomes[index] = Some(if exists && !session.is_lost() {
                    if read_at > 0 {
                        self.key_watches.watch(&grant.key, read_at, &grant.watch);
                    }
                    RenewOutcome::Renewed {
                        valid_from: session.last_ok().max(leases[index].valid_from),
                    }
                } else {
                    tracing::debug!(key = %grant.key, "dlock: etcd lock key gone at renewal");
                    self.give_up(grant, Delete::Nothing);
                    RenewOutcome::NotOwner
                });
            }
        }
        Ok(outcomes
            .into_iter()
            .map(|o| o.unwrap_or(RenewOutcome::NotOwner))
            .collect())
    }

    /// Gives `grant` up, if it was not already: deletes its key as `delete` says and ends
    /// its use of the session.
    fn give_up(self: &Arc<Self>, grant: &EtcdGrant, delete: Delete) {
        if let Some(session) = grant.give_up() {
            self.finish_key(grant.key.clone(), session, delete);
        }
    }

    /// Owner-checked delete of the lock key (its create revision must match).
    pub(super) async fn release(self: &Arc<Self>, lease: &Lease) -> Result<ReleaseOutcome> {
        let Some(grant) = lease.extension::<EtcdGrant>() else {
            return Ok(ReleaseOutcome::NotHeld);
        };
        if grant.live_session(self, &lease.owner).is_none() {
            return self.release_remote(lease).await;
        }
        let Some(session) = grant.give_up() else {
            return Ok(ReleaseOutcome::NotHeld); // given up meanwhile
        };
        // Until the delete is confirmed, the key is deleted in the background if this future
        // is dropped or the delete fails.
        let (inner, key) = (Arc::clone(self), grant.key.clone());
        let mut pending = Releasing::new(grant.create_revision, move |left: Option<i64>| {
            inner.finish_key(key, session, left.map_or(Delete::Nothing, Delete::Exact));
        });
        let deleted = self.delete_exact(&grant.key, grant.create_revision).await?;
        pending.confirmed();
        Ok(if deleted {
            ReleaseOutcome::Released
        } else {
            ReleaseOutcome::NotHeld
        })
    }

    /// Owner-checked: moves the lock key onto a lease of its own that lasts `keep` (rounded
    /// up to whole seconds) and that nothing renews, with `<owner>|<kept>` as its value, in
    /// one transaction checked by create revision and owner. The key keeps its name and create
    /// revision, so the waiters queued behind it stay behind it until the lease expires; the
    /// grant's session lets go of it (the key is no longer on it) and may end. A key that is
    /// not this owner's any more is left alone, and the new lease revoked. A keep whose
    /// outcome is unknown is treated as a release: the key is deleted in the background and
    /// the new lease revoked.
    pub(super) async fn release_keeping(
        self: &Arc<Self>,
        lease: &Lease,
        keep: Duration,
        kept: Kept,
    ) -> Result<ReleaseOutcome> {
        let Some(grant) = lease.extension::<EtcdGrant>() else {
            return Ok(ReleaseOutcome::NotHeld);
        };
        let (record_lease, record_ttl) =
            session::grant_lease(&self.client, self.timeout, keep).await?;
        let owner = lease.owner.as_str();
        let txn = Txn::new()
            .when(grant.still_owned_by(owner))
            .and_then([TxnOp::put(
                grant.key.as_str(),
                format!("{owner}|{kept}"),
                Some(PutOptions::new().with_lease(record_lease)),
            )]);
        let moved = self.txn("release", txn).await;
        let outcome = match &moved {
            Ok(reply) if reply.succeeded() => ReleaseOutcome::Released,
            Ok(_) | Err(_) => {
                self.revoke(record_lease);
                ReleaseOutcome::NotHeld
            }
        };
        let session = grant
            .live_session(self, &lease.owner)
            .and_then(|_| grant.give_up());
        if let Some(session) = session {
            match (&moved, outcome) {
                (Ok(_), ReleaseOutcome::Released) => {
                    // The key stays, on its own lease: no later grant of this session puts a
                    // key of the same name until the lease has surely run out.
                    let mut keys = self.keys();
                    keys.reserved.remove(&grant.key);
                    let until = Instant::now() + record_ttl + Duration::from_secs(1);
                    keys.kept.insert(grant.key.clone(), until);
                    drop(keys);
                    self.end_use(&session);
                }
                (Ok(_), _) => self.finish_key(grant.key.clone(), session, Delete::Nothing),
                (Err(_), _) => self.finish_key(
                    grant.key.clone(),
                    session,
                    Delete::Exact(grant.create_revision),
                ),
            }
        }
        moved.map(|_| outcome)
    }

    /// A lease this backend does not hold (released before, or a forged copy): delete the key
    /// only if it still carries this owner and create revision.
    async fn release_remote(&self, lease: &Lease) -> Result<ReleaseOutcome> {
        let Some(grant) = lease.extension::<EtcdGrant>() else {
            return Ok(ReleaseOutcome::NotHeld);
        };
        let txn = Txn::new()
            .when(grant.still_owned_by(lease.owner.as_str()))
            .and_then([TxnOp::delete(grant.key.as_str(), None)]);
        let reply = self.txn("release", txn).await?;
        Ok(if reply.succeeded() {
            ReleaseOutcome::Released
        } else {
            ReleaseOutcome::NotHeld
        })
    }

    /// Deletes the holder of lock `full_key` (its lowest key), whoever it is.
    pub(super) async fn force_release(&self, full_key: &str) -> Result<bool> {
        let name = LockName::new(&self.namespace, full_key);
        let found = super::call(self.timeout, "force_release", || {
            let mut kv = self.client.kv_client();
            let options = GetOptions::new()
                .with_prefix()
                .with_sort(SortTarget::Create, SortOrder::Ascend)
                .with_keys_only();
            let prefix = name.prefix().to_owned();
            async move { kv.get(prefix, Some(options)).await }
        })
        .await?;
        let Some(holder) = found.kvs().iter().find(|kv| name.is_direct_child(kv.key())) else {
            return Ok(false);
        };
        let txn = Txn::new()
            .when([Compare::create_revision(
                holder.key(),
                CompareOp::Equal,
                holder.create_revision(),
            )])
            .and_then([TxnOp::delete(holder.key(), None)]);
        Ok(self.txn("force_release", txn).await?.succeeded())
    }

    /// Deletes `key` if it has `create_revision`; `Ok(false)` if it was not there.
    pub(super) async fn delete_exact(&self, key: &str, create_revision: i64) -> Result<bool> {
        let txn = Txn::new()
            .when([Compare::create_revision(
                key,
                CompareOp::Equal,
                create_revision,
            )])
            .and_then([TxnOp::delete(key, None)]);
        Ok(self.txn("release", txn).await?.succeeded())
    }

    /// Deletes a key given up, retrying until it is gone, its lease is, or the backend is
    /// dropped; then frees it.
    pub(super) async fn delete_in_background(
        self: Arc<Self>,
        key: String,
        session: Arc<Session>,
        delete: Delete,
    ) {
        // A put whose outcome is unknown may still be applied after a first delete: look again
        // once the operation timeout has passed.
        let mut second_look = matches!(delete, Delete::Unknown(_));
        let attempt = || {
            let look_again = std::mem::take(&mut second_look);
            let (inner, key, delete) = (&self, &key, &delete);
            async move {
                let deleted = match delete {
                    Delete::Nothing => return Ok(None),
                    Delete::Exact(create_revision) => {
                        inner.delete_exact(key, *create_revision).await?
                    }
                    Delete::Unknown(value) => {
                        let txn = Txn::new()
                            .when([Compare::value(
                                key.as_str(),
                                CompareOp::Equal,
                                value.as_str(),
                            )])
                            .and_then([TxnOp::delete(key.as_str(), None)]);
                        inner.txn("release", txn).await?.succeeded()
                    }
                };
                Ok((look_again && !deleted).then_some(inner.timeout))
            }
        };
        let stopped = async {
            tokio::select! {
                () = session.lost() => {}
                () = self.shutdown.cancelled() => {}
            }
        };
        delete_until_gone("etcd", &key, attempt, stopped).await;
        self.keys().reserved.remove(&key);
        self.end_use(&session);
    }
}

impl EtcdGrant {
    /// The transaction guard that the grant's key is still the one it put (create revision)
    /// and, for a lock, still carries `owner` as its value (a kept record does not). An
    /// election's key shows its candidate's value, which a proclaim changes: its create
    /// revision alone names the grant.
    fn still_owned_by(&self, owner: &str) -> Vec<Compare> {
        let mut guard = vec![Compare::create_revision(
            self.key.as_str(),
            CompareOp::Equal,
            self.create_revision,
        )];
        if self.value_is_owner {
            guard.push(Compare::value(self.key.as_str(), CompareOp::Equal, owner));
        }
        guard
    }
}
