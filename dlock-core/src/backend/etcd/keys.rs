//! Key layout, the same as etcd's own mutex (`client/v3/concurrency`, `etcdctl lock`).
//!
//! A lock named `N` (the Locker's full key, after the URL's namespace) is the etcd key range
//! `N/`. Every grant or queued acquire owns one key in it, `N/<lease id in hex>`, attached to
//! its etcd lease; the owner is the key with the lowest create revision. A second key of the
//! same lease under the same name (two tasks of one Locker) gets a suffix, `N/<lease hex>.<n>`:
//! etcd orders waiters by create revision, never by key name, so any suffix interoperates.
//!
//! Read locks (shared grants) put `N/r<lease hex>[.<n>]`. Exclusive keys start with a hex
//! digit, so they all sort below `N/g` and reader keys above it: a reader waits for the newest
//! key in `[N/, N/g)` created before its own (the last writer ahead of it), a writer for the
//! newest key of the whole range — the rule of etcd's `recipes.RWMutex`, FIFO with no
//! starvation. `etcdctl lock N` counts readers as holders, as a writer would.

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
    /// for `n == 0`, `<prefix><lease hex>.<n>` after; a reader's with `r` before the hex.
    pub(super) fn key(&self, lease_id: i64, n: u32, shared: bool) -> String {
        let reader = if shared { "r" } else { "" };
        if n == 0 {
            format!("{}{reader}{lease_id:x}", self.prefix)
        } else {
            format!("{}{reader}{lease_id:x}.{n}", self.prefix)
        }
    }

    /// The end of the range `[prefix, end)` of the keys a grant waits behind: every key of the
    /// name for an exclusive grant, the exclusive keys only (below `N/g`) for a shared one.
    pub(super) fn blockers_end(&self, shared: bool) -> Vec<u8> {
        let mut end = self.prefix.as_bytes().to_vec();
        if shared {
            end.push(b'g');
        } else if let Some(last) = end.last_mut() {
            *last += 1; // `N/` -> `N0`: the whole prefix
        }
        end
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
        assert_eq!(
            name.key(0x694d_65eb_367c_7ec4, 0, false),
            "job/694d65eb367c7ec4"
        );
        assert_eq!(name.key(0x1f, 2, false), "job/1f.2");
        assert_eq!(name.key(0x1f, 0, true), "job/r1f");
        assert_eq!(name.blockers_end(false), b"job0");
        assert_eq!(name.blockers_end(true), b"job/g");
        // Every exclusive key sorts below `job/g`, every reader key above it.
        assert!(name.key(i64::MAX, 9, false).as_bytes() < b"job/g".as_slice());
        assert!(name.key(0, 0, true).as_bytes() > b"job/g".as_slice());
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
