//! The etcd backend (`etcd://h1:2379,h2:2379[/namespace]`), laid out like etcd's own mutex so
//! that dlock, `etcdctl lock` and Go's `concurrency.Mutex` exclude each other on one name.
//!
//! Modules: [`config`] (URL, connection), [`keys`] (key layout), [`session`] (shared leases
//! and their keepalive), [`acquire`] (enqueue and wait for the predecessor), [`name_watch`]
//! (one watch per lock name, shared by its waiters), [`watch`] (a watch closed without
//! resets), [`key_watch`] (held keys watched for their deletion), [`release`]
//! (renew, release, force release, background deletes),
//! [`inspect`] (holders and waiters, for operators). The user-facing documentation is on
//! [`EtcdBackend`].

mod acquire;
mod config;
mod election;
mod errors;
mod inspect;
mod key_watch;
mod keys;
mod name_watch;
mod release;
mod session;
mod together;
mod watch;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use etcd_client::{Client, Txn, TxnResponse};
use tokio_util::sync::CancellationToken;

pub(crate) use self::config::EtcdUrl;
use self::key_watch::KeyWatches;
use self::name_watch::NameWatches;
use self::session::Session;
use crate::backend::BackendUrl;
use crate::backend::background::Background;
use crate::backend::grant_claim::{Claim, GrantClaim};
use crate::backend::sessions::Sessions;
use crate::backend::watched_key::WatchedKey;
use crate::backend::{Capabilities, Fencing, LockBackend};
use crate::lease::{
    AcquireAllOutcome, AcquireOutcome, AcquireRequest, Lease, OwnerId, ReleaseOutcome, RenewOutcome,
};
use crate::{Error, LockMode, Result};

/// etcd's default `--max-txn-ops`: one renewal transaction checks at most this many locks (the
/// ones not watched yet).
const RENEW_BATCH: usize = 128;

/// Locks in etcd, with etcd's own mutex layout: fair (FIFO by create revision), fenced by the
/// lock key's create revision, kept alive by a shared lease.
///
/// Build it with [`EtcdBackend::connect`], or through [`Locker::connect`](crate::Locker::connect)
/// with an `etcd://[user:password@]h1:2379,h2:2379[/namespace]` URL (the namespace, if any, is
/// prepended to every etcd key).
///
/// # How a lock is held
///
/// * **Keys.** Lock `N` (the Locker's full key, e.g. `dlock:order:42`) is the etcd range `N/`.
///   An acquire puts `N/<lease id in hex>` — attached to its lease, value = the grant's owner id
///   — if that key does not exist, in one transaction that also reads the two newest keys of
///   the range: the holder is the key with the **lowest create revision**. This is exactly
///   `concurrency.Mutex`, so `etcdctl lock N` and Go services contend with dlock on the same
///   name (use a Locker with `key_prefix = ""` to share a name literally). A second key of the
///   same lease under the same name (two tasks of one Locker: etcd issue #11360) gets a suffix,
///   `N/<lease hex>.<n>`, so the tasks still exclude each other.
/// * **Read locks and semaphores** put keys of their own kind under the same name — a reader
///   `N/r<lease hex>`, a permit of a semaphore of `L` permits `N/p<L>-<lease hex>` — and wait
///   by etcd's `recipes.RWMutex` rule: a reader for the last writer or permit key created
///   before its own, a writer for the last key of any kind; a permit for the last writer or
///   reader key before its own, then until fewer than `L` permit keys are older than its own
///   (the first `L` by create revision hold). The limit is part of every permit key's name;
///   a caller whose limit differs from the oldest permit key's gets
///   [`Error::PermitLimitMismatch`](crate::Error::PermitLimitMismatch).
/// * **Waiting** waits for the deletion of the keys its rule puts ahead of it (no herd: a
///   reader is not woken by another reader, a permit only when few enough older permits are
///   left). The deletions come from **one watch per lock name** that all of the backend's
///   waiters on that name share, opened by the first of them and closed shortly after the
///   last leaves; a waiter joining late catches up from the watch's log of deletions, so no
///   wait costs a watch of its own. That log lists every deletion under the name since the
///   waiter's last read, its own key's too (etcd #11456: a waiter whose lease expired must
///   not think it holds the lock), so when the last key ahead goes the turn is known without
///   reading the name again (it is read again when the first read listed only the newest 16
///   keys ahead, or the log cannot reach back). A waiter also re-checks once per ttl in case a
///   watch stalled. Cancelling a waiting acquire deletes its key in the background; a
///   `try_lock` (wait of zero) writes only if the range is empty. A permit waiting for other
///   permits counts the deletions of older permit keys down and re-checks only when few
///   enough are left for it to hold.
/// * **Leases.** All locks of one backend with the same ttl share one etcd lease (like Go's
///   `Session`), kept alive by a keepalive stream every ttl/3 and revoked as soon as its last
///   lock is released or the backend is dropped. etcd leases are whole seconds, and at least
///   the cluster's minimum (1.5 × its election timeout): a lock asked for 2.5 s has a 3 s lease.
///   A crashed process stops its keepalives, so its locks free when the lease runs out. A lock
///   whose owner stops renewing it while the process lives (a leaked guard with
///   `.watchdog(false)`) is released by the Locker when its ttl ends, although the shared lease
///   lives on; a lease value dropped without a release deletes its key in the background.
///   A lease an acquire's put may have landed on unanswered (a timeout, a lost reply, a
///   cancelled call) takes no new lock and is revoked once its other locks are done: a put
///   that reaches a frozen member late cannot leave a key queued on a lease kept alive.
/// * **Lock sets** ([`Locker::lock_all`](crate::Locker::lock_all)) of mutexes and read locks
///   are tried in one transaction: every set's key put, each under its lease, only if each
///   lock's range holds no key that would block it (nothing is queued on a busy set: the core
///   then takes it key by key, in order); released in one transaction of owner-checked
///   deletes. Up to 128 keys; permits key by key.
/// * **Renewal** answers from the keepalives — `valid_from` is the send time of the lease's
///   last answered keepalive. A lock's first renewal checks, in **one transaction for up to
///   128 locks**, that its key still exists with its create revision (an admin may have
///   deleted it), then watches the key for its deletion from the revision read (one watch
///   stream per backend, deletions only); later renewals send nothing, and a deletion the
///   watch sees is lost at the next renewal. A watch that falls away (a broken stream, a
///   compaction) sends the renewal back to reading the key.
/// * **Loss.** etcd answering a keepalive with ttl 0 (lease expired or revoked), or no
///   keepalive answered for the lease's ttl, loses every lock on that lease: each answers
///   `NotOwner` at its next renewal (a third of its ttl at most), and the Locker's local
///   deadline ends it in any case.
/// * **Timeouts.** Every round trip is bounded by the operation timeout; a broken keepalive or
///   watch stream is reopened (possibly on another member).
///
/// # What etcd guarantees
///
/// * etcd's key-value store is linearizable (Raft, fsync'ed log): a granted lock survives a
///   leader change or the crash of a minority of members, and the fencing token — the lock
///   key's **create revision** — is strictly increasing and durable across restarts and
///   failover (`Fencing::Durable`).
/// * Leases are counted by the leader; a new leader extends every lease by its full ttl, so a
///   failover never shortens a lease. Keepalives go unanswered during the election (one to two
///   election timeouts), though, and the holder's local deadline keeps running: choose a ttl
///   well above election time + ttl/3 (the tests hold a 6 s lock across a leader kill with a
///   1 s election timeout), or a failover can make the holder give its lock up.
/// * Like every lease-based lock, it cannot stop a holder that paused longer than its ttl from
///   acting afterwards: Jepsen showed lost updates on etcd 3.4.3 locks under process pauses.
///   etcd's own docs: "the lock APIs cannot be used as mutual exclusion mechanism by
///   themselves". The protected resource must check the fencing token.
/// * Lock names nest as in etcd's mutex: keys of lock `jobs/nightly` live inside the range
///   `jobs/` of lock `jobs`, so holders of `jobs/nightly` also make `jobs` wait (never the
///   reverse, never a double grant). Avoid names that are `/`-prefixes of others.
///
/// # Compact the server's history
///
/// etcd keeps every revision of every key, in its memory and its database, until its history
/// is compacted, and every lock + unlock adds two. A server that is never compacted slows
/// down, and in the end refuses writes at its space quota (2 GB by default). Run it with
/// auto-compaction, as its maintenance guide says, e.g. `--auto-compaction-mode=periodic
/// --auto-compaction-retention=5m` (Kubernetes compacts every five minutes). A wait's watch
/// starts at the current revision, so a compaction does not end it; a renewal's watch that a
/// compaction cuts short sends the renewal back to reading its key. On the bench's server,
/// ~2.4 M uncompacted revisions (~450 MB of etcd's heap) took the semaphore's p99 wait from
/// 17 to 43 ms.
///
/// # Checking the fencing token where the data lives
///
/// A resource refuses a stale holder by storing the highest token it has accepted next to the
/// data and comparing it on every write — in SQL, `UPDATE orders SET state = $2, fence = $3
/// WHERE id = $1 AND fence <= $3`. In etcd itself the comparison is a transaction guard
/// (tokens zero-padded, so that etcd's byte comparison orders them numerically):
///
/// ```no_run
/// # async fn settle(locker: &dlock_core::Locker, mut etcd: etcd_client::Client)
/// # -> Result<(), Box<dyn std::error::Error>> {
/// use etcd_client::{Compare, CompareOp, Txn, TxnOp};
///
/// let pad = |token: u64| format!("{token:020}");
/// // Once, when the resource is created: its fence starts at token 0.
/// etcd.txn(Txn::new()
///     .when([Compare::create_revision("order:42:fence", CompareOp::Equal, 0)])
///     .and_then([TxnOp::put("order:42:fence", pad(0), None)]))
///     .await?;
///
/// let guard = locker.lock("order:42").await?;
/// let token = guard.fencing_token().expect("etcd issues tokens");
/// let written = etcd.txn(Txn::new()
///     // fence <= token, i.e. fence < token + 1
///     .when([Compare::value("order:42:fence", CompareOp::Less, pad(token + 1))])
///     .and_then([
///         TxnOp::put("order:42:fence", pad(token), None),
///         TxnOp::put("order:42:state", "paid", None),
///     ]))
///     .await?;
/// assert!(written.succeeded(), "a newer holder already wrote: this one is stale");
/// guard.release().await?;
/// # Ok(()) }
/// ```
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
/// use dlock_core::{DlockConfig, Locker};
/// let config = DlockConfig::from_toml_str(r#"backend = "etcd://127.0.0.1:2379""#)?;
/// let locker = Locker::connect(&config).await?;
/// let guard = locker.lock("order:42").await?;
/// println!("fencing token (create revision) {:?}", guard.fencing_token());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct EtcdBackend {
    inner: Arc<Inner>,
}

/// The state shared by the backend and its background tasks.
pub(super) struct Inner {
    client: Client,
    namespace: String,
    timeout: Duration,
    sessions: Sessions<Session>,
    keys: Mutex<Keys>,
    /// Watches on long-held keys, so that renewing them reads nothing.
    key_watches: KeyWatches,
    /// One watch per lock name with waiters, which they share.
    name_watches: NameWatches,
    shutdown: CancellationToken,
    background: Background,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdBackend")
            .field("namespace", &self.namespace)
            .field("timeout", &self.timeout)
            .field("sessions", &self.sessions)
            .finish_non_exhaustive()
    }
}

/// The etcd keys this backend uses. What it holds is not recorded here: a lease carries its
/// own key, create revision and session ([`EtcdGrant`]), and the core decides when a lease is
/// lost and releases it.
#[derive(Debug, Default)]
struct Keys {
    /// etcd keys in use (queued, held, or being deleted): never reused meanwhile.
    reserved: HashSet<String>,
    /// Keys moved onto a lease of their own by a release that keeps the lock, and until when
    /// (at the latest) they stay: not reused before.
    kept: HashMap<String, Instant>,
}

/// What a [`Lease`] of this backend carries: the etcd key, its create revision, and — until
/// the grant is given up (released, found gone, or the last copy of the lease dropped) — the
/// session whose lease the key is on.
pub(super) struct EtcdGrant {
    key: String,
    create_revision: i64,
    claim: GrantClaim<Inner, Session>,
    /// Whether the key is watched for its deletion (then a renewal need not read it).
    watch: Arc<WatchedKey>,
    /// The key's value is the grant's owner id (a lock), not a candidate's value (an
    /// election).
    value_is_owner: bool,
}

impl EtcdGrant {
    fn new(
        inner: &Arc<Inner>,
        key: String,
        create_revision: i64,
        session: Arc<Session>,
        req: &AcquireRequest,
    ) -> Self {
        Self {
            key,
            create_revision,
            claim: GrantClaim::new(inner, session, req.owner.clone()),
            watch: KeyWatches::new_watch(),
            value_is_owner: req.value.is_none(),
        }
    }

    /// The session the key is on if `inner` made this grant for `owner` and it is not given
    /// up yet.
    fn live_session(&self, inner: &Arc<Inner>, owner: &OwnerId) -> Option<Arc<Session>> {
        self.claim.live(inner, owner)
    }

    /// Gives the grant up (once) and stops watching its key: the caller deletes the key as
    /// it knows best.
    fn give_up(&self) -> Option<Arc<Session>> {
        let claim = self.claim.give_up()?;
        if let Some(inner) = claim.backend.upgrade() {
            inner.key_watches.forget(&self.watch);
        }
        Some(claim.session)
    }
}

impl Drop for EtcdGrant {
    /// The last copy of a lease that was never released: delete its key in the background.
    fn drop(&mut self) {
        if let Some(Claim {
            backend, session, ..
        }) = self.claim.give_up()
            && let Some(inner) = backend.upgrade()
        {
            inner.key_watches.forget(&self.watch);
            inner.finish_key(
                std::mem::take(&mut self.key),
                session,
                Delete::Exact(self.create_revision),
            );
        }
    }
}

impl std::fmt::Debug for EtcdGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdGrant")
            .field("key", &self.key)
            .field("create_revision", &self.create_revision)
            .finish_non_exhaustive()
    }
}

/// The value a grant's key shows: the candidate's in an election, else the owner id.
pub(super) fn shown(req: &AcquireRequest) -> &str {
    req.value.as_deref().unwrap_or(req.owner.as_str())
}

/// How the key of a lock that is given up must be deleted.
#[derive(Debug)]
pub(super) enum Delete {
    /// It is known not to exist (never created, or already deleted).
    Nothing,
    /// It exists with this create revision.
    Exact(i64),
    /// A put of this value (the owner id, or an election candidate's value) may or may not
    /// have been applied (its reply was lost or its request cancelled): delete it if it is
    /// there, and once more after a while.
    Unknown(String),
}

impl EtcdBackend {
    /// Connects to the members `url` names, with `timeout` bounding every round trip, and
    /// checks that the cluster answers (it has a leader).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a URL that is not `etcd://[user:password@]host:port,...[/namespace]`
    /// or a TLS file that cannot be read; [`Error::Unavailable`] / [`Error::Timeout`] when the
    /// cluster cannot be reached within `timeout`; [`Error::Refused`] when it refuses the
    /// credentials.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// use std::time::Duration;
    /// use dlock_core::Locker;
    /// use dlock_core::backend::{BackendUrl, EtcdBackend};
    /// let url = BackendUrl::parse("etcd://127.0.0.1:2379,127.0.0.1:22379/app1/")?;
    /// let locker = Locker::from_backend(EtcdBackend::connect(&url, Duration::from_secs(2)).await?);
    /// # drop(locker); Ok(()) }
    /// ```
    pub async fn connect(url: &BackendUrl, timeout: Duration) -> Result<Self> {
        let background = Background::here("etcd://", "EtcdBackend")?;
        let tls = url.tls();
        let url = match url.etcd() {
            Some(settings) => settings.clone(),
            None => {
                return Err(Error::config(
                    "backend",
                    crate::backend::url_text::redact(url.as_str()),
                    "not an `etcd://` URL",
                ));
            }
        };
        let client = url.connect(tls, timeout).await?;
        let shutdown = CancellationToken::new();
        let inner = Arc::new(Inner {
            sessions: Sessions::new("etcd", timeout, background.clone()),
            key_watches: KeyWatches::start(client.clone(), timeout, shutdown.clone()),
            name_watches: NameWatches::new(
                client.clone(),
                timeout,
                background.clone(),
                shutdown.clone(),
            ),
            client,
            namespace: url.namespace,
            timeout,
            keys: Mutex::default(),
            shutdown,
            background,
        });
        Ok(Self { inner })
    }
}

impl Drop for EtcdBackend {
    fn drop(&mut self) {
        self.inner.shut_down();
    }
}

#[async_trait]
impl LockBackend for EtcdBackend {
    async fn acquire(
        &self,
        req: &AcquireRequest,
        deadline: Option<Instant>,
    ) -> Result<AcquireOutcome> {
        self.inner.acquire(req, deadline).await
    }

    async fn renew(&self, leases: &[Lease]) -> Result<Vec<RenewOutcome>> {
        self.inner.renew(leases).await
    }

    async fn acquire_together(
        &self,
        requests: &[AcquireRequest],
    ) -> Result<Option<AcquireAllOutcome>> {
        self.inner.acquire_together(requests).await
    }

    async fn release_together(&self, leases: &[Lease]) -> Result<Option<Vec<ReleaseOutcome>>> {
        self.inner.release_together(leases).await
    }

    async fn release(&self, lease: &Lease) -> Result<ReleaseOutcome> {
        self.inner.release(lease).await
    }

    async fn release_keeping(
        &self,
        lease: &Lease,
        keep: Duration,
        kept: crate::Kept,
    ) -> Result<ReleaseOutcome> {
        self.inner.release_keeping(lease, keep, kept).await
    }

    async fn force_release(&self, key: &str) -> Result<bool> {
        self.inner.force_release(key).await
    }

    async fn inspect(&self, key: &str) -> Result<crate::LockInfo> {
        self.inner.inspect(key).await
    }

    async fn proclaim(&self, lease: &Lease, value: &str) -> Result<bool> {
        self.inner.proclaim(lease, value).await
    }

    async fn holder_changes(&self, key: &str) -> Result<crate::backend::HolderChanges> {
        self.inner.holder_changes(key).await
    }

    async fn shutdown(&self) -> Result<()> {
        self.inner.shut_down_now().await
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new("etcd")
            .fair(true)
            .read_write(true)
            .semaphore(true)
            .fencing(Fencing::Durable)
            .self_renewing(true)
            .keeps(true)
            .together(true)
            .election(true)
            .max_renew_batch(RENEW_BATCH)
    }
}

/// Runs one etcd request, bounded by `timeout`. A request that surely never reached etcd's
/// state machine — the connection to the member it was routed to was refused (a member is
/// down: the client balances over every endpoint given), or the member knows no leader — is
/// sent again, to whichever member the balancer picks, until `timeout` runs out.
pub(super) async fn call<T, F, Fut>(
    timeout: Duration,
    operation: &'static str,
    mut request: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
{
    let give_up = Instant::now() + timeout;
    let mut pause = Duration::from_millis(5);
    loop {
        let left = give_up.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, request()).await {
            Ok(Ok(answer)) => return Ok(answer),
            Ok(Err(error)) if never_applied(&error) && Instant::now() + pause < give_up => {
                tracing::trace!(operation, %error, "dlock: etcd request not delivered; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            Ok(Err(error)) => return Err(errors::from_etcd(error)),
            Err(_) => {
                return Err(Error::timeout("etcd", operation, timeout));
            }
        }
    }
}

/// Whether `error` proves the request was never applied, so sending it again is safe. etcd
/// answers `too many requests` when its applied entries lag too far behind the committed ones
/// (thousands of requests at once), before it proposes the request: it backs off and retries
/// like the others, within the operation timeout.
fn never_applied(error: &etcd_client::Error) -> bool {
    match error {
        etcd_client::Error::TransportError(_) => true,
        etcd_client::Error::GRpcStatus(status) => {
            let message = status.message().to_ascii_lowercase();
            message.contains("connect error")
                || message.contains("connection refused")
                || message.contains("etcdserver: no leader")
                || message.contains("etcdserver: too many requests")
        }
        _ => false,
    }
}

impl Inner {
    fn keys(&self) -> MutexGuard<'_, Keys> {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One transaction, bounded by the operation timeout.
    async fn txn(&self, operation: &'static str, txn: Txn) -> Result<TxnResponse> {
        call(self.timeout, operation, || {
            let mut kv = self.client.kv_client();
            let txn = txn.clone();
            async move { kv.txn(txn).await }
        })
        .await
    }

    /// A session for `ttl` with one more user, its keepalive started if it is new.
    async fn checkout(self: &Arc<Self>, ttl: Duration) -> Result<Arc<Session>> {
        // An acquire still in flight when the Locker shut down must not open a lease again.
        if self.shutdown.is_cancelled() {
            return Err(Error::ShutDown);
        }
        // A session no keepalive was answered for during its whole ttl (this process was
        // paused, or cut off) is gone on the server: never put a key on it.
        if let Some((stale, reason)) = self
            .sessions
            .live(ttl)
            .and_then(|live| live.overdue().map(|reason| (live, reason)))
        {
            stale.mark_lost(reason);
            self.session_lost(&stale);
        }
        let (client, timeout) = (&self.client, self.timeout);
        let (session, new) = self
            .sessions
            .checkout(ttl, || session::grant(client, timeout, ttl))
            .await?;
        if new {
            let weak = Arc::downgrade(self);
            self.background.spawn(session::keep_alive(
                Arc::clone(&session),
                self.client.lease_client(),
                self.timeout,
                move |lost| {
                    if let Some(inner) = weak.upgrade() {
                        inner.session_lost(lost);
                    }
                },
            ));
        }
        Ok(session)
    }

    /// One user of `session` is done. The last one leaves the lease idle for a while (the
    /// next lock reuses it), then revokes it unless a lock took it up again.
    fn end_use(&self, session: &Arc<Session>) {
        self.sessions.checkin(session);
    }

    /// Revokes lease `id` in the background (best effort: it expires anyway).
    fn revoke(&self, id: i64) {
        let revoking = self.revoke_now(id);
        self.background.spawn(async move {
            let outcome = revoking.await;
            tracing::debug!(lease = %format!("{id:x}"), ok = outcome.is_ok(), "dlock: etcd lease revoked");
        });
    }

    /// Revokes lease `id`, within the operation timeout.
    fn revoke_now(&self, id: i64) -> impl Future<Output = Result<()>> + Send + 'static {
        let (client, timeout) = (self.client.clone(), self.timeout);
        async move { session::revoke(&client, timeout, id).await }
    }

    /// Reserves an etcd key for a new grant of `session` under `name`.
    fn reserve_key(&self, name: &keys::LockName, session: &Session, mode: LockMode) -> String {
        let mut keys = self.keys();
        let now = Instant::now();
        keys.kept.retain(|_, until| *until > now);
        let mut n = 0;
        loop {
            let key = name.key(session.id, n, mode);
            if !keys.kept.contains_key(&key) && keys.reserved.insert(key.clone()) {
                return key;
            }
            n += 1;
        }
    }

    /// Gives up `key` (of `session`): deletes it as `delete` says — in the background, retried
    /// until it is gone or its lease is — then frees the reservation and the session use.
    ///
    /// A put whose outcome is unknown may still land after every delete looked for it — sent
    /// to a member frozen meanwhile, it is applied when the member wakes — leaving a key that
    /// nobody will delete, queued on a lease that stays alive: every later acquire of the name
    /// would wait behind it. So its session takes no new lock and is revoked, with whatever
    /// landed on it, as soon as its last key is settled.
    fn finish_key(self: &Arc<Self>, key: String, session: Arc<Session>, delete: Delete) {
        if matches!(delete, Delete::Unknown(_)) {
            self.sessions.retire(&session);
        }
        if matches!(delete, Delete::Nothing) || session.is_lost() || self.shutdown.is_cancelled() {
            self.keys().reserved.remove(&key);
            self.end_use(&session);
            return;
        }
        let inner = Arc::clone(self);
        self.background
            .spawn(async move { inner.delete_in_background(key, session, delete).await });
    }

    /// A session etcd no longer keeps: no new key goes on it, and its lease is revoked in
    /// case etcd still has it (we only stopped hearing back). The locks on it are lost: the
    /// core learns so at their next renewal, or at their local deadline.
    fn session_lost(self: &Arc<Self>, session: &Arc<Session>) {
        tracing::debug!(lease = %format!("{:x}", session.id), reason = session.lost_reason(), "dlock: etcd session lost");
        self.sessions.forget(session);
        if !self.shutdown.is_cancelled() {
            self.revoke(session.id);
        }
    }

    /// Stops every task and revokes every lease — which deletes every key on it, held locks
    /// and queued waiters alike — then waits for the background work to end, all within the
    /// operation timeout. The first revoke that failed is the error.
    async fn shut_down_now(&self) -> Result<()> {
        self.shutdown.cancel();
        let _ = tokio::time::timeout(self.timeout, self.key_watches.stopped()).await;
        let mut revokes = tokio::task::JoinSet::new();
        for session in self.sessions.drain() {
            session.mark_lost("the Locker was shut down");
            revokes.spawn(self.revoke_now(session.id));
        }
        let mut first_error = None;
        while let Some(revoked) = revokes.join_next().await {
            let revoked = revoked
                .map_err(|panic| Error::unavailable("etcd", panic))
                .and_then(|outcome| outcome);
            if let Err(error) = revoked {
                first_error.get_or_insert(error);
            }
        }
        if !self.background.settle(self.timeout).await {
            tracing::debug!("dlock: etcd background work still running at shutdown");
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Stops every task and revokes every lease (in the background).
    fn shut_down(&self) {
        self.shutdown.cancel();
        let watches_stopped = self.key_watches.stopped();
        let revokes: Vec<_> = self
            .sessions
            .drain()
            .into_iter()
            .map(|session| {
                session.mark_lost("the etcd backend was dropped");
                (session.id, self.revoke_now(session.id))
            })
            .collect();
        let timeout = self.timeout;
        self.background.spawn(async move {
            let _ = tokio::time::timeout(timeout, watches_stopped).await;
            for (id, revoking) in revokes {
                let outcome = revoking.await;
                tracing::debug!(lease = %format!("{id:x}"), ok = outcome.is_ok(), "dlock: etcd lease revoked");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use tonic::{Code, Status};

    use super::never_applied;

    fn status(code: Code, message: &str) -> etcd_client::Error {
        etcd_client::Error::GRpcStatus(Status::new(code, message))
    }

    /// Requests etcd turned away before proposing them are sent again; a timeout or any
    /// other answer is not (it may have been applied).
    #[test]
    fn only_requests_never_proposed_are_sent_again() {
        assert!(never_applied(&status(
            Code::ResourceExhausted,
            "etcdserver: too many requests"
        )));
        assert!(never_applied(&status(
            Code::Unavailable,
            "etcdserver: no leader"
        )));
        assert!(!never_applied(&status(
            Code::Unavailable,
            "etcdserver: request timed out"
        )));
        assert!(!never_applied(&status(
            Code::FailedPrecondition,
            "etcdserver: requested lease not found"
        )));
    }
}
