//! Background work of a backend with server-side sessions (etcd, ZooKeeper): deletes of keys
//! given up, idle sessions closed later. It runs on the runtime the caller is on, or — from a
//! `Drop` outside any runtime — on the one the backend was connected on.

use std::future::Future;

use tokio::runtime::Handle;

use crate::{Error, Result};

/// Where a backend runs its background work.
#[derive(Debug, Clone)]
pub(crate) struct Background {
    connected_on: Handle,
}

impl Background {
    /// The runtime `connect` runs on; `backend` names the URL scheme and type for the error.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] outside a tokio runtime.
    pub(crate) fn here(scheme: &str, backend: &str) -> Result<Self> {
        let connected_on = Handle::try_current().map_err(|_| {
            Error::config(
                "backend",
                scheme,
                format!("{backend}::connect must run inside a tokio runtime"),
            )
        })?;
        Ok(Self { connected_on })
    }

    /// Runs `work` in the background, on the current runtime or the one the backend was
    /// connected on.
    pub(crate) fn spawn(&self, work: impl Future<Output = ()> + Send + 'static) {
        match Handle::try_current() {
            Ok(current) => drop(current.spawn(work)),
            Err(_) => drop(self.connected_on.spawn(work)),
        }
    }
}
