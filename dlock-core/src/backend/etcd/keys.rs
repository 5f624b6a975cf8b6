//! Key layout, the same as etcd's own mutex (`client/v3/concurrency`, `etcdctl lock`).
//!
//! A lock named `N` (the Locker's full key, after the URL's namespace) is the etcd key range
//! `N/`. Every grant or queued acquire owns one key in it, `N/<lease id in hex>`, attached to
//! its etcd lease; the owner is the key with the lowest create revision. A second key of the
//! same lease under the same name (two tasks of one Locker) gets a suffix, `N/<lease hex>.<n>`:
//! etcd orders waiters by create revision, never by key name, so any suffix interoperates.
//!
//! Read locks and semaphores put keys of their own kinds under the same name, each kind in
//! its own sub-range (ordering inside the range is by create revision, never by name, so the
//! prefixes only sort the kinds apart):
//!
//! | kind | key | range |
//! |---|---|---|
//! | writer (exclusive) | `N/<lease hex>[.<n>]` (starts with a hex digit) | `[N/, N/g)` |
//! | permit of a semaphore of `L` | `N/p<L>-<lease hex>[.<n>]` | `[N/p, N/q)` |
//! | reader (shared) | `N/r<lease hex>[.<n>]` | `[N/r, N/s)` |
//!
//! A writer waits for the newest key of the whole range created before its own; a reader for
//! the newest writer or permit key before its own (`[N/, N/q)`) — the rule of etcd's
//! `recipes.RWMutex`, FIFO with no starvation. A permit waits for the newest writer or reader
//! key before its own, and then until fewer than `L` permit keys are older than its own. The
//! semaphore's limit is in every permit key's name: the oldest permit key's is the stored one.
//! `etcdctl lock N` counts readers and permits as holders, as a writer would.

use crate::LockMode;

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

    /// The `n`-th key of lease `lease_id` under this name for a grant of `mode`: etcd's own
    /// `<prefix><lease hex>` for a writer and `n == 0`, `<prefix><lease hex>.<n>` after; a
    /// reader's with `r` before the hex, a permit's with `p<limit>-`.
    pub(super) fn key(&self, lease_id: i64, n: u32, mode: LockMode) -> String {
        let kind = match mode {
            LockMode::Exclusive => String::new(),
            LockMode::Shared => "r".to_owned(),
            LockMode::Permit { limit } => format!("p{limit}-"),
        };
        if n == 0 {
            format!("{}{kind}{lease_id:x}", self.prefix)
        } else {
            format!("{}{kind}{lease_id:x}.{n}", self.prefix)
        }
    }

    /// The end of the range `[prefix, end)` of the keys a writer or reader waits behind: every
    /// key of the name for a writer, the writers' and permits' (below `N/q`) for a reader.
    pub(super) fn blockers_end(&self, shared: bool) -> Vec<u8> {
        if shared {
            self.with_suffix(b"q")
        } else {
            let mut end = self.prefix.as_bytes().to_vec();
            if let Some(last) = end.last_mut() {
                *last += 1; // `N/` -> `N0`: the whole prefix
            }
            end
        }
    }

    /// The writers' keys: `[N/, N/g)`.
    pub(super) fn writers(&self) -> (Vec<u8>, Vec<u8>) {
        (self.prefix.as_bytes().to_vec(), self.with_suffix(b"g"))
    }

    /// The permits' keys: `[N/p, N/q)`.
    pub(super) fn permits(&self) -> (Vec<u8>, Vec<u8>) {
        (self.with_suffix(b"p"), self.with_suffix(b"q"))
    }

    /// The readers' keys: `[N/r, N/s)`.
    pub(super) fn readers(&self) -> (Vec<u8>, Vec<u8>) {
        (self.with_suffix(b"r"), self.with_suffix(b"s"))
    }

    /// The limit a permit key of this name was put with, if `key` is one.
    pub(super) fn permit_limit(&self, key: &[u8]) -> Option<u32> {
        let rest = key
            .strip_prefix(self.prefix.as_bytes())?
            .strip_prefix(b"p")?;
        let digits = &rest[..rest.iter().position(|&b| b == b'-')?];
        std::str::from_utf8(digits).ok()?.parse().ok()
    }

    fn with_suffix(&self, suffix: &[u8]) -> Vec<u8> {
        [self.prefix.as_bytes(), suffix].concat()
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
            name.key(0x694d_65eb_367c_7ec4, 0, LockMode::Exclusive),
            "job/694d65eb367c7ec4"
        );
        assert_eq!(name.key(0x1f, 2, LockMode::Exclusive), "job/1f.2");
        assert_eq!(name.key(0x1f, 0, LockMode::Shared), "job/r1f");
        assert_eq!(
            name.key(0x1f, 1, LockMode::Permit { limit: 12 }),
            "job/p12-1f.1"
        );
        assert_eq!(name.blockers_end(false), b"job0");
        assert_eq!(name.blockers_end(true), b"job/q");
    }

    #[test]
    fn each_kind_of_key_lies_in_its_own_range() {
        let name = LockName::new("", "job");
        let within = |key: &str, (start, end): (Vec<u8>, Vec<u8>)| {
            start.as_slice() <= key.as_bytes() && key.as_bytes() < end.as_slice()
        };
        for (lease, n) in [(0, 0), (0x1f, 3), (i64::MAX, 9)] {
            let writer = name.key(lease, n, LockMode::Exclusive);
            let permit = name.key(lease, n, LockMode::Permit { limit: 4 });
            let reader = name.key(lease, n, LockMode::Shared);
            assert!(within(&writer, name.writers()));
            assert!(within(&permit, name.permits()));
            assert!(within(&reader, name.readers()));
            assert!(!within(&writer, name.permits()) && !within(&writer, name.readers()));
            assert!(!within(&permit, name.writers()) && !within(&permit, name.readers()));
            assert!(!within(&reader, name.writers()) && !within(&reader, name.permits()));
            // A reader waits behind writers and permits, not readers.
            let before_reader = (name.prefix().as_bytes().to_vec(), name.blockers_end(true));
            assert!(
                within(&writer, before_reader.clone()) && within(&permit, before_reader.clone())
            );
            assert!(!within(&reader, before_reader));
            assert_eq!(name.permit_limit(permit.as_bytes()), Some(4));
            assert_eq!(name.permit_limit(writer.as_bytes()), None);
            assert_eq!(name.permit_limit(reader.as_bytes()), None);
        }
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

    proptest::proptest! {
        #![proptest_config(crate::properties::config(2048))]

        /// The keys one lock puts in etcd are its own: a key of lock `b` (any mode, lease and
        /// suffix) counts as a holder or waiter of lock `a` only when `a == b`, even where
        /// `b`'s range lies inside `a`'s (`a/sub`, `a/r…`, `a/0`).
        #[test]
        fn a_key_never_counts_in_another_locks_range(
            namespace in "(app/)?",
            a in "[a-z/0-9rp.-]{1,6}",
            // Often `a` itself with more below it: the case a range check alone gets wrong.
            nested in proptest::prelude::any::<bool>(),
            tail in "[a-z/0-9rp.-]{0,6}",
            lease in proptest::prelude::any::<i64>(),
            n in 0_u32..3,
            limit in 1_u32..5,
        ) {
            let b = if nested { format!("{a}/{tail}") } else { tail };
            proptest::prop_assume!(!b.is_empty());
            let (name_a, name_b) = (LockName::new(&namespace, &a), LockName::new(&namespace, &b));
            for mode in [LockMode::Exclusive, LockMode::Shared, LockMode::Permit { limit }] {
                let key = name_b.key(lease, n, mode);
                proptest::prop_assert!(name_b.is_direct_child(key.as_bytes()));
                proptest::prop_assert_eq!(name_a.is_direct_child(key.as_bytes()), a == b, "{}", key);
            }
        }
    }
}
