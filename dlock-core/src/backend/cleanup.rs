//! Cleaning up what a lock left on a server (a key, a node), written once for the backends
//! whose lock records are deleted by the client (etcd, ZooKeeper): a release in flight that
//! hands its delete to the background if it does not finish, and the background loop that
//! deletes until the record is gone.

use std::future::Future;
use std::time::Duration;

use crate::{Error, Result};

/// The first pause before a failed delete is tried again; it doubles up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_millis(50);

/// The longest pause between two attempts of a failed delete.
const MAX_RETRY: Duration = Duration::from_secs(1);

/// A release in flight. Until [`confirmed`](Self::confirmed), what it deletes is still
/// `pending`; when it is dropped — finished, failed, or its future cancelled — `finish` gets
/// what is still pending (`None` once confirmed) and does the rest in the background.
pub(crate) struct Releasing<T, F: FnOnce(Option<T>)> {
    pending: Option<T>,
    finish: Option<F>,
}

impl<T, F: FnOnce(Option<T>)> Releasing<T, F> {
    /// A release of `pending`, finished by `finish` when dropped.
    pub(crate) const fn new(pending: T, finish: F) -> Self {
        Self {
            pending: Some(pending),
            finish: Some(finish),
        }
    }

    /// The delete was answered: nothing is left to delete.
    pub(crate) fn confirmed(&mut self) {
        self.pending = None;
    }
}

impl<T, F: FnOnce(Option<T>)> Drop for Releasing<T, F> {
    fn drop(&mut self) {
        if let Some(finish) = self.finish.take() {
            finish(self.pending.take());
        }
    }
}

/// Runs `attempt` until the record is gone: `Ok(None)` ends it, `Ok(Some(pause))` looks again
/// after `pause` (a write whose outcome was unknown may land later), an error is retried
/// with a growing pause — except a refusal, which no retry changes (the record then goes
/// with its session or lease). `stopped` ends it early (the session or the backend ended:
/// the record goes with it), at once or in the middle of an attempt.
pub(crate) async fn delete_until_gone<F, Fut>(
    backend: &'static str,
    what: &str,
    mut attempt: F,
    stopped: impl Future<Output = ()>,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<Duration>>>,
{
    tokio::pin!(stopped);
    let mut retry_in = FIRST_RETRY;
    loop {
        let outcome = tokio::select! {
            biased;
            () = &mut stopped => return,
            outcome = attempt() => outcome,
        };
        let pause = match outcome {
            Ok(None) => return,
            Ok(Some(pause)) => pause,
            Err(error @ Error::Refused { .. }) => {
                tracing::warn!(backend, what, %error, "dlock: the server refused to delete a lock record; it goes with its session");
                return;
            }
            Err(error) => {
                tracing::debug!(backend, what, %error, "dlock: deleting a lock record failed; retrying");
                let pause = retry_in;
                retry_in = (retry_in * 2).min(MAX_RETRY);
                pause
            }
        };
        tokio::select! {
            () = &mut stopped => return,
            () = tokio::time::sleep(pause) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[test]
    fn a_release_dropped_unconfirmed_hands_its_delete_on() {
        let finished = Mutex::new(Vec::new());
        drop(Releasing::new("a", |left| {
            finished.lock().unwrap().push(left)
        }));
        let mut confirmed = Releasing::new("b", |left| finished.lock().unwrap().push(left));
        confirmed.confirmed();
        drop(confirmed);
        assert_eq!(*finished.lock().unwrap(), [Some("a"), None]);
    }

    #[tokio::test(start_paused = true)]
    async fn deletes_until_gone_and_stops_on_a_refusal_or_when_stopped() {
        let mut attempts = 0;
        delete_until_gone(
            "test",
            "k",
            || {
                attempts += 1;
                let outcome = match attempts {
                    1 => Err(Error::unavailable("test", "down")),
                    2 => Ok(Some(Duration::from_secs(2))),
                    _ => Ok(None),
                };
                async move { outcome }
            },
            std::future::pending(),
        )
        .await;
        assert_eq!(attempts, 3);

        let mut refused = 0;
        delete_until_gone(
            "test",
            "k",
            || {
                refused += 1;
                async { Err(Error::refused("test", "no")) }
            },
            std::future::pending(),
        )
        .await;
        assert_eq!(refused, 1);

        let sent = std::sync::atomic::AtomicUsize::new(0);
        delete_until_gone(
            "test",
            "k",
            || async {
                sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Ok(Some(Duration::from_secs(1)))
            },
            std::future::ready(()),
        )
        .await;
        assert_eq!(sent.into_inner(), 0, "a stopped cleanup sends no request");
    }
}
