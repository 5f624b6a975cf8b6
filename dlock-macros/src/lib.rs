//! The `#[distributed_lock]` attribute of [dlock](https://docs.rs/dlock-core): hold a
//! distributed lock around an `async fn`.
//!
//! Use it through `dlock-core` with the `macros` feature, as `dlock_core::distributed_lock`;
//! see [`macro@distributed_lock`] for everything it does.
//!
//! The generated code reaches `dlock-core` through `::dlock_core::__private` (override with
//! `crate = "..."`). Set `DLOCK_MACROS_DEBUG=1` while building to print each expansion.

#![cfg_attr(dlock_nightly_doc, feature(doc_cfg))]

mod attr;
mod expand;
mod key_template;

use proc_macro::TokenStream;

/// Holds a distributed lock while an `async fn` runs: acquire before the body, run the body
/// under the lock's watchdog, release on every way out.
///
/// ```
/// use dlock_core::{Locker, distributed_lock};
///
/// #[derive(Debug)]
/// pub enum AppError {
///     Lock(dlock_core::Error),
///     // ... the fn's own errors
/// }
///
/// impl From<dlock_core::Error> for AppError {
///     fn from(error: dlock_core::Error) -> Self {
///         Self::Lock(error)
///     }
/// }
///
/// #[distributed_lock(key = "order:<id>", ttl = "10s")]
/// async fn settle(id: u64, amount: i64) -> Result<String, AppError> {
///     // Only one caller per order id, across every process sharing the backend.
///     Ok(format!("order {id} settled for {amount}"))
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), AppError> {
/// Locker::memory().install_global(); // at start-up; `locker = ..` picks another one
/// assert_eq!(settle(42, 100).await?, "order 42 settled for 100");
/// # Ok(()) }
/// ```
///
/// # What the fn becomes
///
/// For a call `settle(42, 100)`:
///
/// 1. The key template is formatted (`"order:42"`), and the lock is acquired through the
///    Locker with the attribute's `ttl` / `wait` / `watchdog`. If that fails — busy after
///    `wait`, backend unreachable, no global Locker — the fn returns `Err(error.into())` and
///    the body does not run.
/// 2. The body runs under the guard, like
///    [`LockGuard::run`](https://docs.rs/dlock-core/latest/dlock_core/struct.LockGuard.html#method.run):
///    the watchdog renews the lease, and if the lease is lost anyway the body is dropped
///    (cancelled) at its next `.await` and the fn returns
///    `Err(dlock_core::Error::LeaseLost { .. }.into())`.
/// 3. When the body returns — `Ok`, `Err`, an early `return`, or `?` — the lock is released
///    before the fn returns. If the body panics, or the caller drops the fn's future, the guard
///    is dropped and the lock is released in the background.
///
/// **A failed release.** After the body returned, a release that reports
/// `Error::LeaseLost` or `Error::NotHolder` means the lock stopped protecting the body before
/// it finished (its writes may have overlapped another holder's): the fn returns that error
/// when the body succeeded, and the body's own error (with a `tracing` warning) when it
/// failed. Any other release error (backend unreachable, timeout) is logged with `tracing` and
/// the body's result is returned: the body finished while the lease was valid, and the lock
/// frees itself when its ttl runs out.
///
/// The fn must be `async` and return a `Result<T, E>` whose `E: From<dlock_core::Error>`
/// (`dlock_core::Error` itself, or your error type with a `From` impl). A return type written
/// as an alias is accepted when its name ends in `Result` (`io::Result<T>`, `AppResult<T>`).
/// `T` may be `impl Trait`.
///
/// Nothing is boxed: the expansion is one call to a generic `dlock_core` fn with the body as
/// an `async move` block, the same work as writing it by hand against `Locker::lock`.
///
/// # Arguments
///
/// | argument | default | meaning |
/// |---|---|---|
/// | `key = "order:<id>"` | required (or `keys`) | the key template, see below |
/// | `keys = ["account:<from>", "account:<to>"]` | — | a **lock set** instead of one key: every key taken, all or none, in one canonical order (never deadlocks with another set), under one `wait`; `"sku:<sku>" for sku in order.skus` takes one key per element of a parameter (or a field of one). See "Lock sets" below; cannot be combined with `key`, `once` or `hold_at_least` |
/// | `ttl = "10s"` | the Locker's `ttl` | lease length (humantime syntax, parsed at compile time; at least `10ms`) |
/// | `wait = "2s"` | the Locker's `wait` (until acquired, unless configured) | give up with `Error::Busy` after this long; `"0s"`: one attempt; `"forever"`: until acquired |
/// | `watchdog = false` | `true` | don't renew: the lock lasts at most `ttl` (ShedLock's `lockAtMostFor`); the body is cancelled when it runs out |
/// | `max_hold = "1h"` | the Locker's `max_hold` (none) | the longest the lock is held: then the watchdog stops renewing it, the body is cancelled (`Error::LeaseLost`) and the lock released, so a stuck job cannot hold it forever |
/// | `hold_at_least = "1m"` | — | a body that ends sooner leaves the lock taken on the server until this long after its grant, by the server's clock, with no process needed (ShedLock's `lockAtLeastFor`; exclusive locks) |
/// | `once = "48h"` | — | a scheduled job's fire, run at most once across every process: the key names the fire (`"report:<day>"`), a busy fire is skipped (never waited for), a success leaves a `done` record for this retention so later fires of the same key skip too; the fn must return `Result<Option<T>, E>` or `Result<(), E>`, and a skipped fire returns `Ok(None)` / `Ok(())`. See `Locker::once`; cannot be combined with `wait`, `mode` or `permits` |
/// | `fencing = true` | the Locker's `fencing` (`false`) | the grant must carry a fencing token (Redis issues one only when asked; memory and etcd always do) |
/// | `mode = "read"` / `"write"` | exclusive | one side of a read-write lock: readers of a key run side by side, a writer alone; a read inside the same task's write lock re-enters it |
/// | `permits = 3` | — | one of that many permits of a semaphore (cannot be combined with `mode`; every user of the key names the same number) |
/// | `locker = <expr>` | `Locker::global()` | a `Locker`, a `&Locker` or a `dlock_core::Result<Locker>`; may use the fn's parameters, e.g. `locker = &self.locker` |
/// | `crate = "path"` | `dlock_core` | where `dlock-core` is, if renamed or re-exported |
///
/// Durations accept `ns`, `us`, `ms`, `s`, `m`/`min`, `h`, `d`, `w` (and long names such as
/// `sec`, `minutes`, `hours`), summed: `"1m 30s"`, `"1h30m"`. A bad or zero `ttl` is a compile
/// error.
///
/// # Key templates
///
/// * `"order:<id>"` and `"order:{id}"` both insert the parameter `id`, formatted with
///   `Display`;
/// * `<order.id>` reaches a field (`<pair.0>` a tuple field), `<self.id>` a field of the
///   receiver;
/// * `<<`, `>>`, `{{` and `}}` are the literal `<`, `>`, `{` and `}` (a lone `>` or `}` is literal
///   too): the grammar `dlock_tower::path_key` uses, one parser for both;
/// * every placeholder must name a parameter: a typo is a compile error on the key literal
///   listing the fn's parameters.
///
/// The key is built into one `String` by one `format!` before the lock is taken (a template
/// without placeholders is a `&'static str`: no allocation). The Locker adds its key prefix.
///
/// # Lock sets
///
/// `keys = [..]` locks several keys as one set (`Locker::lock_all`): a transfer between two
/// accounts, an order over its SKUs. The keys are sorted and taken in that order whatever the
/// call names, so two calls naming the same keys in opposite orders never wait for each other
/// in a circle; a busy key past `wait` releases what was taken, and the body does not run.
/// `mode` and `permits` apply to every key. `current_lock()` is not set in a set's body.
///
/// ```
/// use dlock_core::{Error, Locker, distributed_lock};
///
/// pub struct Order { pub id: u64, pub skus: Vec<String> }
///
/// #[distributed_lock(keys = ["account:<from>", "account:<to>"], wait = "5s", locker = Locker::memory())]
/// async fn transfer(from: u64, to: u64, cents: u64) -> Result<(), Error> {
///     // both accounts are ours: move the money
///     # let _ = (from, to, cents);
///     Ok(())
/// }
///
/// #[distributed_lock(keys = ["order:<order.id>", "sku:<sku>" for sku in order.skus], locker = Locker::memory())]
/// async fn ship(order: &Order) -> Result<usize, Error> {
///     Ok(order.skus.len()) // one lock per SKU, taken with the order's
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Error> {
/// transfer(1, 2, 500).await?;
/// assert_eq!(ship(&Order { id: 7, skus: vec!["a".into(), "b".into()] }).await?, 2);
/// # Ok(()) }
/// ```
///
/// # The fencing token in the body
///
/// The body reads its lock's key and fencing token through
/// `dlock_core::current_lock()`, a task-local set around the body (and everything it awaits,
/// not tasks it spawns); a nested annotated call shadows it for its own body. Ask for the
/// token with `fencing = true` (on Redis a grant carries one only when asked):
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
/// use dlock_core::{Error, Locker, current_lock, distributed_lock};
///
/// #[distributed_lock(key = "file:<name>", fencing = true, locker = Locker::memory())]
/// async fn write(name: &str, data: &[u8]) -> Result<u64, Error> {
///     let token = current_lock().and_then(|lock| lock.fencing_token()).unwrap();
///     // storage.write(name, data, token): the storage rejects tokens older than its newest
///     # let _ = (name, data);
///     Ok(token)
/// }
/// assert!(write("report.csv", b"...").await? > 0);
/// # Ok(()) }
/// ```
///
/// # Reentrancy
///
/// Locks are reentrant per tokio task (see `dlock_core::Locker`): an annotated fn that calls
/// another with the same key (through the same Locker) re-enters at once; the outermost call
/// releases.
///
/// # Methods, generics, `impl Trait`
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
/// use std::fmt::Display;
/// use dlock_core::{Error, Locker, distributed_lock};
///
/// struct Accounts { locker: Locker, region: String }
///
/// impl Accounts {
///     #[distributed_lock(key = "account:<self.region>:<id>", locker = &self.locker, wait = "2s")]
///     async fn close(&mut self, id: impl Display + Send) -> Result<impl Display, Error> {
///         Ok(format!("closed {id}"))
///     }
/// }
///
/// #[distributed_lock(key = "job:{name}", locker = Locker::memory(), wait = "0s")]
/// async fn run_job<N: Display>(name: N) -> Result<(), Error> {
///     Ok(())
/// }
///
/// let mut accounts = Accounts { locker: Locker::memory(), region: "eu".into() };
/// assert_eq!(accounts.close(7).await?.to_string(), "closed 7");
/// run_job("nightly").await?;
/// # Ok(()) }
/// ```
///
/// # Async traits
///
/// On a method of an `#[async_trait]` impl, the attribute recognises the `async_trait`
/// desugaring (`Box::pin(async move { .. })`, async-trait ≥ 0.1.44) and takes the lock inside
/// that future, not around the call that allocates it:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
/// use async_trait::async_trait;
/// use dlock_core::{Error, Locker, distributed_lock};
///
/// #[async_trait]
/// trait Payments {
///     async fn refund(&self, order: u64) -> Result<(), Error>;
/// }
///
/// struct Service { locker: Locker }
///
/// #[async_trait]
/// impl Payments for Service {
///     #[distributed_lock(key = "order:<order>", locker = &self.locker)]
///     async fn refund(&self, order: u64) -> Result<(), Error> {
///         Ok(())
///     }
/// }
///
/// Service { locker: Locker::memory() }.refund(42).await?;
/// # Ok(()) }
/// ```
///
/// The future of an annotated fn is `Send` when the body's is.
///
/// # Compile errors
///
/// Each mistake is one error on the offending token, naming the attribute; the fn is still
/// emitted as written, so the rest of the crate keeps type-checking:
///
/// ```compile_fail
/// # use dlock_core::{Error, distributed_lock};
/// #[distributed_lock(key = "order:<idd>")] // unknown placeholder `<idd>`; the function's parameters are: `id`
/// async fn settle(id: u64) -> Result<(), Error> {
///     Ok(())
/// }
/// ```
///
/// Not `async`; no `Result` return type; no `key`; an unknown or repeated argument; a bad or
/// zero `ttl` (`"10x"`, `"0s"`); an unknown, empty, invalid or unclosed placeholder; a `key`
/// that is not a string literal.
#[proc_macro_attribute]
pub fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::distributed_lock(args.into(), item.into()).into()
}
