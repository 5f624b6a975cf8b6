//! Sessions: one ZooKeeper session per requested ttl (one per Locker in practice), shared by
//! every lock node of one backend with that ttl. The session *is* the lease: the client pings
//! while it lives, and the server deletes the session's ephemeral nodes when it expires.
//!
//! The server grants a session timeout within its `[minSessionTimeout, maxSessionTimeout]`
//! (by default 2 and 20 ticks). A lock's ttl is the shorter of asked and granted. A session
//! no lock uses stays open for one ttl, for the next lock, and is then closed.
//!
//! A session's state: `Disconnected` is uncertain (the server may still keep the session; the
//! Locker's local deadline keeps running until a renewal gets through again); `Expired`,
//! `Closed` and `AuthFailed` end it, and every grant on it is reported lost at once.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use zookeeper_client::{Client, SessionState, StateWatcher};

use super::config::ZkUrl;
use super::errors::timed;
use crate::Result;
use crate::backend::background::Background;
use crate::backend::session_end::SessionEnd;
use crate::backend::sessions::{PooledSession, Sessions};
use crate::error::within;
use crate::lease::{LostLease, OwnerId};

/// How long, in ttls of its own, a session no lock uses stays open for the next lock.
pub(super) const IDLE_LINGER: u32 = 1;

/// One ZooKeeper session.
#[derive(Debug)]
pub(super) struct Session {
    pub(super) client: Client,
    /// The session id: the `ephemeralOwner` of every node it creates.
    pub(super) id: i64,
    /// The ttl the locks on it asked for.
    pub(super) ttl: Duration,
    /// The session timeout the server granted.
    pub(super) negotiated: Duration,
    /// Whether it ended, and the grants on it to report then.
    end: SessionEnd,
    /// The send time of the latest request for [`Session::confirmed`], and its error if it
    /// failed.
    confirmed: tokio::sync::Mutex<Option<(Instant, Option<crate::Error>)>>,
}

impl Session {
    /// The ttl every lock on this session really has: the shorter of asked and granted.
    pub(super) fn effective_ttl(&self) -> Duration {
        self.ttl.min(self.negotiated)
    }

    pub(super) fn is_lost(&self) -> bool {
        self.end.is_ended()
    }

    /// Resolves when the session has ended.
    pub(super) async fn lost(&self) {
        self.end.ended().await;
    }

    /// Why the session ended.
    pub(super) fn lost_reason(&self) -> String {
        self.end
            .reason_or(|| format!("ZooKeeper session {:#x} ended", self.id))
    }

    /// Whether the session was ended by the backend's shutdown (or drop), not by the server.
    pub(super) fn ended_by_shutdown(&self) -> bool {
        self.is_lost() && self.lost_reason() == SHUT_DOWN
    }

    /// A moment at which the server still kept the session: the send time of an answered
    /// request no older than `max_age`, shared by every renewal meanwhile — or of a new one
    /// (`exists` on the root: the cheapest read), bounded by `timeout`. Renewing watched
    /// nodes costs this one request per `max_age`, however many locks the session holds. A
    /// request that failed is not sent again within `max_age` either: the renewals that
    /// waited for it share its error (they do not each wait a `timeout` in turn).
    ///
    /// # Errors
    ///
    /// As [`timed`]: no answer within `timeout`, or the session is gone.
    pub(super) async fn confirmed(&self, max_age: Duration, timeout: Duration) -> Result<Instant> {
        let mut confirmed = self.confirmed.lock().await;
        let asked = Instant::now();
        if let Some((at, failed)) = confirmed.as_ref()
            && *at + max_age >= asked
        {
            return match failed {
                None => Ok(*at),
                Some(error) => Err(error.copy_for_batch("zookeeper")),
            };
        }
        let answered = timed(timeout, "renew", self.client.check_stat("/")).await;
        let failed = answered.err();
        let outcome = match &failed {
            None => Ok(asked),
            Some(error) => Err(error.copy_for_batch("zookeeper")),
        };
        *confirmed = Some((asked, failed));
        outcome
    }

    /// Records the end of the session, without reporting its grants.
    pub(super) fn mark_lost(&self, reason: impl Into<String>) {
        let _ = self.end.end(reason);
    }

    /// Records a grant on the session, to be reported lost if the session ends (an ended
    /// session's grant is found out by its renewal).
    pub(super) fn add_grant(&self, owner: &OwnerId) {
        let _ = self.end.add_grant(owner);
    }

    /// Forgets a grant given up.
    pub(super) fn remove_grant(&self, owner: &OwnerId) {
        self.end.remove_grant(owner);
    }
}

/// Why the sessions of a backend that was shut down (or dropped) ended.
const SHUT_DOWN: &str = "the ZooKeeper backend was shut down";

impl PooledSession for Session {
    fn end(&self) -> &SessionEnd {
        &self.end
    }

    /// Closed when its last handle goes: the client closes the session then.
    fn linger(&self) -> Duration {
        self.effective_ttl() * IDLE_LINGER
    }
}

/// The sessions of one backend: the shared pool, and what ZooKeeper adds to it — a state
/// watcher per session that reports its end.
pub(super) struct ZkSessions {
    url: ZkUrl,
    pool: Sessions<Session>,
    /// Where the ends of sessions are reported, as lost grants.
    losses: broadcast::Sender<LostLease>,
    /// Stops every session's state watcher (the backend was dropped or shut down).
    shutdown: CancellationToken,
}

impl std::fmt::Debug for ZkSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("url", &self.url)
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

impl ZkSessions {
    pub(super) fn new(url: ZkUrl, timeout: Duration, background: Background) -> Self {
        Self {
            url,
            pool: Sessions::new("zookeeper", timeout, background),
            losses: broadcast::channel(1024).0,
            shutdown: CancellationToken::new(),
        }
    }

    /// A receiver of the grants lost with their session.
    pub(super) fn losses(&self) -> broadcast::Receiver<LostLease> {
        self.losses.subscribe()
    }

    /// A session for `ttl` with one more user: the open one, or a new one.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`](crate::Error::Unavailable) /
    /// [`Error::Timeout`](crate::Error::Timeout) when no server answers within the operation
    /// timeout; [`Error::Refused`](crate::Error::Refused) for refused credentials.
    pub(super) async fn checkout(&self, ttl: Duration, timeout: Duration) -> Result<Arc<Session>> {
        let (session, opened) = self
            .pool
            .checkout(ttl, || async {
                let client = self.url.session(ttl, timeout).await?;
                Ok(Session {
                    id: client.session_id().0,
                    negotiated: client.session_timeout(),
                    ttl,
                    end: SessionEnd::new(),
                    confirmed: tokio::sync::Mutex::new(None),
                    client,
                })
            })
            .await?;
        if opened {
            tracing::debug!(session = %format!("{:#x}", session.id), ?ttl, negotiated = ?session.negotiated, "dlock: ZooKeeper session opened");
            tokio::spawn(watch_state(
                Arc::downgrade(&session),
                session.client.state_watcher(),
                self.losses.clone(),
                self.shutdown.clone(),
            ));
        }
        Ok(session)
    }

    /// One user of `session` is done: the last leaves it open, idle, for its linger.
    pub(super) fn checkin(&self, session: &Arc<Session>) {
        self.pool.checkin(session);
    }

    /// Closes every session (the Locker is shut down): each closes on the server — its
    /// ephemeral nodes, held locks and queued waiters alike, deleted — once its last handle
    /// goes (a background delete may still hold one). [`Closing::wait`] waits for that.
    pub(super) fn close_all(&self, timeout: Duration) -> Closing {
        let watchers = self
            .shut_down()
            .iter()
            .map(|session| (session.id, session.client.state_watcher()))
            .collect();
        Closing { watchers, timeout }
    }

    /// Takes every session out of use (the backend is dropped): each closes — and the server
    /// deletes its nodes — when its last handle goes, at once for sessions no lease or
    /// background delete still holds. Returns them.
    pub(super) fn shut_down(&self) -> Vec<Arc<Session>> {
        self.shutdown.cancel();
        let sessions = self.pool.drain();
        for session in &sessions {
            session.mark_lost(SHUT_DOWN);
        }
        sessions
    }
}

/// Follows a session's state until it ends: then marks it lost, takes it out of use, and
/// reports every grant on it.
async fn watch_state(
    session: Weak<Session>,
    mut states: StateWatcher,
    losses: broadcast::Sender<LostLease>,
    shutdown: CancellationToken,
) {
    // A session may have ended before this task first looked (`changed` would then never
    // return): look at the current state first.
    let mut first = Some(states.peek_state());
    let ended = loop {
        let state = if let Some(state) = first.take() {
            state
        } else {
            tokio::select! {
                () = shutdown.cancelled() => return,
                state = states.changed() => state,
            }
        };
        let Some(live) = session.upgrade() else {
            return; // closed: nobody to tell
        };
        match state {
            SessionState::Expired | SessionState::Closed | SessionState::AuthFailed => {
                break (live, state);
            }
            state => {
                tracing::debug!(session = %format!("{:#x}", live.id), ?state, "dlock: ZooKeeper session state");
            }
        }
    };
    let (session, state) = ended;
    let reason = format!("ZooKeeper session {:#x} {state:?}", session.id);
    tracing::warn!(session = %format!("{:#x}", session.id), ?state, "dlock: ZooKeeper session ended; its locks are lost");
    session.end.end_and_report(reason, &losses);
}

/// Sessions being closed, by id.
pub(super) struct Closing {
    watchers: Vec<(i64, StateWatcher)>,
    timeout: Duration,
}

impl Closing {
    /// Waits, at most the operation timeout, until the server has closed every session.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`](crate::Error::Timeout) when one was not closed in time; the server
    /// then ends it at its session timeout.
    pub(super) async fn wait(self) -> Result<()> {
        within("zookeeper", "close session", self.timeout, async {
            for (id, mut states) in self.watchers {
                let mut state = states.peek_state();
                while !state.is_terminated() {
                    state = states.changed().await;
                }
                tracing::debug!(session = %format!("{id:#x}"), ?state, "dlock: ZooKeeper session closed");
            }
        })
        .await
    }
}
