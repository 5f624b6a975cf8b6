//! Held keys watched for their deletion by someone else (`etcdctl del`, another process's
//! force release, a lease revoked by hand), so that renewing a held lock costs no request.
//!
//! A lock's first renewal reads its key (does it still exist with its create revision?) as
//! before; a key found there is then watched, on one watch stream per backend, from the
//! revision that read saw, for deletions only. Later renewals answer from the session's
//! keepalive alone — unless the watch saw the key deleted (the lock is lost) or fell away
//! (the stream broke, or etcd cancelled the watch after a compaction): then the next renewal
//! reads the key again and watches it anew. A lock released before its first renewal never
//! costs a watch. Renewing 100,000 held locks is then one lease keepalive per cadence, not
//! 100,000 key reads; etcd keeps one watcher per long-held key, which sends nothing unless
//! the key is deleted.
//!
//! Requests go out from one task and answers are read by another, so a burst of watch
//! requests never waits on answers nobody reads (gRPC flow control would stall both sides).

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
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
    next_id: AtomicI64,
    /// The task sending requests and those reading answers.
    tasks: TaskTracker,
}

enum Command {
    /// Watch `key` for its deletion from revision `from` on.
    Watch {
        key: String,
        from: i64,
        watch: Arc<WatchedKey>,
    },
    /// Stop watching (the grant was given up).
    Unwatch(i64),
    /// Cancel etcd's watcher of a key seen deleted (its state is settled already).
    Cancel(i64),
}

/// The watches on the stream now open, by id, with the stream's generation.
type Table = Arc<Mutex<HashMap<i64, (u64, Arc<WatchedKey>)>>>;

fn lock(table: &Table) -> MutexGuard<'_, HashMap<i64, (u64, Arc<WatchedKey>)>> {
    table.lock().unwrap_or_else(PoisonError::into_inner)
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
        };
        tasks.spawn(task.send(receiver));
        Self {
            commands,
            next_id: AtomicI64::new(1),
            tasks,
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

    /// The (unwatched) state of a new grant's key.
    pub(super) fn new_watch(&self) -> Arc<WatchedKey> {
        Arc::new(WatchedKey::new(
            self.next_id.fetch_add(1, Ordering::Relaxed),
        ))
    }

    /// Watches `key` for its deletion after revision `seen_at`, at which a read found it
    /// held (unless it is watched already, or given up).
    pub(super) fn watch(&self, key: &str, seen_at: i64, watch: &Arc<WatchedKey>) {
        if watch.start_watching() {
            let _ = self.commands.send(Command::Watch {
                key: key.to_owned(),
                from: seen_at + 1,
                watch: Arc::clone(watch),
            });
        }
    }

    /// The grant was given up: its key is watched no more.
    pub(super) fn forget(&self, watch: &WatchedKey) {
        if watch.give_up() {
            let _ = self.commands.send(Command::Unwatch(watch.id()));
        }
    }
}

/// The open stream's request half and generation.
struct Open {
    sender: WatchRequestSender,
    generation: u64,
}

/// What the task sending watch requests works with.
struct Requests {
    client: Client,
    timeout: Duration,
    /// Where the readers ask for a deleted key's watcher to be cancelled (weak: the task ends
    /// when the backend drops its sender).
    cancels: mpsc::WeakUnboundedSender<Command>,
    stop: CancellationToken,
    /// Where the readers run.
    tasks: TaskTracker,
}

impl Requests {
    /// Sends the watch requests, opening a stream when there is none (or it broke).
    async fn send(self, mut commands: mpsc::UnboundedReceiver<Command>) {
        let Self {
            client,
            timeout,
            cancels,
            stop,
            tasks,
        } = self;
        let table: Table = Arc::default();
        // The generation of the stream that broke last: its reader sets it.
        let broken = Arc::new(AtomicU64::new(0));
        let mut open: Option<Open> = None;
        let mut generations = 0;
        loop {
            let command = tokio::select! {
                biased;
                () = stop.cancelled() => return,
                command = commands.recv() => match command {
                    Some(command) => command,
                    None => return,
                },
            };
            if open
                .as_ref()
                .is_some_and(|o| broken.load(Ordering::Acquire) == o.generation)
            {
                open = None;
            }
            match command {
                Command::Watch { key, from, watch } => {
                    let options = WatchOptions::new()
                        .with_watch_id(watch.id())
                        .with_start_revision(from)
                        .with_filters([WatchFilterType::NoPut]);
                    let generation = match open.as_ref() {
                        Some(o) => o.generation,
                        None => generations + 1,
                    };
                    // Recorded before the request goes out: its answer may come at once.
                    lock(&table).insert(watch.id(), (generation, Arc::clone(&watch)));
                    if watch.watched() != Watched::Yes {
                        lock(&table).remove(&watch.id()); // given up meanwhile
                        continue;
                    }
                    let sent = match open.as_mut() {
                        Some(o) => {
                            let request = o.sender.watch(key, Some(options));
                            matches!(tokio::time::timeout(timeout, request).await, Ok(Ok(())))
                        }
                        None => {
                            let mut watch_client = client.watch_client();
                            let opened = tokio::time::timeout(
                                timeout,
                                watch_client.watch(key, Some(options)),
                            )
                            .await;
                            match opened {
                                Ok(Ok(stream)) => {
                                    generations = generation;
                                    let (sender, responses) = stream.split();
                                    tasks.spawn(read_answers(
                                        responses,
                                        generation,
                                        Reader {
                                            table: Arc::clone(&table),
                                            broken: Arc::clone(&broken),
                                            cancels: cancels.clone(),
                                            stop: stop.clone(),
                                        },
                                    ));
                                    open = Some(Open { sender, generation });
                                    true
                                }
                                Ok(Err(_)) | Err(_) => false,
                            }
                        }
                    };
                    if !sent {
                        // The next renewal reads the key and asks again.
                        lock(&table).remove(&watch.id());
                        watch.fell_away();
                        if let Some(o) = open.take() {
                            fall_away(&table, o.generation);
                        }
                    }
                }
                Command::Unwatch(id) | Command::Cancel(id) => {
                    let on_stream =
                        matches!(command, Command::Cancel(_)) || lock(&table).remove(&id).is_some();
                    if let (true, Some(o)) = (on_stream, open.as_mut()) {
                        let cancel = o.sender.cancel(id);
                        if !matches!(tokio::time::timeout(timeout, cancel).await, Ok(Ok(()))) {
                            fall_away(&table, o.generation);
                            open = None;
                        }
                    }
                }
            }
        }
    }
}

/// What a task reading one stream's answers works with.
struct Reader {
    table: Table,
    /// Set to the stream's generation when it ends.
    broken: Arc<AtomicU64>,
    cancels: mpsc::WeakUnboundedSender<Command>,
    stop: CancellationToken,
}

/// Reads one stream's answers: a deletion marks its key deleted; a watch etcd cancelled
/// (compaction) and, when the stream ends, every watch on it fall back to renewal reads.
async fn read_answers(mut responses: WatchResponseStream, generation: u64, reader: Reader) {
    let Reader {
        table,
        broken,
        cancels,
        stop,
    } = reader;
    loop {
        let answer = tokio::select! {
            biased;
            () = stop.cancelled() => return,
            answer = responses.message() => answer,
        };
        let Ok(Some(answer)) = answer else {
            tracing::debug!("dlock: etcd key watch stream ended; renewals read the keys again");
            broken.store(generation, Ordering::Release);
            fall_away(&table, generation);
            return;
        };
        let id = answer.watch_id();
        let deleted = answer
            .events()
            .iter()
            .any(|event| event.event_type() == EventType::Delete);
        if deleted {
            if let Some((_, watch)) = lock(&table).remove(&id) {
                tracing::debug!(id, "dlock: etcd held key deleted by someone else");
                watch.deleted();
                if let Some(cancels) = cancels.upgrade() {
                    let _ = cancels.send(Command::Cancel(id));
                }
            }
        } else if (answer.canceled() || answer.compact_revision() > 0)
            && let Some((_, watch)) = lock(&table).remove(&id)
        {
            watch.fell_away();
        }
    }
}

/// The watches of stream `generation` are gone: renewals read their keys again.
fn fall_away(table: &Table, generation: u64) {
    lock(table).retain(|_, (on, watch)| {
        let keep = *on != generation;
        if !keep {
            watch.fell_away();
        }
        keep
    });
}
