//! The ZooKeeper backend (`zk://h1:2181,h2:2181[/chroot]`), laid out like Apache Curator's
//! lock recipes so that dlock and Curator exclude each other on one path.
//!
//! Modules: [`config`] (URL, connecting a session), [`keys`] (lock paths, node names,
//! Curator's order), [`session`] (sessions as leases, their ends reported), [`acquire`]
//! (create a node, wait for the predecessor), [`node_watch`] (held nodes watched for their
//! deletion), [`release`] (renew, release, force release,
//! nodes deleted in the background), [`kept`] (a lock kept after its release: its record),
//! [`known_dirs`] (lock directories seen lately: how a create starts).
//! The user-facing documentation is on [`ZooKeeperBackend`].

mod acquire;
mod config;
mod election;
mod errors;
mod inspect;
mod kept;
mod keys;
mod known_dirs;
mod node_watch;
mod release;
mod session;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

pub(crate) use self::config::ZkUrl;
use self::node_watch::NodeWatches;
use self::session::{Session, ZkSessions};
use crate::backend::background::Background;
use crate::backend::grant_claim::{Claim, GrantClaim};
use crate::backend::watched_key::WatchedKey;
use crate::backend::{BackendUrl, Capabilities, Fencing, LockBackend};
use crate::lease::{
    AcquireOutcome, AcquireRequest, Lease, LostLease, OwnerId, ReleaseOutcome, RenewOutcome,
};
use crate::{Error, Kept, Result};

/// Leases renewed in one call (the nodes not watched yet among them are read side by side).
const RENEW_BATCH: usize = 128;

/// Locks in ZooKeeper, with Apache Curator's layouts: fair (FIFO by sequence number), fenced by
/// the lock node's `czxid`, kept alive by the ZooKeeper session.
///
/// Build it with [`ZooKeeperBackend::connect`], or through
/// [`Locker::connect`](crate::Locker::connect) with a
/// `zk://[user:password@]h1:2181,h2:2181[/chroot]` URL: the credentials are sent as `digest`
/// auth on every session; the chroot is created if missing, and every lock path lives under it.
///
/// # How a lock is held
///
/// * **Paths.** Lock `K` (the Locker's full key) is the path `/K` under the chroot; `/` in a
///   key separates path segments, so key `locks/order-42` (with `key_prefix = ""`) is the path
///   a Curator recipe built on `/locks/order-42` uses. Parents are container nodes, which
///   ZooKeeper deletes once they are empty.
/// * **Nodes**, exactly as Curator 5 names them: a mutex ([`Locker::lock`](crate::Locker::lock))
///   creates `K/_c_<uuid>-lock-<seq>` (`InterProcessMutex`); a read-write lock creates
///   `K/_c_<uuid>-__READ__<seq>` or `K/_c_<uuid>-__WRIT__<seq>`
///   (`InterProcessReadWriteLock`); a semaphore takes the mutex `K/locks`, creates its permit
///   `K/leases/_c_<uuid>-lease-<seq>`, and holds when `K/leases` has no more children than its
///   limit (`InterProcessSemaphoreV2`). Every node is ephemeral and sequential, on the
///   Locker's session, and holds the grant's owner id (a permit: the semaphore's limit).
/// * **Order**, as Curator's: contenders sorted by their sequence number. A mutex or write
///   node holds when it is first and otherwise watches the node just before it; a read node
///   holds when no mutex or write node is before it and otherwise watches the first one. So
///   waiting is a data watch on one node, never a poll, and a release wakes only the next
///   waiter (readers waiting for one writer all wake: they all get in). A mutex and a write
///   lock of one key exclude each other in dlock; Curator's mutex and read-write lock are two
///   recipes that must not share a path, so use `lock` with Curator's `InterProcessMutex` and
///   `write_lock`/`read_lock` with its `InterProcessReadWriteLock`.
/// * **kazoo** (Python): its `Lock` and `WriteLock` nodes `K/<uuid hex>__lock__<seq>` and its
///   `ReadLock` nodes `K/<uuid hex>__rlock__<seq>` are contenders in the same order (the
///   sequence number), exclusive and shared; kazoo waits for dlock's nodes when told their
///   names: `Lock(…, extra_lock_patterns=["-lock-"])`, `ReadLock(…, ["__WRIT__"])`,
///   `WriteLock(…, ["__READ__", "__WRIT__"])`. Curator does not see kazoo's nodes, so a
///   path shared by all three keeps Curator and kazoo apart only through dlock's order, not
///   from each other. kazoo's `Semaphore` has a layout of its own (a sibling `K-__lock__`
///   mutex, leases `K/<uuid hex>`) that dlock's semaphore, Curator's, does not meet.
/// * **Leader election** ([`Locker::campaign`](crate::Locker::campaign)): by default
///   Curator's `LeaderSelector` layout, a mutex node `K/_c_<uuid>-lock-<seq>` whose data is
///   the candidate's value (Curator's participant id); with `?election=latch` in the URL,
///   its `LeaderLatch` layout, `K/_c_<uuid>-latch-<seq>`. Either way the first node leads and
///   Curator's `getLeader()` / `getParticipants()` read dlock's value. Curator's two recipes
///   must not share a path: use the option that matches the recipe your Java services run.
/// * **Round trips.** A node's create and the listing that tells whether it holds (with the
///   kept record, below) are sent together: a session's requests are served in order, so the
///   listing sees the node, and an uncontended lock is one round trip (Curator's two). A path
///   this backend has not used lately is made with its first node in one multi — the
///   container, the node, and an empty `setData` of the container, whose stat carries the
///   transaction's zxid and time (ZooKeeper 3.8 answers a create inside a multi without its
///   stat) — where Curator's create is answered `NoNode`, then makes the path, then creates
///   again. A permit is three round trips: the mutex's create and listing, the lease's create
///   and listing, the mutex given back (Curator's five).
/// * **Fencing token**: the lock node's `czxid`, the id of the transaction that created it,
///   returned by the create itself. It increases with every grant of every lock of the
///   ensemble and survives restarts and leader changes (`Fencing::Durable`).
/// * **Sessions are the lease.** All locks of one backend with the same ttl share one
///   ZooKeeper session (the client pings it); a lock's ttl is the session timeout the server
///   grants, asked for with the lock's ttl. Servers grant between `minSessionTimeout` and
///   `maxSessionTimeout` — by default 2 and 20 ticks, 4 s and 40 s with the usual
///   `tickTime=2000`. A ttl above the maximum gets the maximum, and the guard the shorter
///   lease (it renews more often); a ttl below the minimum keeps its short local deadline, but
///   a crashed holder's lock frees only when the server expires its session, after the
///   minimum. A session no lock uses is closed after one ttl.
/// * **Kept after release** ([`hold_at_least`](crate::LockRequest::hold_at_least),
///   [`Locker::once`](crate::Locker::once)'s done records). An ephemeral node cannot outlive
///   its session, so the release, in one multi, sets the lock node's data, writes a
///   persistent record `/_dlock_kept/<K with '%' and '/' escaped>` holding `<owner>|<at_least
///   or done>|<milliseconds>` and deletes the lock node — nothing is written if the lock node
///   is gone (owner-checked). The record lives apart from `/K`, where Curator would count it
///   as a contender. Setting the node's data tells a waiter watching it that a record came
///   (`NodeDataChanged`); a waiter told `NodeDeleted` of its only blocker, with no record in
///   its last listing and no reconnection since it set the watch, holds without listing
///   again: on a key with no record, a hand-off is the watch event alone. The head of `K`'s
///   queue reads the record in the same multi-read as its listing; a record that may be live is
///   judged by the server's clock — its `mtime` plus the milliseconds against the head's own
///   node's `ctime`, or the `mtime` of a `setData` on that node — and waited out (the head
///   stays first in the queue; a try answers busy with the time left). Expired records are
///   deleted at the version read, by the next acquirer or by a sweep after a keep. Curator
///   does not read them. TTL nodes would need the server's `extendedTypesEnabled`, off by
///   default. `_dlock_kept` is no key's first segment.
/// * **Renewal**: a lock's first renewal reads its node with an exists-watch — it must still
///   exist with its `czxid`, owned by this session; the lease counts from when that read was
///   sent — and the node is watched from then on. Later renewals read no node: the lease
///   counts from the session's latest confirmation (one request per ttl/20, shared by every
///   lock on the session), and a node deleted by someone else fires its watch and is lost at
///   the next renewal. A watch that fires otherwise (the session ended) sends the renewal
///   back to reading.
/// * **Loss.** A session that expires, is closed or fails authentication loses every lock on
///   it at once (pushed to the Locker). A disconnection is uncertain: the client reconnects
///   within the session while the Locker's local deadline runs, which ends before the server
///   can expire the session and let another client in. A create whose reply was lost finds its
///   node again by its `_c_<uuid>` name (after a `sync`), so no duplicate or orphan is left;
///   a cancelled or timed-out acquire deletes its node by the same name, on the same session,
///   after the create. A waiting acquire rides out a disconnection: the reads of its wait, and
///   the writes that may be applied twice, whose replies are lost are sent again on the new
///   connection, within the operation timeout.
///
/// # What ZooKeeper does not guarantee
///
/// * A holder that pauses (a GC pause, a SIGSTOP, a cut network) longer than its session
///   timeout loses its session on the server, and another client gets the lock, while the
///   paused process has not seen the expiry yet. The Locker's local deadline stops the
///   protected work at the next await, but a write already in flight can still land: the
///   resource must check the fencing token (see the crate docs). Curator has the same limit.
/// * Reads may be served by a follower that lags the leader; a renewal that reaches a lagging
///   follower of an ensemble can see a node the leader already deleted. The local deadline,
///   counted from before the read was sent, still ends the lease no later than the session.
///
/// # Many distinct keys: give them one parent
///
/// ZooKeeper 3.7 and 3.8 keep read and write statistics per top-level node
/// (`read_per_namespace`, `write_per_namespace` in `mntr`) for as long as the server runs,
/// deleted nodes' included. With the default `key_prefix` (`dlock:`) every key is a top-level
/// node, so locking a fresh key per order costs the server over a kilobyte of heap per key,
/// until it restarts: seen on 3.8, about 500,000 keys filled a 1 GB heap and the server
/// stalled in its collector. A chroot in the URL (`zk://h:2181/app1`) or a `key_prefix` ending
/// in `/` (`locks/`, as below) puts every key under one top-level node.
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
/// use dlock_core::{DlockConfig, Locker};
/// let config = DlockConfig::from_toml_str(r#"
///     backend = "zk://127.0.0.1:2181/app1"
///     key_prefix = "locks/"
/// "#)?;
/// let locker = Locker::connect(&config).await?;
/// let guard = locker.lock("order-42").await?; // /app1/locks/order-42/_c_<uuid>-lock-<seq>
/// println!("fencing token (czxid) {:?}", guard.fencing_token());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct ZooKeeperBackend {
    inner: Arc<Inner>,
}

/// The state shared by the backend and its background tasks.
pub(super) struct Inner {
    sessions: ZkSessions,
    timeout: Duration,
    background: Background,
    /// When the next sweep of expired kept records may start.
    next_sweep: kept::SweepGate,
    /// Watches on long-held nodes, so that renewing them reads nothing.
    node_watches: NodeWatches,
    /// Stops the watches' task (at shutdown, once the sessions are closed).
    stop: CancellationToken,
    /// Campaigns take Curator's `LeaderLatch` layout (`?election=latch`).
    latch: bool,
    /// Lock directories seen lately: a create into one not seen makes it in the same multi.
    known_dirs: known_dirs::KnownDirs,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZooKeeperBackend")
            .field("timeout", &self.timeout)
            .field("sessions", &self.sessions)
            .finish_non_exhaustive()
    }
}

/// What a [`Lease`] of this backend carries: the lock node and its `czxid`, and — until the
/// grant is given up (released, found gone, or the last copy of the lease dropped) — the
/// session it is on.
pub(super) struct ZkGrant {
    path: String,
    czxid: i64,
    claim: GrantClaim<Inner, Session>,
    /// Whether the node is watched for its deletion (then a renewal need not read it).
    watch: Arc<WatchedKey>,
    /// The node's data is the grant's owner id (a lock), not a candidate's value (an
    /// election, whose proclaim changes it).
    data_is_owner: bool,
}

impl ZkGrant {
    fn new(
        inner: &Arc<Inner>,
        path: String,
        czxid: i64,
        session: Arc<Session>,
        req: &AcquireRequest,
    ) -> Self {
        Self {
            path,
            czxid,
            claim: GrantClaim::new(inner, session, req.owner.clone()),
            watch: NodeWatches::new_watch(),
            data_is_owner: req.value.is_none(),
        }
    }

    /// The session of this grant if `inner` made it for `owner` and it is not given up yet.
    fn live_session(&self, inner: &Arc<Inner>, owner: &OwnerId) -> Option<Arc<Session>> {
        self.claim.live(inner, owner)
    }

    /// Gives the grant up (once): the caller deletes the node as it knows best (which fires
    /// its watch, if any).
    fn give_up(&self) -> Option<Arc<Session>> {
        self.claim.give_up().map(|claim| {
            self.watch.give_up();
            claim.session.remove_grant(&claim.owner);
            claim.session
        })
    }
}

impl Drop for ZkGrant {
    /// The last copy of a lease that was never released: delete its node in the background.
    fn drop(&mut self) {
        if let Some(Claim {
            backend,
            session,
            owner,
        }) = self.claim.give_up()
            && let Some(inner) = backend.upgrade()
        {
            self.watch.give_up();
            session.remove_grant(&owner);
            inner.finish_nodes(
                session,
                vec![std::mem::take(&mut self.path)],
                Vec::new(),
                true,
            );
        }
    }
}

impl std::fmt::Debug for ZkGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkGrant")
            .field("path", &self.path)
            .field("czxid", &self.czxid)
            .finish_non_exhaustive()
    }
}

impl ZooKeeperBackend {
    /// Connects to the ensemble `url` names, with `timeout` bounding every round trip: checks
    /// that a server answers and accepts the credentials, and creates the chroot if missing.
    /// Lock sessions are opened at the first acquire of each ttl.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a URL that is not `zk://[user:password@]host:port,...[/chroot]`;
    /// [`Error::Unavailable`] / [`Error::Timeout`] when no server answers within `timeout`;
    /// [`Error::Refused`] when the ensemble refuses the credentials or the chroot.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// use std::time::Duration;
    /// use dlock_core::Locker;
    /// use dlock_core::backend::{BackendUrl, ZooKeeperBackend};
    /// let url = BackendUrl::parse("zk://127.0.0.1:2181,127.0.0.1:2182/app1")?;
    /// let locker = Locker::from_backend(ZooKeeperBackend::connect(&url, Duration::from_secs(2)).await?);
    /// # drop(locker); Ok(()) }
    /// ```
    pub async fn connect(url: &BackendUrl, timeout: Duration) -> Result<Self> {
        let background = Background::here("zk://", "ZooKeeperBackend")?;
        let stop = CancellationToken::new();
        let Some(settings) = url.zookeeper() else {
            return Err(Error::config(
                "backend",
                crate::backend::url_text::redact(url.as_str()),
                "not a `zk://` URL",
            ));
        };
        let settings = settings.with_tls(url.tls())?;
        settings.prepare(timeout).await?;
        Ok(Self {
            inner: Arc::new(Inner {
                sessions: ZkSessions::new(settings.clone(), timeout, background.clone()),
                timeout,
                background,
                next_sweep: kept::SweepGate::default(),
                node_watches: NodeWatches::start(stop.clone()),
                stop,
                latch: settings.latch,
                known_dirs: known_dirs::KnownDirs::default(),
            }),
        })
    }
}

impl Drop for ZooKeeperBackend {
    /// The sessions close in the background; their end fires every standing watch, and the
    /// watches' task ends once none is left (its sender goes with the backend).
    fn drop(&mut self) {
        let _ = self.inner.sessions.shut_down();
    }
}

#[async_trait]
impl LockBackend for ZooKeeperBackend {
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
        let closing = self.inner.sessions.close_all(self.inner.timeout);
        if !self.inner.background.settle(self.inner.timeout).await {
            tracing::debug!("dlock: ZooKeeper background work still running at shutdown");
        }
        let closed = closing.wait().await;
        // Only now: a watch dropped while its session is open asks the server to remove it
        // (one request per held node); a closed session's watches are gone with it.
        self.inner.stop.cancel();
        closed
    }

    fn lost_leases(&self) -> Option<broadcast::Receiver<LostLease>> {
        Some(self.inner.sessions.losses())
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new("zookeeper")
            .fair(true)
            .read_write(true)
            .semaphore(true)
            .fencing(Fencing::Durable)
            .self_renewing(true)
            .keeps(true)
            .election(true)
            .max_renew_batch(RENEW_BATCH)
    }
}

impl Inner {
    /// A session for `ttl` with one more user.
    async fn checkout(&self, ttl: Duration) -> Result<Arc<Session>> {
        self.sessions.checkout(ttl, self.timeout).await
    }

    /// One user of `session` is done. The last one leaves the session open, idle, for a
    /// while (the next lock reuses it), then closes it unless a lock took it up again.
    fn end_use(&self, session: &Arc<Session>) {
        self.sessions.checkin(session);
    }
}
