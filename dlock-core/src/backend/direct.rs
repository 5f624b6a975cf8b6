//! Calls into a built-in backend without a boxed future per call.
//!
//! [`LockBackend`] is object-safe, so each of its async methods returns a boxed future: an
//! allocation, and a copy of the future into it, per lock and per unlock. A
//! [`Locker`](crate::Locker) that connected to a built-in backend itself knows its type and
//! calls the backend's own methods on the hot path (acquire, release); everything else, and
//! every backend given as a trait object, goes through the trait.

use std::time::Instant;

use crate::Result;
use crate::backend::LockBackend;
use crate::lease::{AcquireOutcome, AcquireRequest, Lease, ReleaseOutcome};

/// The backend a Locker calls directly, if it knows its type.
#[derive(Debug)]
pub(crate) enum Direct {
    #[cfg(feature = "redis")]
    Redis(std::sync::Arc<crate::RedisBackend>),
    /// Through the trait object.
    Dyn,
}

impl Direct {
    /// `backend.acquire(req, deadline)`, directly when the type is known.
    pub(crate) async fn acquire(
        &self,
        backend: &dyn LockBackend,
        req: &AcquireRequest,
        deadline: Option<Instant>,
    ) -> Result<AcquireOutcome> {
        match self {
            #[cfg(feature = "redis")]
            Self::Redis(redis) => redis.acquire_direct(req, deadline).await,
            Self::Dyn => backend.acquire(req, deadline).await,
        }
    }

    /// `backend.release(lease)`, directly when the type is known.
    pub(crate) async fn release(
        &self,
        backend: &dyn LockBackend,
        lease: &Lease,
    ) -> Result<ReleaseOutcome> {
        match self {
            #[cfg(feature = "redis")]
            Self::Redis(redis) => redis.release_direct(lease).await,
            Self::Dyn => backend.release(lease).await,
        }
    }
}
