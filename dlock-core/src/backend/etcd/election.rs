//! Leader election on etcd's own layout (`concurrency.Election`, `etcdctl elect`): a
//! candidate's key is a lock key whose value is the candidate's value, so the lowest create
//! revision under `<name>/` leads and its value is the leader's. Here: the proclaim (a new
//! value, checked by the key's create revision) and the watch an observer follows.

use std::sync::Arc;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp, WatchOptions};

use super::errors::from_etcd;
use super::keys::LockName;
use super::watch::Watch;
use super::{EtcdGrant, Inner, call};
use crate::backend::HolderChanges;
use crate::lease::Lease;
use crate::{Error, Result};

impl Inner {
    /// Puts `value` on the grant's key, on its lease, if the key is still the one the grant
    /// created (etcd's `Proclaim`: `If(CreateRevision(key) == rev)`) and still on that lease
    /// (a proclaim that lands late cannot move a key given up since back onto it).
    pub(super) async fn proclaim(self: &Arc<Self>, lease: &Lease, value: &str) -> Result<bool> {
        let Some(grant) = lease.extension::<EtcdGrant>() else {
            return Ok(false);
        };
        let Some(session) = grant.live_session(self, &lease.owner) else {
            return Ok(false);
        };
        let txn = Txn::new()
            .when([
                Compare::create_revision(
                    grant.key.as_str(),
                    CompareOp::Equal,
                    grant.create_revision,
                ),
                Compare::lease(grant.key.as_str(), CompareOp::Equal, session.id),
            ])
            .and_then([TxnOp::put(
                grant.key.as_str(),
                value,
                Some(PutOptions::new().with_lease(session.id)),
            )]);
        Ok(self.txn("proclaim", txn).await?.succeeded())
    }

    /// A watch of every key under `full_key`'s name (puts and deletes), created on etcd
    /// before this returns: each of its responses is one item.
    pub(super) async fn holder_changes(self: &Arc<Self>, full_key: &str) -> Result<HolderChanges> {
        let name = LockName::new(&self.namespace, full_key);
        let opened = call(self.timeout, "observe", || {
            let mut watcher = self.client.watch_client();
            let prefix = name.prefix().to_owned();
            async move {
                watcher
                    .watch(prefix, Some(WatchOptions::new().with_prefix()))
                    .await
            }
        })
        .await?;
        let mut watch = Watch::new(opened, self.timeout, self.background.clone());
        // Created on etcd (and from which revision) before the caller's first read.
        let created = tokio::time::timeout(self.timeout, watch.message())
            .await
            .map_err(|_| Error::timeout("etcd", "observe", self.timeout))?
            .map_err(from_etcd)?;
        if !created.is_some_and(|response| response.created()) {
            return Err(Error::unavailable(
                "etcd",
                "the observer's watch was not created",
            ));
        }
        Ok(Box::pin(futures_util::stream::unfold(
            watch,
            |mut watch| async move {
                match watch.message().await {
                    Ok(Some(response)) if !response.canceled() => Some((Ok(()), watch)),
                    Ok(_) => None,
                    Err(error) => Some((Err(from_etcd(error)), watch)),
                }
            },
        )))
    }
}
