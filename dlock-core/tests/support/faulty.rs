//! Fault injection around a real backend: not a mock, a decorator that makes the memory
//! backend's answers fail or arrive late.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use dlock_core::backend::{
    AcquireOutcome, AcquireRequest, Capabilities, Lease, LockBackend, MemoryBackend,
    ReleaseOutcome, RenewOutcome,
};
use dlock_core::{Error, Result};

#[derive(Debug, Default)]
pub struct Faulty {
    pub inner: MemoryBackend,
    pub fail_renewals: AtomicBool,
    pub acquire_reply_delay: Mutex<Duration>,
    pub release_delay: Mutex<Duration>,
    pub renew_batches: Mutex<Vec<usize>>,
    pub releases: AtomicUsize,
}

impl Faulty {
    pub fn new(inner: MemoryBackend) -> Self {
        Self {
            inner,
            ..Self::default()
        }
    }
}

#[async_trait]
impl LockBackend for Faulty {
    async fn acquire(
        &self,
        req: &AcquireRequest,
        deadline: Option<Instant>,
    ) -> Result<AcquireOutcome> {
        let outcome = self.inner.acquire(req, deadline).await;
        let delay = *self.acquire_reply_delay.lock().unwrap();
        tokio::time::sleep(delay).await;
        outcome
    }
    async fn renew(&self, leases: &[Lease]) -> Result<Vec<RenewOutcome>> {
        self.renew_batches.lock().unwrap().push(leases.len());
        if self.fail_renewals.load(Ordering::SeqCst) {
            return Err(Error::unavailable(
                "faulty",
                std::io::Error::other("injected renewal failure"),
            ));
        }
        self.inner.renew(leases).await
    }
    async fn release(&self, lease: &Lease) -> Result<ReleaseOutcome> {
        self.releases.fetch_add(1, Ordering::SeqCst);
        let delay = *self.release_delay.lock().unwrap();
        tokio::time::sleep(delay).await;
        self.inner.release(lease).await
    }
    async fn force_release(&self, key: &str) -> Result<bool> {
        self.inner.force_release(key).await
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}
