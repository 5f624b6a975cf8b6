//! [`DistributedLockLayer`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use dlock_core::{Error, LockMode, Locker};
use http::{Method, Response};

use crate::hold_times::HoldTimes;
use crate::reject::{Reject, locked_response, unavailable_response};

/// Holds a distributed lock around every request whose key is `Some`: acquire, run the inner
/// service under the lease's watchdog, release when its response future completes or is
/// dropped (a client that disconnects releases too).
///
/// | outcome | default response |
/// |---|---|
/// | still busy after `wait` (default: the Locker's) | `423 Locked` + `Retry-After` |
/// | the lock service failed | `503 Service Unavailable` |
/// | the lock cannot be taken as set up (a mode the backend lacks, an invalid key) | `500 Internal Server Error` |
/// | the lease was lost while the handler ran (the handler is dropped) | `503 Service Unavailable` |
/// | the key cannot be built (e.g. unknown path parameter) | `500 Internal Server Error` |
///
/// Each carries an RFC 9457 `application/problem+json` body (`title`, `status`, `detail`
/// naming the lock key), so the response body type must be `From<String>` (axum's `Body`,
/// `String`, `Full<Bytes>`). The inner service's error type is unchanged. See the [crate docs](crate) for axum and
/// `ServiceBuilder` examples.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use dlock_tower::DistributedLockLayer;
///
/// let layer = DistributedLockLayer::new(dlock_core::Locker::memory(), |req: &http::Request<()>| {
///     Some(format!("path:{}", req.uri().path()))
/// })
/// .ttl(Duration::from_secs(10))
/// .wait(Duration::from_secs(2));
/// # drop(layer);
/// ```
#[must_use]
pub struct DistributedLockLayer<K> {
    pub(crate) make_key: K,
    pub(crate) settings: Arc<Settings>,
}

/// What every request of one layer shares.
#[derive(Debug)]
pub(crate) struct Settings {
    pub(crate) locker: Locker,
    pub(crate) ttl: Option<Duration>,
    pub(crate) wait: Wait,
    pub(crate) watchdog: bool,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) key_template: Option<Arc<str>>,
    pub(crate) mode: ModeChoice,
    pub(crate) on_busy: Reject,
    pub(crate) on_error: Reject,
    /// This layer's recent holds, for `Retry-After`; shared by the layer's clones.
    pub(crate) holds: Arc<HoldTimes>,
}

/// How long a request waits for a busy lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// The Locker's configured `wait`.
    LockerDefault,
    /// At most this long (zero: one attempt).
    For(Duration),
    /// Until the lock is free.
    Forever,
}

impl<K> DistributedLockLayer<K> {
    /// A layer locking through `locker`, keyed by `make_key` (a closure
    /// `Fn(&Request<B>) -> Option<String>`, or [`path_key`](crate::path_key) with the `axum`
    /// feature). Defaults: the Locker's configured `ttl`, `wait` and `max_hold`, the watchdog
    /// on; each builder method overrides one.
    pub fn new(locker: Locker, make_key: K) -> Self {
        Self {
            make_key,
            settings: Arc::new(Settings {
                locker,
                ttl: None,
                wait: Wait::LockerDefault,
                watchdog: true,
                max_hold: None,
                key_template: None,
                mode: ModeChoice::Every(LockMode::Exclusive),
                on_busy: Reject::new(locked_response),
                on_error: Reject::new(unavailable_response),
                holds: Arc::default(),
            }),
        }
    }

    fn with(mut self, change: impl FnOnce(&mut Settings)) -> Self {
        let mut settings = Settings {
            locker: self.settings.locker.clone(),
            ttl: self.settings.ttl,
            wait: self.settings.wait,
            watchdog: self.settings.watchdog,
            max_hold: self.settings.max_hold,
            key_template: self.settings.key_template.clone(),
            mode: self.settings.mode,
            on_busy: self.settings.on_busy.clone(),
            on_error: self.settings.on_error.clone(),
            holds: Arc::clone(&self.settings.holds),
        };
        change(&mut settings);
        self.settings = Arc::new(settings);
        self
    }

    /// The lease of each request's lock. Defaults to the Locker's ttl.
    pub fn ttl(self, ttl: Duration) -> Self {
        self.with(|s| s.ttl = Some(ttl))
    }

    /// How long a request waits for a busy lock before the busy response; zero makes one
    /// attempt. Defaults to the Locker's configured `wait` ([`DlockConfig::wait`]: until the
    /// lock is free, unless the config bounds it).
    ///
    /// [`DlockConfig::wait`]: dlock_core::DlockConfig::wait
    pub fn wait(self, wait: Duration) -> Self {
        self.with(|s| s.wait = Wait::For(wait))
    }

    /// Requests wait until the lock is free, whatever the Locker's configured `wait`.
    ///
    /// # Examples
    ///
    /// ```
    /// use dlock_tower::DistributedLockLayer;
    ///
    /// let key = |req: &http::Request<String>| Some(req.uri().path().to_owned());
    /// let layer = DistributedLockLayer::new(dlock_core::Locker::memory(), key).wait_forever();
    /// # drop(layer);
    /// ```
    pub fn wait_forever(self) -> Self {
        self.with(|s| s.wait = Wait::Forever)
    }

    /// With `false` the lease is not renewed: a handler running longer than the ttl loses the
    /// lock and is cancelled. Defaults to `true`.
    pub fn watchdog(self, renew: bool) -> Self {
        self.with(|s| s.watchdog = renew)
    }

    /// The longest a request holds its lock: a handler still running after `max_hold` is
    /// cancelled (`503`, as for a lost lease) and the lock released. Defaults to the Locker's
    /// `max_hold` (none).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use dlock_tower::DistributedLockLayer;
    ///
    /// let layer = DistributedLockLayer::new(dlock_core::Locker::memory(), |req: &http::Request<()>| {
    ///     Some(format!("import:{}", req.uri().path()))
    /// })
    /// .max_hold(Duration::from_secs(60));
    /// # drop(layer);
    /// ```
    pub fn max_hold(self, max_hold: Duration) -> Self {
        self.with(|s| s.max_hold = Some(max_hold))
    }

    /// Names the template the keys are built from, for the `key` label of the locks'
    /// metrics (`dlock-core`'s `metrics` feature) instead of `*`: one time series for every
    /// key the layer makes. A [`PathKey`](crate::PathKey) names its own template.
    ///
    /// # Examples
    ///
    /// ```
    /// use dlock_tower::DistributedLockLayer;
    ///
    /// let layer = DistributedLockLayer::new(dlock_core::Locker::memory(), |req: &http::Request<()>| {
    ///     Some(format!("import:{}", req.uri().path()))
    /// })
    /// .key_template("import:<path>");
    /// # drop(layer);
    /// ```
    pub fn key_template(self, template: impl Into<Arc<str>>) -> Self {
        let template = template.into();
        self.with(|s| s.key_template = Some(template))
    }

    /// Locks every request in `mode`. Defaults to [`LockMode::Exclusive`]: one request per key
    /// at a time. [`LockMode::Permit`] lets up to that many requests per key run at once.
    ///
    /// # Examples
    ///
    /// ```
    /// use dlock_core::LockMode;
    /// use dlock_tower::DistributedLockLayer;
    ///
    /// // At most 4 exports per tenant run at once, across every instance of the service.
    /// let key = |req: &http::Request<String>| req.headers().get("x-tenant")?.to_str().ok().map(|t| format!("exports:{t}"));
    /// let layer = DistributedLockLayer::new(dlock_core::Locker::memory(), key)
    ///     .mode(LockMode::Permit { limit: 4 });
    /// # drop(layer);
    /// ```
    pub fn mode(self, mode: LockMode) -> Self {
        self.with(|s| s.mode = ModeChoice::Every(mode))
    }

    /// Locks the key of a safe request (`GET`, `HEAD`, `OPTIONS`) shared and of any other
    /// request exclusive: reads of one resource run side by side, and a write waits for them
    /// and runs alone — a read-write lock per key, which the backend must support
    /// ([`Capabilities::read_write`](dlock_core::backend::Capabilities::read_write); else each
    /// safe request answers `500`). A write that waits is not overtaken by reads that come after it.
    ///
    /// # Examples
    ///
    /// ```
    /// use dlock_tower::DistributedLockLayer;
    ///
    /// let key = |req: &http::Request<String>| Some(req.uri().path().to_owned());
    /// let layer = DistributedLockLayer::new(dlock_core::Locker::memory(), key)
    ///     .shared_for_safe_methods()
    ///     .wait(std::time::Duration::from_secs(2));
    /// # drop(layer);
    /// ```
    pub fn shared_for_safe_methods(self) -> Self {
        self.with(|s| s.mode = ModeChoice::ByMethod)
    }

    /// The response when the lock stays busy, from the lock key and the [`Error::Busy`]; its
    /// `String` body becomes the response body (`String::new()` for none). Defaults to
    /// [`locked_response`](crate::locked_response): `423` with a problem-details body.
    ///
    /// # Examples
    ///
    /// ```
    /// use dlock_tower::DistributedLockLayer;
    /// use http::{Response, StatusCode};
    ///
    /// let key = |req: &http::Request<String>| Some(req.uri().path().to_owned());
    /// let layer = DistributedLockLayer::new(dlock_core::Locker::memory(), key).on_busy(|key, _| {
    ///     let mut response = Response::new(format!("{key} is being changed; try again soon"));
    ///     *response.status_mut() = StatusCode::CONFLICT;
    ///     response
    /// });
    /// # drop(layer);
    /// ```
    pub fn on_busy(
        self,
        respond: impl Fn(&str, &Error) -> Response<String> + Send + Sync + 'static,
    ) -> Self {
        self.with(|s| s.on_busy = Reject::new(respond))
    }

    /// The response when the lock service fails or the lease is lost mid-request, from the
    /// lock key and the error. Defaults to
    /// [`unavailable_response`](crate::unavailable_response): `503` with a problem-details
    /// body.
    ///
    /// # Examples
    ///
    /// ```
    /// use dlock_tower::{DistributedLockLayer, unavailable_response};
    ///
    /// let key = |req: &http::Request<String>| Some(req.uri().path().to_owned());
    /// let layer = DistributedLockLayer::new(dlock_core::Locker::memory(), key).on_error(|key, error| {
    ///     eprintln!("lock {key}: {error}"); // or a metric
    ///     unavailable_response(key, error)
    /// });
    /// # drop(layer);
    /// ```
    pub fn on_error(
        self,
        respond: impl Fn(&str, &Error) -> Response<String> + Send + Sync + 'static,
    ) -> Self {
        self.with(|s| s.on_error = Reject::new(respond))
    }
}

/// How the layer picks a request's lock mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ModeChoice {
    /// The same for every request.
    Every(LockMode),
    /// Shared for safe methods, exclusive for the others.
    ByMethod,
}

impl ModeChoice {
    /// The mode for a request with `method`.
    pub(crate) fn for_method(self, method: &Method) -> LockMode {
        match self {
            Self::Every(mode) => mode,
            Self::ByMethod if is_safe(method) => LockMode::Shared,
            Self::ByMethod => LockMode::Exclusive,
        }
    }
}

/// RFC 9110 §9.2.1's safe methods this layer reads as reads (`TRACE` is echoed by servers,
/// not routed to handlers).
fn is_safe(method: &Method) -> bool {
    [Method::GET, Method::HEAD, Method::OPTIONS].contains(method)
}

impl<K: Clone> Clone for DistributedLockLayer<K> {
    fn clone(&self) -> Self {
        Self {
            make_key: self.make_key.clone(),
            settings: Arc::clone(&self.settings),
        }
    }
}

impl<K> fmt::Debug for DistributedLockLayer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DistributedLockLayer")
            .field("make_key", &std::any::type_name::<K>())
            .field("settings", &self.settings)
            .finish()
    }
}
