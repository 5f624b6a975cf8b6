//! Sessions: one etcd lease per requested ttl, shared by every lock (held or queued) of one
//! backend with that ttl — like Go's `concurrency.Session` — and kept alive by a keepalive
//! stream at ttl/3.
//!
//! The shared pool (`backend::sessions`) counts a session's users (each lock key attached to
//! the lease). When the last one is done the lease stays, idle and kept alive, for one ttl: a
//! lock taken meanwhile reuses it (one lease grant per busy period, not per lock); after that
//! it is revoked. The session is *lost* when etcd answers a keepalive with ttl 0 (the lease expired or was
//! revoked) or when no keepalive was answered for the lease's whole ttl; every lock on it is
//! then lost.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{Client, LeaseClient, LeaseKeepAliveStream, LeaseKeeper};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use super::call;
use crate::backend::session_end::SessionEnd;
use crate::backend::sessions::PooledSession;
use crate::{Error, Result};

/// How long, in ttls of its own, a lease no lock uses stays granted and kept alive, ready for
/// the next lock: a Locker that locks one key at a time grants one lease, not one per lock.
/// A crashed process's locks still free within their ttl (its keepalives stop with it).
pub(super) const IDLE_LINGER: u32 = 1;

/// Keepalives are never sent more often than this, whatever the ttl.
const MIN_CADENCE: Duration = Duration::from_millis(10);

/// The longest pause between two attempts to reopen a broken keepalive stream.
const MAX_REOPEN_DELAY: Duration = Duration::from_millis(200);

/// One etcd lease and its keepalive.
pub(super) struct Session {
    /// The etcd lease id.
    pub(super) id: i64,
    /// The ttl the locks on it asked for.
    pub(super) ttl: Duration,
    /// What etcd granted: whole seconds, at least the cluster's minimum.
    pub(super) server_ttl: Duration,
    /// Send time of the latest keepalive (or the grant) etcd answered: the lease lives at least
    /// until then + ttl.
    alive: watch::Sender<Instant>,
    /// Whether it is lost, and why.
    end: SessionEnd,
    kick: Notify,
    /// Stops the keepalive task.
    stop: CancellationToken,
    /// What revokes the lease when it is closed.
    client: Client,
    timeout: Duration,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &format_args!("{:x}", self.id))
            .field("ttl", &self.ttl)
            .field("server_ttl", &self.server_ttl)
            .field("lost", &self.is_lost())
            .finish_non_exhaustive()
    }
}

impl Session {
    fn new(
        id: i64,
        ttl: Duration,
        server_ttl: Duration,
        granted_at: Instant,
        client: Client,
        timeout: Duration,
    ) -> Self {
        Self {
            id,
            ttl,
            server_ttl,
            alive: watch::Sender::new(granted_at),
            end: SessionEnd::new(),
            kick: Notify::new(),
            stop: CancellationToken::new(),
            client,
            timeout,
        }
    }

    /// The ttl every lock on this session really has: the shorter of asked and granted.
    pub(super) fn effective_ttl(&self) -> Duration {
        self.ttl.min(self.server_ttl)
    }

    /// Send time of the latest keepalive etcd answered.
    pub(super) fn last_ok(&self) -> Instant {
        *self.alive.borrow()
    }

    pub(super) fn is_lost(&self) -> bool {
        self.end.is_ended()
    }

    /// Resolves when the session is lost.
    pub(super) async fn lost(&self) {
        self.end.ended().await;
    }

    /// Why the session was lost.
    pub(super) fn lost_reason(&self) -> String {
        self.end.reason_or(|| "the etcd lease ended".to_owned())
    }

    /// Records the loss (the Locker learns it from the lease's renewal) and stops the
    /// keepalives.
    pub(super) fn mark_lost(&self, reason: impl Into<String>) {
        let _ = self.end.end(reason);
        self.stop.cancel();
    }

    fn confirmed(&self, sent: Instant) {
        self.alive.send_if_modified(|last| {
            let newer = sent > *last;
            if newer {
                *last = sent;
            }
            newer
        });
    }

    /// A recent [`last_ok`](Self::last_ok): if the latest answered keepalive is older than
    /// `max_age`, sends one now and waits (at most `max_age`, so a slow cluster delays a grant
    /// only that much) for its answer. Gives the older value if none comes.
    pub(super) async fn fresh(&self, max_age: Duration) -> Instant {
        let asked = Instant::now();
        if self.last_ok() + max_age >= asked || self.is_lost() {
            return self.last_ok();
        }
        let mut answered = self.alive.subscribe();
        self.kick.notify_one();
        tokio::select! {
            _ = tokio::time::timeout(max_age, answered.wait_for(|last| *last >= asked)) => {}
            () = self.end.ended() => {}
        }
        self.last_ok()
    }

    /// The reason to give up on the lease if no keepalive was answered for its whole ttl.
    pub(super) fn overdue(&self) -> Option<String> {
        (Instant::now() > self.last_ok() + self.server_ttl).then(|| {
            format!(
                "no keepalive of etcd lease {:x} was answered for its ttl ({:?})",
                self.id, self.server_ttl
            )
        })
    }
}

impl PooledSession for Session {
    fn end(&self) -> &SessionEnd {
        &self.end
    }

    fn linger(&self) -> Duration {
        self.effective_ttl() * IDLE_LINGER
    }

    /// Stops the keepalives and revokes the lease (best effort: it expires anyway).
    fn close(self: Arc<Self>) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        self.stop.cancel();
        Box::pin(async move {
            let outcome = revoke(&self.client, self.timeout, self.id).await;
            tracing::debug!(lease = %format!("{:x}", self.id), ok = outcome.is_ok(), "dlock: etcd lease revoked");
        })
    }
}

/// Grants a new lease for locks of `ttl` (whole seconds, at least one), within `timeout`.
///
/// # Errors
///
/// As [`call`]; [`Error::Refused`] when etcd grants no lease.
pub(super) async fn grant(client: &Client, timeout: Duration, ttl: Duration) -> Result<Session> {
    let sent = Instant::now();
    let (id, server_ttl) = grant_lease(client, timeout, ttl).await?;
    let session = Session::new(id, ttl, server_ttl, sent, client.clone(), timeout);
    tracing::debug!(lease = %format!("{:x}", session.id), ?ttl, server_ttl = ?session.server_ttl, "dlock: etcd lease granted");
    Ok(session)
}

/// Grants an etcd lease of `ttl`, rounded up to whole seconds (at least one), within
/// `timeout`: its id and the ttl etcd granted (which may be longer: its minimum lease ttl).
/// Nothing keeps it alive; a [`Session`] does that for the leases of locks.
///
/// # Errors
///
/// As [`call`]; [`Error::Refused`] when etcd grants no lease.
pub(super) async fn grant_lease(
    client: &Client,
    timeout: Duration,
    ttl: Duration,
) -> Result<(i64, Duration)> {
    let seconds = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    let seconds = i64::try_from(seconds.max(1)).unwrap_or(i64::MAX);
    let granted = call(timeout, "lease grant", || {
        let mut leases = client.lease_client();
        async move { leases.grant(seconds, None).await }
    })
    .await?;
    let server_seconds = u64::try_from(granted.ttl()).unwrap_or(0);
    if server_seconds == 0 {
        return Err(Error::refused(
            "etcd",
            format!("etcd granted no lease: {}", granted.error()),
        ));
    }
    Ok((granted.id(), Duration::from_secs(server_seconds)))
}

/// Revokes lease `id`, within `timeout`; a lease etcd no longer has is revoked already.
///
/// # Errors
///
/// As [`call`].
pub(super) async fn revoke(client: &Client, timeout: Duration, id: i64) -> Result<()> {
    let revoked = call(timeout, "lease revoke", || {
        let mut leases = client.lease_client();
        async move { leases.revoke(id).await }
    })
    .await;
    match revoked {
        Err(error) if !super::errors::is_lease_not_found(&error) => Err(error),
        _ => Ok(()),
    }
}

/// Why a keepalive stream ended.
enum StreamEnd {
    /// The lease is gone: stop for good.
    Lost(String),
    /// The stream broke or stalled: open another one.
    Broken(String),
    /// The session was stopped.
    Stopped,
}

/// Keeps `session`'s lease alive until it is stopped or lost, reopening the keepalive stream
/// (possibly to another member) whenever it breaks or an answer is late by more than
/// `timeout`. Calls `on_lost` once if the lease is lost.
pub(super) async fn keep_alive(
    session: Arc<Session>,
    mut leases: LeaseClient,
    timeout: Duration,
    on_lost: impl FnOnce(&Arc<Session>) + Send,
) {
    let cadence = (session.effective_ttl() / 3).max(MIN_CADENCE);
    let mut retry_in = Duration::from_millis(20);
    let lost = loop {
        if session.stop.is_cancelled() {
            return;
        }
        let end = match open(&session, &mut leases, timeout).await {
            Ok((keeper, stream)) => {
                retry_in = Duration::from_millis(20);
                run_stream(&session, keeper, stream, cadence, timeout).await
            }
            Err(end) => end,
        };
        match end {
            StreamEnd::Stopped => return,
            StreamEnd::Lost(reason) => break reason,
            StreamEnd::Broken(why) => {
                if let Some(reason) = session.overdue() {
                    break reason;
                }
                tracing::debug!(lease = %format!("{:x}", session.id), %why, "dlock: etcd keepalive stream broken; reopening");
            }
        }
        tokio::select! {
            () = session.stop.cancelled() => return,
            () = tokio::time::sleep(retry_in) => {}
        }
        // Retry briskly: a failover takes a few hundred milliseconds to a few seconds, and
        // every keepalive missed meanwhile eats into the locks' local deadline.
        retry_in = (retry_in * 2).min(cadence).min(MAX_REOPEN_DELAY);
    };
    if session.stop.is_cancelled() && !session.is_lost() {
        return; // stopped while failing: not a loss
    }
    tracing::warn!(lease = %format!("{:x}", session.id), reason = %lost, "dlock: etcd lease lost");
    session.mark_lost(lost);
    on_lost(&session);
}

async fn open(
    session: &Session,
    leases: &mut LeaseClient,
    timeout: Duration,
) -> std::result::Result<(LeaseKeeper, LeaseKeepAliveStream), StreamEnd> {
    let sent = Instant::now();
    let opened = tokio::select! {
        () = session.stop.cancelled() => return Err(StreamEnd::Stopped),
        opened = tokio::time::timeout(timeout, leases.keep_alive(session.id)) => opened,
    };
    match opened {
        Ok(Ok(pair)) => {
            session.confirmed(sent);
            Ok(pair)
        }
        Ok(Err(error)) if super::errors::names_a_lost_lease(&error) => {
            Err(StreamEnd::Lost(format!(
                "etcd lease {:x} expired or was revoked ({error})",
                session.id
            )))
        }
        Ok(Err(error)) => Err(StreamEnd::Broken(error.to_string())),
        Err(_) => Err(StreamEnd::Broken(format!(
            "no answer to a keepalive within {timeout:?}"
        ))),
    }
}

async fn run_stream(
    session: &Session,
    mut keeper: LeaseKeeper,
    mut stream: LeaseKeepAliveStream,
    cadence: Duration,
    timeout: Duration,
) -> StreamEnd {
    let mut pending: VecDeque<Instant> = VecDeque::new();
    let mut next_send = session.last_ok() + cadence;
    loop {
        let stalled_at = pending.front().map(|sent| *sent + timeout);
        let stalled = async {
            match stalled_at {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        let send = tokio::select! {
            () = session.stop.cancelled() => return StreamEnd::Stopped,
            () = tokio::time::sleep_until(next_send.into()) => true,
            () = session.kick.notified() => true,
            () = stalled => return StreamEnd::Broken(format!("a keepalive got no answer within {timeout:?}")),
            message = stream.message() => match message {
                Ok(Some(answer)) => {
                    let sent = pending.pop_front();
                    if answer.ttl() <= 0 {
                        return StreamEnd::Lost(format!("etcd lease {:x} expired or was revoked", session.id));
                    }
                    if let Some(sent) = sent {
                        session.confirmed(sent);
                    }
                    false
                }
                Ok(None) => return StreamEnd::Broken("the server closed the keepalive stream".to_owned()),
                Err(error) => return StreamEnd::Broken(error.to_string()),
            },
        };
        if let Some(reason) = session.overdue() {
            return StreamEnd::Lost(reason);
        }
        if send {
            let now = Instant::now();
            if keeper.keep_alive().await.is_err() {
                return StreamEnd::Broken("the keepalive stream is closed".to_owned());
            }
            pending.push_back(now);
            next_send = now + cadence;
        }
    }
}
