//! A tower [`Layer`](tower_layer::Layer) that holds a distributed lock around each request:
//! acquire before the handler, keep the lease alive while it runs, release when its response
//! is ready — or when the client goes away and the response future is dropped.
//!
//! # With axum
//!
//! Keys come from path parameters with the `axum` feature; add the layer with `route_layer`
//! so the parameters are known:
//!
//! ```
//! # #[cfg(feature = "axum")] {
//! use std::time::Duration;
//! use axum::{Router, routing::post};
//! use dlock_tower::{DistributedLockLayer, path_key};
//!
//! async fn pay() -> &'static str { "paid" }
//!
//! let locker = dlock_core::Locker::memory();
//! let app: Router = Router::new()
//!     .route("/orders/{id}/pay", post(pay))
//!     .route_layer(
//!         DistributedLockLayer::new(locker, path_key("order:<id>"))
//!             .ttl(Duration::from_secs(10))
//!             .wait(Duration::from_secs(2)),
//!     );
//! # }
//! ```
//!
//! # Defaults
//!
//! The layer takes the [`Locker`](dlock_core::Locker)'s configured defaults — `ttl`, `wait`,
//! `max_hold` of its [`DlockConfig`](dlock_core::DlockConfig) — unless its builder overrides
//! them. A config without `wait` waits until the lock is free, as every dlock lock does; set
//! `wait` in the config (`DLOCK_WAIT=2s`) or on the layer to answer `423` sooner.
//!
//! # With plain tower
//!
//! Any closure `Fn(&Request<B>) -> Option<String>` is a key; `None` lets the request through
//! unlocked:
//!
//! ```
//! use std::convert::Infallible;
//! use http::{Request, Response};
//! use tower::{ServiceBuilder, service_fn};
//! use dlock_tower::DistributedLockLayer;
//!
//! let service = ServiceBuilder::new()
//!     .layer(DistributedLockLayer::new(dlock_core::Locker::memory(), |req: &Request<String>| {
//!         (req.method() == http::Method::POST).then(|| format!("path:{}", req.uri().path()))
//!     }))
//!     .service(service_fn(|_req: Request<String>| async {
//!         Ok::<_, Infallible>(Response::new(String::from("done")))
//!     }));
//! # drop(service);
//! ```
//!
//! # Responses
//!
//! Busy after the wait → `423 Locked` with `Retry-After`: the median of this layer's recent
//! holds (at least 1 s), capped by the holder's remaining lease when the backend knows it;
//! lock service failure → `503`; lease lost while the
//! handler runs → the handler's future is dropped and `503` returned; a key that cannot be
//! built → `500` and an error event. Each carries an RFC 9457 `application/problem+json` body
//! naming the lock key:
//!
//! ```text
//! HTTP/1.1 423 Locked
//! content-type: application/problem+json
//! retry-after: 3
//!
//! {"detail":"The lock `order:42` is held by another request.","status":423,"title":"Locked"}
//! ```
//!
//! All but the last are configurable with [`DistributedLockLayer::on_busy`] /
//! [`DistributedLockLayer::on_error`]. The response body type must be `From<String>` (axum's
//! `Body`, `String`, `Full<Bytes>`); the inner service's error type is unchanged.
//!
//! The lock covers the handler until its response (status and headers) is ready; a streaming
//! body keeps flowing after the release.

#![cfg_attr(dlock_nightly_doc, feature(doc_cfg))]

/// The workspace README's Rust snippets (core, tower and axum), compiled as doctests here,
/// where every crate they use is a (dev-)dependency.
#[cfg(all(doctest, feature = "axum"))]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

mod future;
mod hold_times;
mod key;
mod layer;
#[cfg(feature = "axum")]
mod path_key;
mod reject;
mod service;

pub use future::ResponseFuture;
pub use key::{KeyError, MakeLockKey};
pub use layer::DistributedLockLayer;
#[cfg(feature = "axum")]
pub use path_key::{PathKey, TemplateError, path_key};
pub use reject::{locked_response, unavailable_response};
pub use service::DistributedLock;
