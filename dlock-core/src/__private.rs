//! What `#[distributed_lock]`'s expansion calls. Not public API: no semver guarantees; use
//! [`Locker`] and [`LockGuard`](crate::LockGuard) directly instead.
//!
//! An annotated `async fn f(id: u64) -> Result<T, E> { body }` becomes
//!
//! ```ignore
//! async fn f(id: u64) -> Result<T, E> {
//!     ::dlock_core::__private::run(
//!         ::dlock_core::__private::Locker::global(),          // or IntoLocker::into_locker(expr)
//!         ::std::borrow::Cow::Owned(::std::format!("order:{}", id)),
//!         ::dlock_core::__private::Options { ttl: .., wait: .., watchdog: true, max_hold: None, hold_at_least: None, fencing: None, mode: .., kind: .., key_template: "order:<id>" },
//!         async move { body },
//!     )
//!     .await
//! }
//! ```

use std::borrow::Cow;
use std::future::Future;
use std::time::Duration;

pub use crate::Locker;
use crate::current::CurrentLock;
use crate::mode::LockKind;
use crate::{Error, LockMode, Result};

/// The attribute's `ttl`, `wait`, `watchdog`, `fencing`, `mode` and `permits` arguments.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// `ttl = ".."`; `None`: the Locker's default.
    pub ttl: Option<Duration>,
    /// `wait = ".."`.
    pub wait: Wait,
    /// `watchdog = false` turns renewal off.
    pub watchdog: bool,
    /// `max_hold = ".."`; `None`: the Locker's default.
    pub max_hold: Option<Duration>,
    /// `hold_at_least = ".."`.
    pub hold_at_least: Option<Duration>,
    /// `fencing = ..`; `None`: the Locker's default.
    pub fencing: Option<bool>,
    /// `mode = "read"` (shared), `permits = N` (a permit), else exclusive.
    pub mode: LockMode,
    /// The recipe: `mode = "write"` is the write side of a read-write lock, not a mutex (see
    /// [`AcquireRequest::kind`](crate::backend::AcquireRequest::kind)).
    pub kind: LockKind,
    /// `key = ".."` as written: the template, for the lock's metrics
    /// ([`LockRequest::key_template`](crate::LockRequest::key_template)).
    pub key_template: &'static str,
}

/// The attribute's `wait` argument.
#[derive(Debug, Clone, Copy)]
pub enum Wait {
    /// No `wait`: the Locker's default.
    Default,
    /// `wait = "2s"` (`"0s"`: one attempt).
    For(Duration),
    /// `wait = "forever"`.
    Forever,
}

/// What `locker = <expr>` accepts.
#[diagnostic::on_unimplemented(
    message = "`#[distributed_lock(locker = ..)]` needs a `Locker`, a `&Locker` or a `dlock_core::Result<Locker>`, not `{Self}`",
    label = "not a Locker"
)]
pub trait IntoLocker {
    /// The Locker to lock through.
    ///
    /// # Errors
    ///
    /// The error of a `Result<Locker>` argument, e.g. [`Error::NoGlobalLocker`].
    fn into_locker(self) -> Result<Locker>;
}

impl IntoLocker for Locker {
    fn into_locker(self) -> Result<Locker> {
        Ok(self)
    }
}

impl IntoLocker for &Locker {
    fn into_locker(self) -> Result<Locker> {
        Ok(self.clone())
    }
}

impl IntoLocker for Result<Locker> {
    fn into_locker(self) -> Self {
        self
    }
}

/// Acquires `key`, runs `body` under the guard with `key` and the fencing token as the
/// [`current_lock`](crate::current_lock), and releases.
///
/// * Acquire errors (busy after `wait`, backend down, no global Locker) are returned without
///   running the body.
/// * The lease lost while the body runs: the body is dropped at its next await point and
///   [`Error::LeaseLost`] is returned.
/// * The body finished: the lock is released before returning, by the scope rule
///   ([`LockGuard::run_and_release`](crate::LockGuard::run_and_release)): a successful body
///   whose lock was found lost at release gives [`Error::LeaseLost`]; a failed body's own
///   error stands; an unreachable server is traced and the body's result returned.
/// * A panic in the body, or the caller dropping this future: the guard's drop releases in
///   the background.
///
/// # Errors
///
/// As above, converted into `E`; else the body's own result.
pub async fn run<T, E, F>(
    locker: Result<Locker>,
    key: Cow<'static, str>,
    options: Options,
    body: F,
) -> Result<T, E>
where
    F: Future<Output = Result<T, E>>,
    E: From<Error>,
{
    let locker = locker?;
    let mut request = locker
        .lock_as(&key, options.mode)
        .kind(options.kind)
        .watchdog(options.watchdog)
        .key_template(options.key_template);
    if let Some(ttl) = options.ttl {
        request = request.ttl(ttl);
    }
    if let Some(fencing) = options.fencing {
        request = request.fencing(fencing);
    }
    if let Some(max_hold) = options.max_hold {
        request = request.max_hold(max_hold);
    }
    if let Some(at_least) = options.hold_at_least {
        request = request.hold_at_least(at_least);
    }
    request = match options.wait {
        Wait::Default => request,
        Wait::For(wait) => request.wait(wait),
        Wait::Forever => request.wait_forever(),
    };
    let guard = request.await?;
    let current = CurrentLock::new(key, &guard);
    guard
        .run_and_release(current.scope(body), Result::is_ok)
        .await?
}

/// `#[distributed_lock(keys = [..])]`: acquires `keys` as one lock set
/// ([`Locker::lock_all`]), every key in `options.mode`, runs `body` under it and releases it
/// by the same rule as [`run`]. `current_lock()` is not set for a set's body.
///
/// # Errors
///
/// As [`run`].
pub async fn run_all<T, E, F>(
    locker: Result<Locker>,
    keys: Vec<String>,
    options: Options,
    body: F,
) -> Result<T, E>
where
    F: Future<Output = Result<T, E>>,
    E: From<Error>,
{
    let locker = locker?;
    let mode = options.mode;
    let mut request = locker
        .lock_all_as(keys.into_iter().map(|key| (key, mode)))
        .watchdog(options.watchdog)
        .key_template(options.key_template);
    if options.kind == LockKind::Mutex {
        request = request.mutex();
    }
    if let Some(ttl) = options.ttl {
        request = request.ttl(ttl);
    }
    if let Some(fencing) = options.fencing {
        request = request.fencing(fencing);
    }
    if let Some(max_hold) = options.max_hold {
        request = request.max_hold(max_hold);
    }
    request = match options.wait {
        Wait::Default => request,
        Wait::For(wait) => request.wait(wait),
        Wait::Forever => request.wait_forever(),
    };
    let set = request.await?;
    set.run_and_release(body, Result::is_ok).await?
}

/// What a `once` fn returns for a skipped fire: `Ok(None)` or `Ok(())`.
pub trait Skipped {
    /// The value of a skipped fire.
    fn skipped() -> Self;
}

impl<T> Skipped for Option<T> {
    fn skipped() -> Self {
        None
    }
}

impl Skipped for () {
    fn skipped() -> Self {}
}

/// `#[distributed_lock(once = "..")]`: runs `body` for the fire named by `key` at most once
/// across every process, as [`OnceRequest::run`](crate::OnceRequest::run) does (the key is the
/// fire's whole key; `options.key_template` names the job in metrics), keeping a success's
/// done record for `retention`. A skipped fire returns [`Skipped::skipped`].
///
/// # Errors
///
/// As [`OnceRequest::run`](crate::OnceRequest::run), converted into `E`; else the body's own
/// result.
pub async fn run_once<T, E, F>(
    locker: Result<Locker>,
    key: Cow<'static, str>,
    options: Options,
    retention: Duration,
    body: F,
) -> Result<T, E>
where
    F: Future<Output = Result<T, E>>,
    E: From<Error>,
    T: Skipped,
{
    let locker = locker?;
    let mut request = locker
        .once_of_key(key.into_owned(), options.key_template)
        .retention(retention);
    if let Some(ttl) = options.ttl {
        request = request.ttl(ttl);
    }
    if let Some(fencing) = options.fencing {
        request = request.fencing(fencing);
    }
    if let Some(at_least) = options.hold_at_least {
        request = request.hold_at_least(at_least);
    }
    match request.run(body).await? {
        crate::Once::Ran(value) => Ok(value),
        crate::Once::Skipped(_) => Ok(T::skipped()),
    }
}
