//! Key layout, the same as etcd's own mutex (`client/v3/concurrency`, `etcdctl lock`).
//!
//! A lock named `N` (the Locker's full key, after the URL's namespace) is the etcd key range
//! `N/`. Every grant or queued acquire owns one key in it, `N/<lease id in hex>`, attached to
//! its etcd lease; the owner is the key with the lowest create revision. A second key of the
//! same lease under the same name (two tasks of one Locker) gets a suffix, `N/<lease hex>.<n>`:
//! etcd orders waiters by create revision, never by key name, so any suffix interoperates.

/// The etcd key range of one lock name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct LockName {
    prefix: String,
}

impl LockName {
    /// The range of lock `full_key` under `namespace`: `<namespace><full_key>/`.
    pub(super) fn new(namespace: &str, full_key: &str) -> Self {
        Self {
            prefix: format!("{namespace}{full_key}/"),
        }
    }

    /// `<namespace><full_key>/`: every key of the lock starts with it.
    pub(super) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The `n`-th key of lease `lease_id` under this name: etcd's own `<prefix><lease hex>`
    /// for `n == 0`, `<prefix><lease hex>.<n>` after.
    pub(super) fn key(&self, lease_id: i64, n: u32) -> String {
        if n == 0 {
            format!("{}{lease_id:x}", self.prefix)
        } else {
            format!("{}{lease_id:x}.{n}", self.prefix)
        }
    }

    /// Whether `key` is a waiter or holder of this very name, not of a longer name nested
    /// below it (`N/sub/...` belongs to lock `N/sub`, though etcd's mutex counts it for `N` too).
    pub(super) fn is_direct_child(&self, key: &[u8]) -> bool {
        key.strip_prefix(self.prefix.as_bytes())
            .is_some_and(|rest| !rest.is_empty() && !rest.contains(&b'/'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_etcds_mutex_layout() {
        let name = LockName::new("", "job");
        assert_eq!(name.prefix(), "job/");
        // Go: fmt.Sprintf("%s%x", pfx, leaseID)
        assert_eq!(name.key(0x694d_65eb_367c_7ec4, 0), "job/694d65eb367c7ec4");
        assert_eq!(name.key(0x1f, 2), "job/1f.2");
    }

    #[test]
    fn the_namespace_comes_first() {
        let name = LockName::new("app1/", "dlock:order:42");
        assert_eq!(name.prefix(), "app1/dlock:order:42/");
        assert!(name.is_direct_child(b"app1/dlock:order:42/1f"));
        assert!(!name.is_direct_child(b"app1/dlock:order:42/sub/1f"));
        assert!(!name.is_direct_child(b"app1/dlock:order:42/"));
        assert!(!name.is_direct_child(b"app1/dlock:order:4/1f"));
    }
}
