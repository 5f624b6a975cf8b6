//! Lock connections: the PostgreSQL sessions that hold advisory locks, kept by lease ttl in
//! the backends' shared session pool ([`Sessions`]), apart from any pool of short statements.
//!
//! Advisory locks re-enter per session, so **a connection holds or requests a key at most
//! once**: an attempt reserves its keys on a connection before it sends anything, and only a
//! connection that neither holds nor requests a key may try it. Attempts that do not wait
//! share connections (100 locks taken without waiting need one connection); an acquire that
//! waits on the server does so on a connection with nothing else on it, which then holds
//! what it was granted and takes further attempts.
//!
//! A connection whose statement does not answer within the operation timeout, or whose state
//! is otherwise in doubt, is closed: what the client believes it holds is always exact. A
//! connection that ends — closed by the server (`pg_terminate_backend`, a restart, the
//! `idle_session_timeout` of a frozen holder) or by the network — loses every lock on it, and
//! each is reported lost at once.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::{Notify, broadcast};
use tokio_postgres::{AsyncMessage, CancelToken, Client, Statement};
use tokio_postgres_rustls::MakeRustlsConnect;
use tokio_util::sync::CancellationToken;

use super::config::{PgConnection, PgUrl};
use crate::Result;
use crate::backend::background::Background;
use crate::backend::session_end::SessionEnd;
use crate::backend::sessions::{PooledSession, Sessions};
use crate::lease::{LostLease, OwnerId};

/// How long, as a fraction of its ttl, a connection with nothing on it is kept for the next
/// lock. The server ends it at its `idle_session_timeout` (one ttl) anyway; closing it at
/// half keeps the client from picking a connection the server is closing.
const IDLE_KEEP_DIVISOR: u32 = 2;

/// One lock connection.
pub(super) struct Conn {
    pub(super) client: Client,
    /// The ttl of the locks on it (its `idle_session_timeout`).
    ttl: Duration,
    state: Mutex<ConnState>,
    cancel: CancelToken,
    /// How the cancel request connects (TLS if the connection is).
    connector: MakeRustlsConnect,
    /// Tells the task polling the connection to drop it (closing the socket).
    closing: CancellationToken,
    /// Whether it ended, and the grants on it to report then.
    end: SessionEnd,
    /// Signalled by every `NOTIFY` the connection receives (a semaphore head listens).
    pub(super) notified: Notify,
    /// The statements prepared on this connection, by their text (a dozen at most).
    prepared: Mutex<HashMap<String, Statement>>,
    /// Where its cancel request and the undo of an interrupted attempt run.
    background: Background,
}

/// What a connection holds or requests.
#[derive(Default)]
struct ConnState {
    /// Advisory keys held or requested, with the number of grants holding each (above 1 only
    /// for a semaphore's limit key, held shared by every permit).
    keys: HashMap<i64, u32>,
    /// An acquire waits on the server on this connection: nothing else may use it.
    waiting: bool,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state();
        f.debug_struct("Conn")
            .field("ttl", &self.ttl)
            .field("keys", &state.keys.len())
            .field("waiting", &state.waiting)
            .field("lost", &self.is_lost())
            .finish_non_exhaustive()
    }
}

impl Conn {
    fn state(&self) -> MutexGuard<'_, ConnState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `sql` as a statement prepared on this connection: prepared at its first use (one round
    /// trip), then taken from the connection's cache.
    pub(super) async fn prepared(&self, sql: &str) -> Result<Statement, tokio_postgres::Error> {
        let cached = self
            .prepared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(sql)
            .cloned();
        if let Some(statement) = cached {
            return Ok(statement);
        }
        let statement = self.client.prepare(sql).await?;
        self.prepared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }

    /// Whether the connection ended or is closing: nothing may use it any more.
    pub(super) fn is_lost(&self) -> bool {
        self.end.has_reason() || self.end.is_ended() || self.client.is_closed()
    }

    /// Resolves when the connection has ended.
    pub(super) async fn lost(&self) {
        self.end.ended().await;
    }

    /// Why the connection ended.
    pub(super) fn lost_reason(&self) -> String {
        self.end
            .reason_or(|| "the PostgreSQL connection ended".to_owned())
    }

    /// Whether `key` is held or requested here.
    pub(super) fn has(&self, key: i64) -> bool {
        self.state().keys.contains_key(&key)
    }

    /// Records `owner`'s grant of `keys` (reserved already, or — for a semaphore's limit key —
    /// counted up), to be reported lost if the connection ends.
    pub(super) fn add_grant(&self, owner: &OwnerId, limit_key: Option<i64>) {
        if let Some(key) = limit_key {
            *self.state().keys.entry(key).or_insert(0) += 1;
        }
        // An ended connection's grant is found out by its renewal.
        let _ = self.end.add_grant(owner);
    }

    /// Forgets `owner`'s grant and its `keys`, unlocked (or never taken).
    pub(super) fn remove_grant(&self, owner: &OwnerId, keys: &[i64]) {
        self.end.remove_grant(owner);
        unreserve(&mut self.state(), keys);
    }

    /// Closes the connection because what it holds is in doubt (a statement that did not
    /// answer in time, an error after a grant may have been made): every grant on it is
    /// reported lost by the driver, and the server frees its locks as the socket closes.
    pub(super) fn abandon(&self, reason: impl Into<String>) {
        self.end.give_reason(reason);
        // Cancel a statement waiting on the server first (a blocked backend reads its socket
        // only every `client_connection_check_interval`), then drop the socket.
        let cancel = self.cancel.clone();
        let connector = self.connector.clone();
        let closing = self.closing.clone();
        let spawned = self.background.spawn(async move {
            let _ =
                tokio::time::timeout(Duration::from_secs(1), cancel.cancel_query(connector)).await;
            closing.cancel();
        });
        if !spawned {
            self.closing.cancel();
        }
    }
}

impl PooledSession for Conn {
    fn end(&self) -> &SessionEnd {
        &self.end
    }

    fn usable(&self) -> bool {
        !self.is_lost()
    }

    fn linger(&self) -> Duration {
        self.ttl / IDLE_KEEP_DIVISOR
    }

    /// Closes the socket of a connection with nothing on it.
    fn close(self: Arc<Self>) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        self.end.give_reason("closed after idling");
        self.closing.cancel();
        Box::pin(async {})
    }
}

fn unreserve(state: &mut ConnState, keys: &[i64]) {
    for key in keys {
        if let Some(count) = state.keys.get_mut(key) {
            *count -= 1;
            if *count == 0 {
                state.keys.remove(key);
            }
        }
    }
}

/// An acquire's (or a read's) use of a connection, counted by the pool until it ends: the
/// keys it reserved there, given back when it ends without a grant (a grant keeps the use,
/// until it is unlocked). A use that [`waits`](Conns::for_wait) has the connection to itself,
/// and closes it when dropped unfinished (a cancelled wait leaves nothing queued).
pub(super) struct ConnUse {
    pub(super) conn: Arc<Conn>,
    keys: Vec<i64>,
    dedicated: bool,
    done: bool,
    /// What to do instead of closing the connection when dropped unfinished.
    undo: Option<Undo>,
    sessions: Arc<Sessions<Conn>>,
}

/// Puts a shared connection back in order after an attempt dropped mid-statement: given the
/// connection and the keys the attempt reserved, it runs in a task of its own.
pub(super) type Undo =
    Box<dyn FnOnce(Arc<Conn>, Vec<i64>) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

impl ConnUse {
    /// If this use is dropped unfinished, `undo` runs (on the current runtime) instead of the
    /// connection being closed.
    pub(super) fn undo_on_drop(&mut self, undo: Undo) {
        self.undo = Some(undo);
    }

    /// Gives `keys` back, unlocked (or never granted), as the end of an undo.
    pub(super) fn give_back(conn: &Conn, keys: &[i64]) {
        unreserve(&mut conn.state(), keys);
    }

    /// Reserves `key` too, unless held or requested here already (then `false`).
    pub(super) fn reserve(&mut self, key: i64) -> bool {
        let mut state = self.conn.state();
        if state.keys.contains_key(&key) {
            return false;
        }
        state.keys.insert(key, 1);
        self.keys.push(key);
        true
    }

    /// Gives back `key`, unlocked (or never granted).
    pub(super) fn unreserve(&mut self, key: i64) {
        if let Some(at) = self.keys.iter().position(|k| *k == key) {
            self.keys.swap_remove(at);
            unreserve(&mut self.conn.state(), &[key]);
        }
    }

    /// The acquire is granted what it still reserves: the grant keeps the keys, and the use
    /// of the connection (ended by [`Conns::ungranted`]).
    pub(super) fn granted(mut self, owner: &OwnerId, limit_key: Option<i64>) -> Arc<Conn> {
        self.done = true;
        let conn = Arc::clone(&self.conn);
        if self.dedicated {
            conn.state().waiting = false;
        }
        conn.add_grant(owner, limit_key);
        conn
    }

    /// The acquire is granted every key it reserves, one grant per owner: each grant keeps its
    /// key and its own use of the connection (ended by [`Conns::ungranted`]).
    pub(super) fn granted_all(mut self, owners: &[&OwnerId]) -> Arc<Conn> {
        self.done = true;
        let conn = Arc::clone(&self.conn);
        for owner in owners {
            conn.add_grant(owner, None);
        }
        self.sessions
            .add_users(&conn, owners.len().saturating_sub(1));
        conn
    }

    /// The acquire (or read) ends without a grant, with nothing held: every key goes back.
    pub(super) fn finish(mut self) {
        self.done = true;
        {
            let mut state = self.conn.state();
            if self.dedicated {
                state.waiting = false;
            }
            unreserve(&mut state, &self.keys);
        }
        self.sessions.checkin(&self.conn);
    }
}

impl Drop for ConnUse {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let sessions = Arc::clone(&self.sessions);
        if let Some(undo) = self.undo.take() {
            let (conn, keys) = (Arc::clone(&self.conn), std::mem::take(&mut self.keys));
            let undone = undo(Arc::clone(&conn), keys);
            let spawned = self.conn.background.spawn(async move {
                undone.await;
                sessions.checkin(&conn);
            });
            if spawned {
                return;
            }
        } else if self.keys.is_empty() {
            // A read: it reserved nothing, so nothing is in doubt.
            sessions.checkin(&self.conn);
            return;
        }
        // Cancelled, failed or timed out while a statement may be under way: what the
        // connection holds is in doubt.
        self.conn
            .abandon("an acquire on this connection was interrupted");
        self.sessions.checkin(&self.conn);
    }
}

/// The lock connections of one backend.
pub(super) struct Conns {
    url: PgUrl,
    timeout: Duration,
    sessions: Arc<Sessions<Conn>>,
    losses: broadcast::Sender<LostLease>,
    background: Background,
    /// How many connections could not be opened: an acquire that saw this count change
    /// failed to connect, not on a connection that was closed under it.
    connect_failures: AtomicU64,
}

impl std::fmt::Debug for Conns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conns")
            .field("url", &self.url)
            .field("open", &self.open_count())
            .finish_non_exhaustive()
    }
}

impl Conns {
    pub(super) fn new(url: PgUrl, timeout: Duration, background: Background) -> Self {
        Self {
            url,
            timeout,
            sessions: Arc::new(Sessions::new("postgres", timeout, background.clone())),
            losses: broadcast::channel(1024).0,
            background,
            connect_failures: AtomicU64::new(0),
        }
    }

    pub(super) const fn url(&self) -> &PgUrl {
        &self.url
    }

    pub(super) const fn background(&self) -> &Background {
        &self.background
    }

    /// A receiver of the grants lost with their connection.
    pub(super) fn losses(&self) -> broadcast::Receiver<LostLease> {
        self.losses.subscribe()
    }

    /// How many lock connections are open.
    pub(super) fn open_count(&self) -> usize {
        self.sessions
            .every()
            .iter()
            .filter(|conn| !conn.is_lost())
            .count()
    }

    /// A connection of `ttl` where `key` is neither held nor requested, with `key` reserved:
    /// one that holds other locks first (so locks share connections), else an idle one, else
    /// a new one.
    ///
    /// # Errors
    ///
    /// As [`PgUrl::open`] when a new connection is needed and cannot be made.
    pub(super) async fn for_try(&self, ttl: Duration, key: i64) -> Result<ConnUse> {
        let rank = |conn: &Conn| {
            let state = conn.state();
            (!state.waiting && !state.keys.contains_key(&key)).then_some(state.keys.len())
        };
        self.checkout(ttl, rank, &[key], false).await
    }

    /// A connection of `ttl` where none of `keys` is held or requested, with all of them
    /// reserved: for a set taken in one statement.
    ///
    /// # Errors
    ///
    /// As [`for_try`](Self::for_try).
    pub(super) async fn for_try_all(&self, ttl: Duration, keys: &[i64]) -> Result<ConnUse> {
        let rank = |conn: &Conn| {
            let state = conn.state();
            (!state.waiting && keys.iter().all(|key| !state.keys.contains_key(key)))
                .then_some(state.keys.len())
        };
        self.checkout(ttl, rank, keys, false).await
    }

    /// A connection of `ttl` with nothing on it, for an acquire that waits on the server,
    /// with `key` reserved.
    ///
    /// # Errors
    ///
    /// As [`for_try`](Self::for_try).
    pub(super) async fn for_wait(&self, ttl: Duration, key: i64) -> Result<ConnUse> {
        let rank = |conn: &Conn| {
            let state = conn.state();
            (!state.waiting && state.keys.is_empty()).then_some(0)
        };
        self.checkout(ttl, rank, &[key], true).await
    }

    /// A connection for statements that take no lock (an operator's read): an open one of
    /// `ttl` that is not waiting on the server, else a new one.
    ///
    /// # Errors
    ///
    /// As [`for_try`](Self::for_try).
    pub(super) async fn for_read(&self, ttl: Duration) -> Result<ConnUse> {
        let rank = |conn: &Conn| (!conn.state().waiting).then_some(0);
        self.checkout(ttl, rank, &[], false).await
    }

    /// A use of the connection `rank` ranks highest (else of a new one), with `keys` reserved
    /// and the connection `dedicated` to the use when asked.
    async fn checkout(
        &self,
        ttl: Duration,
        rank: impl Fn(&Conn) -> Option<usize>,
        keys: &[i64],
        dedicated: bool,
    ) -> Result<ConnUse> {
        let take = |conn: &Conn| {
            let mut state = conn.state();
            for key in keys {
                state.keys.insert(*key, 1);
            }
            state.waiting |= dedicated;
        };
        let (conn, _) = self
            .sessions
            .checkout_where(ttl, rank, take, || self.open(ttl))
            .await?;
        Ok(ConnUse {
            conn,
            keys: keys.to_vec(),
            dedicated,
            done: false,
            undo: None,
            sessions: Arc::clone(&self.sessions),
        })
    }

    /// A grant on `conn` was unlocked (or lost): its use of the connection ends.
    pub(super) fn ungranted(&self, conn: &Arc<Conn>) {
        self.sessions.checkin(conn);
    }

    /// How many connections could not be opened so far.
    pub(super) fn connect_failures(&self) -> u64 {
        self.connect_failures.load(Ordering::SeqCst)
    }

    /// Takes every connection whose end the client has seen (closed by the server) out of
    /// use, so the next checkout opens a fresh one instead.
    pub(super) fn forget_closed(&self) {
        for conn in self.sessions.every() {
            if conn.client.is_closed() {
                conn.abandon("the server closed the connection");
                self.sessions.forget(&conn);
            }
        }
    }

    async fn open(&self, ttl: Duration) -> Result<Arc<Conn>> {
        let (client, connection) = self.url.open(ttl, self.timeout).await.inspect_err(|_| {
            self.connect_failures.fetch_add(1, Ordering::SeqCst);
        })?;
        let conn = Arc::new(Conn {
            cancel: client.cancel_token(),
            connector: self.url.connector(),
            client,
            ttl,
            state: Mutex::default(),
            closing: CancellationToken::new(),
            end: SessionEnd::new(),
            notified: Notify::new(),
            prepared: Mutex::default(),
            background: self.background.clone(),
        });
        self.background.spawn(drive(
            connection,
            Arc::downgrade(&conn),
            conn.closing.clone(),
            self.losses.clone(),
        ));
        tracing::debug!(?ttl, "dlock: PostgreSQL lock connection opened");
        Ok(conn)
    }

    /// Closes every connection and waits, at most the operation timeout, until each socket
    /// is closed (the Locker is shut down): the server frees their locks.
    pub(super) async fn close_all(&self) {
        self.shut_down();
        if !self.background.settle(self.timeout).await {
            tracing::debug!("dlock: PostgreSQL connections still closing at shutdown");
        }
    }

    /// Closes every connection (the backend is dropped): the server frees their locks.
    pub(super) fn shut_down(&self) {
        for conn in self.sessions.drain() {
            let _ = conn.end.end("the PostgreSQL backend was dropped");
            conn.closing.cancel();
        }
    }
}

/// Polls `connection` until it ends, passing notifications on; then reports every grant on it
/// lost.
async fn drive(
    mut connection: PgConnection,
    conn: Weak<Conn>,
    closing: CancellationToken,
    losses: broadcast::Sender<LostLease>,
) {
    let ended = loop {
        let message = tokio::select! {
            message = std::future::poll_fn(|cx| connection.poll_message(cx)) => message,
            () = closing.cancelled() => break "closed by dlock".to_owned(),
        };
        match message {
            Some(Ok(AsyncMessage::Notification(_))) => {
                if let Some(conn) = conn.upgrade() {
                    conn.notified.notify_one();
                }
            }
            Some(Ok(_)) => {} // a notice
            Some(Err(error)) => break super::errors::describe(&error),
            None => break "the PostgreSQL connection closed".to_owned(),
        }
    };
    drop(connection); // closes the socket: the server frees the session's locks
    if let Some(conn) = conn.upgrade() {
        report_lost(&conn, &ended, &losses);
    }
}

/// The connection ended: every grant on it is lost.
fn report_lost(conn: &Conn, ended: &str, losses: &broadcast::Sender<LostLease>) {
    let reason = match conn.end.reason_or(String::new) {
        why if why.is_empty() => ended.to_owned(),
        why => format!("{why}: {ended}"),
    };
    let lost = conn.end.end_and_report(reason.clone(), losses);
    if lost == 0 {
        tracing::debug!(%reason, "dlock: PostgreSQL lock connection ended");
    } else {
        tracing::warn!(%reason, locks = lost, "dlock: PostgreSQL lock connection ended; its locks are lost");
    }
}
