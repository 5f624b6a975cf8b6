//! ZooKeeper's errors as dlock's, and the time bound on every request.

use std::future::Future;
use std::time::Duration;

use zookeeper_client::Error as ZkError;

use crate::Error;
use crate::error::within;

/// dlock's error for a ZooKeeper client error: the ensemble out of reach or the session gone
/// is [`Error::Unavailable`]; a refusal (credentials, permissions, a request it rejects) is
/// [`Error::Refused`].
pub(super) fn from_zk(error: ZkError) -> Error {
    match error {
        ZkError::ConnectionLoss
        | ZkError::Timeout
        | ZkError::NoHosts
        | ZkError::SessionExpired
        | ZkError::SessionMoved
        | ZkError::ClientClosed
        | ZkError::Throttled
        | ZkError::NotReadOnly
        // The client's own words for a transport failure: an I/O error, a connection that
        // answered nothing in time.
        | ZkError::Custom(_) => Error::unavailable("zookeeper", error),
        other => Error::refused("zookeeper", other),
    }
}

/// `true` when the request's reply is lost with its connection: `ConnectionLoss`, or the
/// client's own words for a transport failure (`Custom`: an I/O error, a connection that
/// answered nothing for 0.4 × the session timeout). The request may have been applied; the
/// session lives on if the client reconnects within it.
pub(super) const fn reply_lost(error: &ZkError) -> bool {
    matches!(error, ZkError::ConnectionLoss | ZkError::Custom(_))
}

/// Awaits `request`, giving [`Error::Timeout`] after `timeout`. The request itself was queued
/// when it was made: it may still be sent and applied after a timeout (a create is then found
/// again, or deleted, by its protected name).
pub(super) async fn timed<T>(
    timeout: Duration,
    operation: &'static str,
    request: impl Future<Output = Result<T, ZkError>>,
) -> crate::Result<T> {
    timed_raw(timeout, operation, request)
        .await?
        .map_err(from_zk)
}

/// Like [`timed_raw`], for a request safe to apply twice whose answer means the same either
/// way (a read; a `mkdir`; giving back a node only this acquire can have made; setting a
/// node's data to what it holds): made again while its reply is lost with its connection,
/// until `timeout` has passed in all. The client holds a request made while it reconnects and
/// sends it on the new connection, so a connection that drops and comes back within the
/// session costs the operation a round trip, not a failure; a session that ends fails it.
pub(super) async fn timed_resent<T, F>(
    timeout: Duration,
    operation: &'static str,
    mut request: impl FnMut() -> F,
) -> crate::Result<Result<T, ZkError>>
where
    F: Future<Output = Result<T, ZkError>>,
{
    let answered = async {
        loop {
            match request().await {
                Err(error) if reply_lost(&error) => {
                    tracing::debug!(%error, operation, "dlock: ZooKeeper reply lost; asking again");
                }
                answered => return answered,
            }
        }
    };
    within("zookeeper", operation, timeout, answered).await
}

/// Like [`timed`], keeping ZooKeeper's own error (for the callers that act on `NoNode` and
/// `ConnectionLoss`).
pub(super) async fn timed_raw<T>(
    timeout: Duration,
    operation: &'static str,
    request: impl Future<Output = Result<T, ZkError>>,
) -> crate::Result<Result<T, ZkError>> {
    within("zookeeper", operation, timeout, request).await
}
