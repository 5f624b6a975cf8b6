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

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use zookeeper_client::{Client, SessionState, StateWatcher};

use super::config::ZkUrl;
use crate::Result;
use crate::backend::session_end::SessionEnd;
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
    /// Lock nodes (held, queued, or being deleted) on the session. Changed only under
    /// [`Sessions`]' map lock.
    users: AtomicUsize,
    /// Whether it ended, and the grants on it to report then.
    end: SessionEnd,
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

/// The open sessions of one backend, by requested ttl.
pub(super) struct Sessions {
    url: ZkUrl,
    timeout: Duration,
    live: Mutex<HashMap<Duration, Arc<Session>>>,
    /// Serialises connects, so concurrent first acquires with one ttl share one session.
    connecting: tokio::sync::Mutex<()>,
    /// Where the ends of sessions are reported, as lost grants.
    losses: broadcast::Sender<LostLease>,
    /// Stops every session's state watcher, and new sessions (the backend was dropped or
    /// shut down).
    shutdown: CancellationToken,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("url", &self.url)
            .field("live", &self.live().keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Sessions {
    pub(super) fn new(url: ZkUrl, timeout: Duration) -> Self {
        Self {
            url,
            timeout,
            live: Mutex::default(),
            connecting: tokio::sync::Mutex::new(()),
            losses: broadcast::channel(1024).0,
            shutdown: CancellationToken::new(),
        }
    }

    fn live(&self) -> MutexGuard<'_, HashMap<Duration, Arc<Session>>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A receiver of the grants lost with their session.
    pub(super) fn losses(&self) -> broadcast::Receiver<LostLease> {
        self.losses.subscribe()
    }

    fn reuse(&self, ttl: Duration) -> Option<Arc<Session>> {
        let live = self.live();
        let session = live.get(&ttl).filter(|s| !s.is_lost())?;
        session.users.fetch_add(1, Ordering::SeqCst);
        Some(Arc::clone(session))
    }

    /// A session for `ttl` with one more user: the open one, or a new one.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`](crate::Error::Unavailable) /
    /// [`Error::Timeout`](crate::Error::Timeout) when no server answers within the operation
    /// timeout; [`Error::Refused`](crate::Error::Refused) for refused credentials.
    pub(super) async fn checkout(&self, ttl: Duration) -> Result<Arc<Session>> {
        // An acquire still in flight when the Locker shut down must not open a session again.
        if self.shutdown.is_cancelled() {
            return Err(crate::Error::ShutDown);
        }
        if let Some(session) = self.reuse(ttl) {
            return Ok(session);
        }
        let _connecting = tokio::time::timeout(self.timeout, self.connecting.lock())
            .await
            .map_err(|_| crate::Error::Timeout {
                backend: "zookeeper",
                operation: "connect",
                after: self.timeout,
            })?;
        if let Some(session) = self.reuse(ttl) {
            return Ok(session);
        }
        let client = self.url.session(ttl, self.timeout).await?;
        let session = Arc::new(Session {
            id: client.session_id().0,
            negotiated: client.session_timeout(),
            ttl,
            users: AtomicUsize::new(1),
            end: SessionEnd::new(),
            client,
        });
        tracing::debug!(session = %format!("{:#x}", session.id), ?ttl, negotiated = ?session.negotiated, "dlock: ZooKeeper session opened");
        tokio::spawn(watch_state(
            Arc::downgrade(&session),
            session.client.state_watcher(),
            self.losses.clone(),
            self.shutdown.clone(),
        ));
        if let Some(old) = self.live().insert(ttl, Arc::clone(&session)) {
            old.mark_lost("replaced"); // a lost one: nothing to report any more
        }
        Ok(session)
    }

    /// One user of `session` is done. Returns `true` if it was the last: the session stays
    /// open, idle, for [`IDLE_LINGER`] ttls (the caller then calls
    /// [`close_if_idle`](Self::close_if_idle)).
    pub(super) fn checkin(&self, session: &Arc<Session>) -> bool {
        let _live = self.live(); // `reuse` counts users up under this lock
        session.users.fetch_sub(1, Ordering::SeqCst) == 1 && !session.is_lost()
    }

    /// Closes `session` if it is still idle: out of the map, so its last handle goes (the
    /// client closes the session when its last handle is dropped).
    pub(super) fn close_if_idle(&self, session: &Arc<Session>) {
        let mut live = self.live();
        if session.users.load(Ordering::SeqCst) == 0
            && live
                .get(&session.ttl)
                .is_some_and(|s| Arc::ptr_eq(s, session))
        {
            live.remove(&session.ttl);
        }
    }

    /// Closes every session (the Locker is shut down): each closes on the server — its
    /// ephemeral nodes, held locks and queued waiters alike, deleted — once its last handle
    /// goes (a background delete may still hold one). [`Closing::wait`] waits for that.
    pub(super) fn close_all(&self) -> Closing {
        let watchers = self
            .live()
            .values()
            .map(|session| (session.id, session.client.state_watcher()))
            .collect();
        self.shut_down();
        Closing {
            watchers,
            timeout: self.timeout,
        }
    }

    /// Takes every session out of use (the backend is dropped): each closes — and the server
    /// deletes its nodes — when its last handle goes, at once for sessions no lease or
    /// background delete still holds.
    pub(super) fn shut_down(&self) {
        self.shutdown.cancel();
        for (_, session) in self.live().drain() {
            session.mark_lost(SHUT_DOWN);
        }
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
        let closed = tokio::time::timeout(self.timeout, async {
            for (id, mut states) in self.watchers {
                let mut state = states.peek_state();
                while !state.is_terminated() {
                    state = states.changed().await;
                }
                tracing::debug!(session = %format!("{id:#x}"), ?state, "dlock: ZooKeeper session closed");
            }
        })
        .await;
        closed.map_err(|_| crate::Error::Timeout {
            backend: "zookeeper",
            operation: "close session",
            after: self.timeout,
        })
    }
}
