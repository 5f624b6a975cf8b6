//! Held keys watched for their deletion by someone else (`etcdctl del`, another process's
//! force release, a lease revoked by hand), so that renewing a held lock costs no request.
//!
//! A lock's first renewal reads its key (does it still exist with its create revision?) as
//! before; a key found there is then watched, on one watch stream per backend, from the
//! revision that read saw, for deletions only. Later renewals answer from the session's
//! keepalive alone — unless the watch saw the key deleted (the lock is lost) or fell away
//! (the stream broke, or etcd cancelled the watch after a compaction): then the next renewal
//! reads the key again and watches it anew, under a new watch id. A lock released before its
//! first renewal never costs a watch. Renewing 100,000 held locks is then one lease keepalive
//! per cadence, not 100,000 key reads; etcd keeps one watcher per long-held key, which sends
//! nothing unless the key is deleted. The client asks etcd to end its streams when the member
//! it talks to loses the leader (`require_leader`), so a partitioned member cannot keep a
//! silent watch alive.
//!
//! Requests go out from one task and answers are read by another (one per stream), so a
//! burst of watch requests never waits on answers nobody reads (gRPC flow control would stall
//! both sides). A stream given up (a request that got no answer within the operation timeout)
//! is reset, so etcd drops its watchers too.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use etcd_client::{
    Client, EventType, WatchFilterType, WatchOptions, WatchRequestSender, WatchResponseStream,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::backend::watched_key::{Watched, WatchedKey};

/// One backend's watches on held keys.
#[derive(Debug)]
pub(super) struct KeyWatches {
    commands: mpsc::UnboundedSender<Command>,
    /// The next watch id: every watch request gets a new one (etcd refuses an id still known
    /// to the stream, which a watch it cancelled after a compaction is until the client
    /// cancels it too).
    next_id: AtomicI64,
    /// The task sending requests and those reading answers.
    tasks: TaskTracker,
}

enum Command {
    /// Watch `key` for its deletion from revision `from` on, as watch `id`.
    Watch {
        id: i64,
        key: String,
        from: i64,
        watched: Arc<WatchedKey>,
    },
    /// Stop watching (the grant was given up).
    Unwatch(i64),
    /// Cancel etcd's watcher `id`, whose state is settled already (its key was seen deleted,
    /// or etcd cancelled it).
    Cancel(i64),
}

/// The watches on the open stream, by id, and which stream is open.
#[derive(Default)]
struct Table {
    /// Watch id → (the generation of the stream it is on, its key's state).
    watches: HashMap<i64, (u64, Arc<WatchedKey>)>,
    /// The generation of the open stream, if one is open and not broken.
    live: Option<u64>,
}

type SharedTable = Arc<Mutex<Table>>;

fn lock(table: &SharedTable) -> MutexGuard<'_, Table> {
    table.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Table {
    /// Records watch `id` on stream `generation` if that stream is still the live one.
    fn insert(&mut self, generation: u64, id: i64, watched: &Arc<WatchedKey>) -> bool {
        if self.live != Some(generation) {
            return false;
        }
        self.watches.insert(id, (generation, Arc::clone(watched)));
        true
    }

    /// Removes watch `id` if it is on stream `generation`.
    fn take(&mut self, generation: u64, id: i64) -> Option<Arc<WatchedKey>> {
        match self.watches.get(&id) {
            Some((on, _)) if *on == generation => self.watches.remove(&id).map(|(_, w)| w),
            _ => None,
        }
    }

    /// Stream `generation` is gone: its watches fall away (renewals read their keys again).
    fn close(&mut self, generation: u64) {
        if self.live == Some(generation) {
            self.live = None;
        }
        self.watches.retain(|_, (on, watched)| {
            let keep = *on != generation;
            if !keep {
                watched.fell_away();
            }
            keep
        });
    }
}

impl KeyWatches {
    /// Starts the task that sends watch requests; it ends with `stop` or when this is dropped.
    pub(super) fn start(client: Client, timeout: Duration, stop: CancellationToken) -> Self {
        let (commands, receiver) = mpsc::unbounded_channel();
        let tasks = TaskTracker::new();
        let task = Requests {
            client,
            timeout,
            cancels: commands.downgrade(),
            stop,
            tasks: tasks.clone(),
            table: SharedTable::default(),
            open: None,
            generations: 0,
        };
        tasks.spawn(task.run(receiver));
        Self {
            commands,
            next_id: AtomicI64::new(1),
            tasks,
        }
    }

    /// The (unwatched) state of a new grant's key.
    pub(super) fn new_watch() -> Arc<WatchedKey> {
        Arc::new(WatchedKey::new())
    }

    /// Watches `key` for its deletion after revision `seen_at`, at which a read found it
    /// held (unless it is watched already, or given up).
    pub(super) fn watch(&self, key: &str, seen_at: i64, watched: &Arc<WatchedKey>) {
        if watched.start_watching() {
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            watched.set_watch_id(id);
            let _ = self.commands.send(Command::Watch {
                id,
                key: key.to_owned(),
                from: seen_at + 1,
                watched: Arc::clone(watched),
            });
        }
    }

    /// The grant was given up: its key is watched no more.
    pub(super) fn forget(&self, watched: &WatchedKey) {
        if watched.give_up() {
            let _ = self.commands.send(Command::Unwatch(watched.watch_id()));
        }
    }

    /// Resolves once every task has ended (after `stop`), its stream dropped. A shutdown
    /// awaits this before it revokes the leases: the stream is then reset before etcd
    /// deletes the keys, so no deletion event races the reset (h2 counts every frame that
    /// arrives for a reset stream; see [`watch`](super::watch)).
    pub(super) fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        self.tasks.close();
        let tasks = self.tasks.clone();
        async move { tasks.wait().await }
    }
}

/// The open stream's request half, generation, and what ends its reader (which resets it).
struct Open {
    sender: WatchRequestSender,
    generation: u64,
    reader: CancellationToken,
}

/// The task sending watch requests, and what it works with.
struct Requests {
    client: Client,
    timeout: Duration,
    /// Where the readers ask for a watcher to be cancelled (weak: the task ends when the
    /// backend drops its sender).
    cancels: mpsc::WeakUnboundedSender<Command>,
    stop: CancellationToken,
    /// Where the readers run.
    tasks: TaskTracker,
    table: SharedTable,
    open: Option<Open>,
    generations: u64,
}

impl Requests {
    /// Sends the watch requests, opening a stream when there is none (or it broke).
    async fn run(mut self, mut commands: mpsc::UnboundedReceiver<Command>) {
        loop {
            let command = tokio::select! {
                biased;
                () = self.stop.cancelled() => return,
                command = commands.recv() => match command {
                    Some(command) => command,
                    None => return,
                },
            };
            match command {
                Command::Watch {
                    id,
                    key,
                    from,
                    watched,
                } => {
                    if !self.watch(id, key, from, &watched).await {
                        // The next renewal reads the key and asks again.
                        watched.fell_away();
                    }
                }
                Command::Unwatch(id) => {
                    let on_stream = lock(&self.table).watches.remove(&id).is_some();
                    if on_stream {
                        self.cancel(id).await;
                    }
                }
                Command::Cancel(id) => self.cancel(id).await,
            }
        }
    }

    /// The open stream's generation, if it is still live.
    fn live(&self) -> Option<u64> {
        let live = lock(&self.table).live;
        self.open
            .as_ref()
            .map(|open| open.generation)
            .filter(|generation| live == Some(*generation))
    }

    /// Sends watch `id` on the live stream, or opens one with it; false if neither worked or
    /// the grant was given up meanwhile.
    async fn watch(&mut self, id: i64, key: String, from: i64, watched: &Arc<WatchedKey>) -> bool {
        if watched.watched() != Watched::Yes {
            return false; // given up meanwhile
        }
        let options = WatchOptions::new()
            .with_watch_id(id)
            .with_start_revision(from)
            .with_filters([WatchFilterType::NoPut]);
        if let Some(generation) = self.live() {
            // Recorded before the request goes out: its answer may come at once.
            if !lock(&self.table).insert(generation, id, watched) {
                return false;
            }
            let open = self.open.as_mut().expect("live");
            let request = open.sender.watch(key, Some(options));
            if matches!(
                tokio::time::timeout(self.timeout, request).await,
                Ok(Ok(()))
            ) {
                return true;
            }
            self.abandon();
            return false;
        }
        self.abandon();
        let mut watch_client = self.client.watch_client();
        let opened =
            tokio::time::timeout(self.timeout, watch_client.watch(key, Some(options))).await;
        let Ok(Ok(stream)) = opened else {
            return false;
        };
        self.generations += 1;
        let generation = self.generations;
        {
            let mut table = lock(&self.table);
            table.live = Some(generation);
            table.insert(generation, id, watched);
        }
        let (sender, responses) = stream.split();
        let reader = self.stop.child_token();
        self.tasks.spawn(read_answers(
            responses,
            generation,
            Reader {
                table: Arc::clone(&self.table),
                cancels: self.cancels.clone(),
                stop: reader.clone(),
            },
        ));
        self.open = Some(Open {
            sender,
            generation,
            reader,
        });
        true
    }

    /// Cancels watcher `id` on the live stream (nothing to do without one: a stream that
    /// ended took its watchers with it).
    async fn cancel(&mut self, id: i64) {
        if self.live().is_none() {
            return;
        }
        let open = self.open.as_mut().expect("live");
        let cancel = open.sender.cancel(id);
        if !matches!(tokio::time::timeout(self.timeout, cancel).await, Ok(Ok(()))) {
            self.abandon();
        }
    }

    /// Gives up the open stream: its reader ends and drops it (a reset, so etcd drops its
    /// watchers), and its watches fall away.
    fn abandon(&mut self) {
        if let Some(open) = self.open.take() {
            open.reader.cancel();
            lock(&self.table).close(open.generation);
        }
    }
}

/// What a task reading one stream's answers works with.
struct Reader {
    table: SharedTable,
    cancels: mpsc::WeakUnboundedSender<Command>,
    /// Ends the reader (the stream given up, or the backend stopped).
    stop: CancellationToken,
}

impl Reader {
    fn cancel(&self, id: i64) {
        if let Some(cancels) = self.cancels.upgrade() {
            let _ = cancels.send(Command::Cancel(id));
        }
    }
}

/// Reads one stream's answers: a deletion marks its key deleted; a watch etcd cancelled
/// (compaction, lost leader) and, when the stream ends, every watch on it fall back to
/// renewal reads.
async fn read_answers(mut responses: WatchResponseStream, generation: u64, reader: Reader) {
    loop {
        let answer = tokio::select! {
            biased;
            () = reader.stop.cancelled() => break,
            answer = responses.message() => answer,
        };
        let Ok(Some(answer)) = answer else {
            tracing::debug!("dlock: etcd key watch stream ended; renewals read the keys again");
            break;
        };
        let id = answer.watch_id();
        let deleted = answer
            .events()
            .iter()
            .any(|event| event.event_type() == EventType::Delete);
        if deleted {
            let watched = lock(&reader.table).take(generation, id);
            if let Some(watched) = watched {
                tracing::debug!(id, "dlock: etcd held key deleted by someone else");
                watched.deleted();
                reader.cancel(id);
            }
        } else if answer.canceled() || answer.compact_revision() > 0 {
            let watched = lock(&reader.table).take(generation, id);
            if let Some(watched) = watched {
                watched.fell_away();
                reader.cancel(id); // etcd 3.4 keeps a compacted watch's id until then
            }
        }
    }
    lock(&reader.table).close(generation);
}
