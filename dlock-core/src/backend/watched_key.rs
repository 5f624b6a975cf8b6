//! Whether a held lock's key (an etcd key, a ZooKeeper node) is watched for its deletion by
//! someone else — `etcdctl del`, `zkCli delete`, another process's force release — so that a
//! renewal can answer from the session alone instead of reading the key.
//!
//! A backend's renewal reads a key it does not watch yet and, finding it held, starts a watch
//! from what it read; later renewals read nothing while the watch stands. The watch marks the
//! key deleted when it sees the deletion (the next renewal answers "not the owner"), or falls
//! away when it can no longer tell (its stream broke, the server cancelled it): the next
//! renewal reads the key again. Giving the grant up ends the watch's interest in it.

use std::sync::atomic::{AtomicI64, AtomicU8, Ordering};

/// Not watched (not yet, or not any more): the next renewal reads the key.
const UNWATCHED: u8 = 0;
/// Watched (or about to be) from a moment at which the key was held.
const WATCHED: u8 = 1;
/// The watch saw the key deleted.
const DELETED: u8 = 2;
/// The grant was given up: nothing watches it any more.
const GIVEN_UP: u8 = 3;

/// What a renewal needs to know of a key's watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Watched {
    /// Nothing watches the key: a renewal must read it.
    No,
    /// Watched from a moment at which the key was held, and not seen deleted since.
    Yes,
    /// Seen deleted: the lock is lost.
    Deleted,
}

/// The watch state of one grant's key, shared by the grant and the task watching it.
#[derive(Debug)]
pub(crate) struct WatchedKey {
    /// The backend's id of the latest watch started on the key (etcd's watch id), 0 if none.
    watch_id: AtomicI64,
    state: AtomicU8,
}

impl WatchedKey {
    /// An unwatched key.
    pub(crate) const fn new() -> Self {
        Self {
            watch_id: AtomicI64::new(0),
            state: AtomicU8::new(UNWATCHED),
        }
    }

    /// The id of the latest watch started on the key (0 if none).
    pub(crate) fn watch_id(&self) -> i64 {
        self.watch_id.load(Ordering::Acquire)
    }

    /// Records the id of the watch just started on the key.
    pub(crate) fn set_watch_id(&self, id: i64) {
        self.watch_id.store(id, Ordering::Release);
    }

    /// What the watch knows now.
    pub(crate) fn watched(&self) -> Watched {
        match self.state.load(Ordering::Acquire) {
            WATCHED => Watched::Yes,
            DELETED => Watched::Deleted,
            _ => Watched::No,
        }
    }

    /// A renewal found the key held: true if it is not watched yet (and not given up), and
    /// the caller now starts its watch.
    pub(crate) fn start_watching(&self) -> bool {
        self.shift(UNWATCHED, WATCHED)
    }

    /// The watch saw the key deleted (ignored unless it is watched).
    pub(crate) fn deleted(&self) {
        self.shift(WATCHED, DELETED);
    }

    /// The watch can no longer tell (ignored unless it is watched): renewals read the key
    /// again.
    pub(crate) fn fell_away(&self) {
        self.shift(WATCHED, UNWATCHED);
    }

    /// The grant was given up: true if a watch was standing (the caller may cancel it).
    pub(crate) fn give_up(&self) -> bool {
        self.state.swap(GIVEN_UP, Ordering::AcqRel) == WATCHED
    }

    /// Moves `from` → `to`; false if the state was something else.
    fn shift(&self, from: u8, to: u8) -> bool {
        self.state
            .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}
