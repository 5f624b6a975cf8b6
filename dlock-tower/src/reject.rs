//! The responses the layer gives when it does not run the handler: RFC 9457 problem details
//! (`application/problem+json`) naming the lock key, unless the user replaces them.

use std::fmt;
use std::sync::Arc;

use dlock_core::{Error, ErrorKind, LostReason};
use http::{HeaderValue, Response, StatusCode, header};

use crate::key::KeyError;

/// Builds the response for a request the layer refuses, from the lock key and the error that
/// caused the refusal; its `String` body becomes the service's response body type.
#[derive(Clone)]
pub(crate) struct Reject(Arc<RejectFn>);

/// A refusal's response, from the lock key and the error that caused it.
type RejectFn = dyn Fn(&str, &Error) -> Response<String> + Send + Sync;

impl Reject {
    pub(crate) fn new(
        f: impl Fn(&str, &Error) -> Response<String> + Send + Sync + 'static,
    ) -> Self {
        Self(Arc::new(f))
    }

    pub(crate) fn respond<B: From<String>>(&self, key: &str, error: &Error) -> Response<B> {
        (self.0)(key, error).map(B::from)
    }
}

impl fmt::Debug for Reject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Reject(..)")
    }
}

/// `423 Locked` with a problem-details body naming the key, and `Retry-After` (whole seconds,
/// at least 1) when the holder's remaining lease is known.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// let busy = dlock_core::Error::Busy {
///     key: "order:42".into(),
///     waited: Duration::ZERO,
///     retry_after: Some(Duration::from_millis(2500)),
///     by_this_locker: false,
/// };
/// let response = dlock_tower::locked_response("order:42", &busy);
/// assert_eq!(response.status(), 423);
/// assert_eq!(response.headers()["retry-after"], "3");
/// assert_eq!(response.headers()["content-type"], "application/problem+json");
/// assert_eq!(
///     response.body(),
///     r#"{"detail":"The lock `order:42` is held by another request.","status":423,"title":"Locked"}"#
/// );
/// ```
#[must_use]
pub fn locked_response(key: &str, error: &Error) -> Response<String> {
    let mut response = problem(
        StatusCode::LOCKED,
        &format!("The lock `{key}` is held by another request."),
    );
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

/// `503 Service Unavailable` with a problem-details body naming the key: the lock service
/// failed, or the lease was lost mid-request. A lock this service is set up to take wrongly
/// (a mode the backend lacks, an invalid key or ttl: [`ErrorKind::Unsupported`] and
/// [`ErrorKind::InvalidInput`](dlock_core::ErrorKind::InvalidInput)) is a
/// `500 Internal Server Error` instead: retrying will not help. The error's own text (hosts,
/// client errors) stays in the server's logs, out of the response.
///
/// # Examples
///
/// ```
/// use dlock_core::{Error, ErrorKind};
/// let down = Error::unavailable("redis", std::io::Error::other("connection refused"));
/// let response = dlock_tower::unavailable_response("order:42", &down);
/// assert_eq!(response.status(), 503);
/// assert!(response.body().contains("`order:42`"));
/// let response = dlock_tower::unavailable_response("order:42", &Error::NoGlobalLocker);
/// assert_eq!(response.status(), 500);
/// ```
#[must_use]
pub fn unavailable_response(key: &str, error: &Error) -> Response<String> {
    match error.kind() {
        // A cap the service set: say so (other reasons may name the lock service's internals).
        ErrorKind::LeaseLost
            if let Error::LeaseLost {
                reason: LostReason::MaxHold(cap),
                ..
            } = error =>
        {
            problem(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!(
                    "The request held the lock `{key}` for its max_hold of {cap:?} and was cancelled."
                ),
            )
        }
        ErrorKind::LeaseLost => problem(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!("The lock `{key}` was lost while the request ran; the request was cancelled."),
        ),
        ErrorKind::Unsupported | ErrorKind::InvalidInput => problem(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("The lock `{key}` could not be taken: this service's lock set-up is invalid."),
        ),
        _ => problem(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!("The lock `{key}` could not be taken: the lock service failed."),
        ),
    }
}

/// `500 Internal Server Error` for a request whose lock key cannot be built, with the reason:
/// a mistake in the service (a key template naming a parameter its route lacks), which the
/// developer who sees the response can fix; a retry cannot.
pub(crate) fn key_error_response<B: From<String>>(error: &KeyError) -> Response<B> {
    problem(
        StatusCode::INTERNAL_SERVER_ERROR,
        &format!("The lock key of this request could not be built: {error}"),
    )
    .map(B::from)
}

/// An RFC 9457 problem-details response: `title` (the status's reason), `status`, `detail`.
fn problem(status: StatusCode, detail: &str) -> Response<String> {
    let body = serde_json::json!({
        "title": status.canonical_reason().unwrap_or_default(),
        "status": status.as_u16(),
        "detail": detail,
    });
    let mut response = Response::new(body.to_string());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_with_quotes_and_controls_stays_valid_json() {
        let down = Error::unavailable("redis", std::io::Error::other("reset"));
        let response = unavailable_response("a\"b\\c\u{1}", &down);
        let body: serde_json::Value = serde_json::from_str(response.body()).unwrap();
        assert_eq!(body["status"], 503);
        assert_eq!(body["title"], "Service Unavailable");
        assert!(body["detail"].as_str().unwrap().contains("`a\"b\\c\u{1}`"));
    }

    #[test]
    fn a_lost_lease_says_the_request_was_cancelled() {
        let lost = Error::LeaseLost {
            key: "order:42".into(),
            reason: dlock_core::LostReason::Expired,
        };
        let response = unavailable_response("order:42", &lost);
        assert!(response.body().contains("cancelled"), "{}", response.body());
    }

    #[test]
    fn the_key_error_response_is_a_500_problem() {
        let response: Response<String> = key_error_response(&KeyError::new("no `id`"));
        assert_eq!(response.status(), 500);
        assert!(response.body().contains("no `id`"), "{}", response.body());
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "application/problem+json"
        );
    }
}
