//! How many acquires of each key wait in a server's queue (etcd, ZooKeeper): a backend's
//! `waiters` probe, which lets the conformance suite see that a waiter has queued.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Acquires queued on the server, by full key.
#[derive(Debug, Clone, Default)]
pub(crate) struct QueuedCounts(Arc<Mutex<HashMap<String, usize>>>);

impl QueuedCounts {
    fn counts(&self) -> MutexGuard<'_, HashMap<String, usize>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many acquires of `full_key` are queued now.
    pub(crate) fn of(&self, full_key: &str) -> usize {
        self.counts().get(full_key).copied().unwrap_or(0)
    }

    /// Counts one more acquire of `full_key` as queued, until the mark is dropped.
    pub(crate) fn mark(&self, full_key: &str) -> QueuedMark {
        *self.counts().entry(full_key.to_owned()).or_insert(0) += 1;
        QueuedMark {
            counts: self.clone(),
            key: full_key.to_owned(),
        }
    }
}

/// One acquire queued on the server, counted while it lives.
#[derive(Debug)]
pub(crate) struct QueuedMark {
    counts: QueuedCounts,
    key: String,
}

impl Drop for QueuedMark {
    fn drop(&mut self) {
        let mut counts = self.counts.counts();
        if let Some(count) = counts.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.key);
            }
        }
    }
}
