//! Per-task reentrancy: which task (or, outside tasks, which thread) holds which key.
//! Redisson keys reentrancy on `client-id:thread-id`; in async Rust the unit of execution is
//! the tokio task, so dlock keys it on [`tokio::task::Id`]. Code running outside any task
//! (the body of `#[tokio::main]`, `block_on`) is identified by its thread.
//!
//! A holder is registered while it has at least one share of the hold (a guard it acquired or
//! adopted); the registration ends with its last share. Two consequences, documented for
//! users: futures polled concurrently inside one task (`join!`, `select!`,
//! `FuturesUnordered`) re-enter each other's holds, and a guard moved to another task keeps
//! counting for the task that acquired it.
//!
//! Entries are keyed by the full lock key, shared with the lease (no copy per lock); there is
//! nearly always one holder per key, so it is kept inline.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::thread::ThreadId;

use crate::hold::Hold;

/// Who is acquiring: a tokio task, or a thread outside any task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum HolderId {
    Task(tokio::task::Id),
    Thread(ThreadId),
}

impl HolderId {
    pub(crate) fn current() -> Self {
        tokio::task::try_id().map_or_else(|| Self::Thread(std::thread::current().id()), Self::Task)
    }
}

/// Each held key's holders (foldhash: randomly seeded per map, and much cheaper than SipHash
/// on a short key, which every lock and unlock hashes).
type HoldsByKey = HashMap<Arc<str>, Holders, foldhash::fast::RandomState>;

/// The holds of one Locker, by key and holder.
#[derive(Debug, Default)]
pub(crate) struct Reentrancy {
    holds: Mutex<HoldsByKey>,
}

/// The holders of one key: almost always one.
#[derive(Debug)]
enum Holders {
    One(HolderId, Weak<Hold>),
    Many(Vec<(HolderId, Weak<Hold>)>),
}

impl Holders {
    fn find(&self, holder: HolderId) -> Option<&Weak<Hold>> {
        match self {
            Self::One(id, hold) => (*id == holder).then_some(hold),
            Self::Many(all) => all.iter().find(|(id, _)| *id == holder).map(|(_, h)| h),
        }
    }

    /// Records `hold` for `holder` unless a live hold is recorded already.
    fn register(&mut self, holder: HolderId, hold: &Arc<Hold>) {
        let weak = Arc::downgrade(hold);
        match self {
            Self::One(id, existing) if *id == holder => {
                if existing.strong_count() == 0 {
                    *existing = weak;
                }
            }
            Self::One(id, existing) => {
                *self = Self::Many(vec![(*id, existing.clone()), (holder, weak)]);
            }
            Self::Many(all) => match all.iter_mut().find(|(id, _)| *id == holder) {
                Some((_, existing)) if existing.strong_count() == 0 => *existing = weak,
                Some(_) => {}
                None => all.push((holder, weak)),
            },
        }
    }

    /// Drops `holder`'s entry if it is `hold` or dead; returns whether none are left.
    fn forget(&mut self, holder: HolderId, hold: *const Hold) -> bool {
        let stale = |id: &HolderId, w: &Weak<Hold>| {
            *id == holder && (w.strong_count() == 0 || std::ptr::eq(w.as_ptr(), hold))
        };
        match self {
            Self::One(id, existing) => stale(id, existing),
            Self::Many(all) => {
                all.retain(|(id, w)| !stale(id, w));
                all.is_empty()
            }
        }
    }
}

impl Reentrancy {
    fn holds(&self) -> MutexGuard<'_, HoldsByKey> {
        self.holds.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The live hold `holder` has on `key`, if any.
    pub(crate) fn find(&self, holder: HolderId, key: &str) -> Option<Arc<Hold>> {
        self.holds().get(key)?.find(holder)?.upgrade()
    }

    /// Records that `holder` holds `hold`, so its nested acquires re-enter. An earlier live
    /// hold of the same holder and key (taken with `.reentrant(false)`) keeps the entry.
    pub(crate) fn register(&self, holder: HolderId, hold: &Arc<Hold>) {
        // One lookup (the key hashed once); the entry keeps the shared key.
        match self.holds().entry(Arc::clone(hold.full_key())) {
            Entry::Occupied(mut holders) => holders.get_mut().register(holder, hold),
            Entry::Vacant(place) => {
                place.insert(Holders::One(holder, Arc::downgrade(hold)));
            }
        }
    }

    /// Forgets that `holder` holds `key` through `hold` (its last share of it is gone).
    pub(crate) fn forget(&self, holder: HolderId, key: &Arc<str>, hold: *const Hold) {
        if let Entry::Occupied(mut holders) = self.holds().entry(Arc::clone(key))
            && holders.get_mut().forget(holder, hold)
        {
            holders.remove();
        }
    }
}
