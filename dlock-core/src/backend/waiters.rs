//! [`WaitQueues`]: the local FIFO waiter queues of a try-and-notify backend (memory, Redis,
//! RedLock), one per key, with cancel-safe tickets.
//!
//! A waiter enqueues with its data (memory: the owner, mode and ttl it waits to be granted)
//! and gets a [`Ticket`]; dropping the ticket — granted, gave up, or cancelled — leaves the
//! queue, and if it was first, wakes the next one. The backend wakes waiters by key: the head
//! ([`WaitQueues::wake_head`], Redis on a release message) or every admitted waiter at the head
//! ([`WaitQueues::hand_off_while`], memory's direct hand-off).

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use tokio::sync::Notify;

/// Called with a key whose queue just emptied (Redis unsubscribes from its channel).
type OnEmptied = Box<dyn Fn(&str) + Send + Sync>;

/// The queues of one backend, by key.
pub(crate) struct WaitQueues<T> {
    state: Mutex<State<T>>,
    /// No key has a waiter: read without the lock on the uncontended path.
    idle: AtomicBool,
    on_emptied: Option<OnEmptied>,
}

struct State<T> {
    by_key: HashMap<String, VecDeque<Waiter<T>>>,
    next_id: u64,
}

struct Waiter<T> {
    id: u64,
    wake: Arc<Notify>,
    #[cfg_attr(not(feature = "memory"), allow(dead_code))] // read by the memory backend
    data: T,
}

impl<T> fmt::Debug for WaitQueues<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WaitQueues")
            .field("keys", &self.state().by_key.len())
            .finish_non_exhaustive()
    }
}

impl<T> Default for WaitQueues<T> {
    fn default() -> Self {
        Self::new(None)
    }
}

impl<T> WaitQueues<T> {
    /// Empty queues; `on_emptied` is told each key whose queue empties.
    pub(crate) fn new(on_emptied: Option<OnEmptied>) -> Self {
        Self {
            state: Mutex::new(State {
                by_key: HashMap::new(),
                next_id: 0,
            }),
            idle: AtomicBool::new(true),
            on_emptied,
        }
    }

    fn state(&self) -> MutexGuard<'_, State<T>> {
        // Every change is complete before the lock is released: recover from poisoning.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Nobody waits on any key (one atomic load, no lock).
    pub(crate) fn is_idle(&self) -> bool {
        self.idle.load(Ordering::Acquire)
    }

    /// How many wait on `key`.
    pub(crate) fn len(&self, key: &str) -> usize {
        if self.is_idle() {
            return 0;
        }
        self.state().by_key.get(key).map_or(0, VecDeque::len)
    }

    /// The data of every waiter on `key`, in queue order.
    #[cfg_attr(not(feature = "memory"), allow(dead_code))] // used by the memory backend
    pub(crate) fn queued(&self, key: &str) -> Vec<T>
    where
        T: Clone,
    {
        if self.is_idle() {
            return Vec::new();
        }
        self.state()
            .by_key
            .get(key)
            .map(|queue| queue.iter().map(|waiter| waiter.data.clone()).collect())
            .unwrap_or_default()
    }

    /// Queues a waiter on `key` with `data`; the ticket leaves the queue when dropped.
    pub(crate) fn enqueue(self: &Arc<Self>, key: &str, data: T) -> Ticket<T> {
        let mut state = self.state();
        state.next_id += 1;
        let id = state.next_id;
        let wake = Arc::new(Notify::new());
        state
            .by_key
            .entry(key.to_owned())
            .or_default()
            .push_back(Waiter {
                id,
                wake: Arc::clone(&wake),
                data,
            });
        self.idle.store(false, Ordering::Release);
        Ticket {
            queues: Arc::clone(self),
            key: key.to_owned(),
            id,
            wake,
        }
    }

    /// Puts `ticket`'s waiter back at the head of its queue with `data`, if it is not queued
    /// (it was handed the key, and lost that grant before it could take it). Returns whether
    /// it did.
    #[cfg_attr(not(feature = "memory"), allow(dead_code))] // used by the memory backend
    pub(crate) fn requeue_front(&self, ticket: &Ticket<T>, data: T) -> bool {
        let mut state = self.state();
        let queue = state.by_key.entry(ticket.key.clone()).or_default();
        if queue.iter().any(|w| w.id == ticket.id) {
            return false;
        }
        queue.push_front(Waiter {
            id: ticket.id,
            wake: Arc::clone(&ticket.wake),
            data,
        });
        self.idle.store(false, Ordering::Release);
        true
    }

    /// Wakes the first waiter on `key`, if any.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))] // used by the Redis backend
    pub(crate) fn wake_head(&self, key: &str) {
        if let Some(head) = self.state().by_key.get(key).and_then(VecDeque::front) {
            head.wake.notify_one();
        }
    }

    /// Wakes the first waiter of every key (after a reconnect, a release may have been missed).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))] // used by the Redis backend
    pub(crate) fn wake_every_head(&self) {
        for queue in self.state().by_key.values() {
            if let Some(head) = queue.front() {
                head.wake.notify_one();
            }
        }
    }

    /// Takes the waiters at the head of `key`'s queue, in order, as long as `admit` accepts
    /// each one's data, and wakes them (a direct hand-off: the caller has granted them).
    #[cfg_attr(not(feature = "memory"), allow(dead_code))] // used by the memory backend
    pub(crate) fn hand_off_while(&self, key: &str, mut admit: impl FnMut(&T) -> bool) {
        let mut state = self.state();
        let Some(queue) = state.by_key.get_mut(key) else {
            return;
        };
        while let Some(head) = queue.front()
            && admit(&head.data)
        {
            let head = queue.pop_front().expect("just looked at it");
            head.wake.notify_one();
        }
        if queue.is_empty() {
            self.forget(&mut state, key);
        }
    }

    /// Removes `key`'s (empty) queue.
    fn forget(&self, state: &mut State<T>, key: &str) {
        state.by_key.remove(key);
        if state.by_key.is_empty() {
            self.idle.store(true, Ordering::Release);
        }
        if let Some(on_emptied) = &self.on_emptied {
            on_emptied(key);
        }
    }

    fn leave(&self, key: &str, id: u64) {
        let mut state = self.state();
        let Some(queue) = state.by_key.get_mut(key) else {
            return;
        };
        let was_head = queue.front().is_some_and(|head| head.id == id);
        queue.retain(|waiter| waiter.id != id);
        match queue.front() {
            Some(next) if was_head => next.wake.notify_one(),
            Some(_) => {}
            None => self.forget(&mut state, key),
        }
    }
}

/// One waiter's place in its key's queue.
pub(crate) struct Ticket<T> {
    queues: Arc<WaitQueues<T>>,
    key: String,
    id: u64,
    wake: Arc<Notify>,
}

impl<T> fmt::Debug for Ticket<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ticket")
            .field("key", &self.key)
            .field("id", &self.id)
            .finish()
    }
}

impl<T> Ticket<T> {
    /// Whether this waiter is first in its queue.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))] // used by the Redis backend
    pub(crate) fn is_head(&self) -> bool {
        self.queues
            .state()
            .by_key
            .get(&self.key)
            .and_then(VecDeque::front)
            .is_some_and(|head| head.id == self.id)
    }

    /// Waits to be woken, or until the sooner of a re-check time and a deadline (either may
    /// be missing).
    #[cfg(feature = "redis")]
    pub(crate) async fn wait_until_sooner(
        &self,
        recheck: Option<Instant>,
        deadline: Option<Instant>,
    ) {
        let until = match (recheck, deadline) {
            (Some(r), Some(d)) => Some(r.min(d)),
            (r, d) => r.or(d),
        };
        self.wait(until).await;
    }

    /// Waits to be woken (a release, a hand-off, becoming head), or until `until`.
    pub(crate) async fn wait(&self, until: Option<Instant>) {
        match until {
            Some(at) => {
                let _ = tokio::time::timeout_at(at.into(), self.wake.notified()).await;
            }
            None => self.wake.notified().await,
        }
    }
}

impl<T> Drop for Ticket<T> {
    fn drop(&mut self) {
        self.queues.leave(&self.key, self.id);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn first_in_first_out_and_a_leaving_head_wakes_the_next() {
        let queues = Arc::new(WaitQueues::<u32>::default());
        assert!(queues.is_idle());
        let first = queues.enqueue("k", 1);
        let second = queues.enqueue("k", 2);
        assert!(first.is_head() && !second.is_head());
        assert_eq!(queues.len("k"), 2);
        drop(first);
        assert!(second.is_head());
        // Woken by the head's leaving: returns before its (long) deadline.
        tokio::time::timeout(Duration::from_secs(5), second.wait(None))
            .await
            .expect("the next head was not woken");
        drop(second);
        assert!(queues.is_idle() && queues.len("k") == 0);
    }

    #[tokio::test]
    async fn hand_off_takes_admitted_waiters_in_order_and_tells_of_empty_queues() {
        let emptied = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&emptied);
        let queues = Arc::new(WaitQueues::<u32>::new(Some(Box::new(move |key| {
            seen.lock().unwrap().push(key.to_owned());
        }))));
        let tickets: Vec<_> = [1, 2, 9, 3].map(|n| queues.enqueue("k", n)).into();
        let mut taken = Vec::new();
        queues.hand_off_while("k", |n| {
            let admit = *n < 5;
            if admit {
                taken.push(*n);
            }
            admit
        });
        assert_eq!(taken, [1, 2], "stops at the first waiter it does not admit");
        assert!(tickets[2].is_head());
        assert!(
            queues.requeue_front(&tickets[0], 1),
            "a handed-off waiter goes back first"
        );
        assert!(tickets[0].is_head());
        drop(tickets);
        assert_eq!(*emptied.lock().unwrap(), ["k"]);
        assert!(queues.is_idle());
    }
}
