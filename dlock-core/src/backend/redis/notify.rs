//! Waiting without polling: local FIFO queues per lock, woken by release notifications.
//!
//! One subscription connection per backend (per Locker) carries the release channels of every
//! key it waits on. Local waiters of one key queue in arrival order; only the head of the
//! queue talks to Redis. A release message wakes just that head; when the head leaves
//! (acquired, gave up, cancelled) the next one becomes head and is woken. The head also wakes
//! when the holder's remaining ttl runs out, so a lost message costs at most one ttl.

use std::collections::{HashMap, VecDeque};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use redis::{PushInfo, PushKind, Value};
use tokio::sync::Notify;
use tokio::sync::mpsc::UnboundedReceiver;

use super::conn::Conn;
use super::keys::RedisName;
use crate::{Error, Result};

/// The release channel of the lock with full key `key`.
pub(super) fn channel_of(key: &str) -> String {
    RedisName::channel(key).to_string()
}

/// The local waiters of one backend, and its subscription connection.
#[derive(Debug)]
pub(super) struct Waiters {
    /// The payload of this backend's own release messages.
    own_id: String,
    queues: Mutex<Queues>,
    /// Nobody queues and no bar is set: the uncontended fast path reads this instead of
    /// taking the lock (kept up to date by [`QueuesGuard`]).
    idle: AtomicBool,
    /// Serialises SUBSCRIBE / UNSUBSCRIBE so they reach Redis in the order decided.
    subscriber: tokio::sync::Mutex<Conn>,
    timeout: Duration,
}

#[derive(Debug, Default)]
struct Queues {
    by_channel: HashMap<String, Queue>,
    /// Channels this Locker barred itself on: it released while other Lockers listened, so
    /// for a few milliseconds (or until another Locker's release) it lets them go first.
    bars: HashMap<String, Instant>,
    next_id: u64,
}

#[derive(Debug, Default)]
struct Queue {
    waiters: VecDeque<(u64, Arc<Notify>)>,
    subscribed: bool,
}

impl Waiters {
    /// Starts dispatching the pushes of `subscriber` (whose push sender feeds `pushes`).
    pub(super) fn start(
        own_id: String,
        subscriber: Conn,
        mut pushes: UnboundedReceiver<PushInfo>,
        timeout: Duration,
    ) -> Arc<Self> {
        let waiters = Arc::new(Self {
            own_id,
            queues: Mutex::default(),
            idle: AtomicBool::new(true),
            subscriber: tokio::sync::Mutex::new(subscriber),
            timeout,
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

    fn queues(&self) -> QueuesGuard<'_> {
        QueuesGuard {
            queues: self.queues.lock().unwrap_or_else(PoisonError::into_inner),
            idle: &self.idle,
        }
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
            PushKind::Disconnection => {
                let queues = self.queues();
                for queue in queues.by_channel.values() {
                    if let Some((_, head)) = queue.waiters.front() {
                        head.notify_one();
                    }
                }
            }
            _ => {}
        }
    }

    /// A release was published on `channel`: another Locker's release lifts our bar and
    /// wakes our head; our own release wakes it only if we did not bar ourselves.
    fn on_release(&self, channel: &str, ours: bool) {
        let mut queues = self.queues();
        if ours
            && queues
                .bars
                .get(channel)
                .is_some_and(|until| Instant::now() < *until)
        {
            return;
        }
        queues.bars.remove(channel);
        if let Some((_, head)) = queues
            .by_channel
            .get(channel)
            .and_then(|q| q.waiters.front())
        {
            head.notify_one();
        }
    }

    /// Bars this Locker from taking the lock of `channel` until `until` (or until another
    /// Locker releases it).
    pub(super) fn bar(&self, channel: &str, until: Instant) {
        let mut queues = self.queues();
        if queues.bars.len() > 1024 {
            let now = Instant::now();
            queues.bars.retain(|_, until| now < *until);
        }
        queues.bars.insert(channel.to_owned(), until);
    }

    /// Lifts a bar set in anticipation of a release that turned out not to need it.
    pub(super) fn lift_bar(&self, channel: &str) {
        self.on_release(channel, false);
    }

    /// Until when this Locker should not ask Redis for the lock of `channel`.
    pub(super) fn barred_until(&self, channel: &str) -> Option<Instant> {
        let mut queues = self.queues();
        let until = *queues.bars.get(channel)?;
        if Instant::now() < until {
            Some(until)
        } else {
            queues.bars.remove(channel);
            None
        }
    }

    /// Whether a new acquire of the lock with full key `key` may ask Redis at once: nobody
    /// of this backend queues on its channel and this backend did not just yield it to other
    /// Lockers. One look at the queues, and no channel name built while nobody waits at all:
    /// this is the uncontended fast path.
    pub(super) fn may_try_at_once(&self, key: &str) -> bool {
        if self.idle.load(Ordering::Acquire) {
            return true;
        }
        let mut queues = self.queues();
        if queues.by_channel.is_empty() && queues.bars.is_empty() {
            return true;
        }
        let channel = channel_of(key);
        let queued = queues
            .by_channel
            .get(&channel)
            .is_some_and(|q| !q.waiters.is_empty());
        let barred = match queues.bars.get(&channel) {
            Some(until) if Instant::now() < *until => true,
            Some(_) => {
                queues.bars.remove(&channel);
                false
            }
            None => false,
        };
        !queued && !barred
    }

    /// Whether anyone of this backend waits on the lock with full key `key`.
    pub(super) fn has_waiters(&self, key: &str) -> bool {
        if self.idle.load(Ordering::Acquire) {
            return false;
        }
        let queues = self.queues();
        !queues.by_channel.is_empty()
            && queues
                .by_channel
                .get(&channel_of(key))
                .is_some_and(|q| !q.waiters.is_empty())
    }

    /// Queues a waiter on `channel`, subscribing to it first if needed. The returned ticket
    /// leaves the queue when dropped.
    ///
    /// # Errors
    ///
    /// The subscription failed or timed out.
    pub(super) async fn enqueue(self: &Arc<Self>, channel: &str) -> Result<Ticket> {
        let ticket = {
            let mut queues = self.queues();
            queues.next_id += 1;
            let id = queues.next_id;
            let wake = Arc::new(Notify::new());
            let queue = queues.by_channel.entry(channel.to_owned()).or_default();
            queue.waiters.push_back((id, Arc::clone(&wake)));
            Ticket {
                waiters: Arc::clone(self),
                channel: channel.to_owned(),
                id,
                wake,
            }
        };
        self.ensure_subscribed(channel).await?;
        Ok(ticket)
    }

    async fn ensure_subscribed(&self, channel: &str) -> Result<()> {
        let mut subscriber = self.subscriber.lock().await;
        if self
            .queues()
            .by_channel
            .get(channel)
            .is_some_and(|q| q.subscribed)
        {
            return Ok(());
        }
        tokio::time::timeout(self.timeout, subscriber.subscribe(channel))
            .await
            .map_err(|_| Error::Timeout {
                backend: "redis",
                operation: "subscribe",
                after: self.timeout,
            })?
            .map_err(super::errors::from_redis)?;
        if let Some(queue) = self.queues().by_channel.get_mut(channel) {
            queue.subscribed = true;
        }
        Ok(())
    }

    /// Unsubscribes from `channel` if its queue is (still) empty.
    async fn unsubscribe_if_idle(&self, channel: String) {
        let mut subscriber = self.subscriber.lock().await;
        let idle = {
            let mut queues = self.queues();
            let idle = queues
                .by_channel
                .get(&channel)
                .is_some_and(|q| q.waiters.is_empty());
            if idle {
                queues.by_channel.remove(&channel);
            }
            idle
        };
        if idle {
            let outcome =
                tokio::time::timeout(self.timeout, subscriber.unsubscribe(&channel)).await;
            tracing::trace!(%channel, ?outcome, "dlock: redis unsubscribed");
        }
    }

    fn leave(self: &Arc<Self>, channel: &str, id: u64) {
        let mut queues = self.queues();
        let Some(queue) = queues.by_channel.get_mut(channel) else {
            return;
        };
        let was_head = queue.waiters.front().is_some_and(|(head, _)| *head == id);
        queue.waiters.retain(|(waiter, _)| *waiter != id);
        match queue.waiters.front() {
            Some((_, next)) if was_head => next.notify_one(),
            Some(_) => {}
            None => {
                drop(queues);
                let waiters = Arc::clone(self);
                let channel = channel.to_owned();
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime.spawn(async move { waiters.unsubscribe_if_idle(channel).await });
                }
            }
        }
    }
}

/// The locked queues; on unlock, records whether they are idle.
struct QueuesGuard<'a> {
    queues: MutexGuard<'a, Queues>,
    idle: &'a AtomicBool,
}

impl Deref for QueuesGuard<'_> {
    type Target = Queues;

    fn deref(&self) -> &Queues {
        &self.queues
    }
}

impl DerefMut for QueuesGuard<'_> {
    fn deref_mut(&mut self) -> &mut Queues {
        &mut self.queues
    }
}

impl Drop for QueuesGuard<'_> {
    fn drop(&mut self) {
        let idle = self.queues.by_channel.is_empty() && self.queues.bars.is_empty();
        self.idle.store(idle, Ordering::Release);
    }
}

/// One waiting acquire's place in its key's local queue.
#[derive(Debug)]
pub(super) struct Ticket {
    waiters: Arc<Waiters>,
    channel: String,
    id: u64,
    wake: Arc<Notify>,
}

impl Ticket {
    /// Whether this waiter is first in its queue (the one that may try).
    pub(super) fn is_head(&self) -> bool {
        self.waiters
            .queues()
            .by_channel
            .get(&self.channel)
            .and_then(|q| q.waiters.front())
            .is_some_and(|(head, _)| *head == self.id)
    }

    /// Waits for a wake-up (a release, or becoming head), or until `until`.
    pub(super) async fn wait(&self, until: Option<Instant>) {
        match until {
            Some(at) => {
                let _ = tokio::time::timeout_at(at.into(), self.wake.notified()).await;
            }
            None => self.wake.notified().await,
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.waiters.leave(&self.channel, self.id);
    }
}
