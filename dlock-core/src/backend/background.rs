//! Background work of a backend with server-side sessions (etcd, ZooKeeper): deletes of keys
//! given up, idle sessions closed later. It runs on the runtime the caller is on, or — from a
//! `Drop` outside any runtime — on the one the backend was connected on; a shutdown awaits it.

use std::future::Future;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio_util::task::TaskTracker;

use crate::{Error, Result};

/// Where a backend runs its background work.
#[derive(Debug, Clone)]
pub(crate) struct Background {
    connected_on: Handle,
    /// Every task spawned, for [`settle`](Self::settle).
    tasks: TaskTracker,
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
        Ok(Self {
            connected_on,
            tasks: TaskTracker::new(),
        })
    }

    /// Runs `work` in the background, on the current runtime or the one the backend was
    /// connected on.
    pub(crate) fn spawn(&self, work: impl Future<Output = ()> + Send + 'static) {
        match Handle::try_current() {
            Ok(current) => drop(self.tasks.spawn_on(work, &current)),
            Err(_) => drop(self.tasks.spawn_on(work, &self.connected_on)),
        }
    }

    /// Waits, at most `bound`, for every task spawned so far to end (the backend is shutting
    /// down: its tasks were told to stop); `false` if some still run.
    pub(crate) async fn settle(&self, bound: Duration) -> bool {
        self.tasks.close();
        tokio::time::timeout(bound, self.tasks.wait()).await.is_ok()
    }
}
