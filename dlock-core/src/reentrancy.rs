//! Per-task reentrancy: which task (or, outside tasks, which thread) holds which key.
//!
//! Redisson keys reentrancy on `client-id:thread-id`; in async Rust the unit of execution is
//! the tokio task, so dlock keys it on [`tokio::task::Id`]. Code running outside any task
//! (the body of `#[tokio::main]`, `block_on`) is identified by its thread.
//!
//! A holder is registered while it has at least one share of the hold (a guard it acquired or
//! adopted); the registration ends with its last share. Two consequences, documented for
//! users: futures polled concurrently inside one task (`join!`, `select!`,
//! `FuturesUnordered`) re-enter each other's holds, and a guard moved to another task keeps
//! counting for the task that acquired it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
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

/// The holds of one Locker, by holder and full key.
#[derive(Debug, Default)]
pub(crate) struct Reentrancy {
    holds: Mutex<HashMap<(HolderId, String), Weak<Hold>>>,
}

impl Reentrancy {
    /// The live hold `holder` has on `key`, if any.
    pub(crate) fn find(&self, holder: HolderId, key: &str) -> Option<Arc<Hold>> {
        let holds = self.holds.lock().unwrap_or_else(PoisonError::into_inner);
        holds.get(&(holder, key.to_owned()))?.upgrade()
    }

    /// Records that `holder` holds `hold`, so its nested acquires re-enter. An earlier live
    /// hold of the same holder and key (taken with `.reentrant(false)`) keeps the entry.
    pub(crate) fn register(&self, holder: HolderId, hold: &Arc<Hold>) {
        let mut holds = self.holds.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = holds
            .entry((holder, hold.full_key().to_owned()))
            .or_default();
        if entry.strong_count() == 0 {
            *entry = Arc::downgrade(hold);
        }
    }

    /// Forgets that `holder` holds `key` through `hold` (its last share of it is gone).
    pub(crate) fn forget(&self, holder: HolderId, key: &str, hold: *const Hold) {
        let mut holds = self.holds.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = (holder, key.to_owned());
        if holds
            .get(&entry)
            .is_some_and(|w| w.strong_count() == 0 || std::ptr::eq(w.as_ptr(), hold))
        {
            holds.remove(&entry);
        }
    }
}
