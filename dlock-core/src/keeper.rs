//! [`LeaseKeeper`]: what keeps and gives up the grants of one Locker — its backend, its
//! watchdog, and releases bounded by the operation timeout, inline or in the background.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Instrument as _;

use crate::backend::LockBackend;
use crate::lease::{Lease, ReleaseOutcome};
use crate::watchdog::Watchdog;
use crate::{Error, Kept, Result};

/// Shared by a Locker and every hold taken through it; the watchdog stops when the last of
/// them goes.
pub(crate) struct LeaseKeeper {
    backend: Arc<dyn LockBackend>,
    /// The backend's name, for errors.
    name: &'static str,
    operation_timeout: Duration,
    watchdog: Watchdog,
}

impl Drop for LeaseKeeper {
    fn drop(&mut self) {
        self.watchdog.shutdown();
    }
}

impl fmt::Debug for LeaseKeeper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseKeeper")
            .field("backend", &self.name)
            .field("operation_timeout", &self.operation_timeout)
            .finish_non_exhaustive()
    }
}

impl LeaseKeeper {
    /// A keeper of leases granted by `backend`, each call bounded by `operation_timeout`.
    pub(crate) fn new(backend: Arc<dyn LockBackend>, operation_timeout: Duration) -> Self {
        let name = backend.capabilities().name;
        let watchdog = Watchdog::new(Arc::clone(&backend), operation_timeout);
        Self {
            backend,
            name,
            operation_timeout,
            watchdog,
        }
    }

    pub(crate) const fn backend(&self) -> &Arc<dyn LockBackend> {
        &self.backend
    }

    pub(crate) const fn operation_timeout(&self) -> Duration {
        self.operation_timeout
    }

    /// `request`'s answer, or [`Error::Timeout`] for `operation` when it takes longer than
    /// the operation timeout.
    pub(crate) async fn bounded<T>(
        &self,
        operation: &'static str,
        request: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        tokio::time::timeout(self.operation_timeout, request)
            .await
            .unwrap_or_else(|_| Err(self.timeout(operation)))
    }

    /// [`Error::Timeout`] for `operation`, after the operation timeout.
    pub(crate) const fn timeout(&self, operation: &'static str) -> Error {
        Error::timeout(self.name, operation, self.operation_timeout)
    }

    pub(crate) const fn watchdog(&self) -> &Watchdog {
        &self.watchdog
    }

    /// Owner-checked release, bounded by the operation timeout; with `keep`, the key stays
    /// held on the server that much longer ([`LockBackend::release_keeping`]).
    pub(crate) async fn release_lease(
        &self,
        lease: &Lease,
        keep: Option<(Duration, Kept)>,
    ) -> Result<ReleaseOutcome> {
        let span = tracing::debug_span!(
            "dlock.release",
            key = %lease.key,
            mode = %lease.mode,
            backend = self.name,
            kept = keep.map(|(_, kept)| kept.as_str()),
            outcome = tracing::field::Empty,
        );
        let outcome = match keep {
            None => self.bounded("release", self.backend.release(lease)),
            Some((left, kept)) => {
                self.bounded("release", self.backend.release_keeping(lease, left, kept))
            }
        }
        .instrument(span.clone())
        .await;
        span.record(
            "outcome",
            match &outcome {
                Ok(ReleaseOutcome::Released) => "released",
                Ok(ReleaseOutcome::NotHeld) => "not_held",
                Err(_) => "failed",
            },
        );
        outcome
    }

    /// Releases `lease` — a grant the caller never got, or may have been made after the
    /// caller heard of a failure — from a spawned task, trying again until the backend
    /// answers or the lease would have run out anyway: a server that stops answering while
    /// the acquire is in flight may apply it when it comes back.
    pub(crate) fn release_once_answered(self: &Arc<Self>, lease: Lease) {
        let keeper = Arc::clone(self);
        let key = Arc::clone(&lease.key);
        let spawned = self.watchdog.spawn(async move {
            let expires = lease.valid_from + lease.ttl;
            let mut pause = Duration::from_millis(50);
            loop {
                match keeper.release_lease(&lease, None).await {
                    Ok(outcome) => {
                        tracing::debug!(key = %lease.key, ?outcome, "dlock: released a grant its caller did not get");
                        return;
                    }
                    Err(error) if Instant::now() + pause < expires => {
                        tracing::debug!(key = %lease.key, %error, "dlock: releasing an unconfirmed grant; trying again");
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_secs(1));
                    }
                    Err(error) => {
                        tracing::warn!(key = %lease.key, %error, "dlock: could not release an unconfirmed grant; it expires at its ttl");
                        return;
                    }
                }
            }
        });
        if !spawned {
            tracing::debug!(%key, "dlock: no runtime to release an unconfirmed grant; it expires at its ttl");
        }
    }

    /// Releases `lease` from a spawned task (a guard was dropped), keeping it as
    /// [`release_lease`](Self::release_lease) does. Without a runtime the lease simply runs
    /// out at its ttl.
    pub(crate) fn release_in_background(
        self: &Arc<Self>,
        lease: Lease,
        keep: Option<(Duration, Kept)>,
    ) {
        let keeper = Arc::clone(self);
        let key = lease.key.clone();
        let spawned = self.watchdog.spawn(async move {
            match keeper.release_lease(&lease, keep).await {
                Ok(outcome) => {
                    tracing::debug!(key = %lease.key, ?outcome, "dlock: released on drop");
                }
                Err(error) => tracing::warn!(
                    key = %lease.key,
                    %error,
                    "dlock: release on drop failed; the lease will expire at its ttl"
                ),
            }
        });
        if !spawned {
            tracing::debug!(%key, "dlock: guard dropped with no runtime known; the lease will expire at its ttl");
        }
    }
}
