//! Where a request's lock key comes from.

use std::fmt;
use std::sync::Arc;

use http::Request;

/// Produces the lock key for a request.
///
/// `Ok(None)` lets the request through without a lock; `Err` answers `500` (a key that
/// should exist but cannot be built, e.g. a template naming a missing path parameter).
///
/// Implemented for closures `FnMut(&Request<B>) -> Option<String>`:
///
/// ```
/// use dlock_tower::MakeLockKey;
/// let mut by_header = |req: &http::Request<()>| {
///     req.headers().get("x-account").and_then(|v| v.to_str().ok()).map(|a| format!("account:{a}"))
/// };
/// let mut req = http::Request::builder().header("x-account", "7").body(()).unwrap();
/// assert_eq!(by_header.make_key(&mut req).unwrap().as_deref(), Some("account:7"));
/// ```
pub trait MakeLockKey<B> {
    /// The key to lock for `request`.
    ///
    /// # Errors
    ///
    /// [`KeyError`] when the key cannot be built; the layer answers `500` and logs it.
    fn make_key(&mut self, request: &mut Request<B>) -> Result<Option<String>, KeyError>;

    /// The template every key is built from (`order:{id}`), if there is one: the `key` label
    /// of the lock's metrics (feature `metrics` of `dlock-core`). `None` by default; a
    /// [`PathKey`](crate::PathKey) gives its template. The layer's
    /// [`key_template`](crate::DistributedLockLayer::key_template) overrides it.
    fn key_template(&self) -> Option<Arc<str>> {
        None
    }
}

impl<B, F> MakeLockKey<B> for F
where
    F: FnMut(&Request<B>) -> Option<String>,
{
    fn make_key(&mut self, request: &mut Request<B>) -> Result<Option<String>, KeyError> {
        Ok(self(request))
    }
}

/// A lock key that could not be built for a request.
///
/// # Examples
///
/// ```
/// let err = dlock_tower::KeyError::new("no path parameter `id`");
/// assert_eq!(err.to_string(), "no path parameter `id`");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyError(String);

impl KeyError {
    /// A key error explained by `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for KeyError {}
