//! Background work, spawned in one way for the whole crate: a Locker's releases of dropped
//! guards, a backend's deletes of keys given up and sessions closed later. It runs on the
//! runtime the caller is on or — from a `Drop` outside any runtime — on the last one seen
//! (the one a backend was connected on, the one of a Locker's latest acquire); a shutdown
//! awaits it.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio_util::task::TaskTracker;

use crate::{Error, Result};

/// Where background work runs, and the work still running.
#[derive(Debug, Clone, Default)]
pub(crate) struct Background {
    /// The runtime last seen current: where work spawned from outside any runtime goes.
    last_runtime: Arc<Mutex<Option<Handle>>>,
    /// Every task spawned, for [`settle`](Self::settle).
    tasks: TaskTracker,
}

impl Background {
    /// Background work that remembers the runtime it is first used on.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Background work that starts on the runtime `connect` runs on; `backend` names the URL
    /// scheme and type for the error.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] outside a tokio runtime.
    #[cfg_attr(
        not(any(feature = "etcd", feature = "zookeeper", feature = "postgres")),
        allow(dead_code)
    )]
    pub(crate) fn here(scheme: &str, backend: &str) -> Result<Self> {
        let background = Self::new();
        if background.runtime().is_none() {
            return Err(Error::config(
                "backend",
                scheme,
                format!("{backend}::connect must run inside a tokio runtime"),
            ));
        }
        Ok(background)
    }

    /// The current runtime (remembered), else the last one seen.
    pub(crate) fn runtime(&self) -> Option<Handle> {
        let mut last = self
            .last_runtime
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Ok(current) = Handle::try_current() {
            *last = Some(current);
        }
        last.clone()
    }

    /// Runs `work` in the background on [`runtime`](Self::runtime); `false` if no runtime was
    /// ever seen (the work is dropped).
    pub(crate) fn spawn(&self, work: impl Future<Output = ()> + Send + 'static) -> bool {
        self.runtime()
            .map(|runtime| self.tasks.spawn_on(work, &runtime))
            .is_some()
    }

    /// Runs `work` in the background, as [`spawn`](Self::spawn), and hands back its handle:
    /// for work that must finish even if whoever awaits it is dropped. `None` if no runtime
    /// was ever seen (the work is dropped).
    #[cfg_attr(not(feature = "redlock"), allow(dead_code))]
    pub(crate) fn spawn_joinable<T: Send + 'static>(
        &self,
        work: impl Future<Output = T> + Send + 'static,
    ) -> Option<tokio::task::JoinHandle<T>> {
        self.runtime()
            .map(|runtime| self.tasks.spawn_on(work, &runtime))
    }

    /// Waits, at most `bound`, for every task spawned so far to end (the owner is shutting
    /// down: its tasks were told to stop); `false` if some still run.
    pub(crate) async fn settle(&self, bound: Duration) -> bool {
        self.tasks.close();
        tokio::time::timeout(bound, self.tasks.wait()).await.is_ok()
    }
}
