//! The state behind every clone of one Locker, and the operations on the Locker as a whole:
//! shut it down, inspect a lock, break one. How a Locker takes a lock is `acquire`.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::backend::{Capabilities, LockBackend};
use crate::config::DlockConfig;
use crate::hold::Hold;
use crate::keeper::LeaseKeeper;
use crate::lease::OwnerId;
use crate::meter::Meter;
use crate::reentrancy::Reentrancy;
use crate::{Error, LostReason, Result};

/// The state behind every clone of one Locker.
pub(crate) struct LockerState {
    /// 128 random bits in hex, drawn once: the scope of this Locker's owner ids.
    pub(crate) id: String,
    /// How many grants this Locker asked for: the other half of an owner id.
    pub(crate) grants: AtomicU64,
    /// Set by [`LockerState::shutdown`]: no more grants.
    pub(crate) shut_down: AtomicBool,
    /// Cancelled by [`LockerState::shutdown`]: acquires still waiting end with
    /// [`Error::ShutDown`](crate::Error::ShutDown) (dropping the backend's acquire, which
    /// leaves nothing behind).
    pub(crate) stopping: tokio_util::sync::CancellationToken,
    pub(crate) capabilities: Capabilities,
    pub(crate) config: DlockConfig,
    pub(crate) keeper: Arc<LeaseKeeper>,
    pub(crate) reentrancy: Arc<Reentrancy<Hold>>,
}

impl fmt::Debug for LockerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Locker")
            .field("id", &self.id)
            .field("backend", &self.capabilities.name)
            .field("key_prefix", &self.config.key_prefix)
            .field("ttl", &self.config.ttl)
            .finish_non_exhaustive()
    }
}

impl LockerState {
    /// The state of a new Locker over `backend` with (valid) `config`.
    pub(crate) fn new(backend: Arc<dyn LockBackend>, config: DlockConfig) -> Self {
        let capabilities = backend.capabilities();
        Meter::describe();
        let id = OwnerId::random("locker").as_str()["locker:".len()..].to_owned();
        Self {
            id,
            grants: AtomicU64::new(0),
            shut_down: AtomicBool::new(false),
            stopping: tokio_util::sync::CancellationToken::new(),
            capabilities,
            keeper: Arc::new(LeaseKeeper::new(backend, config.operation_timeout)),
            config,
            reentrancy: Arc::default(),
        }
    }

    /// Refuses new grants, marks every held lease lost ([`LostReason::Shutdown`]) and
    /// releases them all at once, each within the operation timeout; the watchdog stops.
    /// Then waits for the releases left to the background and ends the backend's server-side
    /// state ([`LockBackend::shutdown`]), each within the operation timeout. The first
    /// failure is returned after everything was tried.
    pub(crate) async fn shutdown(&self) -> Result<()> {
        self.shut_down.store(true, Ordering::SeqCst);
        self.stopping.cancel();
        let leases = self
            .keeper
            .watchdog()
            .shut_down_and_drain(&LostReason::Shutdown);
        let held = leases.len();
        let mut releases = tokio::task::JoinSet::new();
        for lease in leases {
            let keeper = Arc::clone(&self.keeper);
            releases.spawn(async move { keeper.release_lease(&lease, None).await });
        }
        let mut first_error = None;
        while let Some(released) = releases.join_next().await {
            let released = released
                .map_err(|panic| Error::unavailable(self.capabilities.name, panic.to_string()))
                .and_then(|outcome| outcome);
            if let Err(error) = released {
                first_error.get_or_insert(error);
            }
        }
        // Releases left to the background (dropped guards, late grants) end before the
        // backend's sessions do: each is bounded by the operation timeout already.
        let timeout = self.keeper.operation_timeout();
        if !self.keeper.watchdog().settle(timeout).await {
            tracing::debug!("dlock: background releases still running at shutdown");
        }
        let backend = self.keeper.backend();
        if let Err(error) = self.keeper.bounded("shutdown", backend.shutdown()).await {
            first_error.get_or_insert(error);
        }
        tracing::info!(
            held,
            failed = first_error.is_some(),
            "dlock: Locker shut down"
        );
        first_error.map_or(Ok(()), Err)
    }

    /// The backend's view of `key`'s lock, within the operation timeout.
    pub(crate) async fn inspect(&self, key: &str) -> Result<crate::LockInfo> {
        let full_key = crate::key::full_key(&self.config.key_prefix, key)?;
        let backend = self.keeper.backend();
        self.keeper
            .bounded("inspect", backend.inspect(&full_key))
            .await
    }

    /// Deletes `key`'s lock whoever holds it, within the operation timeout.
    pub(crate) async fn force_release(&self, key: &str) -> Result<bool> {
        let full_key = crate::key::full_key(&self.config.key_prefix, key)?;
        let backend = self.keeper.backend();
        let released = self
            .keeper
            .bounded("force_release", backend.force_release(&full_key))
            .await?;
        tracing::info!(%key, released, "dlock: force-released");
        Ok(released)
    }
}
