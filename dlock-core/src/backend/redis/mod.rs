//! The Redis backend: a single server (`redis://`), a Redis Cluster (`redis+cluster://`) or a
//! master with replicas that Redis Sentinel fails over (`redis+sentinel://`: the `sentinel`
//! module, and the guide's backends chapter). What follows is dlock's own layout; the `plain`
//! module has the other languages' one (`?layout=plain`).
//!
//! Each operation is one round trip:
//!
//! * **acquire**: `SET key owner NX PX ttl` — and, when the lock is asked for a fencing
//!   token, `INCR` of the key's fencing counter pipelined with it, both native commands;
//!   waiters (and a `try_lock` that found the lock taken) use a Lua script that does the
//!   same and also returns the holder's remaining `PTTL` (or says which key is of another
//!   type);
//! * **release**: a Lua script (`EVALSHA`, loaded on `NOSCRIPT`): owner-checked `DEL`; when
//!   a waiter marked the lock waited for, the hand-off to the first writer in line (below)
//!   (an uncontended release costs what the raw compare-and-delete costs);
//! * **renew**: a Lua script: owner-checked `PEXPIRE` of up to 100 locks in one call (Redis Cluster: one call
//!   per lock, sent concurrently, since every lock lives in its own slot).
//!
//! # Waiting: first come, first served across Lockers
//!
//! Waiting never polls, and writers are served in the order they came, whichever Locker
//! (process) they wait in. A writer that finds the lock held (after subscribing to its release
//! channel) joins the lock's line on the server (`{K}:writers`, by place, and
//! `{K}:writers:expiry`) and marks the lock waited for (`|waited` appended to the holder's
//! value: the mark lives and dies with that lease). Only the release of a marked lock does
//! more than the raw compare-and-delete: it reserves the lock for the first writer in line
//! (the value `~<owner>`, which every `SET NX` fails on, for a one-second claim window) and
//! publishes `><owner>\n<next owner>` on the release channel; only the Locker of that writer
//! acts on it, and only that writer asks the server again (the next one asks once the window
//! has passed, if it still waits). A hot key therefore costs the same few commands per
//! hand-off with 2 waiters or 1,000, in 2 Lockers or 50, and nobody cuts in: a newcomer's
//! `SET NX` fails on the reservation and it joins the end of the line.
//!
//! A writer stays in line while it renews its place, which each attempt does and which comes
//! at half its ttl at the latest; one that gives up or is cancelled leaves the line (and
//! passes the lock on if it had just been handed it); one that vanished (its process died) is
//! dropped when its place expires, or when it does not claim the lock within the claim window
//! (the writer after it asks then; two vanished in a row cost the third up to half its ttl).
//! The uncontended path never touches the line: one `SET NX PX` to take the lock, one
//! compare-and-delete to release it. The writers in line also try again when the holder's
//! ttl runs out, in case a holder vanished without releasing; in that moment a newcomer's
//! `SET NX` can find the lock free before the line does, and a `try_lock` or a whole lock set
//! taken in one script never joins the line. Readers and permits wait in their Locker
//! (below); where they wait for a writer together with writers in line, a release lets them
//! race the first writer in line. Every client of one Redis must run this protocol: a line
//! kept by an older dlock (which scored places in milliseconds) is not one this one shares.
//!
//! # Read-write locks and semaphores
//!
//! A reader, or one of a semaphore's permits, is a member of a sorted set at the lock's own
//! name, scored by its own expiry: one script per acquire, release and renewal batch, the same
//! round trips as a writer's lock. A crashed reader frees its share at its ttl; a writer that
//! waits for readers marks itself so readers who come after it wait (no writer starvation);
//! waiters are woken by the release channel, never by polling. The `shares` module has the
//! details. The plain lock (a writer) keeps its one-command protocol.
//!
//! Key layout (hash-tagged for Cluster): see the `keys` module — the lock of full key `K` is
//! the Redis string `{K}` (a sorted set while readers or permits hold it); its fencing counter
//! is `{K}:fence`; its line of writers `{K}:writers` and `{K}:writers:expiry`.
//!
//! # Leader election
//!
//! A campaign ([`Locker::campaign`](crate::Locker::campaign)) is a writer's fenced lock whose
//! grant, in the same script, records the leader in `{K}:leader` (`<owner>\n<term>\n<value>`,
//! the term being the grant's fencing token) and publishes `+` on the release channel;
//! a proclaim rewrites the record, owner-checked, and publishes too. The leader's lock is
//! marked waited for, so its release publishes whether or not a candidate waits. Observers
//! listen on the release channel (the Locker's one subscription connection) and re-read the
//! leader after each message; an expiry publishes nothing, and the core looks again when the
//! leader's ttl runs out. The record is shown only while its owner holds the lock, and is
//! kept (one small key per election name, like the fence).
//!
//! # What Redis does and does not guarantee
//!
//! * A single Redis server is a single point of truth: locks are exact while it runs.
//! * **Failover loses locks.** Replication is asynchronous: a lock written to a master that
//!   dies before replicating is gone on the promoted replica, and a second client can take it.
//! * **Restarts lose locks and may reuse tokens.** Without persistence a restarted server has
//!   no locks (holders find out at their next renewal and report the lease lost); the fencing
//!   counter restarts too unless the server runs with `appendonly yes` and `appendfsync
//!   always`. Fencing tokens are `Fencing::Volatile` for that reason.
//! * **Eviction.** With a `maxmemory-policy` of `allkeys-*`, Redis may evict lock keys under
//!   memory pressure, silently freeing locks. dlock warns at connect time when it sees such a
//!   policy; use `noeviction` or `volatile-*` (lock keys always have a ttl, so `volatile-*`
//!   policies can evict them too — prefer `noeviction` on a lock server).
//! * The fencing counter keys (`{K}:fence`) are kept forever, one per lock name ever locked
//!   with fencing on.
//!
//! # Fencing tokens only when asked
//!
//! A token costs Redis an `INCR` per grant — no extra round trip, but 5–10 % of a busy
//! server's lock throughput on the benchmark machine — and a counter key per lock name, kept
//! forever. So, like Redisson's `RFencedLock` next to its plain `RLock`, a Redis grant carries
//! a token only when asked: [`LockRequest::fencing`](crate::LockRequest::fencing) per lock,
//! or `fencing = true` in [`DlockConfig`](crate::DlockConfig) for every lock of a Locker.
//! Without it, [`LockGuard::fencing_token`](crate::LockGuard::fencing_token) is `None`.
//!
//! # Checking the fencing token where the data lives
//!
//! A lease can run out while its holder is paused (GC, swap, a stalled VM); only the resource
//! can refuse the late write. If the protected data is in Redis too, let one script compare
//! and store the token with the write:
//!
//! ```no_run
//! # async fn settle(locker: &dlock_core::Locker, mut data: redis::aio::MultiplexedConnection)
//! # -> Result<(), Box<dyn std::error::Error>> {
//! const FENCED_SET: &str = r"
//!     local highest = tonumber(redis.call('get', KEYS[2]) or '0')
//!     if tonumber(ARGV[1]) < highest then return 0 end
//!     redis.call('set', KEYS[2], ARGV[1])
//!     redis.call('set', KEYS[1], ARGV[2])
//!     return 1";
//! let guard = locker.lock("order:42").fencing(true).await?;
//! let token = guard.fencing_token().expect("asked for");
//! let accepted: i64 = redis::Script::new(FENCED_SET)
//!     .key("order:42:state")
//!     .key("order:42:state:token")
//!     .arg(token)
//!     .arg("paid")
//!     .invoke_async(&mut data)
//!     .await?;
//! assert_eq!(accepted, 1, "a newer holder already wrote: this one is stale");
//! guard.release().await?;
//! # Ok(()) }
//! ```

mod conn;
mod errors;
mod keys;
mod node;
mod notify;
mod plain;
mod scripts;
mod sentinel;
mod shares;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use redis::aio::ConnectionLike;

pub(crate) use self::conn::{Conn, RedisUrl};
#[cfg(feature = "redlock")]
pub(crate) use self::conn::{certificates, open_lazy};
pub(crate) use self::node::{AllAttempt, Attempt, Node};
#[cfg(feature = "redlock")]
pub(crate) use self::notify::MAX_SERVERS as MAX_SUBSCRIPTION_SERVERS;
pub(crate) use self::notify::{Waiters, channel_of};
pub(crate) use self::plain::Layout;
#[cfg(feature = "redlock")]
pub(crate) use self::plain::LookAgain;
use self::shares::WriterMark;
use crate::backend::BackendUrl;
use crate::backend::{Capabilities, Fencing, LockBackend};
use crate::lease::{
    AcquireAllOutcome, AcquireOutcome, AcquireRequest, Lease, ReleaseOutcome, RenewOutcome,
};
use crate::{Error, Kept, LockMode, Result};

/// How many locks one renewal script handles.
const RENEW_BATCH: usize = 100;

/// The most locks a set takes or releases in one script (the scripts `unpack` them, which
/// Lua limits to a few thousand values); a larger set goes key by key.
const MAX_TOGETHER: usize = 1000;

/// Locks in Redis (single server or Cluster).
///
/// Build it with [`RedisBackend::connect`], or through
/// [`Locker::connect`](crate::Locker::connect) with a `redis://`, `redis+cluster://` or
/// `redis+sentinel://` URL.
///
/// With `?layout=plain` in the URL, locks are written as redis-py's `Lock(name)` and
/// node-redlock write theirs — the key itself holding the owner's token (`SET NX PX`) — so
/// services in those languages and dlock exclude each other; the mutex only (every other mode
/// is [`Error::Unsupported`]), FIFO within a Locker. Every Locker sharing a lock must use the
/// same layout (the two lock different keys). See the guide's backends chapter.
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
/// use dlock_core::{DlockConfig, Locker};
/// let config = DlockConfig::from_toml_str(r#"backend = "redis://127.0.0.1:6379/0""#)?;
/// let locker = Locker::connect(&config).await?;
/// let guard = locker.lock("order:42").fencing(true).await?;
/// println!("fencing token {:?}", guard.fencing_token());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct RedisBackend {
    node: Node,
    waiters: Arc<Waiters>,
    /// Replicas that must acknowledge each grant and renewal (a Sentinel URL's
    /// `min_replicas`).
    replicas: Option<Replicas>,
}

/// How many replicas must acknowledge a grant or renewal (`WAIT`), and for how long it waits.
#[derive(Debug, Clone, Copy)]
struct Replicas {
    wanted: u32,
    timeout: Duration,
}

impl Replicas {
    /// Runs `work` with every command it sends acknowledged (see the `sentinel` module):
    /// its output, and how many replicas acknowledged its last command.
    async fn scope<T>(self, work: impl Future<Output = T>) -> (T, u32) {
        let acknowledged = sentinel::Acknowledged::new(self.wanted, self.timeout);
        sentinel::ACKNOWLEDGED
            .scope(acknowledged, async {
                let output = work.await;
                (output, sentinel::Acknowledged::last())
            })
            .await
    }

    fn shortfall(self, key: &str, acked: u32) -> Error {
        Error::NotReplicated {
            key: key.to_owned(),
            acked,
            wanted: self.wanted,
            waited: self.timeout,
        }
    }
}

impl RedisBackend {
    /// Connects to the server, cluster or Sentinel-managed master `url` names, with
    /// `timeout` bounding every round trip (and the connection itself).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a URL that is not `redis://`, `rediss://`, `redis+cluster://`
    /// or `redis+sentinel://`, or a Sentinel `replica_timeout` not shorter than `timeout`;
    /// [`Error::Unavailable`] / [`Error::Timeout`] when the server (or no sentinel) can be
    /// reached within `timeout`.
    pub async fn connect(url: &BackendUrl, timeout: Duration) -> Result<Self> {
        let replicas = match url.redis() {
            Some(RedisUrl::Sentinel(sentinel)) if sentinel.min_replicas > 0 => {
                if sentinel.replica_timeout >= timeout {
                    return Err(Error::config(
                        "replica_timeout",
                        format!("{:?}", sentinel.replica_timeout),
                        format!(
                            "must be shorter than the operation timeout ({timeout:?}), which bounds the grant's wait for its replicas"
                        ),
                    ));
                }
                Some(Replicas {
                    wanted: sentinel.min_replicas,
                    timeout: sentinel.replica_timeout,
                })
            }
            _ => None,
        };
        let (pushes_tx, pushes_rx) = tokio::sync::mpsc::unbounded_channel();
        let (conn, subscriber) = conn::open_pair(url, timeout, pushes_tx).await?;
        let mut backend = Self::start(conn, subscriber, pushes_rx, timeout).await;
        backend.replicas = replicas;
        backend.node = backend.node.with_layout(url.redis_layout());
        Ok(backend)
    }

    /// Locks through a [`redis::Client`] the application already built (its address,
    /// credentials, database and TLS settings), with `timeout` bounding every round trip: the
    /// backend opens its own two connections with it (commands, and the pub/sub that wakes
    /// waiters, in RESP3 whatever the client's protocol). One server; a Cluster takes
    /// [`connect`](Self::connect) with a `redis+cluster://` URL.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`](crate::Error::Unavailable) /
    /// [`Error::Timeout`](crate::Error::Timeout) when the server cannot be reached within
    /// `timeout`; [`Error::Refused`](crate::Error::Refused) when it refuses the credentials.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// use std::{sync::Arc, time::Duration};
    /// use dlock_core::{DlockConfig, Locker, backend::RedisBackend};
    ///
    /// let client = redis::Client::open("redis://127.0.0.1:6379/0").expect("a Redis URL");
    /// let backend = RedisBackend::from_client(&client, Duration::from_secs(5)).await?;
    /// let locker = Locker::with_config(Arc::new(backend), &DlockConfig::default())?;
    /// let guard = locker.lock("order:42").await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn from_client(client: &redis::Client, timeout: Duration) -> Result<Self> {
        let (pushes_tx, pushes_rx) = tokio::sync::mpsc::unbounded_channel();
        let conn = conn::open_with_client(client, timeout, None).await?;
        let subscriber = conn::open_with_client(client, timeout, Some(pushes_tx)).await?;
        Ok(Self::start(conn, subscriber, pushes_rx, timeout).await)
    }

    /// The backend over its command connection and its subscriber (whose pushes arrive on
    /// `pushes_rx`).
    async fn start(
        conn: conn::Conn,
        subscriber: conn::Conn,
        pushes_rx: tokio::sync::mpsc::UnboundedReceiver<redis::PushInfo>,
        timeout: Duration,
    ) -> Self {
        let backend = Self {
            node: Node::new(conn, timeout),
            waiters: Waiters::start(vec![subscriber], vec![pushes_rx], timeout),
            replicas: None,
        };
        backend.warn_about_eviction().await;
        backend
    }

    /// The server's `maxmemory-policy` if it lets Redis evict keys that have no ttl concern
    /// (`allkeys-*`): lock keys can then vanish under memory pressure, freeing locks. `None`
    /// when the policy is safe or `CONFIG GET` is not allowed. [`connect`](Self::connect)
    /// logs a warning when this is `Some`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn check(backend: &dlock_core::backend::RedisBackend) {
    /// if let Some(policy) = backend.eviction_risk().await {
    ///     eprintln!("lock keys may be evicted: maxmemory-policy is {policy}");
    /// }
    /// # }
    /// ```
    pub async fn eviction_risk(&self) -> Option<String> {
        let mut conn = self.node.conn.clone();
        let mut command = redis::cmd("CONFIG");
        command.arg("GET").arg("maxmemory-policy");
        let query = command.query_async::<HashMap<String, String>>(&mut conn);
        let reply = tokio::time::timeout(self.node.timeout, query)
            .await
            .ok()?
            .ok()?;
        reply
            .get("maxmemory-policy")
            .filter(|policy| policy.starts_with("allkeys"))
            .cloned()
    }

    async fn warn_about_eviction(&self) {
        if let Some(policy) = self.eviction_risk().await {
            tracing::warn!(
                %policy,
                "dlock: this Redis may evict lock keys under memory pressure (maxmemory-policy); use noeviction on a lock server"
            );
        }
    }

    fn lease(req: &AcquireRequest, sent: Instant, token: Option<u64>) -> AcquireOutcome {
        let lease = Lease::new(req, sent);
        AcquireOutcome::Acquired(match token {
            Some(token) => lease.with_fencing_token(token),
            None => lease,
        })
    }
}

#[async_trait]
impl LockBackend for RedisBackend {
    /// With `min_replicas`, a grant is handed over only once that many replicas acknowledged
    /// it (`WAIT`); otherwise it is given back and the error is [`Error::NotReplicated`].
    async fn acquire(
        &self,
        req: &AcquireRequest,
        deadline: Option<Instant>,
    ) -> Result<AcquireOutcome> {
        let Some(replicas) = self.replicas else {
            return self.acquire_here(req, deadline).await;
        };
        let (outcome, acked) = replicas.scope(self.acquire_here(req, deadline)).await;
        let outcome = outcome?;
        if let AcquireOutcome::Acquired(lease) = &outcome
            && acked < replicas.wanted
        {
            let _ = self.release(lease).await;
            return Err(replicas.shortfall(&req.key, acked));
        }
        Ok(outcome)
    }

    /// One script for the whole set on a single server, when every request is exclusive and
    /// no waiter of this Locker queues for its key (they go first: the set takes the ordered
    /// path, and joins the line). Not on Cluster (see `capabilities`). With `min_replicas`,
    /// as [`acquire`](Self::acquire).
    async fn acquire_together(
        &self,
        requests: &[AcquireRequest],
    ) -> Result<Option<AcquireAllOutcome>> {
        let Some(replicas) = self.replicas else {
            return self.acquire_together_here(requests).await;
        };
        let (outcome, acked) = replicas.scope(self.acquire_together_here(requests)).await;
        let outcome = outcome?;
        if let Some(AcquireAllOutcome::Acquired(leases)) = &outcome
            && acked < replicas.wanted
        {
            for lease in leases {
                let _ = self.release(lease).await;
            }
            return Err(replicas.shortfall(&requests[0].key, acked));
        }
        Ok(outcome)
    }

    /// With `min_replicas`, a renewal too many replicas did not acknowledge does not count:
    /// an error, the leases' local deadlines running on from the last one that did.
    async fn renew(&self, leases: &[Lease]) -> Result<Vec<RenewOutcome>> {
        let Some(replicas) = self.replicas else {
            return self.renew_here(leases).await;
        };
        let (renewed, acked) = replicas.scope(self.renew_here(leases)).await;
        let renewed = renewed?;
        if acked < replicas.wanted
            && let Some(lease) = leases.first()
        {
            return Err(replicas.shortfall(&lease.key, acked));
        }
        Ok(renewed)
    }

    async fn release(&self, lease: &Lease) -> Result<ReleaseOutcome> {
        if lease.mode != LockMode::Exclusive {
            return Ok(if self.release_share(lease).await? < 0 {
                ReleaseOutcome::NotHeld
            } else {
                ReleaseOutcome::Released
            });
        }
        let listeners = self
            .node
            .release_owned(lease.owner.as_str(), &lease.key)
            .await?;
        Ok(if listeners < 0 {
            ReleaseOutcome::NotHeld
        } else {
            ReleaseOutcome::Released
        })
    }

    /// One script for a set's locks on a single server (each lock waited for handed to the
    /// first writer in its line), unless one is a reader's or a permit's.
    async fn release_together(&self, leases: &[Lease]) -> Result<Option<Vec<ReleaseOutcome>>> {
        if self.node.conn.is_cluster()
            || leases.len() > MAX_TOGETHER
            || leases.iter().any(|lease| lease.mode != LockMode::Exclusive)
        {
            return Ok(None);
        }
        let heard = self.node.release_all(leases).await?;
        Ok(Some(
            heard
                .into_iter()
                .map(|heard| {
                    if heard < 0 {
                        ReleaseOutcome::NotHeld
                    } else {
                        ReleaseOutcome::Released
                    }
                })
                .collect(),
        ))
    }

    async fn release_keeping(
        &self,
        lease: &Lease,
        keep: Duration,
        kept: Kept,
    ) -> Result<ReleaseOutcome> {
        let kept = self
            .node
            .release_keeping(lease.owner.as_str(), &lease.key, keep, kept)
            .await?;
        Ok(if kept < 0 {
            ReleaseOutcome::NotHeld
        } else {
            ReleaseOutcome::Released
        })
    }

    async fn force_release(&self, key: &str) -> Result<bool> {
        self.node.force_release(key).await
    }

    async fn inspect(&self, key: &str) -> Result<crate::LockInfo> {
        self.node.inspect(key).await
    }

    /// The leader record's value is rewritten, owner-checked (see the `keys` module).
    async fn proclaim(&self, lease: &Lease, value: &str) -> Result<bool> {
        self.node
            .proclaim(lease.owner.as_str(), &lease.key, value)
            .await
    }

    /// The lock's release channel, on which an election's grants and proclaims publish too
    /// (an expiry publishes nothing: the core looks again when the leader's ttl runs out).
    async fn holder_changes(&self, key: &str) -> Result<crate::backend::HolderChanges> {
        self.waiters.watch(&channel_of(key)).await
    }

    /// Awaits the work left running (unsubscribes, withdrawals of cancelled waiters), within
    /// the operation timeout.
    async fn shutdown(&self) -> Result<()> {
        self.waiters.settle().await;
        Ok(())
    }

    fn capabilities(&self) -> Capabilities {
        if self.node.plain {
            // The mutex only: nothing but the lock's own key is written.
            return Capabilities::new(Layout::Plain.name("redis")).max_renew_batch(usize::MAX);
        }
        Capabilities::new("redis")
            .fencing(Fencing::Volatile)
            .keeps(true)
            .max_renew_batch(usize::MAX)
            .read_write(true)
            .semaphore(true)
            .fair(true)
            .election(true)
            // On a Cluster every lock is its own hash tag: a set's keys sit in different
            // slots, which one script cannot touch.
            .together(!self.node.conn.is_cluster())
    }
}

impl RedisBackend {
    /// [`LockBackend::acquire`] before the replicas' acknowledgement.
    async fn acquire_here(
        &self,
        req: &AcquireRequest,
        deadline: Option<Instant>,
    ) -> Result<AcquireOutcome> {
        if self.node.plain {
            return Box::pin(self.acquire_plain(req, deadline)).await;
        }
        if req.mode != LockMode::Exclusive {
            // Boxed: keeps the writer's (and the plain lock's) future small.
            return Box::pin(self.acquire_share(req, deadline)).await;
        }
        let mut retry_after = None;
        // Fast path: nobody of ours queues for this key and we did not just yield it to
        // other Lockers, so try at once.
        if self.waiters.may_try_at_once(&req.key) {
            let sent = Instant::now();
            match self.node.attempt(req).await? {
                Attempt::Granted(token) => return Ok(Self::lease(req, sent, token)),
                Attempt::Held(pttl) => retry_after = pttl,
                Attempt::Taken if deadline.is_some_and(|d| d <= Instant::now()) => {
                    // Out of time: the script asks once more and says for how long the
                    // lock is held (a `try_lock` that finds it taken costs two round trips).
                    let sent = Instant::now();
                    return Ok(match self.node.attempt_scripted(req, false).await? {
                        Attempt::Granted(token) => Self::lease(req, sent, token),
                        Attempt::Held(pttl) | Attempt::WriterWaits(pttl) => {
                            AcquireOutcome::Busy { retry_after: pttl }
                        }
                        Attempt::Taken => AcquireOutcome::Busy { retry_after: None },
                    });
                }
                Attempt::Taken | Attempt::WriterWaits(_) => {}
            }
            if deadline.is_some_and(|d| d <= Instant::now()) {
                return Ok(AcquireOutcome::Busy { retry_after });
            }
        }
        // Boxed: the line is the slow path, and keeping its state out of this future keeps
        // the uncontended one small.
        Box::pin(self.wait_in_line(req, deadline)).await
    }

    /// One script for the whole set on a single server, when every request is exclusive and
    /// no waiter of this Locker queues for its key (they go first: the set takes the ordered
    /// path, and joins the line). Not on Cluster (see `capabilities`).
    async fn acquire_together_here(
        &self,
        requests: &[AcquireRequest],
    ) -> Result<Option<AcquireAllOutcome>> {
        if self.node.conn.is_cluster()
            || requests.len() > MAX_TOGETHER
            || requests.iter().any(|req| {
                req.mode != LockMode::Exclusive || !self.waiters.may_try_at_once(&req.key)
            })
        {
            return Ok(None);
        }
        let sent = Instant::now();
        Ok(Some(match self.node.attempt_all(requests).await? {
            AllAttempt::Granted(tokens) => AcquireAllOutcome::Acquired(
                requests
                    .iter()
                    .zip(tokens)
                    .map(|(req, token)| match token {
                        Some(token) => Lease::new(req, sent).with_fencing_token(token),
                        None => Lease::new(req, sent),
                    })
                    .collect(),
            ),
            AllAttempt::Held(index, retry_after) => AcquireAllOutcome::Busy { index, retry_after },
        }))
    }

    /// [`LockBackend::renew`] before the replicas' acknowledgement.
    async fn renew_here(&self, leases: &[Lease]) -> Result<Vec<RenewOutcome>> {
        let sent = Instant::now();
        // Writers' locks and shares take different scripts: one batch of each kind.
        let (writers, shares): (Vec<&Lease>, Vec<&Lease>) = leases
            .iter()
            .partition(|lease| lease.mode == LockMode::Exclusive);
        let batch = if self.node.conn.is_cluster() {
            1 // every lock lives in its own slot
        } else {
            RENEW_BATCH
        };
        let calls = writers
            .chunks(batch)
            .map(|writers| futures_util::future::Either::Left(self.node.renew_batch(writers)))
            .chain(
                shares
                    .chunks(batch)
                    .map(|shares| futures_util::future::Either::Right(self.renew_shares(shares))),
            );
        let replies: Vec<Result<Vec<i64>>> = if self.node.conn.is_cluster() {
            futures_util::future::join_all(calls).await
        } else {
            let mut replies = Vec::new();
            for call in calls {
                replies.push(call.await);
            }
            replies
        };
        let mut flags = Vec::with_capacity(leases.len());
        for reply in replies {
            flags.extend(reply?);
        }
        if flags.len() != leases.len() {
            return Err(Error::refused(
                "redis",
                "renewal script returned the wrong number of results",
            ));
        }
        // Put the answers back in the order of `leases`: writers' first, then shares'.
        let (writer_flags, share_flags) = flags.split_at(writers.len());
        let (mut writer_flags, mut share_flags) = (writer_flags.iter(), share_flags.iter());
        Ok(leases
            .iter()
            .map(|lease| {
                let flag = if lease.mode == LockMode::Exclusive {
                    writer_flags.next()
                } else {
                    share_flags.next()
                };
                if flag == Some(&1) {
                    RenewOutcome::Renewed { valid_from: sent }
                } else {
                    RenewOutcome::NotOwner
                }
            })
            .collect())
    }

    /// A reader or a permit: one attempt at once unless this Locker already queues for the
    /// key, then the queue.
    async fn acquire_share(
        &self,
        req: &AcquireRequest,
        deadline: Option<Instant>,
    ) -> Result<AcquireOutcome> {
        let mut retry_after = None;
        let mut first_asked = 0;
        if self.waiters.may_try_at_once(&req.key) {
            let sent = Instant::now();
            match self.attempt_share(req, false, &mut first_asked).await? {
                Attempt::Granted(token) => return Ok(Self::lease(req, sent, token)),
                Attempt::Held(wait) | Attempt::WriterWaits(wait) => retry_after = wait,
                Attempt::Taken => {}
            }
            if deadline.is_some_and(|d| d <= Instant::now()) {
                return Ok(AcquireOutcome::Busy { retry_after });
            }
        }
        self.wait_in_queue(req, deadline, retry_after, Queued::Share { first_asked })
            .await
    }

    /// A reader, a permit or a plain-layout lock: queues locally (subscribing to the release
    /// channel first), then tries whenever this waiter is at the head and woken: by a
    /// release, by becoming head, or at the holder's expiry (a share: also at half its ttl,
    /// renewing its waited-for mark).
    async fn wait_in_queue(
        &self,
        req: &AcquireRequest,
        deadline: Option<Instant>,
        mut retry_after: Option<Duration>,
        mut queued: Queued,
    ) -> Result<AcquireOutcome> {
        let ticket = self.waiters.enqueue(&channel_of(&req.key)).await?;
        loop {
            if ticket.is_head() {
                // The script also says how long the holder keeps the lock, for the re-check.
                let sent = Instant::now();
                let attempt = match &mut queued {
                    Queued::Share { first_asked } => {
                        self.attempt_share(req, true, first_asked).await?
                    }
                    Queued::Plain(_) => self.node.attempt_plain(req).await?,
                };
                match attempt {
                    Attempt::Granted(token) => return Ok(Self::lease(req, sent, token)),
                    Attempt::Held(wait) | Attempt::WriterWaits(wait) => retry_after = wait,
                    Attempt::Taken => {}
                }
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| d <= now) {
                return Ok(AcquireOutcome::Busy { retry_after });
            }
            // A holder without expiry (not ours) is re-checked at our own ttl; in the plain
            // layout, sooner (a foreign release is not published).
            let recheck = ticket.is_head().then(|| {
                let wait = match &mut queued {
                    Queued::Plain(look_again) => look_again.after(retry_after),
                    Queued::Share { .. } => retry_after.unwrap_or(req.ttl),
                };
                now + wait + Duration::from_millis(1)
            });
            ticket.wait_until_sooner(recheck, deadline).await;
        }
    }

    /// A writer: joins the server's line (subscribed to the release channel first, and
    /// listening for a hand-off that names it), then asks again when the lock is handed to
    /// it, when its place needs renewing (half its ttl), or — first in this Locker's queue —
    /// when another release is heard or the holder's ttl runs out.
    async fn wait_in_line(
        &self,
        req: &AcquireRequest,
        deadline: Option<Instant>,
    ) -> Result<AcquireOutcome> {
        let ticket = self.waiters.enqueue(&channel_of(&req.key)).await?;
        let called = self.waiters.call(req.owner.as_str());
        let mut mark = WriterMark::new(self, req);
        loop {
            let heard_before = self.waiters.releases_heard();
            let sent = Instant::now();
            let attempt = mark.attempt().await?;
            let retry_after = match attempt {
                Attempt::Granted(token) => return Ok(Self::lease(req, sent, token)),
                Attempt::Held(wait) | Attempt::WriterWaits(wait) => wait,
                Attempt::Taken => None,
            };
            if deadline.is_some_and(|d| d <= Instant::now()) {
                mark.withdraw().await;
                return Ok(AcquireOutcome::Busy { retry_after });
            }
            let recheck =
                Instant::now() + retry_after.unwrap_or(req.ttl / 2) + Duration::from_millis(1);
            loop {
                tokio::select! {
                    () = called.heard() => break,
                    () = ticket.wait_until_sooner(Some(recheck), deadline) => {}
                }
                let now = Instant::now();
                // Woken only because it became this Locker's head: nothing new to ask about.
                if now >= recheck
                    || deadline.is_some_and(|d| d <= now)
                    || self.waiters.releases_heard() != heard_before
                {
                    break;
                }
            }
        }
    }
}

/// Who waits in a Locker's queue ([`RedisBackend::wait_in_queue`]), and how it asks.
enum Queued {
    /// A reader or permit; `first_asked`: its first attempt (server µs), 0 if it made none.
    Share { first_asked: u64 },
    /// A lock in the plain layout, and when it looks again on its own.
    Plain(plain::LookAgain),
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

// Keep the trait import used on all feature sets.
const _: fn(&mut Conn) -> i64 = |c| c.get_db();
