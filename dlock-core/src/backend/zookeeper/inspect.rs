//! Who holds and who waits for a lock, read from its path's children (for operators).

use std::sync::Arc;

use zookeeper_client::MultiReadResult;

use super::Inner;
use super::errors::{from_zk, timed};
use super::keys;
use super::release::InUse;
use super::session::Session;
use crate::{HolderInfo, LockInfo, LockMode, Result, WaiterInfo};

/// A lock node read back: its name, and what its data and stat say.
struct Node {
    name: String,
    /// The node's data: the owner for a dlock mutex, read or write node; a Curator client
    /// writes its address; a dlock permit writes its limit.
    data: Option<Vec<u8>>,
    czxid: Option<i64>,
}

impl Node {
    /// The owner: the node's data when it is text, else its name.
    fn owner(&self) -> String {
        self.data
            .as_deref()
            .and_then(|data| std::str::from_utf8(data).ok())
            .filter(|text| !text.is_empty() && keys::limit_of(text.as_bytes()).is_none())
            .map_or_else(|| self.name.clone(), str::to_owned)
    }
}

impl Inner {
    /// The lock nodes under `full_key`'s path in Curator's order — the first mutex or write
    /// node, or the leading read nodes, hold; the others wait — and a semaphore's leases (the
    /// first `limit` hold; a lease beyond them, and the acquirers queued on its `locks` mutex
    /// after the first, wait). Fencing token = the node's `czxid`; no expiry (a node lives as
    /// long as its session). A live record keeping the lock after its release is the holder,
    /// with its time left as this host's clock estimates it.
    pub(super) async fn inspect(self: &Arc<Self>, full_key: &str) -> Result<LockInfo> {
        let path = keys::lock_path(full_key)?;
        let session = self.checkout(self.timeout).await?;
        let _in_use = InUse(self, &session);
        let record = super::kept::record_path(&path);
        let (children, record) = self
            .list_with_record(&session, &path, Some(&record))
            .await?;
        let (mut holders, mut waiters) = (Vec::new(), Vec::new());
        let contenders = keys::in_order(&children);
        let holding = keys::holders(&children).len();
        let nodes = self
            .read_children(&session, &path, contenders.iter().map(|(name, _)| *name))
            .await?;
        // A live record keeping the lock after its release holds it: the head of the queue
        // waits it out.
        let kept = super::kept::kept_holder(record);
        let holding = if kept.is_some() { 0 } else { holding };
        holders.extend(kept);
        for (index, (node, (_, exclusive))) in nodes.iter().zip(&contenders).enumerate() {
            let mode = if *exclusive {
                LockMode::Exclusive
            } else {
                LockMode::Shared
            };
            if index < holding {
                holders.push(holder(node, mode));
            } else {
                waiters.push(WaiterInfo::new(Some(node.owner()), mode));
            }
        }
        if children.iter().any(|child| child == keys::SEMAPHORE_LEASES) {
            self.inspect_semaphore(&session, &path, &mut holders, &mut waiters)
                .await?;
        }
        Ok(LockInfo {
            holders,
            waiters: Some(waiters),
        })
    }

    /// Adds a semaphore's permits under `path` to `holders` and `waiters`.
    async fn inspect_semaphore(
        &self,
        session: &Session,
        path: &str,
        holders: &mut Vec<HolderInfo>,
        waiters: &mut Vec<WaiterInfo>,
    ) -> Result<()> {
        let leases_dir = format!("{path}/{}", keys::SEMAPHORE_LEASES);
        let children = self.children(session, &leases_dir).await?;
        let leases = self
            .read_children(
                session,
                &leases_dir,
                keys::leases_in_order(&children).into_iter(),
            )
            .await?;
        // A Curator semaphore stores no limit: then every lease counts as held.
        let stored = leases
            .iter()
            .find_map(|lease| keys::limit_of(lease.data.as_deref()?));
        let limit = stored.unwrap_or_else(|| u32::try_from(leases.len()).unwrap_or(u32::MAX));
        let mode = LockMode::Permit { limit };
        let held = usize::try_from(limit).unwrap_or(usize::MAX);
        for (index, lease) in leases.iter().enumerate() {
            if index < held {
                holders.push(holder(lease, mode));
            } else {
                waiters.push(WaiterInfo::new(Some(lease.owner()), mode));
            }
        }
        let locks_dir = format!("{path}/{}", keys::SEMAPHORE_LOCKS);
        let locks = self.children(session, &locks_dir).await?;
        let queued = keys::in_order(&locks);
        let names = queued.iter().skip(1).map(|(name, _)| *name);
        for node in self.read_children(session, &locks_dir, names).await? {
            waiters.push(WaiterInfo::new(Some(node.owner()), mode));
        }
        Ok(())
    }

    /// The data and stat of each child `names` of `dir`, in one multi-read (a node deleted
    /// meanwhile comes back without them).
    async fn read_children<'a>(
        &self,
        session: &Session,
        dir: &str,
        names: impl Iterator<Item = &'a str>,
    ) -> Result<Vec<Node>> {
        let names: Vec<&str> = names.collect();
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let mut reader = session.client.new_multi_reader();
        for name in &names {
            reader
                .add_get_data(&format!("{dir}/{name}"))
                .map_err(from_zk)?;
        }
        let results = timed(self.timeout, "get data", reader.commit()).await?;
        Ok(names
            .into_iter()
            .zip(results)
            .map(|(name, result)| match result {
                MultiReadResult::Data { data, stat } => Node {
                    name: name.to_owned(),
                    data: Some(data),
                    czxid: Some(stat.czxid),
                },
                _ => Node {
                    name: name.to_owned(),
                    data: None,
                    czxid: None,
                },
            })
            .collect())
    }
}

fn holder(node: &Node, mode: LockMode) -> HolderInfo {
    HolderInfo::new(node.owner(), mode)
        .with_fencing_token(node.czxid.and_then(|czxid| u64::try_from(czxid).ok()))
}
