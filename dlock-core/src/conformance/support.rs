//! Instruments the scenarios share.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::sync::broadcast;

use crate::Result;
use crate::backend::{Capabilities, LockBackend};
use crate::lease::{
    AcquireAllOutcome, AcquireOutcome, AcquireRequest, Lease, LostLease, ReleaseOutcome,
    RenewOutcome,
};

/// A pass-through decorator that counts the calls made to the backend it wraps, to show
/// what the core does *not* send (a re-entrant acquire makes no round trip).
#[derive(Debug)]
pub struct CountingBackend<B: ?Sized> {
    acquires: AtomicUsize,
    renewals: AtomicUsize,
    releases: AtomicUsize,
    inner: Arc<B>,
}

impl<B: LockBackend + ?Sized> CountingBackend<B> {
    /// Wraps `inner`.
    pub const fn new(inner: Arc<B>) -> Self {
        Self {
            acquires: AtomicUsize::new(0),
            renewals: AtomicUsize::new(0),
            releases: AtomicUsize::new(0),
            inner,
        }
    }

    /// Calls to `acquire` and `acquire_together` so far.
    pub fn acquires(&self) -> usize {
        self.acquires.load(Ordering::SeqCst)
    }

    /// Calls to `renew` so far.
    pub fn renewals(&self) -> usize {
        self.renewals.load(Ordering::SeqCst)
    }

    /// Calls to `release` and `release_together` so far.
    pub fn releases(&self) -> usize {
        self.releases.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl<B: LockBackend + ?Sized> LockBackend for CountingBackend<B> {
    async fn acquire(
        &self,
        req: &AcquireRequest,
        deadline: Option<Instant>,
    ) -> Result<AcquireOutcome> {
        self.acquires.fetch_add(1, Ordering::SeqCst);
        self.inner.acquire(req, deadline).await
    }
    async fn acquire_together(
        &self,
        requests: &[AcquireRequest],
    ) -> Result<Option<AcquireAllOutcome>> {
        self.acquires.fetch_add(1, Ordering::SeqCst);
        self.inner.acquire_together(requests).await
    }
    async fn renew(&self, leases: &[Lease]) -> Result<Vec<RenewOutcome>> {
        self.renewals.fetch_add(1, Ordering::SeqCst);
        self.inner.renew(leases).await
    }
    async fn release(&self, lease: &Lease) -> Result<ReleaseOutcome> {
        self.releases.fetch_add(1, Ordering::SeqCst);
        self.inner.release(lease).await
    }
    async fn release_together(&self, leases: &[Lease]) -> Result<Option<Vec<ReleaseOutcome>>> {
        self.releases.fetch_add(1, Ordering::SeqCst);
        self.inner.release_together(leases).await
    }
    async fn release_keeping(
        &self,
        lease: &Lease,
        keep: std::time::Duration,
        kept: crate::Kept,
    ) -> Result<ReleaseOutcome> {
        self.releases.fetch_add(1, Ordering::SeqCst);
        self.inner.release_keeping(lease, keep, kept).await
    }
    async fn force_release(&self, key: &str) -> Result<bool> {
        self.inner.force_release(key).await
    }
    async fn inspect(&self, key: &str) -> Result<crate::LockInfo> {
        self.inner.inspect(key).await
    }
    async fn proclaim(&self, lease: &Lease, value: &str) -> Result<bool> {
        self.inner.proclaim(lease, value).await
    }
    async fn holder_changes(&self, key: &str) -> Result<crate::backend::HolderChanges> {
        self.inner.holder_changes(key).await
    }
    fn lost_leases(&self) -> Option<broadcast::Receiver<LostLease>> {
        self.inner.lost_leases()
    }
    async fn shutdown(&self) -> Result<()> {
        self.inner.shutdown().await
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}

/// A resource that is deliberately **not** safe for concurrent use: an increment is a read,
/// a pause, and a write. Two holders inside at once lose an update, and the entry check sees
/// the other holder. It also plays the fenced resource: writes must carry non-decreasing
/// tokens.
#[derive(Debug, Default)]
pub(crate) struct UnsafeCounter {
    value: Mutex<u64>,
    inside: Mutex<Option<usize>>,
    overlaps: Mutex<Vec<(usize, usize)>>,
    highest_token: Mutex<Option<u64>>,
    stale_tokens: Mutex<Vec<(u64, u64)>>,
}

impl UnsafeCounter {
    /// One protected increment by `worker`, holding the lock with `token`.
    pub(crate) async fn increment(&self, worker: usize, token: Option<u64>, pause: Duration) {
        {
            let mut inside = self.inside.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(other) = *inside {
                self.overlaps
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push((other, worker));
            }
            *inside = Some(worker);
        }
        if let Some(token) = token {
            let mut highest = self
                .highest_token
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some(h) = *highest
                && token <= h
            {
                self.stale_tokens
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push((token, h));
            }
            *highest = Some(token);
        }
        let read = *self.value.lock().unwrap_or_else(PoisonError::into_inner);
        tokio::time::sleep(pause).await;
        *self.value.lock().unwrap_or_else(PoisonError::into_inner) = read + 1;
        let mut inside = self.inside.lock().unwrap_or_else(PoisonError::into_inner);
        if *inside == Some(worker) {
            *inside = None;
        }
    }

    pub(crate) fn value(&self) -> u64 {
        *self.value.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn overlaps(&self) -> Vec<(usize, usize)> {
        self.overlaps
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn stale_tokens(&self) -> Vec<(u64, u64)> {
        self.stale_tokens
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// A resource of two fields that a writer sets one after the other, with a pause between, so
/// that between the two writes they differ. A reader that sees them differ, or change while it
/// reads, ran next to a writer; a writer that finds them different on entry ran next to
/// another writer.
#[derive(Debug, Default)]
pub(crate) struct TornPair {
    fields: Mutex<(u64, u64)>,
    torn_reads: Mutex<u64>,
    torn_writes: Mutex<u64>,
}

impl TornPair {
    fn fields(&self) -> (u64, u64) {
        *self.fields.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn count(counter: &Mutex<u64>) {
        *counter.lock().unwrap_or_else(PoisonError::into_inner) += 1;
    }

    /// One write: the first field, a pause, the second.
    pub(crate) async fn write(&self, pause: Duration) {
        let (first, second) = self.fields();
        if first != second {
            Self::count(&self.torn_writes);
        }
        self.fields.lock().unwrap_or_else(PoisonError::into_inner).0 = first + 1;
        tokio::time::sleep(pause).await;
        self.fields.lock().unwrap_or_else(PoisonError::into_inner).1 = first + 1;
    }

    /// One read: both fields, a pause, both fields again.
    pub(crate) async fn read(&self, pause: Duration) {
        let seen = self.fields();
        tokio::time::sleep(pause).await;
        if seen.0 != seen.1 || self.fields() != seen {
            Self::count(&self.torn_reads);
        }
    }

    pub(crate) fn torn_reads(&self) -> u64 {
        *self
            .torn_reads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn torn_writes(&self) -> u64 {
        *self
            .torn_writes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Completed writes (the first field counts them).
    pub(crate) fn writes(&self) -> u64 {
        self.fields().1
    }
}

/// How many holders are inside at once, counted on entry and exit, and the most ever seen.
#[derive(Debug, Default)]
pub(crate) struct Occupancy {
    inside_and_most: Mutex<(usize, usize)>,
}

impl Occupancy {
    /// Enters, stays for `pause`, leaves.
    pub(crate) async fn stay(&self, pause: Duration) {
        {
            let mut counts = self
                .inside_and_most
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            counts.0 += 1;
            counts.1 = counts.1.max(counts.0);
        }
        tokio::time::sleep(pause).await;
        self.inside_and_most
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .0 -= 1;
    }

    /// The most holders that were inside at once.
    pub(crate) fn most(&self) -> usize {
        self.inside_and_most
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .1
    }
}

/// Asserts `elapsed` is within `[low, high]`, with a message naming `what`.
pub(crate) fn assert_between(what: &str, elapsed: Duration, low: Duration, high: Duration) {
    assert!(
        elapsed >= low && elapsed <= high,
        "{what}: took {elapsed:?}, expected between {low:?} and {high:?}"
    );
}

/// A unique key for one scenario run.
pub(crate) fn key(name: &str) -> String {
    format!("{name}:{:08x}", rand::random::<u32>())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The detector itself must catch a violation, or every exclusion test passes vacuously.
    #[tokio::test]
    async fn unsafe_counter_detects_unprotected_overlap() {
        let counter = Arc::new(UnsafeCounter::default());
        let a = tokio::spawn({
            let c = Arc::clone(&counter);
            async move { c.increment(1, Some(5), Duration::from_millis(30)).await }
        });
        let b = tokio::spawn({
            let c = Arc::clone(&counter);
            async move { c.increment(2, Some(4), Duration::from_millis(30)).await }
        });
        a.await.unwrap();
        b.await.unwrap();
        assert_eq!(counter.value(), 1, "one update lost");
        assert_eq!(counter.overlaps().len(), 1);
        assert_eq!(counter.stale_tokens().len(), 1);
    }

    /// A read and a write at the same time are seen, and so are two writes.
    #[tokio::test]
    async fn torn_pair_detects_overlapping_readers_and_writers() {
        let pair = Arc::new(TornPair::default());
        let pause = Duration::from_millis(30);
        pair.write(Duration::ZERO).await;
        pair.read(Duration::ZERO).await;
        assert_eq!(
            pair.torn_reads() + pair.torn_writes(),
            0,
            "one at a time counted as torn"
        );
        let (p1, p2) = (Arc::clone(&pair), Arc::clone(&pair));
        tokio::join!(p1.write(pause), async {
            tokio::time::sleep(pause / 3).await;
            p2.read(pause / 3).await;
        });
        assert_eq!(pair.torn_reads(), 1);
        let (p1, p2) = (Arc::clone(&pair), Arc::clone(&pair));
        tokio::join!(p1.write(pause), async {
            tokio::time::sleep(pause / 3).await;
            p2.write(pause / 3).await;
        });
        assert_eq!(pair.torn_writes(), 1);
    }
}
