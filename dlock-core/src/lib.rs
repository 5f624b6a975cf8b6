//! Distributed locks for async Rust services.
//!
//! A [`Locker`] takes locks on string keys from one backend — in-process memory by default;
//! Redis, etcd, ZooKeeper; PostgreSQL as it lands — and gives back a [`LockGuard`]. While the
//! guard lives, the Locker's watchdog renews the lease; if the lease is lost anyway, the guard
//! says so ([`LockGuard::lost`]) and [`LockGuard::run`] cancels the protected work. A grant
//! carries a fencing token for the protected resource to check (always on memory, etcd and
//! ZooKeeper; on Redis when asked, [`LockRequest::fencing`]). A task that holds a key can lock it again
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
//! | `redis`       | no      | `backend::RedisBackend`: `redis://`, `redis+cluster://` URLs       |
//! | `etcd`        | no      | `backend::EtcdBackend`: `etcd://` URLs, interoperable with `etcdctl lock` |
//! | `zookeeper`   | no      | `backend::ZooKeeperBackend`: `zk://` URLs, interoperable with Apache Curator's locks |
//! | `macros`      | no      | the `#[distributed_lock]` attribute on `async fn`s                 |
//! | `conformance` | no      | `dlock_core::conformance`, the suite every backend must pass       |
//! | `harness`     | no      | `dlock_core::harness`, real test servers started from system binaries |

//!
//! The crate root is the user's API; [`backend`] holds the backend contract, the values that
//! cross it and the built-in backends, for implementors.

// The user's API: the handle, the acquire builder, the guard, the one acquire -> run ->
// release scope, and what they speak in.
mod backend_spec;
mod config;
mod current;
mod error;
mod guard;
mod inspect;
mod locker;
mod mode;
mod protected;
mod request;
mod scope;

// The mechanisms the core owns: the acquire steps, holds and reentrancy, the lease keeper and
// its watchdog, lease deadlines, keys.
mod acquire;
mod hold;
mod keeper;
mod key;
mod lease_watch;
mod reentrancy;
mod watchdog;

// The contract's values (`pub mod backend` below holds the contract, a URL-scheme -> backend
// dispatch and one module per backend).
mod lease;

#[doc(hidden)]
pub mod __private;
pub mod backend;
#[cfg(feature = "conformance")]
pub mod conformance;
#[cfg(feature = "harness")]
pub mod harness;
#[doc(hidden)]
pub mod key_template;

pub use acquire::WAIT_SLACK;
pub use backend_spec::{BackendSpec, BackendTable};
pub use config::DlockConfig;
pub use current::{CurrentLock, current_lock};
pub use error::{BoxError, Error, ErrorKind, LostReason, Result};
pub use guard::{HandOff, LockGuard};
pub use inspect::{HolderInfo, LockInfo, WaiterInfo};
pub use locker::Locker;
pub use mode::LockMode;
pub use protected::Protected;
pub use request::LockRequest;

#[cfg(feature = "macros")]
#[doc(inline)]
pub use dlock_macros::distributed_lock;
