//! Who holds and who waits for a lock, read from its key range (for operators).

use std::time::Duration;

use etcd_client::{GetOptions, KeyValue, SortOrder, SortTarget};

use super::keys::LockName;
use super::{Inner, call};
use crate::{HolderInfo, Kept, LockInfo, LockMode, Result, WaiterInfo};

impl Inner {
    /// The keys of lock `full_key` in create-revision order, read in one request: the
    /// leading run that the waiting rules let hold are the holders (fencing token = create
    /// revision, time left = their lease's), the rest are the waiters in the order they will
    /// be served. A key's owner is its value (a dlock owner id), or its name after the
    /// lock's prefix when the value is empty (`etcdctl lock`, Go's mutex).
    pub(super) async fn inspect(&self, full_key: &str) -> Result<LockInfo> {
        let name = LockName::new(&self.namespace, full_key);
        let found = call(self.timeout, "inspect", || {
            let mut kv = self.client.kv_client();
            let options = GetOptions::new()
                .with_prefix()
                .with_sort(SortTarget::Create, SortOrder::Ascend);
            let prefix = name.prefix().to_owned();
            async move { kv.get(prefix, Some(options)).await }
        })
        .await?;
        let keys: Vec<(&KeyValue, LockMode)> = found
            .kvs()
            .iter()
            .filter(|kv| name.is_direct_child(kv.key()))
            .map(|kv| (kv, mode_of(&name, kv.key())))
            .collect();
        let holding = holding(keys.iter().map(|(_, mode)| *mode));
        let mut holders = Vec::with_capacity(holding);
        for (kv, mode) in &keys[..holding] {
            let left = self.lease_left(kv.lease()).await?;
            let (owner, kept) = owner_and_kept(&name, kv);
            holders.push(
                HolderInfo::new(owner, *mode)
                    .with_fencing_token(u64::try_from(kv.create_revision()).ok())
                    .with_expires_in(left)
                    .with_kept(kept),
            );
        }
        let waiters = keys[holding..]
            .iter()
            .map(|(kv, mode)| WaiterInfo::new(Some(owner_of(&name, kv)), *mode))
            .collect();
        Ok(LockInfo {
            holders,
            waiters: Some(waiters),
        })
    }

    /// The time left of etcd lease `id` (whole seconds, as etcd counts them); `None` for a
    /// key without a lease.
    async fn lease_left(&self, id: i64) -> Result<Option<Duration>> {
        if id == 0 {
            return Ok(None);
        }
        let answer = call(self.timeout, "inspect", || {
            let mut leases = self.client.lease_client();
            async move { leases.time_to_live(id, None).await }
        })
        .await?;
        Ok(Some(Duration::from_secs(
            u64::try_from(answer.ttl()).unwrap_or(0),
        )))
    }
}

/// The kind of grant key `key` of `name` is (see [`keys`](super::keys)).
fn mode_of(name: &LockName, key: &[u8]) -> LockMode {
    if let Some(limit) = name.permit_limit(key) {
        return LockMode::Permit { limit };
    }
    match key.get(name.prefix().len()) {
        Some(b'r') => LockMode::Shared,
        _ => LockMode::Exclusive,
    }
}

/// How many of the keys, in create-revision order, hold the lock: the first writer alone,
/// the leading readers, or the leading permits up to their limit.
fn holding(modes: impl Iterator<Item = LockMode>) -> usize {
    let mut modes = modes.peekable();
    let Some(&first) = modes.peek() else {
        return 0;
    };
    match first {
        LockMode::Exclusive => 1,
        LockMode::Shared => modes.take_while(|mode| *mode == LockMode::Shared).count(),
        LockMode::Permit { limit } => modes
            .take_while(|mode| matches!(mode, LockMode::Permit { .. }))
            .take(usize::try_from(limit).unwrap_or(usize::MAX))
            .count(),
    }
}

/// The owner of a holder's key, and whether it is a kept record (`<owner>|<kept>`, see
/// `release_keeping`).
fn owner_and_kept(name: &LockName, kv: &KeyValue) -> (String, Option<Kept>) {
    let owner = owner_of(name, kv);
    match owner
        .rsplit_once('|')
        .map(|(grant, why)| (grant, why.parse()))
    {
        Some((grant, Ok(kept))) => (grant.to_owned(), Some(kept)),
        _ => (owner, None),
    }
}

fn owner_of(name: &LockName, kv: &KeyValue) -> String {
    match kv.value_str() {
        Ok(owner) if !owner.is_empty() => owner.to_owned(),
        _ => String::from_utf8_lossy(&kv.key()[name.prefix().len()..]).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_leading_run_the_waiting_rules_allow_holds() {
        let (w, r, p) = (
            LockMode::Exclusive,
            LockMode::Shared,
            LockMode::Permit { limit: 2 },
        );
        assert_eq!(holding([].into_iter()), 0);
        assert_eq!(holding([w, w, r].into_iter()), 1);
        assert_eq!(holding([r, r, w, r].into_iter()), 2);
        assert_eq!(holding([p, p, p].into_iter()), 2);
        assert_eq!(holding([p, r, p].into_iter()), 1);
    }

    #[test]
    fn each_kind_of_key_is_read_back() {
        let name = LockName::new("", "jobs");
        for mode in [
            LockMode::Exclusive,
            LockMode::Shared,
            LockMode::Permit { limit: 7 },
        ] {
            assert_eq!(mode_of(&name, name.key(0x694d, 2, mode).as_bytes()), mode);
        }
    }
}
