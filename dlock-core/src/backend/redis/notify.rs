//! Waiting without polling: local FIFO queues per lock, woken by release notifications.
//!
//! One subscription connection per backend (per Locker) and server — RedLock has one per
//! master, and a release heard from any of them wakes the waiter — carries the release
//! channels of every key it waits on. Local waiters of one key queue in arrival order, in the
//! core's shared [`WaitQueues`]. Readers, permits and RedLock's waiters: only the head of the
//! queue talks to Redis; a release message wakes just that head; when the head leaves
//! (acquired, gave up, cancelled) the next one becomes head and is woken. The head also wakes
//! when the holder's remaining ttl runs out, so a lost message costs at most one ttl.
//!
//! A writer waiting in a single server's (or Cluster's) line talks to Redis itself (its place
//! in line is its own) and is woken on its own: a release that hands it the lock publishes
//! `><owner>\n<next owner>` on the lock's channel, which every subscribed Locker hears and
//! only the ones with those waiters act on ([`Waiters::call`]); the local queue then only says
//! who wakes for a release that names nobody. A reconnect wakes every writer in line.
//!
//! A subscription is confirmed by each server on its own: [`Waiters::confirmed`] says which
//! servers had confirmed a channel, so a RedLock waiter knows which masters' releases it is
//! sure to hear, and [`Waiters::wake_on_confirmation`] wakes it when one it needs confirms.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::join_all;
use futures_util::stream::FuturesUnordered;
use redis::{PushInfo, PushKind, Value};
use tokio::sync::Notify;
use tokio::sync::mpsc::UnboundedReceiver;

use super::conn::Conn;
use super::keys::RedisName;
use super::node::CLAIM_WINDOW;
use crate::backend::HolderChanges;
use crate::backend::background::Background;
use crate::backend::waiters::{Ticket, WaitQueues};
use crate::error::within;
use crate::{Error, Result};

/// The release channel of the lock with full key `key`.
pub(crate) fn channel_of(key: &str) -> String {
    RedisName::channel(key).to_string()
}

/// The local waiters of one backend, and its subscription connection.
#[derive(Debug)]
pub(crate) struct Waiters {
    /// Local waiters, by release channel (the core's shared FIFO queues).
    queues: Arc<WaitQueues<()>>,
    /// Writers waiting in the server's line, by owner: a hand-off names one.
    called: Mutex<HashMap<String, Arc<Notify>>>,
    /// Observers of a channel ([`watch`](Self::watch)): each is told of every message on it
    /// and of every confirmation of its subscription; a disconnect ends them. A channel is
    /// subscribed while it has waiters or observers.
    watchers: Mutex<HashMap<String, Vec<Arc<Watcher>>>>,
    /// Releases heard that named no waiter (and reconnects): a writer in line woken only
    /// because it became its queue's head need not ask the server again.
    releases_heard: AtomicU64,
    /// The channels subscribed to (added and removed only while holding `subscribers`), and
    /// which servers confirmed each.
    subscribed: Mutex<HashMap<String, Subscription>>,
    /// One subscription connection per server; the lock serialises SUBSCRIBE / UNSUBSCRIBE so
    /// they reach the servers in the order decided.
    subscribers: tokio::sync::Mutex<Vec<Conn>>,
    timeout: Duration,
    /// Work the backend leaves running (unsubscribes, withdrawals of cancelled waiters), which
    /// its shutdown awaits.
    background: Background,
}

impl Waiters {
    /// Runs `work` in the background, awaited by [`settle`](Self::settle).
    pub(crate) fn spawn(&self, work: impl Future<Output = ()> + Send + 'static) {
        let _ = self.background.spawn(work);
    }

    /// Waits, at most the operation timeout, for the work left running to end (the backend
    /// is shutting down).
    pub(crate) async fn settle(&self) {
        let _ = self.background.settle(self.timeout).await;
    }

    /// Starts dispatching the pushes of `subscribers`, server by server: `pushes[i]` receives
    /// what `subscribers[i]`'s push sender sends.
    pub(crate) fn start(
        subscribers: Vec<Conn>,
        pushes: Vec<UnboundedReceiver<PushInfo>>,
        timeout: Duration,
    ) -> Arc<Self> {
        debug_assert_eq!(subscribers.len(), pushes.len());
        assert!(
            subscribers.len() <= MAX_SERVERS,
            "at most {MAX_SERVERS} subscription servers"
        );
        let waiters = Arc::new_cyclic(|weak: &Weak<Self>| {
            let weak = weak.clone();
            // A channel nobody waits on any more is unsubscribed, in the background.
            let on_emptied = move |channel: &str| {
                let Some(waiters) = weak.upgrade() else {
                    return;
                };
                let channel = channel.to_owned();
                let background = waiters.background.clone();
                background.spawn(async move { waiters.unsubscribe_if_idle(channel).await });
            };
            Self {
                queues: Arc::new(WaitQueues::new(Some(Box::new(on_emptied)))),
                called: Mutex::default(),
                watchers: Mutex::default(),
                releases_heard: AtomicU64::new(0),
                subscribed: Mutex::default(),
                subscribers: tokio::sync::Mutex::new(subscribers),
                timeout,
                background: Background::new(),
            }
        });
        for (server, mut pushes) in pushes.into_iter().enumerate() {
            let weak = Arc::downgrade(&waiters);
            tokio::spawn(async move {
                while let Some(push) = pushes.recv().await {
                    let Some(waiters) = weak.upgrade() else {
                        return;
                    };
                    waiters.dispatch(server, &push);
                }
            });
        }
        waiters
    }

    fn called(&self) -> MutexGuard<'_, HashMap<String, Arc<Notify>>> {
        self.called.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn watchers(&self) -> MutexGuard<'_, HashMap<String, Vec<Arc<Watcher>>>> {
        self.watchers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Tells the observers of `channel` that something happened on it.
    fn tell_watchers(&self, channel: &str) {
        if let Some(watchers) = self.watchers().get(channel) {
            for watcher in watchers {
                watcher.notify.notify_one();
            }
        }
    }

    /// Ends every observer: the subscription connection dropped, and what was published
    /// meanwhile is unknown. Each observer subscribes again (which reconnects) and looks.
    fn end_watchers(&self) {
        for watcher in self.watchers().values().flatten() {
            watcher.disconnected.store(true, Ordering::Release);
            watcher.notify.notify_one();
        }
    }

    fn subscribed(&self) -> MutexGuard<'_, HashMap<String, Subscription>> {
        self.subscribed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn dispatch(&self, server: usize, push: &PushInfo) {
        let bit = 1u64 << server;
        match push.kind {
            PushKind::Message => {
                let (Some(Value::BulkString(channel)), payload) =
                    (push.data.first(), push.data.get(1))
                else {
                    return;
                };
                let channel = String::from_utf8_lossy(channel);
                match payload {
                    Some(Value::BulkString(payload)) if payload.first() == Some(&b'>') => {
                        let call = String::from_utf8_lossy(&payload[1..]);
                        let (first, next) = call.split_once('\n').unwrap_or((&call, ""));
                        self.on_hand_off(first, next);
                    }
                    // An election's new leader or proclaimed value: for observers only.
                    Some(Value::BulkString(payload)) if payload.as_slice() == b"+" => {}
                    _ => self.on_release(&channel),
                }
                self.tell_watchers(&channel);
            }
            // After a reconnect a release or hand-off may have been missed: let every head
            // and every writer in line re-check. The connection resubscribes when it
            // reconnects, and each channel is confirmed again.
            PushKind::Disconnection => {
                for subscription in self.subscribed().values_mut() {
                    subscription.confirmed &= !bit;
                }
                self.releases_heard.fetch_add(1, Ordering::AcqRel);
                self.queues.wake_every_head();
                for called in self.called().values() {
                    called.notify_one();
                }
                self.end_watchers();
            }
            PushKind::Subscribe | PushKind::Unsubscribe => {
                let Some(Value::BulkString(channel)) = push.data.first() else {
                    return;
                };
                let channel = String::from_utf8_lossy(channel);
                let mut subscribed = self.subscribed();
                let Some(subscription) = subscribed.get_mut(channel.as_ref()) else {
                    return;
                };
                if push.kind == PushKind::Unsubscribe {
                    subscription.confirmed &= !bit;
                } else {
                    let awaited = subscription.confirm(bit);
                    drop(subscribed);
                    if awaited {
                        self.queues.wake_head(&channel);
                    }
                    // (Re)subscribed: what changed while it was not is read again.
                    self.tell_watchers(&channel);
                }
            }
            _ => {}
        }
    }

    /// A release was published on `channel` for whoever waits: wakes the head of its queue.
    fn on_release(&self, channel: &str) {
        self.releases_heard.fetch_add(1, Ordering::AcqRel);
        self.queues.wake_head(channel);
    }

    /// The lock was handed to the writer `first`, with `next` after it in line: wakes
    /// `first` if it is one of ours, and `next` (if ours) once `first`'s claim window has
    /// passed — if `first` vanished, `next` finds the lock free and takes it then.
    fn on_hand_off(&self, first: &str, next: &str) {
        let called = self.called();
        if let Some(first) = called.get(first) {
            first.notify_one();
        }
        if let Some(next) = called.get(next) {
            let next = Arc::downgrade(next);
            tokio::spawn(async move {
                tokio::time::sleep(CLAIM_WINDOW + CLAIM_SLACK).await;
                // Gone when that writer stopped waiting (it was granted the lock, or gave up).
                if let Some(next) = next.upgrade() {
                    next.notify_one();
                }
            });
        }
    }

    /// How many releases that named no waiter this backend has heard (reconnects count too).
    pub(crate) fn releases_heard(&self) -> u64 {
        self.releases_heard.load(Ordering::Acquire)
    }

    /// Listens for hand-offs to the writer `owner` until the returned guard is dropped.
    pub(crate) fn call(self: &Arc<Self>, owner: &str) -> Called {
        let notify = Arc::new(Notify::new());
        self.called().insert(owner.to_owned(), Arc::clone(&notify));
        Called {
            waiters: Arc::clone(self),
            owner: owner.to_owned(),
            notify,
        }
    }

    /// Whether a new acquire of the lock with full key `key` may ask Redis at once: nobody
    /// of this backend queues on its channel (otherwise it goes behind them). One atomic load,
    /// and no channel name built, while nobody waits at all: this is the uncontended fast
    /// path.
    pub(crate) fn may_try_at_once(&self, key: &str) -> bool {
        self.queues.is_idle() || self.queues.len(&channel_of(key)) == 0
    }

    /// Queues a waiter on `channel`, subscribing to it first if needed. The returned ticket
    /// leaves the queue when dropped.
    ///
    /// # Errors
    ///
    /// The subscription failed or timed out.
    pub(crate) async fn enqueue(&self, channel: &str) -> Result<Ticket<()>> {
        let ticket = self.queues.enqueue(channel, ());
        self.ensure_subscribed(channel).await?;
        Ok(ticket)
    }

    /// Observes `channel` (subscribing to it first if needed) until the returned stream is
    /// dropped: it yields once after each message published on it and each confirmation of
    /// the subscription (several at once may come as one), and ends when the subscription
    /// connection drops (the caller then watches again, which subscribes again).
    ///
    /// # Errors
    ///
    /// The subscription failed or timed out.
    pub(crate) async fn watch(self: &Arc<Self>, channel: &str) -> Result<HolderChanges> {
        let watcher = Arc::new(Watcher {
            notify: Notify::new(),
            disconnected: AtomicBool::new(false),
        });
        self.watchers()
            .entry(channel.to_owned())
            .or_default()
            .push(Arc::clone(&watcher));
        let watching = Watching {
            waiters: Arc::clone(self),
            channel: channel.to_owned(),
            watcher,
        };
        self.ensure_subscribed(channel).await?;
        Ok(Box::pin(futures_util::stream::unfold(
            watching,
            |watching| async move {
                watching.watcher.notify.notified().await;
                if watching.watcher.disconnected.load(Ordering::Acquire) {
                    return None;
                }
                Some((Ok(()), watching))
            },
        )))
    }

    /// Subscribes to `channel` on every server at once, and returns as soon as one confirms
    /// (a RedLock master may be down or frozen). The other requests run on in the background;
    /// their confirmations arrive as pushes and are recorded in [`confirmed`](Self::confirmed).
    /// (A request whose connection is still being opened may reach its server after a later
    /// `UNSUBSCRIBE`: that server then sends releases of a channel nobody waits on, which are
    /// ignored.) An error only if none confirms.
    async fn ensure_subscribed(&self, channel: &str) -> Result<()> {
        let subscribers = self.subscribers.lock().await;
        // Subscribed and confirmed by a server. One that no server confirms (since a
        // disconnect) is asked for again: the request also reconnects the connection.
        if self
            .subscribed()
            .get(channel)
            .is_some_and(|subscription| subscription.confirmed != 0)
        {
            return Ok(());
        }
        self.subscribed().entry(channel.to_owned()).or_default();
        let timeout = self.timeout;
        // Each request owns a handle on its connection, so the ones still pending when the
        // first confirms can run on in the background: a request dropped while its connection
        // is still being opened (lazily, or again after a disconnect) would never be sent.
        let mut pending: FuturesUnordered<_> = subscribers
            .iter()
            .enumerate()
            .map(|(server, subscriber)| {
                let (mut subscriber, channel) = (subscriber.clone(), channel.to_owned());
                async move {
                    let reply = within(
                        "redis",
                        "subscribe",
                        timeout,
                        subscriber.subscribe(&channel),
                    )
                    .await?
                    .map_err(super::errors::from_redis);
                    reply.map(|()| server)
                }
            })
            .collect();
        let mut first_error = None;
        while let Some(reply) = pending.next().await {
            match reply {
                Ok(server) => {
                    if let Some(subscription) = self.subscribed().get_mut(channel) {
                        subscription.confirm(1 << server);
                    }
                    if !pending.is_empty() {
                        // Their confirmations are recorded as they arrive (as pushes).
                        let channel = channel.to_owned();
                        tokio::spawn(async move {
                            while let Some(reply) = pending.next().await {
                                if let Err(error) = reply {
                                    tracing::debug!(%channel, %error, "dlock: redis subscription not confirmed");
                                }
                            }
                        });
                    }
                    return Ok(());
                }
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        self.subscribed().remove(channel);
        Err(first_error
            .unwrap_or_else(|| Error::unavailable("redis", "no subscription connection")))
    }

    /// Which servers had confirmed the subscription to `channel` (bit `i` for server `i`): a
    /// release published on one of them from now on is heard.
    #[cfg_attr(not(feature = "redlock"), allow(dead_code))] // used by RedLock
    pub(crate) fn confirmed(&self, channel: &str) -> u64 {
        self.subscribed()
            .get(channel)
            .map_or(0, |subscription| subscription.confirmed)
    }

    /// Wakes the head of `channel`'s queue as soon as one of `servers` confirms the
    /// subscription; `false` (nothing to wait for) if one of them has already.
    #[cfg_attr(not(feature = "redlock"), allow(dead_code))] // used by RedLock
    pub(crate) fn wake_on_confirmation(&self, channel: &str, servers: u64) -> bool {
        let mut subscribed = self.subscribed();
        let Some(subscription) = subscribed.get_mut(channel) else {
            return false;
        };
        if subscription.confirmed & servers != 0 {
            return false;
        }
        subscription.awaited |= servers;
        true
    }

    /// Unsubscribes from `channel` if nobody waits on it (any more): sent on every server,
    /// waiting at most [`UNSUBSCRIBE_WAIT`] for the answers (a frozen server must not hold up
    /// the next subscription).
    async fn unsubscribe_if_idle(&self, channel: String) {
        let mut subscribers = self.subscribers.lock().await;
        let idle = self.queues.len(&channel) == 0
            && !self.watchers().contains_key(&channel)
            && self.subscribed().remove(&channel).is_some();
        if idle {
            let channel = channel.as_str();
            let all = join_all(
                subscribers
                    .iter_mut()
                    .map(|subscriber| subscriber.unsubscribe(channel)),
            );
            let outcome = tokio::time::timeout(UNSUBSCRIBE_WAIT.min(self.timeout), all).await;
            tracing::trace!(%channel, ?outcome, "dlock: redis unsubscribed");
        }
    }
}

/// The most servers one `Waiters` subscribes on (the bits of [`Subscription`]'s masks).
pub(crate) const MAX_SERVERS: usize = 64;

/// One subscribed channel: which servers confirmed it, and which ones a waiter awaits.
#[derive(Debug, Default)]
struct Subscription {
    /// Bit `i`: server `i` confirmed the subscription (and has not disconnected since).
    confirmed: u64,
    /// Servers whose confirmation should wake the head; cleared when one confirms.
    awaited: u64,
}

impl Subscription {
    /// Records `server`'s confirmation; whether the head awaited it (and must be woken).
    fn confirm(&mut self, server: u64) -> bool {
        self.confirmed |= server;
        let awaited = self.awaited & server != 0;
        if awaited {
            self.awaited = 0;
        }
        awaited
    }
}

/// How long after the first writer's claim window the next one asks again.
const CLAIM_SLACK: Duration = Duration::from_millis(50);

/// How long an unsubscription waits for its answers.
const UNSUBSCRIBE_WAIT: Duration = Duration::from_millis(100);

/// A writer in the server's line, listening for the hand-off that names it.
#[derive(Debug)]
pub(crate) struct Called {
    waiters: Arc<Waiters>,
    owner: String,
    notify: Arc<Notify>,
}

impl Called {
    /// Resolves when a hand-off named this writer (also one heard before this call), or the
    /// subscription reconnected.
    pub(crate) async fn heard(&self) {
        self.notify.notified().await;
    }
}

impl Drop for Called {
    fn drop(&mut self) {
        self.waiters.called().remove(&self.owner);
    }
}

/// One observer of a channel: woken by what happens on it; `disconnected` once the
/// subscription connection dropped.
#[derive(Debug)]
struct Watcher {
    notify: Notify,
    disconnected: AtomicBool,
}

/// An observer of a channel ([`Waiters::watch`]): leaves the channel's observers when
/// dropped, unsubscribing (in the background) if nobody else listens.
struct Watching {
    waiters: Arc<Waiters>,
    channel: String,
    watcher: Arc<Watcher>,
}

impl Drop for Watching {
    fn drop(&mut self) {
        let mut watchers = self.waiters.watchers();
        if let Some(list) = watchers.get_mut(&self.channel) {
            list.retain(|watcher| !Arc::ptr_eq(watcher, &self.watcher));
            if list.is_empty() {
                watchers.remove(&self.channel);
            }
        }
        drop(watchers);
        let (waiters, channel) = (Arc::clone(&self.waiters), self.channel.clone());
        let background = self.waiters.background.clone();
        background.spawn(async move { waiters.unsubscribe_if_idle(channel).await });
    }
}
