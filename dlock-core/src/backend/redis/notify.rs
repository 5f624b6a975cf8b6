//! Waiting without polling: local FIFO queues per lock, woken by release notifications.
//!
//! One subscription connection per backend (per Locker) and server — RedLock has one per
//! master, and a release heard from any of them wakes the waiter — carries the release
//! channels of every key it waits on. Local waiters of one key queue in arrival order, in the core's shared
//! [`WaitQueues`]; only the head of the queue talks to Redis. A release message wakes just that head; when the head leaves
//! (acquired, gave up, cancelled) the next one becomes head and is woken. The head also wakes
//! when the holder's remaining ttl runs out, so a lost message costs at most one ttl.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::future::join_all;
use futures_util::stream::FuturesUnordered;
use redis::{PushInfo, PushKind, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use super::conn::Conn;
use super::keys::RedisName;
use crate::backend::waiters::{Ticket, WaitQueues};
use crate::{Error, Result};

/// The release channel of the lock with full key `key`.
pub(crate) fn channel_of(key: &str) -> String {
    RedisName::channel(key).to_string()
}

/// The local waiters of one backend, and its subscription connection.
#[derive(Debug)]
pub(crate) struct Waiters {
    /// The payload of this backend's own release messages.
    own_id: String,
    /// Local waiters, by release channel (the core's shared FIFO queues).
    queues: Arc<WaitQueues<()>>,
    /// Channels this Locker barred itself on: it released while other Lockers listened, so
    /// for a few milliseconds (or until another Locker's release) it lets them go first.
    bars: Mutex<HashMap<String, Instant>>,
    /// No bar is set: the uncontended fast path reads this instead of taking the lock.
    no_bars: AtomicBool,
    /// The channels subscribed to; changed only while holding `subscribers`.
    subscribed: Mutex<HashSet<String>>,
    /// One subscription connection per server; the lock serialises SUBSCRIBE / UNSUBSCRIBE so
    /// they reach the servers in the order decided.
    subscribers: tokio::sync::Mutex<Vec<Conn>>,
    timeout: Duration,
}

impl Waiters {
    /// Starts dispatching the pushes of `subscribers` (whose push senders feed `pushes`).
    pub(crate) fn start(
        own_id: String,
        subscribers: Vec<Conn>,
        mut pushes: UnboundedReceiver<PushInfo>,
        timeout: Duration,
    ) -> Arc<Self> {
        let waiters = Arc::new_cyclic(|weak: &Weak<Self>| {
            let weak = weak.clone();
            // A channel nobody waits on any more is unsubscribed, in the background.
            let on_emptied = move |channel: &str| {
                let (Some(waiters), Ok(runtime)) =
                    (weak.upgrade(), tokio::runtime::Handle::try_current())
                else {
                    return;
                };
                let channel = channel.to_owned();
                runtime.spawn(async move { waiters.unsubscribe_if_idle(channel).await });
            };
            Self {
                own_id,
                queues: Arc::new(WaitQueues::new(Some(Box::new(on_emptied)))),
                bars: Mutex::default(),
                no_bars: AtomicBool::new(true),
                subscribed: Mutex::default(),
                subscribers: tokio::sync::Mutex::new(subscribers),
                timeout,
            }
        });
        let weak = Arc::downgrade(&waiters);
        tokio::spawn(async move {
            while let Some(push) = pushes.recv().await {
                let Some(waiters) = weak.upgrade() else {
                    return;
                };
                waiters.dispatch(&push);
            }
        });
        waiters
    }

    fn bars(&self) -> BarsGuard<'_> {
        BarsGuard {
            bars: self.bars.lock().unwrap_or_else(PoisonError::into_inner),
            none: &self.no_bars,
        }
    }

    fn subscribed(&self) -> MutexGuard<'_, HashSet<String>> {
        self.subscribed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn dispatch(&self, push: &PushInfo) {
        match push.kind {
            PushKind::Message => {
                let (Some(Value::BulkString(channel)), payload) =
                    (push.data.first(), push.data.get(1))
                else {
                    return;
                };
                let ours =
                    matches!(payload, Some(Value::BulkString(p)) if *p == self.own_id.as_bytes());
                self.on_release(&String::from_utf8_lossy(channel), ours);
            }
            // After a reconnect a release may have been missed: let every head re-check.
            PushKind::Disconnection => self.queues.wake_every_head(),
            _ => {}
        }
    }

    /// A release was published on `channel`: another Locker's release lifts our bar and
    /// wakes our head; our own release wakes it only if we did not bar ourselves.
    fn on_release(&self, channel: &str, ours: bool) {
        {
            let mut bars = self.bars();
            if ours
                && bars
                    .get(channel)
                    .is_some_and(|until| Instant::now() < *until)
            {
                return;
            }
            bars.remove(channel);
        }
        self.queues.wake_head(channel);
    }

    /// Bars this Locker from taking the lock of `channel` until `until` (or until another
    /// Locker releases it).
    pub(crate) fn bar(&self, channel: &str, until: Instant) {
        let mut bars = self.bars();
        if bars.len() > 1024 {
            let now = Instant::now();
            bars.retain(|_, until| now < *until);
        }
        bars.insert(channel.to_owned(), until);
    }

    /// Lifts a bar set in anticipation of a release that turned out not to need it.
    pub(crate) fn lift_bar(&self, channel: &str) {
        self.on_release(channel, false);
    }

    /// Until when this Locker should not ask Redis for the lock of `channel`.
    pub(crate) fn barred_until(&self, channel: &str) -> Option<Instant> {
        let mut bars = self.bars();
        let until = *bars.get(channel)?;
        if Instant::now() < until {
            Some(until)
        } else {
            bars.remove(channel);
            None
        }
    }

    /// Whether a new acquire of the lock with full key `key` may ask Redis at once: nobody
    /// of this backend queues on its channel and this backend did not just yield it to other
    /// Lockers. Two atomic loads, and no channel name built, while nobody waits at all and no
    /// bar is set: this is the uncontended fast path.
    pub(crate) fn may_try_at_once(&self, key: &str) -> bool {
        if self.queues.is_idle() && self.no_bars.load(Ordering::Acquire) {
            return true;
        }
        let channel = channel_of(key);
        self.queues.len(&channel) == 0 && self.barred_until(&channel).is_none()
    }

    /// Whether anyone of this backend waits on the lock with full key `key`.
    pub(crate) fn has_waiters(&self, key: &str) -> bool {
        !self.queues.is_idle() && self.queues.len(&channel_of(key)) > 0
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

    /// Subscribes to `channel` on every server at once, and returns as soon as one confirms
    /// (a RedLock master may be down or frozen; a missed release costs a waiter at most the
    /// holder's ttl, when it re-checks anyway). The other requests are queued on their
    /// connections by then, in order with any later `UNSUBSCRIBE`. An error only if none
    /// confirms.
    async fn ensure_subscribed(&self, channel: &str) -> Result<()> {
        let mut subscribers = self.subscribers.lock().await;
        if self.subscribed().contains(channel) {
            return Ok(());
        }
        let timeout = self.timeout;
        let mut pending: FuturesUnordered<_> = subscribers
            .iter_mut()
            .map(|subscriber| async move {
                tokio::time::timeout(timeout, subscriber.subscribe(channel))
                    .await
                    .map_err(|_| Error::Timeout {
                        backend: "redis",
                        operation: "subscribe",
                        after: timeout,
                    })?
                    .map_err(super::errors::from_redis)
            })
            .collect();
        let mut first_error = None;
        while let Some(reply) = pending.next().await {
            match reply {
                Ok(()) => {
                    self.subscribed().insert(channel.to_owned());
                    return Ok(());
                }
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        Err(first_error
            .unwrap_or_else(|| Error::unavailable("redis", "no subscription connection")))
    }

    /// Unsubscribes from `channel` if nobody waits on it (any more): sent on every server,
    /// waiting at most [`UNSUBSCRIBE_WAIT`] for the answers (a frozen server must not hold up
    /// the next subscription).
    async fn unsubscribe_if_idle(&self, channel: String) {
        let mut subscribers = self.subscribers.lock().await;
        let idle = self.queues.len(&channel) == 0 && self.subscribed().remove(&channel);
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

/// How long an unsubscription waits for its answers.
const UNSUBSCRIBE_WAIT: Duration = Duration::from_millis(100);

/// The locked bars; on unlock, records whether there are none.
struct BarsGuard<'a> {
    bars: MutexGuard<'a, HashMap<String, Instant>>,
    none: &'a AtomicBool,
}

impl std::ops::Deref for BarsGuard<'_> {
    type Target = HashMap<String, Instant>;

    fn deref(&self) -> &Self::Target {
        &self.bars
    }
}

impl std::ops::DerefMut for BarsGuard<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.bars
    }
}

impl Drop for BarsGuard<'_> {
    fn drop(&mut self) {
        self.none.store(self.bars.is_empty(), Ordering::Release);
    }
}
