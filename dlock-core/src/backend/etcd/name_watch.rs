//! One watch per lock name, shared by that name's waiters in this backend.
//!
//! A waiter waits for a deletion under its lock's name (the key just ahead of its own, or one
//! of the older permits). A watch of its own per wait cost a new gRPC stream, a watch created
//! on etcd, a read to catch up on what happened between the waiter's last read and the
//! watch's start, and a cancel afterwards: on a busy name, most of a hand-off's round trips
//! and much of etcd's work. Instead, the first waiter of a name opens one watch on the whole
//! name (deletions only) and every waiter of that name in the backend follows it; it stays
//! open while the name has waiters, and a little longer ([`LINGER`]) so that the next wait on
//! a busy name finds it open.
//!
//! The watch does not ask for each deleted key's previous state (`prev_kv`): etcd reads it
//! from its store for every deletion and every watcher before it sends the event, work on the
//! hand-off's path (kubernetes/kubernetes#131862 takes `prev_kv` off the API server's watches
//! for that cost: half of etcd's range operations), and a compaction racing the read leaves it
//! out (etcd #10681). A deletion names its key only, and that is enough: a waiter waits for
//! keys its last read listed, and the first deletion of such a key after that read is the
//! deletion of the key it saw (a key of the same name put again later is deleted only after
//! that). On the bench's semaphore, against a fresh etcd: ~25 % more grants per second and a
//! p99 wait ~4 ms shorter (`dlock-core/src/guide/performance.md`).
//!
//! The watch keeps a log of the deletions it saw, each with its revision: every deletion
//! after the log's `base` revision is in it. A waiter that last read the name at revision
//! `seen` takes the deletions after `seen` from the log, then each new one as it arrives, so
//! it never misses the one it waits for however late it joins — or, if `seen` is older than
//! `base` (the watch opened, or the log was trimmed, after its read), it reads the name again
//! and then follows. `base` is the revision of a read made once the watch was created: every
//! deletion after it reaches the watch (etcd starts a watch without a start revision from its
//! current revision, without the 100 ms catch-up loop a watch from the past goes through).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use etcd_client::{Client, EventType, GetOptions, WatchFilterType, WatchOptions};
use tokio::sync::{OnceCell, watch};
use tokio_util::sync::CancellationToken;

use super::keys::LockName;
use super::watch::Watch;
use crate::backend::background::Background;

/// How long a name's watch stays open after its last waiter left.
const LINGER: Duration = Duration::from_secs(2);

/// The most deletions a name's log keeps; a waiter that falls further behind reads the name
/// again.
const LOG_LENGTH: usize = 1024;

/// A key deleted under a watched name.
#[derive(Debug, Clone)]
pub(super) struct Deletion {
    pub(super) key: Vec<u8>,
    /// The revision of the deletion.
    pub(super) revision: i64,
}

/// The names being watched in one backend.
pub(super) struct NameWatches {
    client: Client,
    timeout: Duration,
    background: Background,
    /// Ends every name's watch (the backend shut down).
    stop: CancellationToken,
    names: Arc<Mutex<HashMap<String, Arc<NameWatch>>>>,
}

impl std::fmt::Debug for NameWatches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NameWatches")
            .field("names", &lock(&self.names).len())
            .finish_non_exhaustive()
    }
}

/// One name's watch.
struct NameWatch {
    /// Whether the watch opened (set once, by the first waiter).
    opened: OnceCell<bool>,
    log: watch::Sender<Log>,
    /// Waiters following it now.
    followers: AtomicUsize,
    /// How many times its last follower left: a linger ends the watch only if no follower
    /// came and left since it started.
    departures: AtomicU64,
    /// Ends the task reading the watch.
    stop: CancellationToken,
}

/// What a name's watch saw.
#[derive(Debug, Default)]
struct Log {
    /// Every deletion under the name after this revision is in `deletions`.
    base: i64,
    deletions: VecDeque<Deletion>,
    /// The watch ended (its stream broke, or etcd cancelled it): its waiters read again.
    ended: bool,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a follower learned from the log since it last asked.
pub(super) enum Since {
    /// The deletions after the revision asked about (possibly none yet).
    Deletions(Vec<Deletion>),
    /// They cannot be told: the log does not reach back that far (the watch opened, or the
    /// log was trimmed, after that revision). Read the name again, and follow from there.
    Behind,
    /// The watch ended (its stream broke, or etcd cancelled it).
    Ended,
}

impl NameWatches {
    /// No name watched yet; every watch ends with `stop`.
    pub(super) fn new(
        client: Client,
        timeout: Duration,
        background: Background,
        stop: CancellationToken,
    ) -> Self {
        Self {
            client,
            timeout,
            background,
            stop,
            names: Arc::default(),
        }
    }

    /// Follows the watch on `name`, opening it if no waiter of this backend has (bounded by
    /// the operation timeout). `None` if it could not be opened.
    pub(super) async fn follow(&self, name: &LockName) -> Option<Follower> {
        if self.stop.is_cancelled() {
            return None; // shut down: no new watch
        }
        let prefix = name.prefix().to_owned();
        let shared = {
            let mut names = lock(&self.names);
            let shared = names.entry(prefix.clone()).or_insert_with(|| {
                Arc::new(NameWatch {
                    opened: OnceCell::new(),
                    log: watch::Sender::new(Log::default()),
                    followers: AtomicUsize::new(0),
                    departures: AtomicU64::new(0),
                    stop: self.stop.child_token(),
                })
            });
            shared.followers.fetch_add(1, Ordering::AcqRel);
            Arc::clone(shared)
        };
        let follower = Follower {
            log: shared.log.subscribe(),
            prefix: prefix.clone(),
            shared,
            names: Arc::clone(&self.names),
            background: self.background.clone(),
        };
        let opened = *follower
            .shared
            .opened
            .get_or_init(|| self.open(name, &follower.shared))
            .await;
        opened.then_some(follower)
    }

    /// Opens the watch on `name` and starts reading it; false (and forgotten, so the next
    /// waiter tries again) if etcd did not create it or answer the read within the timeout.
    async fn open(&self, name: &LockName, shared: &Arc<NameWatch>) -> bool {
        let prefix = name.prefix().to_owned();
        let opened = tokio::time::timeout(self.timeout, self.create(name)).await;
        let Ok(Some((watch, base))) = opened else {
            tracing::debug!(name = %prefix, "dlock: etcd name watch did not open; waiters read again");
            forget(&self.names, &prefix, shared);
            return false;
        };
        shared.log.send_modify(|log| log.base = base);
        let (shared_task, names) = (Arc::clone(shared), Arc::clone(&self.names));
        self.background.spawn(async move {
            read(watch, &shared_task).await;
            shared_task.log.send_modify(|log| log.ended = true);
            forget(&names, &prefix, &shared_task);
        });
        true
    }

    /// Creates the watch and reads the revision from which it sees every deletion.
    async fn create(&self, name: &LockName) -> Option<(Watch, i64)> {
        let prefix = name.prefix().as_bytes().to_vec();
        let options = WatchOptions::new()
            .with_range(name.blockers_end(false))
            .with_filters([WatchFilterType::NoPut]);
        let stream = self
            .client
            .watch_client()
            .watch(prefix.clone(), Some(options))
            .await
            .ok()?;
        let mut watch = Watch::new(stream, self.timeout, self.background.clone());
        match watch.message().await {
            Ok(Some(response)) if response.created() && !response.canceled() => {}
            _ => return None,
        }
        // Read after the watch exists: every deletion after this revision reaches it.
        let mut kv = self.client.kv_client();
        let read = kv
            .get(prefix, Some(GetOptions::new().with_count_only()))
            .await
            .ok()?;
        Some((watch, read.header()?.revision()))
    }
}

/// Reads the watch's deletions into its log until it ends or is stopped.
async fn read(mut watch: Watch, shared: &NameWatch) {
    loop {
        let response = tokio::select! {
            biased;
            () = shared.stop.cancelled() => return,
            response = watch.message() => response,
        };
        let Ok(Some(response)) = response else {
            tracing::debug!("dlock: etcd name watch ended; its waiters read again");
            return;
        };
        if response.canceled() || response.compact_revision() > 0 {
            return;
        }
        let deletions: Vec<Deletion> = response
            .events()
            .iter()
            .filter(|event| event.event_type() == EventType::Delete)
            .filter_map(|event| {
                let kv = event.kv()?;
                Some(Deletion {
                    key: kv.key().to_vec(),
                    revision: kv.mod_revision(),
                })
            })
            .collect();
        if !deletions.is_empty() {
            shared.log.send_modify(|log| log.record(deletions));
        }
    }
}

impl Log {
    /// Appends deletions (those at or before `base`, which came before the read that set it,
    /// are not needed), dropping the oldest beyond [`LOG_LENGTH`].
    fn record(&mut self, deletions: Vec<Deletion>) {
        let base = self.base;
        self.deletions
            .extend(deletions.into_iter().filter(|d| d.revision > base));
        while self.deletions.len() > LOG_LENGTH {
            if let Some(dropped) = self.deletions.pop_front() {
                self.base = self.base.max(dropped.revision);
            }
        }
    }
}

/// Forgets `shared` as `prefix`'s watch, if it still is.
fn forget(names: &Mutex<HashMap<String, Arc<NameWatch>>>, prefix: &str, shared: &Arc<NameWatch>) {
    let mut names = lock(names);
    if names
        .get(prefix)
        .is_some_and(|current| Arc::ptr_eq(current, shared))
    {
        names.remove(prefix);
    }
}

/// A waiter following a name's watch; when the last one is dropped, the watch ends after
/// [`LINGER`] unless another waiter came.
pub(super) struct Follower {
    shared: Arc<NameWatch>,
    log: watch::Receiver<Log>,
    prefix: String,
    names: Arc<Mutex<HashMap<String, Arc<NameWatch>>>>,
    background: Background,
}

impl Follower {
    /// The deletions after revision `after`, as far as the log tells.
    pub(super) fn since(&mut self, after: i64) -> Since {
        let log = self.log.borrow_and_update();
        if log.ended {
            return Since::Ended;
        }
        if after < log.base {
            return Since::Behind;
        }
        // The log is in revision order.
        let first = log
            .deletions
            .partition_point(|deletion| deletion.revision <= after);
        Since::Deletions(log.deletions.range(first..).cloned().collect())
    }

    /// Resolves when the log changed (a deletion, or the watch ended).
    pub(super) async fn changed(&mut self) {
        if self.log.changed().await.is_err() {
            std::future::pending::<()>().await; // cannot happen: the follower keeps the sender
        }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        if self.shared.followers.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let departure = self.shared.departures.fetch_add(1, Ordering::AcqRel) + 1;
        let (shared, names, prefix) = (
            Arc::clone(&self.shared),
            Arc::clone(&self.names),
            std::mem::take(&mut self.prefix),
        );
        self.background.spawn(async move {
            tokio::select! {
                () = shared.stop.cancelled() => {}
                () = tokio::time::sleep(LINGER) => {}
            }
            // Under the names' lock, which a new follower takes to join.
            let mut names = lock(&names);
            if shared.followers.load(Ordering::Acquire) == 0
                && shared.departures.load(Ordering::Acquire) == departure
                && names
                    .get(&prefix)
                    .is_some_and(|current| Arc::ptr_eq(current, &shared))
            {
                names.remove(&prefix);
                shared.stop.cancel();
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deletion(revision: i64) -> Deletion {
        Deletion {
            key: format!("n/{revision}").into_bytes(),
            revision,
        }
    }

    #[test]
    fn the_log_keeps_what_came_after_its_base_and_moves_the_base_when_trimmed() {
        let mut log = Log {
            base: 10,
            ..Log::default()
        };
        // Deletions the base read already saw are not kept.
        log.record(vec![deletion(9), deletion(10), deletion(11)]);
        assert_eq!(log.deletions.len(), 1);
        assert_eq!(log.base, 10);
        let more: Vec<_> = (12..12 + i64::try_from(LOG_LENGTH).unwrap())
            .map(deletion)
            .collect();
        log.record(more);
        assert_eq!(log.deletions.len(), LOG_LENGTH);
        // The oldest one was dropped: a waiter that read before it must read again.
        assert_eq!(log.base, 11);
        assert_eq!(log.deletions.front().map(|d| d.revision), Some(12));
    }
}
