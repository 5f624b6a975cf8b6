//! The responses the layer gives when it does not run the handler.

use std::fmt;
use std::sync::Arc;

use dlock_core::Error;
use http::{HeaderValue, Response, StatusCode, header};

/// Builds the response for a request the layer refuses: the status and headers come from the
/// closure, the body is the response body type's default (empty).
#[derive(Clone)]
pub(crate) struct Reject(Arc<RejectFn>);

/// Status and headers of a refusal, from the error that caused it.
type RejectFn = dyn Fn(&Error) -> Response<()> + Send + Sync;

impl Reject {
    pub(crate) fn new(f: impl Fn(&Error) -> Response<()> + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }

    pub(crate) fn respond<B: Default>(&self, error: &Error) -> Response<B> {
        (self.0)(error).map(|()| B::default())
    }
}

impl fmt::Debug for Reject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Reject(..)")
    }
}

/// `423 Locked`, with `Retry-After` (whole seconds, at least 1) when the holder's remaining
/// lease is known.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// let busy = dlock_core::Error::Busy {
///     key: "order:42".into(),
///     waited: Duration::ZERO,
///     retry_after: Some(Duration::from_millis(2500)),
/// };
/// let response = dlock_tower::locked_response(&busy);
/// assert_eq!(response.status(), 423);
/// assert_eq!(response.headers()["retry-after"], "3");
/// ```
#[must_use]
pub fn locked_response(error: &Error) -> Response<()> {
    let mut response = Response::new(());
    *response.status_mut() = StatusCode::LOCKED;
    if let Error::Busy {
        retry_after: Some(remaining),
        ..
    } = error
    {
        let seconds = remaining.as_secs() + u64::from(remaining.subsec_nanos() > 0);
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds.max(1)));
    }
    response
}

/// `503 Service Unavailable`: the lock service failed, or the lease was lost mid-request.
///
/// # Examples
///
/// ```
/// let response = dlock_tower::unavailable_response(&dlock_core::Error::NoGlobalLocker);
/// assert_eq!(response.status(), 503);
/// ```
#[must_use]
pub fn unavailable_response(_error: &Error) -> Response<()> {
    let mut response = Response::new(());
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    response
}
