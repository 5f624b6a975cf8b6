//! A lock set in one round trip each way: one transaction puts every key of the set, each
//! under its request's lease, if every lock of the set is free (else it puts nothing and
//! counts, in the same revision, each lock's holders and waiters to say which key was busy
//! first); one transaction deletes them all, each owner-checked on its own.

use std::sync::Arc;

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse};
use futures_util::future::join_all;

use super::acquire::{FRESHNESS, PendingKey, revision};
use super::keys::LockName;
use super::{Delete, EtcdGrant, Inner, errors};
use crate::backend::cleanup::Releasing;
use crate::lease::{AcquireAllOutcome, AcquireRequest, Lease, ReleaseOutcome};
use crate::{Error, LockMode, Result};

/// etcd's default `--max-txn-ops`: a set with more keys than one transaction may hold is
/// taken key by key.
const MAX_TXN_OPS: usize = 128;

impl Inner {
    /// Takes every request's lock in one transaction, or none of them. `None` for a set this
    /// path does not take: permits (whether fewer than the limit hold cannot be a
    /// transaction's condition), more keys than a transaction may hold, or a lease found
    /// gone (the key-by-key path acquires on a fresh one).
    pub(super) async fn acquire_together(
        self: &Arc<Self>,
        requests: &[AcquireRequest],
    ) -> Result<Option<AcquireAllOutcome>> {
        let permits = requests
            .iter()
            .any(|req| matches!(req.mode, LockMode::Permit { .. }));
        if permits || requests.len() > MAX_TXN_OPS {
            return Ok(None);
        }
        let names: Vec<LockName> = requests
            .iter()
            .map(|req| LockName::new(&self.namespace, &req.key))
            .collect();
        // Each key reserved on its request's session before anything is sent: dropped
        // (cancelled, failed, busy) they are settled as a single acquire's key is.
        let mut pending: Vec<PendingKey> = Vec::with_capacity(requests.len());
        for (req, name) in requests.iter().zip(&names) {
            pending.push(self.pending_key(req, name).await?);
        }
        let blockers_end =
            |req: &AcquireRequest, name: &LockName| name.blockers_end(req.mode == LockMode::Shared);
        let free: Vec<Compare> = requests
            .iter()
            .zip(&names)
            .map(|(req, name)| {
                Compare::create_revision(name.prefix(), CompareOp::Equal, 0)
                    .with_range(blockers_end(req, name))
            })
            .collect();
        let puts: Vec<TxnOp> = requests
            .iter()
            .zip(&pending)
            .map(|(req, key)| {
                TxnOp::put(
                    key.key.as_str(),
                    super::shown(req),
                    Some(PutOptions::new().with_lease(key.session().id)),
                )
            })
            .collect();
        let counts: Vec<TxnOp> = requests
            .iter()
            .zip(&names)
            .map(|(req, name)| {
                let options = GetOptions::new()
                    .with_range(blockers_end(req, name))
                    .with_count_only();
                TxnOp::get(name.prefix(), Some(options))
            })
            .collect();
        let txn = Txn::new().when(free).and_then(puts).or_else(counts);
        // Recent keepalives, in parallel, as a single acquire asks for one.
        let fresh = join_all(
            pending
                .iter()
                .map(|key| key.session().fresh(key.session().ttl / FRESHNESS)),
        );
        let (reply, valid_from) = tokio::join!(self.txn("acquire", txn), fresh);
        let reply = match reply {
            // The key-by-key path meets the same lease, marks its session lost and acquires
            // on a fresh one.
            Err(error) if errors::is_lease_not_found(&error) => {
                for key in &mut pending {
                    key.delete = Delete::Nothing; // nothing was put: the transaction failed
                }
                return Ok(None);
            }
            reply => reply?,
        };
        if !reply.succeeded() {
            for key in &mut pending {
                key.delete = Delete::Nothing; // nothing was put
            }
            let index = reply
                .op_responses()
                .into_iter()
                .position(|op| matches!(op, TxnOpResponse::Get(get) if get.count() > 0))
                .unwrap_or(0);
            return Ok(Some(AcquireAllOutcome::Busy {
                index,
                retry_after: None,
            }));
        }
        let create_revision = revision(&reply)?;
        let leases = requests
            .iter()
            .zip(pending)
            .zip(valid_from)
            .map(|((req, mut key), valid_from)| {
                key.delete = Delete::Exact(create_revision);
                self.granted(req, key, create_revision, valid_from)
            })
            .collect();
        Ok(Some(AcquireAllOutcome::Acquired(leases)))
    }

    /// Deletes a set's keys in one transaction, each checked by its create revision in a
    /// transaction of its own inside it, so that each answers for itself. `None`, having
    /// changed nothing, when a lease is not held through a live session of this backend (the
    /// key-by-key path releases it), or for more keys than a transaction may hold.
    pub(super) async fn release_together(
        self: &Arc<Self>,
        leases: &[Lease],
    ) -> Result<Option<Vec<ReleaseOutcome>>> {
        if leases.len() > MAX_TXN_OPS {
            return Ok(None);
        }
        let mut grants = Vec::with_capacity(leases.len());
        for lease in leases {
            let Some(grant) = lease.extension::<EtcdGrant>() else {
                return Ok(None);
            };
            if grant.live_session(self, &lease.owner).is_none() {
                return Ok(None);
            }
            grants.push(grant);
        }
        // Given up together: a grant given up meanwhile (lost, or its lease dropped) is not
        // ours to delete. Until its delete is answered, each key is deleted in the background
        // if this future is dropped or the transaction fails.
        let mut outcomes = vec![ReleaseOutcome::NotHeld; leases.len()];
        let mut releasing = Vec::with_capacity(grants.len());
        for (at, grant) in grants.into_iter().enumerate() {
            if let Some(session) = grant.give_up() {
                let (inner, key) = (Arc::clone(self), grant.key.clone());
                let pending = Releasing::new(grant.create_revision, move |left: Option<i64>| {
                    inner.finish_key(key, session, left.map_or(Delete::Nothing, Delete::Exact));
                });
                releasing.push((at, grant, pending));
            }
        }
        if releasing.is_empty() {
            return Ok(Some(outcomes));
        }
        let deletes: Vec<TxnOp> = releasing
            .iter()
            .map(|(_, grant, _)| {
                let key = grant.key.as_str();
                TxnOp::txn(
                    Txn::new()
                        .when([Compare::create_revision(
                            key,
                            CompareOp::Equal,
                            grant.create_revision,
                        )])
                        .and_then([TxnOp::delete(key, None)]),
                )
            })
            .collect();
        let reply = self.txn("release", Txn::new().and_then(deletes)).await?;
        let deleted: Vec<bool> = reply
            .op_responses()
            .into_iter()
            .map(|op| matches!(op, TxnOpResponse::Txn(txn) if txn.succeeded()))
            .collect();
        if deleted.len() != releasing.len() {
            return Err(Error::refused(
                "etcd",
                "the release transaction returned the wrong number of results",
            ));
        }
        for ((at, _, mut pending), deleted) in releasing.into_iter().zip(deleted) {
            pending.confirmed();
            if deleted {
                outcomes[at] = ReleaseOutcome::Released;
            }
        }
        Ok(Some(outcomes))
    }
}
