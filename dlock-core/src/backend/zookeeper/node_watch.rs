//! Held lock nodes watched for their deletion by someone else (`zkCli delete`, another
//! process's force release), so that renewing a held lock reads no node
//! ([`watched_key`](crate::backend::watched_key) has the rule).
//!
//! A lock's first renewal reads its node with an exists-watch (`check_and_watch_stat`: one
//! request, the node's stat and a one-shot watch); a node found held is watched from then on,
//! and later renewals only confirm the session ([`Session::confirmed`]). One task per backend
//! awaits every watch: a deletion marks the node deleted; any other event (the node's data
//! set, the session expired or closed) lets the next renewal read the node again. The client
//! sets its watches again after a reconnection within the session. Releasing a node deletes
//! it, which fires its watch: nothing is left on the server.
//!
//! [`Session::confirmed`]: super::session::Session::confirmed

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;

use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use zookeeper_client::{EventType, OneshotWatcher};

use crate::backend::watched_key::WatchedKey;

type Fired = Pin<Box<dyn Future<Output = ()> + Send>>;

/// One backend's watches on held nodes.
#[derive(Debug)]
pub(super) struct NodeWatches {
    watches: mpsc::UnboundedSender<Fired>,
}

impl NodeWatches {
    /// Starts the task that awaits the watches; it ends with `stop` or when this is dropped.
    pub(super) fn start(stop: CancellationToken) -> Self {
        let (watches, receiver) = mpsc::unbounded_channel();
        tokio::spawn(await_watches(receiver, stop));
        Self { watches }
    }

    /// The (unwatched) state of a new grant's node.
    pub(super) fn new_watch() -> Arc<WatchedKey> {
        Arc::new(WatchedKey::new())
    }

    /// `watcher`, set by a read that found the node held, now watches it (unless it was given
    /// up meanwhile: then the watch fires harmlessly when the node is deleted).
    pub(super) fn watch(&self, key: &Arc<WatchedKey>, watcher: OneshotWatcher) {
        if !key.start_watching() {
            return;
        }
        let watched = Arc::clone(key);
        let fired: Fired = Box::pin(async move {
            // The client panics if it drops a watch without an event: that watch is gone.
            match AssertUnwindSafe(watcher.changed()).catch_unwind().await {
                Ok(event) if event.event_type == EventType::NodeDeleted => {
                    tracing::debug!(path = %event.path, "dlock: ZooKeeper held node deleted");
                    watched.deleted();
                }
                Ok(_) | Err(_) => watched.fell_away(),
            }
        });
        if self.watches.send(fired).is_err() {
            key.fell_away(); // shutting down: nothing would see the watch fire
        }
    }
}

/// Awaits every watch until `stop`, or until the backend drops its sender and none is left.
async fn await_watches(mut incoming: mpsc::UnboundedReceiver<Fired>, stop: CancellationToken) {
    let mut standing = FuturesUnordered::new();
    let mut open = true;
    loop {
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            watch = incoming.recv(), if open => match watch {
                Some(watch) => standing.push(watch),
                None => open = false,
            },
            Some(()) = standing.next(), if !standing.is_empty() => {}
            else => return,
        }
    }
}
