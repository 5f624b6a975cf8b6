//! [`DistributedLock`], the service the layer wraps around an inner service.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use dlock_core::{LockGuard, LockMode, Result as LockResult};
use http::{Request, Response};
use tower_layer::Layer;
use tower_service::Service;

use crate::future::ResponseFuture;
use crate::key::MakeLockKey;
use crate::layer::{DistributedLockLayer, ModeChoice, Settings, Wait};
use crate::reject::key_error_response;

/// Holds a distributed lock around each request to `S`. Built by [`DistributedLockLayer`].
#[must_use]
pub struct DistributedLock<S, K> {
    inner: S,
    make_key: K,
    settings: Arc<Settings>,
}

impl<S, K> DistributedLock<S, K> {
    pub(crate) const fn from_parts(inner: S, make_key: K, settings: Arc<Settings>) -> Self {
        Self {
            inner,
            make_key,
            settings,
        }
    }

    /// A layer producing this service; the same as [`DistributedLockLayer::new`].
    pub fn layer(locker: dlock_core::Locker, make_key: K) -> DistributedLockLayer<K> {
        DistributedLockLayer::new(locker, make_key)
    }

    /// The inner service.
    pub const fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub const fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, unwrapped.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: Clone, K: Clone> Clone for DistributedLock<S, K> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            make_key: self.make_key.clone(),
            settings: Arc::clone(&self.settings),
        }
    }
}

impl<S: fmt::Debug, K> fmt::Debug for DistributedLock<S, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DistributedLock")
            .field("inner", &self.inner)
            .field("make_key", &std::any::type_name::<K>())
            .field("settings", &self.settings)
            .finish()
    }
}

impl<S, K, ReqBody, ResBody> Service<Request<ReqBody>> for DistributedLock<S, K>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    K: MakeLockKey<ReqBody>,
    ReqBody: Send + 'static,
    ResBody: From<String>,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqBody>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<ReqBody>) -> Self::Future {
        // The ready service goes with this request; a fresh clone stays for the next one.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        match self.make_key.make_key(&mut request) {
            Ok(Some(key)) => {
                let mode = self.settings.mode.for_method(request.method());
                let template = self
                    .settings
                    .key_template
                    .clone()
                    .or_else(|| self.make_key.key_template());
                let acquire = acquire(Arc::clone(&self.settings), key.clone(), mode, template);
                ResponseFuture::acquiring(acquire, key, inner, request, Arc::clone(&self.settings))
            }
            Ok(None) => ResponseFuture::passthrough(inner, request, Arc::clone(&self.settings)),
            Err(error) => {
                tracing::error!(%error, uri = %request.uri(), "dlock-tower: cannot build the lock key");
                ResponseFuture::respond(key_error_response(&error), Arc::clone(&self.settings))
            }
        }
    }
}

type Acquire = std::pin::Pin<Box<dyn std::future::Future<Output = LockResult<LockGuard>> + Send>>;

fn acquire(
    settings: Arc<Settings>,
    key: String,
    mode: LockMode,
    template: Option<Arc<str>>,
) -> Acquire {
    Box::pin(async move {
        // One exclusive mode for every request is a mutex; exclusive next to shared is the
        // write side of a read-write lock (the two differ only in a backend's layout).
        let request = match settings.mode {
            ModeChoice::Every(LockMode::Exclusive) => settings.locker.lock(&key),
            _ => settings.locker.lock_as(&key, mode),
        };
        let mut request = match settings.wait {
            Wait::LockerDefault => request,
            Wait::For(wait) => request.wait(wait),
            Wait::Forever => request.wait_forever(),
        };
        request = request
            .watchdog(settings.watchdog)
            // Requests polled in one task (e.g. `join!` of two `oneshot`s) must still exclude
            // each other; locks the handler takes inside re-enter this one.
            .reentrant(false);
        if let Some(ttl) = settings.ttl {
            request = request.ttl(ttl);
        }
        if let Some(max_hold) = settings.max_hold {
            request = request.max_hold(max_hold);
        }
        if let Some(template) = &template {
            request = request.key_template(template);
        }
        request.await
    })
}

impl<S, K: Clone> Layer<S> for DistributedLockLayer<K> {
    type Service = DistributedLock<S, K>;

    fn layer(&self, inner: S) -> Self::Service {
        DistributedLock::from_parts(inner, self.make_key.clone(), Arc::clone(&self.settings))
    }
}
