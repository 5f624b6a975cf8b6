//! [`ResponseFuture`]: acquire, run the inner service while watching the lease, release.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Instant;

use dlock_core::{Error, LockGuard, Protected, Result as LockResult};
use http::{Request, Response};
use pin_project_lite::pin_project;
use tower_service::Service;

use crate::layer::Settings;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

pin_project! {
    /// The response future of [`DistributedLock`](crate::DistributedLock).
    ///
    /// Dropping it (a client that disconnects) drops the guard, which releases the lock.
    #[must_use = "futures do nothing unless polled"]
    pub struct ResponseFuture<S, ReqBody>
    where
        S: Service<Request<ReqBody>>,
    {
        #[pin]
        state: State<S, ReqBody>,
        settings: Arc<Settings>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, ReqBody>
    where
        S: Service<Request<ReqBody>>,
    {
        Acquiring {
            acquire: BoxFuture<LockResult<LockGuard>>,
            key: String,
            inner: S,
            request: Option<Request<ReqBody>>,
        },
        Running {
            // The handler, polled only while the lease is valid.
            #[pin]
            future: Protected<S::Future>,
            guard: Option<LockGuard>,
            key: String,
            // When the lock was granted: the hold's length feeds `Retry-After`.
            since: Instant,
        },
        Releasing {
            release: BoxFuture<LockResult<()>>,
            key: String,
            output: Option<Result<S::Response, S::Error>>,
        },
        Passthrough {
            #[pin]
            future: S::Future,
        },
        Respond {
            response: Option<S::Response>,
        },
        Done,
    }
}

impl<S, ReqBody> ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>>,
{
    pub(crate) const fn acquiring(
        acquire: BoxFuture<LockResult<LockGuard>>,
        key: String,
        inner: S,
        request: Request<ReqBody>,
        settings: Arc<Settings>,
    ) -> Self {
        Self {
            state: State::Acquiring {
                acquire,
                key,
                inner,
                request: Some(request),
            },
            settings,
        }
    }

    pub(crate) fn passthrough(
        mut inner: S,
        request: Request<ReqBody>,
        settings: Arc<Settings>,
    ) -> Self {
        Self {
            state: State::Passthrough {
                future: inner.call(request),
            },
            settings,
        }
    }

    pub(crate) const fn respond(response: S::Response, settings: Arc<Settings>) -> Self {
        Self {
            state: State::Respond {
                response: Some(response),
            },
            settings,
        }
    }
}

impl<S, ReqBody, ResBody> Future for ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: From<String>,
{
    type Output = Result<Response<ResBody>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Acquiring {
                    acquire,
                    key,
                    inner,
                    request,
                } => {
                    let guard = match ready!(acquire.as_mut().poll(cx)) {
                        Ok(guard) => guard,
                        Err(error) => {
                            let response = reject(this.settings, key, &error);
                            this.state.set(State::Done);
                            return Poll::Ready(Ok(response));
                        }
                    };
                    let request = request.take().expect("request taken once");
                    let future = guard.protect(inner.call(request));
                    let key = std::mem::take(key);
                    this.state.set(State::Running {
                        future,
                        guard: Some(guard),
                        key,
                        since: Instant::now(),
                    });
                }
                StateProj::Running {
                    future,
                    guard,
                    key,
                    since,
                } => {
                    let output = ready!(future.poll(cx));
                    this.settings.holds.record(since.elapsed());
                    let guard = guard.take().expect("guard taken once");
                    let output = match output {
                        Ok(output) => output,
                        Err(error) => {
                            // The guard's drop releases in the background.
                            tracing::warn!(%error, "dlock-tower: lease lost mid-request; the handler was cancelled");
                            let response = this.settings.on_error.respond(key, &error);
                            this.state.set(State::Done);
                            return Poll::Ready(Ok(response));
                        }
                    };
                    // A 2xx whose lock is found lost at release may have overlapped another
                    // holder: not a success to report (dlock's one scope rule).
                    let succeeded =
                        matches!(&output, Ok(response) if response.status().is_success());
                    let key = std::mem::take(key);
                    this.state.set(State::Releasing {
                        release: Box::pin(guard.release_after(succeeded)),
                        key,
                        output: Some(output),
                    });
                }
                StateProj::Releasing {
                    release,
                    key,
                    output,
                } => {
                    let verdict = ready!(release.as_mut().poll(cx));
                    let output = output.take().expect("output taken once");
                    let response = match verdict {
                        Ok(()) => output,
                        Err(error) => {
                            tracing::warn!(%error, "dlock-tower: the lock stopped protecting the handler; answering 503");
                            Ok(this.settings.on_error.respond(key, &error))
                        }
                    };
                    this.state.set(State::Done);
                    return Poll::Ready(response);
                }
                StateProj::Passthrough { future } => {
                    let output = ready!(future.poll(cx));
                    this.state.set(State::Done);
                    return Poll::Ready(output);
                }
                StateProj::Respond { response } => {
                    let response = response.take().expect("polled after completion");
                    this.state.set(State::Done);
                    return Poll::Ready(Ok(response));
                }
                StateProj::Done => panic!("ResponseFuture polled after completion"),
            }
        }
    }
}

fn reject<B: From<String>>(settings: &Settings, key: &str, error: &Error) -> Response<B> {
    match error {
        Error::Busy {
            key: busy_key,
            waited,
            retry_after,
            by_this_locker,
        } => {
            // When the holder is likely done, from how long this layer's requests hold the
            // lock, rather than when its lease would run out (the ttl, for a live holder).
            let busy = Error::Busy {
                key: busy_key.clone(),
                waited: *waited,
                retry_after: settings.holds.estimate(*retry_after),
                by_this_locker: *by_this_locker,
            };
            settings.on_busy.respond(key, &busy)
        }
        other => {
            tracing::warn!(key, error = %other, "dlock-tower: the lock could not be taken");
            settings.on_error.respond(key, other)
        }
    }
}
