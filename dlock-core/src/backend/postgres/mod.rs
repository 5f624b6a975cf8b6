//! The PostgreSQL backend (`postgres://user:password@host:5432/database`), on session-level
//! advisory locks that `psql` and any SQL client can take too.
//!
//! Modules: [`config`] (URL, connection settings, the fence table), [`keys`] (the documented
//! 64-bit key of a lock name, a semaphore's derived keys), [`sql`] (every statement),
//! [`session`] (lock connections: which may take which key, their ends reported),
//! [`acquire`] (try, wait on the server, semaphore; a kept record read after each grant),
//! [`release`] (renew, release, release keeping the key),
//! [`inspect`] (holders and waiters from `pg_locks`), [`together`] (a lock set in one
//! statement). The user-facing documentation is on
//! [`PostgresBackend`].

mod acquire;
mod config;
mod election;
mod errors;
mod inspect;
mod keys;
mod release;
mod session;
mod sql;
mod together;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::sync::broadcast;

pub(crate) use self::config::PgUrl;
use self::session::{Conn, Conns};
use self::sql::Statements;
use crate::backend::background::Background;
use crate::backend::grant_claim::{Claim, GrantClaim};
use crate::backend::{BackendUrl, Capabilities, Fencing, LockBackend};
use crate::lease::{
    AcquireAllOutcome, AcquireOutcome, AcquireRequest, Lease, LostLease, OwnerId, ReleaseOutcome,
    RenewOutcome,
};
use crate::{Error, Kept, Result};

/// Leases renewed in one call (one round trip per connection among them).
const RENEW_BATCH: usize = 1024;

/// Locks in PostgreSQL: session-level advisory locks, fair (PostgreSQL's own FIFO lock
/// queue), fenced by a per-key counter row bumped in the acquiring statement, held by the
/// session that took them.
///
/// Build it with [`PostgresBackend::connect`], or through
/// [`Locker::connect`](crate::Locker::connect) with a
/// `postgres://user:password@host:5432/database` URL (libpq's URL syntax and options; the
/// password is never shown). `?dlock_fence_table=schema.table` names the fence table
/// (default `dlock_fence` in the connection's `search_path`); it is created if missing.
/// PostgreSQL 14 or later.
///
/// # How a lock is held
///
/// * **Keys.** Lock `K` (the Locker's full key, prefix included) is the advisory lock on the
///   `bigint` [`PostgresBackend::advisory_key`]`(K)`: the first 8 bytes of `K`'s SHA-256, so
///   any SQL client takes the same lock:
///
///   ```sql
///   SELECT pg_advisory_lock(('x' || encode(substr(sha256(convert_to('dlock:order:42', 'UTF8')), 1, 8), 'hex'))::bit(64)::bigint);
///   ```
///
///   Advisory locks belong to one database: use the same database as the Lockers.
/// * **Modes.** A mutex or write lock is `pg_advisory_lock`, a read lock
///   `pg_advisory_lock_shared` — PostgreSQL queues both in arrival order, so a reader that
///   comes after a waiting writer waits behind it. A semaphore of `N` permits queues its
///   waiters on a queue key (`K` + `"\n#queue"`), first come first served; the head of the
///   queue takes the first free of `N` slot keys (`K` + `"\n#slot\n<i>"`), woken by the
///   `NOTIFY` a release sends, and every holder holds a limit key (`K` + `"\n#limit\n<N>"`)
///   shared, so a caller with another limit sees that permits with the stored limit are out.
/// * **Waiting is on the server**: the acquire's statement blocks in PostgreSQL's lock queue,
///   bounded by `lock_timeout` sent in the same round trip (`55P03` = busy; a grant that
///   raced the timeout is found in `pg_locks`). A dropped acquire cancels its statement and
///   closes its connection: nothing stays queued.
/// * **Fencing token**: when asked for (`fencing = true`), the statement that takes the lock
///   also bumps `K`'s row of the fence table and returns it (`INSERT ... SELECT ... FROM
///   (SELECT pg_advisory_lock(k)) ... ON CONFLICT DO UPDATE SET token = token + 1 RETURNING
///   token`): one round trip, durable and replicated with the database (`Fencing::Durable`),
///   increasing across every mode of the key. A lock without a token writes nothing.
/// * **Kept after release** ([`hold_at_least`](crate::LockRequest::hold_at_least),
///   [`Locker::once`](crate::Locker::once)'s done records). A session lock cannot outlive its
///   session, so the release writes a record in `K`'s fence-table row — `kept_until`
///   (`clock_timestamp()` plus the time left, the server's clock), `kept` (`at_least` or
///   `done`) and `kept_by` (the owner) — if the session still holds `K` exclusively, commits
///   it, and only then unlocks, in one round trip. Every acquire of `K` reads the record in a
///   statement after the one that took the lock (a statement's snapshot predates its own
///   lock): a live record gives the lock back — busy, `retry_after` the time left — and a
///   waiter sleeps on the server until the record expires, then queues again. The record
///   needs no process. `psql`'s own `pg_advisory_lock` does not read it: SQL that must
///   respect it reads `kept_until` too. Expired records of keys that never had a fencing
///   token are deleted by later keeps (64 at a time), so one row per fire does not pile up.
///   Fence tables made by earlier versions get the three columns at connect.
/// * **Connections.** Advisory locks re-enter per session, so a connection never holds or
///   asks for a key twice. Attempts that do not wait share connections: **locks taken
///   without waiting (one ttl) share one connection, 100 of them included**. An acquire that
///   waits uses a connection of its own, which then holds its lock and takes further
///   attempts. So a Locker opens one connection per ttl in use, plus one per acquire waiting
///   at once (and per lock granted after waiting, while held). These connections are dlock's
///   own, apart from any pool of short statements, `application_name = 'dlock'`.
/// * **Sessions are the lease.** A session holds its locks until it ends. dlock sets, on
///   each of its connections: `idle_session_timeout` = the ttl (renewals every ttl/3 keep a
///   live holder's session busy; a frozen holder's session ends one ttl after its last
///   statement), `idle_in_transaction_session_timeout = 0` and `statement_timeout = 0` (a
///   server default would end sessions or cancel waits), `client_connection_check_interval`
///   (a waiter whose client died leaves the queue), and TCP keepalives and
///   `tcp_user_timeout` following the ttl on both sides (tokio-postgres' default keepalive
///   idle is two hours).
/// * **How long a crashed holder keeps its lock**: a killed process closes its socket, and
///   the server frees its locks at once; a frozen process or a lost network, one ttl after
///   the last renewal reached the server (its `idle_session_timeout`, or its TCP keepalive
///   and `tcp_user_timeout`).
/// * **Leader election** ([`Locker::campaign`](crate::Locker::campaign)). A campaign is a
///   fenced exclusive lock on `K`; right after its grant, one `UPDATE` of `K`'s fence row
///   records the leader — `leader` (the value), `leader_pid` (the session), `leader_token`
///   (the term: the grant's token) and `leader_ttl_ms` — only if the session holds `K` with
///   that token, and `NOTIFY`s the channel `dlock_<16 hex digits of K's advisory key>` on
///   commit. A proclaim rewrites `leader` with the same checks; a resign unlocks and notifies
///   in one statement. Each observer `LISTEN`s on a connection of its own (closed when it is
///   dropped). A leader whose session ended without a word notifies nobody: observers look
///   again one ttl after each read while someone leads. SQL reads the leader with
///   `SELECT leader, leader_token FROM dlock_fence WHERE lock_key = <key> AND leader_token =
///   token` (and `leader_pid` holding the key in `pg_locks`). Fence tables made by earlier
///   versions get the four columns at connect.
/// * **Renewal** is one round trip per connection, for every lock on it (a live session holds
///   what it was granted), and restarts the session's idle timer. A connection that ends — the server restarted,
///   `pg_terminate_backend`, the network — loses every lock on it at once (pushed to the
///   Locker).
///
/// # What PostgreSQL does not guarantee
///
/// * **Failover** to a replica loses every session lock (they live in the primary's memory);
///   the Lockers see their connections end and report the locks lost.
/// * **Transaction pooling** (PgBouncer's `pool_mode = transaction` or `statement`) hands
///   one server session to many clients: session locks then leak to strangers or vanish.
///   Connect dlock to the server directly, or through a session-mode pool.
/// * Tokens are as durable as the commits that bump them. dlock's sessions commit with
///   `synchronous_commit = on` unless the URL's `options` say otherwise; with it off, a
///   crash may lose the last bumps and a token may repeat. On a replicated database, only
///   synchronous standbys have every bump when they take over.
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
/// use dlock_core::{DlockConfig, Locker};
/// let config = DlockConfig::from_toml_str(r#"
///     backend = "postgres://app:secret@127.0.0.1:5432/orders"
///     fencing = true
/// "#)?;
/// let locker = Locker::connect(&config).await?;
/// let guard = locker.lock("order:42").await?;
/// println!("fencing token {:?}", guard.fencing_token());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct PostgresBackend {
    inner: Arc<Inner>,
}

/// The state shared by the backend and its background tasks.
pub(super) struct Inner {
    conns: Conns,
    timeout: Duration,
    sql: Statements,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresBackend")
            .field("timeout", &self.timeout)
            .field("conns", &self.conns)
            .finish_non_exhaustive()
    }
}

/// What a grant holds on its connection.
#[derive(Debug)]
pub(super) enum PgHold {
    /// An exclusive or shared lock on `key`.
    Lock { key: i64, shared: bool },
    /// An election's leadership: the exclusive lock on `key`, whose release notifies the
    /// observers listening on `channel`.
    Leader { key: i64, channel: String },
    /// A semaphore's permit: its slot, and the limit key held shared.
    Permit {
        slot: i64,
        limit_key: i64,
        /// The `LISTEN` channel of the semaphore's head, notified on release.
        channel: String,
    },
}

impl PgHold {
    /// Every key the grant holds.
    pub(super) fn keys(&self) -> Vec<i64> {
        match self {
            Self::Lock { key, .. } | Self::Leader { key, .. } => vec![*key],
            Self::Permit {
                slot, limit_key, ..
            } => vec![*slot, *limit_key],
        }
    }

    /// The key held shared by every permit of the same limit.
    pub(super) const fn limit_key(&self) -> Option<i64> {
        match self {
            Self::Lock { .. } | Self::Leader { .. } => None,
            Self::Permit { limit_key, .. } => Some(*limit_key),
        }
    }
}

/// What a [`Lease`] of this backend carries: what it holds, and — until the grant is given
/// up (released, or the last copy of the lease dropped) — the connection holding it.
pub(super) struct PgGrant {
    hold: PgHold,
    claim: GrantClaim<Inner, Conn>,
}

impl PgGrant {
    fn new(inner: &Arc<Inner>, conn: Arc<Conn>, hold: PgHold, owner: OwnerId) -> Self {
        Self {
            hold,
            claim: GrantClaim::new(inner, conn, owner),
        }
    }

    /// The connection of this grant if `inner` made it for `owner` and it is not given up.
    fn live_conn(&self, inner: &Arc<Inner>, owner: &OwnerId) -> Option<Arc<Conn>> {
        self.claim.live(inner, owner)
    }

    /// Gives the grant up (once): the caller unlocks it.
    fn give_up(&self) -> Option<(Arc<Conn>, OwnerId)> {
        self.claim
            .give_up()
            .map(|claim| (claim.session, claim.owner))
    }
}

impl Drop for PgGrant {
    /// The last copy of a lease that was never released (or a grant nobody received): unlock
    /// it in the background.
    fn drop(&mut self) {
        let Some(Claim {
            backend,
            session: conn,
            owner,
        }) = self.claim.give_up()
        else {
            return;
        };
        let Some(inner) = backend.upgrade() else {
            return; // the backend is gone, and its connections with it
        };
        let hold = std::mem::replace(
            &mut self.hold,
            PgHold::Lock {
                key: 0,
                shared: false,
            },
        );
        let background = inner.conns.background().clone();
        background.spawn(async move {
            let _ = inner.unlock(&conn, &owner, &hold).await;
        });
    }
}

impl std::fmt::Debug for PgGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgGrant")
            .field("hold", &self.hold)
            .finish_non_exhaustive()
    }
}

impl PostgresBackend {
    /// Connects to the database `url` names, with `timeout` bounding every round trip:
    /// checks that the server answers and is PostgreSQL 14 or later, and creates the fence
    /// table if missing. Lock connections are opened at the first acquire.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a URL that is not `postgres://...`;
    /// [`Error::Unavailable`] / [`Error::Timeout`] when the server cannot be reached within
    /// `timeout`; [`Error::Refused`] when it refuses the credentials or the database, is too
    /// old, or the fence table cannot be created.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// use std::time::Duration;
    /// use dlock_core::Locker;
    /// use dlock_core::backend::{BackendUrl, PostgresBackend};
    /// let url = BackendUrl::parse("postgres://app@127.0.0.1:5432/orders")?;
    /// let locker = Locker::from_backend(PostgresBackend::connect(&url, Duration::from_secs(2)).await?);
    /// # drop(locker); Ok(()) }
    /// ```
    pub async fn connect(url: &BackendUrl, timeout: Duration) -> Result<Self> {
        let background = Background::here("postgres://", "PostgresBackend")?;
        let Some(settings) = url.postgres() else {
            return Err(Error::config(
                "backend",
                crate::backend::url_text::redact(url.as_str()),
                "not a `postgres://` URL",
            ));
        };
        let settings = settings.with_tls(url.tls())?;
        settings.prepare(timeout).await?;
        Ok(Self {
            inner: Arc::new(Inner {
                sql: Statements::new(&settings.fence_table),
                conns: Conns::new(settings.clone(), timeout, background),
                timeout,
            }),
        })
    }

    /// The advisory-lock key of `full_key` (a Locker's full key, its prefix included): the
    /// first 8 bytes of the key's SHA-256, big-endian, as a signed `bigint`. See the type's
    /// docs for the SQL that computes the same number.
    ///
    /// # Examples
    ///
    /// ```
    /// use dlock_core::backend::PostgresBackend;
    /// // SELECT ('x' || encode(substr(sha256(convert_to('abc', 'UTF8')), 1, 8), 'hex'))::bit(64)::bigint;
    /// assert_eq!(PostgresBackend::advisory_key("abc"), -5_010_229_573_455_851_542);
    /// ```
    #[must_use]
    pub fn advisory_key(full_key: &str) -> i64 {
        keys::advisory_key(full_key)
    }

    /// How many lock connections this backend has open.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn probe(backend: &dlock_core::backend::PostgresBackend) {
    /// assert!(backend.connections() <= 1, "one connection for locks taken without waiting");
    /// # }
    /// ```
    #[must_use]
    pub fn connections(&self) -> usize {
        self.inner.conns.open_count()
    }
}

impl Drop for PostgresBackend {
    fn drop(&mut self) {
        self.inner.conns.shut_down();
    }
}

#[async_trait]
impl LockBackend for PostgresBackend {
    async fn acquire(
        &self,
        req: &AcquireRequest,
        deadline: Option<Instant>,
    ) -> Result<AcquireOutcome> {
        self.inner.acquire(req, deadline).await
    }

    /// One statement for a set's locks on one connection.
    async fn release_together(&self, leases: &[Lease]) -> Result<Option<Vec<ReleaseOutcome>>> {
        self.inner.release_together(leases).await
    }

    /// One statement for the whole set (see the `together` module).
    async fn acquire_together(
        &self,
        requests: &[AcquireRequest],
    ) -> Result<Option<AcquireAllOutcome>> {
        self.inner.acquire_together(requests).await
    }

    async fn renew(&self, leases: &[Lease]) -> Result<Vec<RenewOutcome>> {
        self.inner.renew(leases).await
    }

    async fn release(&self, lease: &Lease) -> Result<ReleaseOutcome> {
        self.inner.release(lease).await
    }

    async fn release_keeping(
        &self,
        lease: &Lease,
        keep: Duration,
        kept: Kept,
    ) -> Result<ReleaseOutcome> {
        self.inner.release_keeping(lease, keep, kept).await
    }

    async fn shutdown(&self) -> Result<()> {
        self.inner.conns.close_all().await;
        Ok(())
    }

    fn lost_leases(&self) -> Option<broadcast::Receiver<LostLease>> {
        Some(self.inner.conns.losses())
    }

    async fn inspect(&self, key: &str) -> Result<crate::LockInfo> {
        self.inner.inspect(key).await
    }

    /// The leader's value in the key's fence row, checked against the grant's session and
    /// token (see the `election` module).
    async fn proclaim(&self, lease: &Lease, value: &str) -> Result<bool> {
        self.inner.proclaim(lease, value).await
    }

    /// A connection of its own that `LISTEN`s on the election's channel.
    async fn holder_changes(&self, key: &str) -> Result<crate::backend::HolderChanges> {
        self.inner.listen(key).await
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new("postgres")
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
