//! Asking for a fencing token of a backend that issues none (RedLock-like): the acquire fails
//! with `Error::Unsupported` and takes nothing; not asking works as before. The backend here
//! is a real one (memory) that hides its tokens and says it has none.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use dlock_core::backend::{
    AcquireOutcome, AcquireRequest, Capabilities, Fencing, Lease, LockBackend, MemoryBackend,
    ReleaseOutcome, RenewOutcome,
};
use dlock_core::{DlockConfig, Error, Locker, Result};

/// The memory backend without fencing tokens.
#[derive(Debug, Default)]
struct Tokenless(MemoryBackend);

#[async_trait]
impl LockBackend for Tokenless {
    async fn acquire(
        &self,
        req: &AcquireRequest,
        deadline: Option<Instant>,
    ) -> Result<AcquireOutcome> {
        let outcome = self.0.acquire(req, deadline).await?;
        Ok(match outcome {
            AcquireOutcome::Acquired(mut lease) => {
                lease.fencing_token = None;
                AcquireOutcome::Acquired(lease)
            }
            busy => busy,
        })
    }

    async fn renew(&self, leases: &[Lease]) -> Result<Vec<RenewOutcome>> {
        self.0.renew(leases).await
    }

    async fn release(&self, lease: &Lease) -> Result<ReleaseOutcome> {
        self.0.release(lease).await
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = self.0.capabilities();
        caps.name = "tokenless";
        caps.fencing = Fencing::None;
        caps
    }
}

#[tokio::test]
async fn asking_a_backend_without_tokens_is_unsupported_and_takes_nothing() {
    let backend = Arc::new(Tokenless::default());
    let locker = Locker::with_config(backend.clone(), &DlockConfig::default()).unwrap();
    match locker.lock("invoice").fencing(true).await {
        Err(error @ Error::Unsupported { backend, operation }) => {
            assert_eq!((backend, operation), ("tokenless", "fencing tokens"));
            assert_eq!(error.kind(), dlock_core::ErrorKind::Unsupported);
            assert!(!error.is_retryable());
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
    let plain = locker
        .try_lock("invoice")
        .await
        .expect("the key stayed free");
    assert_eq!(plain.fencing_token(), None);
    plain.release().await.unwrap();

    let fenced = DlockConfig::default().with_fencing(true);
    let fenced = Locker::with_config(backend, &fenced).unwrap();
    assert!(matches!(
        fenced.lock("invoice").await,
        Err(Error::Unsupported { .. })
    ));
    let guard = fenced.lock("invoice").fencing(false).await.unwrap();
    assert_eq!(guard.fencing_token(), None);
    guard.release().await.unwrap();
}
