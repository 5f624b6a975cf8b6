//! Where locks live in ZooKeeper: a key's lock path, Apache Curator's node names, and
//! Curator's order of the contenders under one path (`LockInternals`,
//! `StandardLockInternalsDriver` and `InterProcessReadWriteLock` of Curator 5.4), which also
//! counts kazoo's lock nodes (Python's ZooKeeper client) among the contenders.

use crate::lease::AcquireRequest;
use crate::mode::LockKind;
use crate::{Error, LockMode, Result};

/// Curator's protected-mode prefix: a node is `_c_<uuid>-<lock name><sequence>`, so that its
/// creator finds it again by the uuid when the create's reply was lost.
const PROTECTED_PREFIX: &str = "_c_";

/// The directory of the records of locks kept after their release (see `kept`): no lock's
/// first segment.
pub(super) const KEPT_DIR: &str = "/_dlock_kept";

/// The child of a semaphore's path holding the mutex its acquirers take in turn.
pub(super) const SEMAPHORE_LOCKS: &str = "locks";
/// The child of a semaphore's path holding one node per permit (held or awaited).
pub(super) const SEMAPHORE_LEASES: &str = "leases";

/// The kind of node a grant puts under a path, by Curator's recipe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NodeKind {
    /// `InterProcessMutex`: `…-lock-<seq>` (also the mutex of a semaphore's `locks`).
    Mutex,
    /// `InterProcessReadWriteLock`'s read side: `…-__READ__<seq>`.
    Read,
    /// `InterProcessReadWriteLock`'s write side: `…-__WRIT__<seq>`.
    Write,
    /// `InterProcessSemaphoreV2`'s permit: `leases/…-lease-<seq>`.
    Lease,
    /// `LeaderLatch`'s candidate: `…-latch-<seq>` (a campaign with `?election=latch`).
    Latch,
}

impl NodeKind {
    /// The node kind a request puts under its lock path (for a permit: its lease; for a
    /// campaign, a latch's node when `latch`, else the mutex's, as `LeaderSelector` does).
    pub(super) const fn of(request: &AcquireRequest, latch: bool) -> Self {
        match (request.mode, request.kind) {
            (LockMode::Shared, _) => Self::Read,
            (LockMode::Permit { .. }, _) => Self::Lease,
            (LockMode::Exclusive, LockKind::ReadWrite) => Self::Write,
            _ if latch && request.value.is_some() => Self::Latch,
            _ => Self::Mutex,
        }
    }

    /// Curator's lock name for this kind: what precedes the sequence number.
    const fn lock_name(self) -> &'static str {
        match self {
            Self::Mutex => "lock-",
            Self::Read => "__READ__",
            Self::Write => "__WRIT__",
            Self::Lease => "lease-",
            Self::Latch => "latch-",
        }
    }
}

/// The lock path of a full key, relative to the chroot: `order:42` → `/order:42`,
/// `locks/order-42` (or `/locks/order-42`) → `/locks/order-42`, so a key names the same
/// path as a Curator recipe built on it.
///
/// # Errors
///
/// [`Error::InvalidKey`] for a key ZooKeeper cannot store as a path: an empty segment (`a//b`,
/// a trailing `/`), a `.` or `..` segment, a first segment `zookeeper` (the server's own
/// tree) or `_dlock_kept` (the records of kept locks), a `leases` segment, or a last `locks`
/// segment, below another (a semaphore's own nodes), a segment named like a lock node (it
/// would pose as a contender of the lock above it), or a control, private-use or
/// non-character code point.
pub(super) fn lock_path(full_key: &str) -> Result<String> {
    let invalid = |reason| Error::InvalidKey {
        key: full_key.chars().take(64).collect(),
        reason,
    };
    let relative = full_key.strip_prefix('/').unwrap_or(full_key);
    let last = relative.split('/').count() - 1;
    for (index, segment) in relative.split('/').enumerate() {
        match segment {
            "" => {
                return Err(invalid(
                    "a ZooKeeper path has no empty segment (`//`, or a `/` at the end)",
                ));
            }
            "." | ".." => return Err(invalid("a ZooKeeper path has no `.` or `..` segment")),
            "zookeeper" if index == 0 => {
                return Err(invalid("`/zookeeper` is the ZooKeeper server's own tree"));
            }
            _ if index == 0 && segment == &KEPT_DIR[1..] => {
                return Err(invalid(
                    "`/_dlock_kept` holds the records of locks kept after their release",
                ));
            }
            SEMAPHORE_LEASES if index > 0 => {
                return Err(invalid(
                    "`leases` below another segment holds that segment's semaphore permits \
                     (Curator's layout): a lock there would count as one",
                ));
            }
            SEMAPHORE_LOCKS if index > 0 && index == last => {
                return Err(invalid(
                    "`locks` at the end of a key below another segment is that segment's \
                     semaphore's own mutex (Curator's layout)",
                ));
            }
            _ if index > 0 && is_lock_node_name(segment) => {
                return Err(invalid(
                    "a segment named like a lock node (`…-lock-0000000001`, `…-latch-…`, `…__READ__…`, \
                     kazoo's `…__lock__…`) would pose as a contender of the lock above it",
                ));
            }
            _ => {}
        }
    }
    if relative.chars().any(|c| {
        matches!(c, '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{e000}'..='\u{f8ff}' | '\u{fff0}'..='\u{ffff}')
    }) {
        return Err(invalid(
            "ZooKeeper paths cannot hold control, private-use or non-character code points",
        ));
    }
    Ok(format!("/{relative}"))
}

/// The name a new node of `kind` is created with (ZooKeeper appends the sequence number):
/// `_c_<uuid>-lock-`.
pub(super) fn node_prefix(uuid: &str, kind: NodeKind) -> String {
    format!("{PROTECTED_PREFIX}{uuid}-{}", kind.lock_name())
}

/// Whether `child` is the node of the acquire with this `uuid` (Curator's protected-mode
/// match: the name starts with `_c_<uuid>-`).
pub(super) fn is_node_of(child: &str, uuid: &str) -> bool {
    child
        .strip_prefix(PROTECTED_PREFIX)
        .and_then(|rest| rest.strip_prefix(uuid))
        .is_some_and(|rest| rest.starts_with('-'))
}

/// Whether `name` reads as a node of a mutex or read-write lock (what a lock path's children
/// are parsed as). A lease node can only be a child of `leases`, which no key can name.
fn is_lock_node_name(name: &str) -> bool {
    contender(name).is_some()
}

/// A lock node under a lock path, as Curator orders it.
#[derive(Debug, Clone, Copy)]
struct Contender<'a> {
    name: &'a str,
    /// What follows the last lock name in the node's name: Curator sorts by this text.
    sequence: &'a str,
    /// A mutex or write node: it excludes every other node.
    exclusive: bool,
}

/// The lock names a contender's node may carry before its sequence number, each with whether
/// it excludes every other node: Curator's (the kinds dlock creates) and kazoo's, whose `Lock`
/// and `WriteLock` create `<uuid hex>__lock__<seq>` and whose `ReadLock` creates
/// `<uuid hex>__rlock__<seq>` (`kazoo/recipe/lock.py`). Every node under a path takes its
/// sequence number from the parent's one counter, so the families interleave in creation
/// order, and kazoo sorts its contenders by that number as Curator and dlock do.
const LOCK_NAMES: [(&str, bool); 6] = [
    (NodeKind::Mutex.lock_name(), true),
    (NodeKind::Read.lock_name(), false),
    (NodeKind::Write.lock_name(), true),
    (NodeKind::Latch.lock_name(), true),
    (KAZOO_LOCK, true),
    (KAZOO_READ_LOCK, false),
];

/// kazoo's `Lock` and `WriteLock` node name (before the sequence number).
const KAZOO_LOCK: &str = "__lock__";
/// kazoo's `ReadLock` node name.
const KAZOO_READ_LOCK: &str = "__rlock__";

/// Reads `child` as a lock node of a mutex or read-write lock, or `None` for another child
/// (a container of a nested lock path, a semaphore's `locks`/`leases`).
fn contender(child: &str) -> Option<Contender<'_>> {
    LOCK_NAMES
        .into_iter()
        .filter_map(|(name, exclusive)| {
            let at = child.rfind(name)?;
            Some((at + name.len(), exclusive))
        })
        .max_by_key(|(end, _)| *end)
        .and_then(|(end, exclusive)| {
            let sequence = &child[end..];
            // ZooKeeper 3.x prints the parent's cversion with `%010d`: past 2^31 it turns
            // negative (`-2147483648`). Curator sorts that text as it is, and so does dlock.
            // A sequence has at least ZooKeeper's 10 digits: a shorter number is a user's name.
            let digits = sequence.strip_prefix('-').unwrap_or(sequence);
            (digits.len() >= 10 && digits.bytes().all(|b| b.is_ascii_digit())).then_some(
                Contender {
                    name: child,
                    sequence,
                    exclusive,
                },
            )
        })
}

/// How far below 2^31 a sequence must be for every node made in the next 2^24 changes of its
/// parent to sort after it (ZooKeeper's counter turns negative past `i32::MAX`, and the text
/// `-2147483648` sorts first).
const WRAP_MARGIN: i64 = 1 << 24;

/// Whether a node made after the one of `sequence` sorts after it: true unless the parent's
/// counter is within [`WRAP_MARGIN`] of wrapping (or already wrapped). A waiter holds the
/// moment its only blocker goes only while this is so; a wait that may take 2^24 changes
/// looks again anyway (see `wait_turn`).
fn sorts_before_later_nodes(sequence: &str) -> bool {
    sequence.len() == 10
        && sequence
            .parse::<i64>()
            .is_ok_and(|n| (0..=i64::from(i32::MAX) - WRAP_MARGIN).contains(&n))
}

/// The lock nodes among `children`, in Curator's order: by the text after the last lock name.
fn contenders(children: &[String]) -> Vec<Contender<'_>> {
    let mut nodes: Vec<Contender<'_>> = children.iter().filter_map(|c| contender(c)).collect();
    nodes.sort_by(|a, b| a.sequence.cmp(b.sequence));
    nodes
}

/// Where a node stands among the contenders of its path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Standing {
    /// It holds the lock.
    Holds,
    /// It waits until the named child (a sibling) is deleted, then looks again — or, when
    /// that child is `last`, holds: it was the only node in the way, and a node made later
    /// sorts after this one.
    Waits {
        /// The child to watch.
        watch: String,
        /// The child is the only node in the way.
        last: bool,
    },
    /// It is not among the children: its session ended, or an admin deleted it.
    Gone,
}

/// Where `ours` stands among `children` of its lock path, by Curator's rules, with every lock
/// node sorted by the text after its last lock name (`lock-`, `__READ__`, `__WRIT__`, kazoo's
/// `__lock__` and `__rlock__`: one sequence counter per parent, so mutex, read and write nodes
/// interleave in creation order):
///
/// * a mutex or write node holds when it is first, else watches the node just before it
///   (`StandardLockInternalsDriver`: `ourIndex < maxLeases`, watch `ourIndex - 1`);
/// * a read node holds when no mutex or write node is before it, else watches the first one
///   (`InterProcessReadWriteLock.readLockPredicate`).
///
/// Curator sorts other children (not lock nodes) among them by their whole name; dlock leaves
/// them out. The two orders differ only for a child whose name sorts before a sequence number
/// (a nested lock path starting with a digit or punctuation), which Curator would wait for.
/// kazoo's nodes are such children to Curator: it sorts them by their uuid, after its own, and
/// so does not wait for a kazoo holder. dlock waits for both, and each waits for dlock.
pub(super) fn standing(children: &[String], ours: &str, reader: bool) -> Standing {
    let nodes = contenders(children);
    let Some(index) = nodes.iter().position(|node| node.name == ours) else {
        return Standing::Gone;
    };
    let ahead = &nodes[..index];
    let (blocker, in_the_way) = if reader {
        let mut writers = ahead.iter().filter(|node| node.exclusive);
        (writers.next(), 1 + writers.count())
    } else {
        (ahead.last(), ahead.len())
    };
    blocker.map_or(Standing::Holds, |node| Standing::Waits {
        watch: node.name.to_owned(),
        last: in_the_way == 1 && sorts_before_later_nodes(nodes[index].sequence),
    })
}

/// The holders among `children` of a lock path: the first node if it is a mutex or write
/// node, else every read node before the first mutex or write node.
pub(super) fn holders(children: &[String]) -> Vec<String> {
    let nodes = contenders(children);
    match nodes.first() {
        Some(first) if first.exclusive => vec![first.name.to_owned()],
        _ => nodes
            .iter()
            .take_while(|node| !node.exclusive)
            .map(|node| node.name.to_owned())
            .collect(),
    }
}

/// The lock nodes among `children` in Curator's order, each with whether it excludes (a
/// mutex or write node); the first [`holders`]`.len()` of them hold.
pub(super) fn in_order(children: &[String]) -> Vec<(&str, bool)> {
    contenders(children)
        .into_iter()
        .map(|node| (node.name, node.exclusive))
        .collect()
}

/// The children of a semaphore's `leases` in creation order (the text after `lease-`; other
/// names last, by name).
pub(super) fn leases_in_order(children: &[String]) -> Vec<&str> {
    let lease = NodeKind::Lease.lock_name();
    let mut sorted: Vec<&str> = children.iter().map(String::as_str).collect();
    sorted.sort_by_key(|child| {
        child
            .rfind(lease)
            .map_or(*child, |at| &child[at + lease.len()..])
    });
    sorted
}

/// The data dlock writes into a permit's lease node: the semaphore's limit, so that a caller
/// naming another limit is refused (Curator stores no limit; its lease nodes hold the client's
/// address and are not checked).
pub(super) fn permit_data(limit: u32) -> Vec<u8> {
    format!("dlock-permits={limit}").into_bytes()
}

/// The limit a lease node's data states, if dlock wrote it.
pub(super) fn limit_of(data: &[u8]) -> Option<u32> {
    std::str::from_utf8(data)
        .ok()?
        .strip_prefix("dlock-permits=")?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "0b0e5e4e-8c56-4a5b-9a57-8f0c0a2f1e01";
    const B: &str = "6f1d2a8e-1f47-4a9a-8f33-0c9d7e7b2a02";

    fn node(uuid: &str, kind: NodeKind, seq: u32) -> String {
        format!("{}{seq:010}", node_prefix(uuid, kind))
    }

    #[test]
    fn lock_paths_follow_the_key_and_refuse_what_zookeeper_cannot_store() {
        assert_eq!(lock_path("dlock:order:42").unwrap(), "/dlock:order:42");
        assert_eq!(lock_path("locks/order-42").unwrap(), "/locks/order-42");
        assert_eq!(lock_path("/locks/order-42").unwrap(), "/locks/order-42");
        // Names that only look a little like lock nodes, and `locks` as a plain directory.
        for fine in [
            "jobs/block-1",
            "db/deadlock-7",
            "app/locks/order-42",
            "x/release-1",
        ] {
            assert_eq!(lock_path(fine).unwrap(), format!("/{fine}"));
        }
        for bad in [
            "a//b",
            "a/",
            "/",
            "a/./b",
            "../a",
            "zookeeper/x",
            "a\u{1}b",
            "a\u{fffe}",
            "sem/locks",
            "sem/leases",
            "sem/leases/x",
            "job/_c_0b0e5e4e-8c56-4a5b-9a57-8f0c0a2f1e01-lock-0000000001",
            "job/x-lock-0000000001",
            "job/x-lock--2147483648",
            "job/x__WRIT__0000000007",
            "job/0b0e5e4e8c564a5b9a578f0c0a2f1e01__lock__0000000003",
            "job/x__rlock__0000000004",
        ] {
            let error = lock_path(bad).unwrap_err();
            assert!(matches!(error, Error::InvalidKey { .. }), "{bad}: {error}");
        }
        assert!(lock_path("app/zookeeper").is_ok());
    }

    #[test]
    fn node_names_are_curators_protected_names() {
        assert_eq!(node_prefix(A, NodeKind::Mutex), format!("_c_{A}-lock-"));
        assert_eq!(node_prefix(A, NodeKind::Read), format!("_c_{A}-__READ__"));
        assert_eq!(node_prefix(A, NodeKind::Write), format!("_c_{A}-__WRIT__"));
        assert_eq!(node_prefix(A, NodeKind::Lease), format!("_c_{A}-lease-"));
        assert!(is_node_of(&node(A, NodeKind::Read, 3), A));
        assert!(!is_node_of(&node(B, NodeKind::Read, 3), A));
        assert!(!is_node_of("locks", A));
    }

    #[test]
    fn a_mutex_holds_when_first_and_watches_the_node_before_it() {
        let (a, b) = (node(A, NodeKind::Mutex, 7), node(B, NodeKind::Mutex, 8));
        // Listed out of order; a nested lock path's container is left out.
        let children = vec![b.clone(), "nested".to_owned(), a.clone()];
        assert_eq!(standing(&children, &a, false), Standing::Holds);
        assert_eq!(
            standing(&children, &b, false),
            Standing::Waits {
                watch: a,
                last: true
            }
        );
        assert_eq!(standing(&children, "gone", false), Standing::Gone);
    }

    /// Curator's readLockPredicate: a reader holds before the first writer and watches it;
    /// a writer must be first of all and watches the node just before it.
    #[test]
    fn readers_wait_for_the_first_writer_and_writers_for_their_predecessor() {
        let r1 = node(A, NodeKind::Read, 1);
        let w2 = node(B, NodeKind::Write, 2);
        let r3 = node(A, NodeKind::Read, 3);
        let m4 = node(B, NodeKind::Mutex, 4);
        let r5 = node(A, NodeKind::Read, 5);
        let children = vec![r5.clone(), m4.clone(), r3.clone(), w2.clone(), r1.clone()];
        assert_eq!(standing(&children, &r1, true), Standing::Holds);
        assert_eq!(
            standing(&children, &w2, false),
            Standing::Waits {
                watch: r1.clone(),
                last: true
            }
        );
        assert_eq!(
            standing(&children, &r3, true),
            Standing::Waits {
                watch: w2.clone(),
                last: true
            }
        );
        assert_eq!(
            standing(&children, &m4, false),
            Standing::Waits {
                watch: r3,
                last: false
            }
        );
        assert_eq!(
            standing(&children, &r5, true),
            Standing::Waits {
                watch: w2,
                last: false
            }
        );
        assert_eq!(holders(&children), vec![r1]);
    }

    /// kazoo's nodes (`<uuid hex>__lock__<seq>`, `__rlock__`) are contenders like Curator's,
    /// in one order by sequence number: a kazoo lock or write node excludes, a kazoo read node
    /// shares with readers.
    #[test]
    fn kazoos_nodes_are_contenders_in_sequence_order() {
        let kazoo_writer = "6f1d2a8e1f474a9a8f330c9d7e7b2a02__lock__0000000001".to_owned();
        let dlock_reader = node(A, NodeKind::Read, 2);
        let kazoo_reader = "0b0e5e4e8c564a5b9a578f0c0a2f1e01__rlock__0000000003".to_owned();
        let dlock_writer = node(B, NodeKind::Write, 4);
        let children = vec![
            dlock_writer.clone(),
            kazoo_reader.clone(),
            dlock_reader.clone(),
            kazoo_writer.clone(),
        ];
        assert_eq!(holders(&children), vec![kazoo_writer.clone()]);
        assert_eq!(
            standing(&children, &dlock_reader, true),
            Standing::Waits {
                watch: kazoo_writer.clone(),
                last: true
            }
        );
        assert_eq!(
            standing(&children, &dlock_writer, false),
            Standing::Waits {
                watch: kazoo_reader.clone(),
                last: false
            }
        );
        // With kazoo's writer gone, both readers hold, kazoo's among them.
        let children = vec![
            dlock_writer.clone(),
            kazoo_reader.clone(),
            dlock_reader.clone(),
        ];
        assert_eq!(holders(&children), vec![dlock_reader.clone(), kazoo_reader]);
        assert_eq!(standing(&children, &dlock_reader, true), Standing::Holds);
        // A mutex waits for kazoo's `Lock` node before it.
        let kazoo_lock = "00aa__lock__0000000007".to_owned();
        let dlock_mutex = node(A, NodeKind::Mutex, 8);
        let children = vec![dlock_mutex.clone(), kazoo_lock.clone()];
        assert_eq!(
            standing(&children, &dlock_mutex, false),
            Standing::Waits {
                watch: kazoo_lock,
                last: true
            }
        );
        // Names that only end like them are not contenders.
        assert!(contender("x__lock__12").is_none());
        assert!(contender("x_lock__0000000001").is_none());
    }

    #[test]
    fn sequences_sort_as_text_like_curator() {
        // Sequence texts past i32::MAX (19 digits from some clients, a negative number from
        // ZooKeeper 3.x servers) sort as text in Curator (before `0000000005`), and so must
        // they in dlock, or the two would disagree on who holds.
        let late = format!("{}0000000002147483648", node_prefix(A, NodeKind::Mutex));
        let early = node(B, NodeKind::Mutex, 5);
        let children = vec![early.clone(), late.clone()];
        assert_eq!(standing(&children, &late, false), Standing::Holds);
        assert_eq!(
            standing(&children, &early, false),
            Standing::Waits {
                watch: late,
                last: true
            }
        );
        let negative = format!("{}-2147483648", node_prefix(A, NodeKind::Mutex));
        let children = vec![early.clone(), negative.clone()];
        assert_eq!(standing(&children, &negative, false), Standing::Holds);
    }

    /// A waiter whose only blocker goes holds at once only while no node made later can sort
    /// before it: not near the counter's wrap, nor past it.
    #[test]
    fn the_only_blocker_gone_holds_at_once_unless_the_counter_may_wrap() {
        for (sequence, sorts_first) in [
            ("0000000008", true),
            ("2130706431", true), // i32::MAX - 2^24
            ("2130706432", false),
            ("2147483647", false),
            ("-2147483640", false),
            ("0000000002147483648", false),
        ] {
            assert_eq!(
                sorts_before_later_nodes(sequence),
                sorts_first,
                "{sequence}"
            );
        }
        let first = node(B, NodeKind::Mutex, 7);
        let near_the_wrap = format!("{}2147483000", node_prefix(A, NodeKind::Mutex));
        let children = vec![first.clone(), near_the_wrap.clone()];
        assert_eq!(
            standing(&children, &near_the_wrap, false),
            Standing::Waits {
                watch: first,
                last: false
            }
        );
    }

    #[test]
    fn leases_sort_by_sequence_and_limits_round_trip() {
        let children = vec![node(A, NodeKind::Lease, 9), node(B, NodeKind::Lease, 2)];
        assert_eq!(leases_in_order(&children)[0], children[1]);
        assert_eq!(limit_of(&permit_data(3)), Some(3));
        assert_eq!(limit_of(b"127.0.0.1"), None);
    }

    /// Keys as users write them, with path characters and lock-node-like segments likely.
    fn nested_keys() -> impl proptest::strategy::Strategy<Value = (String, String)> {
        use proptest::prelude::*;
        let segment = prop_oneof![
            "[a-z:.{}%-]{0,6}",
            "[a-z_]{0,4}(-lock-|__READ__|__WRIT__|-lease-|__lock__|__rlock__)-?[0-9]{0,10}",
            Just(SEMAPHORE_LOCKS.to_owned()),
            Just(SEMAPHORE_LEASES.to_owned()),
            Just("zookeeper".to_owned()),
            Just("..".to_owned()),
            any::<String>(),
        ];
        let key = prop::collection::vec(segment.clone(), 1..4).prop_map(|s| s.join("/"));
        (key, segment)
    }

    proptest::proptest! {
        #![proptest_config(crate::properties::config(2048))]

        /// A key's path stays below the chroot (no empty, `.` or `..` segment, not the
        /// server's `/zookeeper`), and a key one segment below another's can neither pose as
        /// that lock's contender nor be its semaphore's own `locks` or `leases`.
        #[test]
        fn a_key_never_leaves_its_path_nor_poses_as_another_locks_node(
            (parent, child) in nested_keys()
        ) {
            if let Ok(path) = lock_path(&parent) {
                let segments: Vec<&str> = path[1..].split('/').collect();
                proptest::prop_assert!(path.starts_with('/'));
                proptest::prop_assert!(segments.iter().all(|s| !matches!(*s, "" | "." | "..")));
                proptest::prop_assert!(segments[0] != "zookeeper");
                let nested = format!("{parent}/{child}");
                if let Ok(nested_path) = lock_path(&nested) {
                    let name = &nested_path[path.len() + 1..];
                    proptest::prop_assert_eq!(&nested_path[..path.len()], path.as_str());
                    proptest::prop_assert!(contender(name).is_none(), "{} poses as a contender", nested);
                    proptest::prop_assert!(name != SEMAPHORE_LOCKS && name != SEMAPHORE_LEASES);
                    let mut below_first = nested_path[1..].split('/').skip(1);
                    proptest::prop_assert!(below_first.all(|s| s != SEMAPHORE_LEASES));
                }
            }
        }
    }
}
