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
//! Entries are keyed by the full lock key, shared with the lease (no copy per lock), and
//! point weakly to the hold (`H`): a hold that is gone is never found.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::thread::ThreadId;

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
type HoldsByKey<H> = HashMap<Arc<str>, Holders<H>, foldhash::fast::RandomState>;

/// The holds of one Locker, by key and holder.
#[derive(Debug)]
pub(crate) struct Reentrancy<H> {
    holds: Mutex<HoldsByKey<H>>,
}

impl<H> Default for Reentrancy<H> {
    fn default() -> Self {
        Self {
            holds: Mutex::default(),
        }
    }
}

/// The holders of one key (almost always one), each with a weak link to its hold.
#[derive(Debug)]
struct Holders<H>(Vec<(HolderId, Weak<H>)>);

impl<H> Default for Holders<H> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<H> Holders<H> {
    fn find(&self, holder: HolderId) -> Option<&Weak<H>> {
        self.0
            .iter()
            .find(|(id, _)| *id == holder)
            .map(|(_, hold)| hold)
    }

    /// Records `hold` for `holder` unless a live hold is recorded already.
    fn register(&mut self, holder: HolderId, hold: &Arc<H>) {
        match self.0.iter_mut().find(|(id, _)| *id == holder) {
            Some((_, existing)) if existing.strong_count() == 0 => *existing = Arc::downgrade(hold),
            Some(_) => {}
            None => self.0.push((holder, Arc::downgrade(hold))),
        }
    }

    /// Drops `holder`'s entry if it is `hold` or dead; returns whether none are left.
    fn forget(&mut self, holder: HolderId, hold: *const H) -> bool {
        self.0.retain(|(id, weak)| {
            *id != holder || (weak.strong_count() > 0 && !std::ptr::eq(weak.as_ptr(), hold))
        });
        self.0.is_empty()
    }
}

impl<H> Reentrancy<H> {
    fn holds(&self) -> MutexGuard<'_, HoldsByKey<H>> {
        self.holds.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The live hold `holder` has on `key`, if any.
    pub(crate) fn find(&self, holder: HolderId, key: &str) -> Option<Arc<H>> {
        self.holds().get(key)?.find(holder)?.upgrade()
    }

    /// Whether any holder of this Locker (any task) holds `key` through a live hold.
    pub(crate) fn is_held(&self, key: &str) -> bool {
        self.holds()
            .get(key)
            .is_some_and(|holders| holders.0.iter().any(|(_, hold)| hold.strong_count() > 0))
    }

    /// The greatest key (in byte order) `holder` holds through a live hold: what a lock set
    /// must not wait behind. A scan of every held key: called once per lock set that has to
    /// wait, never on a single lock's path.
    pub(crate) fn greatest_held_by(&self, holder: HolderId) -> Option<Arc<str>> {
        self.holds()
            .iter()
            .filter(|(_, holders)| holders.find(holder).is_some_and(|h| h.strong_count() > 0))
            .map(|(key, _)| key)
            .max()
            .cloned()
    }

    /// Records that `holder` holds `key` through `hold`, so its nested acquires re-enter. An
    /// earlier live hold of the same holder and key (taken with `.reentrant(false)`) keeps the
    /// entry.
    pub(crate) fn register(&self, holder: HolderId, key: &Arc<str>, hold: &Arc<H>) {
        self.holds()
            .entry(Arc::clone(key))
            .or_default()
            .register(holder, hold);
    }

    /// Forgets that `holder` holds `key` through `hold` (its last share of it is gone).
    pub(crate) fn forget(&self, holder: HolderId, key: &Arc<str>, hold: *const H) {
        if let Entry::Occupied(mut holders) = self.holds().entry(Arc::clone(key))
            && holders.get_mut().forget(holder, hold)
        {
            holders.remove();
        }
    }
}
