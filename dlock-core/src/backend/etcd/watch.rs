//! A watch on etcd that ends without a reset the server could answer.
//!
//! Dropping a gRPC watch stream resets its HTTP/2 stream at once. Events etcd already sent on
//! it then arrive for a stream the client no longer tracks, and the client's HTTP/2 library
//! (h2) resets each of them again as a protocol error of the peer, counting them: past 1024
//! (h2's `max_local_error_reset_streams`) it closes the whole connection with
//! `ENHANCE_YOUR_CALM` / `too_many_internal_resets`, failing every request on it. Waiting
//! permits, which watch a busy range, reached that within seconds on the bench. So a watch is
//! first cancelled (etcd's `WatchCancelRequest`), and its stream dropped only once etcd
//! confirmed the cancel — nothing follows that — in the background, bounded by the operation
//! timeout.

use crate::backend::background::Background;
use std::time::Duration;

use etcd_client::{WatchResponse, WatchStream};

/// An open watch; cancelled in the background when dropped.
pub(super) struct Watch {
    stream: Option<WatchStream>,
    /// The watch's id, once etcd said it created it.
    id: Option<i64>,
    timeout: Duration,
    /// Where the watch is cancelled when dropped.
    background: Background,
}

impl Watch {
    /// Wraps a stream just opened with one watch request.
    pub(super) const fn new(
        stream: WatchStream,
        timeout: Duration,
        background: Background,
    ) -> Self {
        Self {
            stream: Some(stream),
            id: None,
            timeout,
            background,
        }
    }

    /// The next response (`None` when the stream ended).
    ///
    /// # Errors
    ///
    /// The stream failed.
    pub(super) async fn message(&mut self) -> Result<Option<WatchResponse>, etcd_client::Error> {
        let Some(stream) = self.stream.as_mut() else {
            return Ok(None);
        };
        let response = stream.message().await?;
        if let Some(response) = &response
            && response.created()
        {
            self.id = Some(response.watch_id());
        }
        Ok(response)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let Some(stream) = self.stream.take() else {
            return;
        };
        let (id, timeout) = (self.id, self.timeout);
        self.background.spawn(async move {
            let closed = tokio::time::timeout(timeout, cancel(stream, id)).await;
            tracing::trace!(confirmed = closed.is_ok(), "dlock: etcd watch closed");
        });
    }
}

/// Cancels watch `id` of `stream` (waiting for its `created` answer first if `id` is not known
/// yet), and reads on until etcd confirms the cancel or the stream ends.
async fn cancel(mut stream: WatchStream, id: Option<i64>) {
    let id = match id {
        Some(id) => id,
        None => loop {
            match stream.message().await {
                Ok(Some(response)) if response.created() => break response.watch_id(),
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return,
            }
        },
    };
    if stream.cancel(id).await.is_err() {
        return;
    }
    while let Ok(Some(response)) = stream.message().await {
        if response.canceled() {
            return;
        }
    }
}
