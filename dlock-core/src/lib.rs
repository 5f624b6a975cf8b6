//! Distributed locks for async Rust services.
//!
//! A [`Locker`] takes locks on string keys from one backend — in-process memory by default;
//! Redis (single node, Cluster, RedLock), etcd, ZooKeeper, PostgreSQL — and gives back a [`LockGuard`]. While the
//! guard lives, the Locker's watchdog renews the lease; if the lease is lost anyway, the guard
//! says so ([`LockGuard::lost`]) and [`LockGuard::run`] cancels the protected work. A grant
//! carries a fencing token for the protected resource to check (always on memory, etcd and
//! ZooKeeper; on Redis and PostgreSQL when asked, [`LockRequest::fencing`]). A task that holds a key can lock it again
//! and re-enters at once.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
//! use std::time::Duration;
//! use dlock_core::Locker;
//!
//! let locker = Locker::memory();
//! let guard = locker.lock("order:42").ttl(Duration::from_secs(10)).await?;
//! let token = guard.fencing_token();
//! guard
//!     .run(async {
//!         // settle the order, passing `token` to the database
//!         # let _ = token;
//!     })
//!     .await?;
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # Feature flags
//!
//! | feature       | default | what it adds                                                       |
//! |---------------|---------|--------------------------------------------------------------------|
//! | `memory`      | yes     | [`backend::MemoryBackend`], `memory://` URLs                       |
//! | `redis`       | no      | `backend::RedisBackend`: `redis://`, `redis+cluster://`, `redis+sentinel://` URLs |
//! | `etcd`        | no      | `backend::EtcdBackend`: `etcd://` URLs, interoperable with `etcdctl lock` |
//! | `zookeeper`   | no      | `backend::ZooKeeperBackend`: `zk://` URLs, interoperable with Apache Curator's locks |
//! | `redlock`     | no      | `backend::RedLockBackend`: `redlock://` URLs, one lock over N Redis masters |
//! | `postgres`    | no      | `backend::PostgresBackend`: `postgres://` URLs, advisory locks `psql` can take too |
//! | `metrics`     | no      | the metrics below, on the [`metrics`](https://docs.rs/metrics) facade |
//! | `macros`      | no      | the `#[distributed_lock]` attribute on `async fn`s                 |
//! | `conformance` | no      | `dlock_core::conformance`, the suite every backend must pass       |
//!
//! Every feature but `etcd` builds with nothing but Rust and a C compiler. `etcd`'s client
//! compiles etcd's protocol buffers at build time and needs `protoc` (Debian:
//! `protobuf-compiler`).
//!
//! The `dlock` command line is a package of its own, so the library never compiles its parts:
//! `cargo install dlock-cli` (Redis, RedLock, ZooKeeper and PostgreSQL), with etcd
//! `cargo install dlock-cli --features etcd`; a `dlock` built without etcd, pointed at
//! `etcd://`, names that line.
//!
//! HTTP handlers (tower, axum) lock through [`dlock-tower`](https://docs.rs/dlock-tower)'s
//! `DistributedLockLayer`, over the same [`Locker`].
//!
//! # Metrics
//!
//! With the `metrics` feature, dlock records on the `metrics` facade — nothing until the
//! application installs a recorder (`metrics-exporter-prometheus`, an OpenTelemetry bridge).
//! Names follow OpenTelemetry's rules (durations in seconds; Prometheus shows
//! `dlock.acquire.duration` as `dlock_acquire_duration_seconds`):
//!
//! | metric | kind | labels besides `backend`, `mode`, `key` |
//! |---|---|---|
//! | `dlock.acquire.duration` | histogram, s | `outcome`: `acquired`, `reentered`, `busy`, `failed` |
//! | `dlock.hold.duration` | histogram, s | `outcome`: `released`, `lost` |
//! | `dlock.lock.count` | gauge | `state`: `held`, `waiting` |
//! | `dlock.renewals` | counter | `outcome`: `renewed`, `lost`, `failed` |
//! | `dlock.lost` | counter | `reason`: `not_owner`, `expired`, `max_hold`, `shutdown`, `session_lost` |
//! | `dlock.once` | counter | `outcome`: `ran`, `failed`, `skipped_running`, `skipped_done` ([`Locker::once`]; `key` is the job) |
//!
//! `mode` is `exclusive`, `shared` or `permit`; `key` is the key **template** the attribute
//! or the layer names (`order:<id>`, [`LockRequest::key_template`]), never the raw key unless
//! [`DlockConfig::metrics_raw_keys`] asks for it (one series per key floods a metrics
//! store); `*` for a request without a template.
//!
//! The crate root is the user's API; [`backend`] holds the backend contract, the values that
//! cross it and the built-in backends, for implementors.

#![cfg_attr(dlock_nightly_doc, feature(doc_cfg))]

// The user's API: the handle, the acquire builder, the guard, the one acquire -> run ->
// release scope, and what they speak in.
mod backend_spec;
mod config;
mod current;
mod duration_serde;
mod election;
mod error;
mod guard;
mod inspect;
mod kept;
mod lock_set;
mod locker;
mod mode;
mod once;
mod protected;
mod request;
mod scope;
mod set_guard;
mod setters;
mod tls;

// The mechanisms the core owns: a Locker's state and its acquire steps, holds and reentrancy,
// the lease keeper and its watchdog, lease deadlines, keys.
mod acquire;
mod acquire_set;
mod hold;
mod keeper;
mod key;
mod lease_watch;
mod meter;
mod reentrancy;
mod state;
mod watchdog;

// The contract's values (`pub mod backend` below holds the contract, a URL-scheme -> backend
// dispatch and one module per backend).
mod lease;
#[cfg(test)]
mod properties;

#[doc(hidden)]
pub mod __private;
pub mod backend;
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod guide;
#[doc(hidden)]
pub use dlock_grammar::key_template;

pub use acquire::WAIT_SLACK;
pub use backend_spec::{BackendSpec, BackendTable};
pub use config::DlockConfig;
pub use current::{CurrentLock, current_lock};
pub use election::{CampaignRequest, Leader, Leadership};
pub use error::{BoxError, Error, ErrorKind, LostReason, Result};
pub use guard::{HandOff, LockGuard};
pub use inspect::{HolderInfo, LockInfo, WaiterInfo};
pub use kept::{Kept, UnknownKept};
pub use lock_set::LockSetRequest;
pub use locker::Locker;
pub use mode::LockMode;
pub use once::{DEFAULT_RETENTION, Once, OnceRequest, Skip};
pub use protected::Protected;
pub use request::LockRequest;
pub use set_guard::LockSetGuard;
pub use tls::TlsConfig;

#[cfg(feature = "macros")]
#[doc(inline)]
pub use dlock_macros::distributed_lock;
