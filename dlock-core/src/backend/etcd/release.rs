//! Renew, release, force release, and the background work that deletes keys given up.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, GetOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
};

use super::keys::LockName;
use super::session::Session;
use super::{Delete, EtcdGrant, Inner};
use crate::lease::{Lease, ReleaseOutcome, RenewOutcome};
use crate::{Error, Result};

impl Inner {
    /// Answers from the keepalives, after checking in one transaction that every lock key
    /// still exists with its create revision. A grant whose session is lost, or whose key is
    /// gone, is given up and answered [`RenewOutcome::NotOwner`].
    pub(super) async fn renew(self: &Arc<Self>, leases: &[Lease]) -> Result<Vec<RenewOutcome>> {
        let mut outcomes: Vec<Option<RenewOutcome>> = Vec::with_capacity(leases.len());
        let mut checks = Vec::new();
        for (index, lease) in leases.iter().enumerate() {
            let grant = lease
                .extension::<EtcdGrant>()
                .filter(|grant| grant.is_live_grant_of(self));
            match grant.and_then(|grant| Some((grant, grant.session()?))) {
                Some((grant, session)) if !session.is_lost() => {
                    checks.push((index, grant, session));
                    outcomes.push(None);
                }
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
        if !grant.is_live_grant_of(self) {
            return self.release_remote(lease).await;
        }
        let Some(session) = grant.give_up() else {
            return Ok(ReleaseOutcome::NotHeld); // given up meanwhile
        };
        // Until the delete is confirmed, the key is deleted in the background if this future
        // is dropped or the delete fails.
        let mut pending = Releasing {
            inner: Arc::clone(self),
            key: grant.key.clone(),
            session: Some(session),
            create_revision: Some(grant.create_revision),
        };
        let deleted = self.delete_exact(&grant.key, grant.create_revision).await?;
        pending.create_revision = None;
        Ok(if deleted {
            ReleaseOutcome::Released
        } else {
            ReleaseOutcome::NotHeld
        })
    }

    /// A lease this backend does not hold (released before, or a forged copy): delete the key
    /// only if it still carries this owner and create revision.
    async fn release_remote(&self, lease: &Lease) -> Result<ReleaseOutcome> {
        let Some(grant) = lease.extension::<EtcdGrant>() else {
            return Ok(ReleaseOutcome::NotHeld);
        };
        let txn = Txn::new()
            .when([
                Compare::create_revision(
                    grant.key.as_str(),
                    CompareOp::Equal,
                    grant.create_revision,
                ),
                Compare::value(grant.key.as_str(), CompareOp::Equal, lease.owner.as_str()),
            ])
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
        let mut retry_in = Duration::from_millis(50);
        loop {
            if session.is_lost() || self.shutdown.is_cancelled() {
                break;
            }
            let outcome = match &delete {
                Delete::Nothing => break,
                Delete::Exact(create_revision) => self.delete_exact(&key, *create_revision).await,
                Delete::Unknown(owner) => {
                    let txn = Txn::new()
                        .when([Compare::value(
                            key.as_str(),
                            CompareOp::Equal,
                            owner.as_str(),
                        )])
                        .and_then([TxnOp::delete(key.as_str(), None)]);
                    self.txn("release", txn)
                        .await
                        .map(|reply| reply.succeeded())
                }
            };
            let wait = match outcome {
                Ok(deleted) if second_look && !deleted => {
                    second_look = false;
                    self.timeout
                }
                Ok(_) => break,
                Err(error) => {
                    tracing::debug!(%key, %error, "dlock: deleting an etcd lock key failed; retrying");
                    retry_in = (retry_in * 2).min(Duration::from_secs(1));
                    retry_in
                }
            };
            tokio::select! {
                () = session.lost() => break,
                () = self.shutdown.cancelled() => break,
                () = tokio::time::sleep(wait) => {}
            }
        }
        self.keys().reserved.remove(&key);
        self.end_use(&session);
    }
}

/// A release in flight: dropped before its delete is confirmed, it deletes in the background.
struct Releasing {
    inner: Arc<Inner>,
    key: String,
    session: Option<Arc<Session>>,
    /// `Some` until the delete is confirmed.
    create_revision: Option<i64>,
}

impl Drop for Releasing {
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            let delete = self.create_revision.map_or(Delete::Nothing, Delete::Exact);
            self.inner
                .finish_key(std::mem::take(&mut self.key), session, delete);
        }
    }
}
