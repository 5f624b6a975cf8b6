//! Redis Sentinel (`redis+sentinel://s1:26379,s2:26379/<master>[/db]`): the Redis backend on
//! a master that can move. The sentinels are asked where the master is (the address most of
//! them give first; another one only if that server does not say `ROLE` master and this one
//! does, as the Sentinel client protocol takes the first confirmed answer); the backend's
//! connections then follow it:
//! every sentinel's `+switch-master` announcement, a `READONLY` answer (the server was
//! demoted), a dropped connection or a timeout has the sentinels asked again, and when the
//! master moved, the command connection and the subscription move with it. A command that got
//! `READONLY` was not applied, so it is sent once more to the new master; anything else fails
//! with [`Error::Unavailable`] within the operation timeout and the next request goes to the
//! new master.
//!
//! With `min_replicas`, each command of a grant or renewal (sent inside [`ACKNOWLEDGED`]'s
//! scope) goes down a connection of its own followed by `WAIT` in the same write, so the
//! acknowledgement counts that very command (a reconnect cannot come between them) and a
//! `WAIT` for slow replicas holds up no other request of the backend.
//!
//! The redis crate's own Sentinel client (its `sentinel` feature) resolves the master at
//! connect time only (redis-rs#1438) and asks the sentinels one after another with no bound
//! for each, so a frozen sentinel would hold every resolution up; the few requests of the
//! Sentinel client protocol are written here instead.

use std::cell::Cell;
use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{
    Client, Cmd, IntoConnectionInfo, PushInfo, PushKind, RedisFuture, ServerErrorKind,
    TlsCertificates, Value,
};
use tokio::sync::{Notify, mpsc::UnboundedSender, watch};
use tokio_util::sync::CancellationToken;

use crate::backend::url_text::redact;
use crate::{Error, Result};

/// The sentinels' channel announcing a failover's new master:
/// `<master name> <old ip> <old port> <new ip> <new port>`.
const SWITCH_MASTER: &str = "+switch-master";

/// The longest pause between two attempts to find the master after a failed one.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

tokio::task_local! {
    /// Set around a grant or a renewal that replicas must acknowledge: each command a
    /// Sentinel connection sends meanwhile is followed by `WAIT` (see the module docs), and
    /// the acknowledgements of the last one are kept here.
    pub(crate) static ACKNOWLEDGED: Acknowledged;
}

/// How many replicas must acknowledge, for how long `WAIT` waits, and how many did for the
/// last command sent.
pub(crate) struct Acknowledged {
    wanted: u32,
    timeout: Duration,
    last: Cell<Option<u32>>,
}

impl Acknowledged {
    pub(crate) const fn new(wanted: u32, timeout: Duration) -> Self {
        Self {
            wanted,
            timeout,
            last: Cell::new(None),
        }
    }

    /// How many replicas acknowledged the last command sent in the current scope (0 if none
    /// was sent, or none answered).
    pub(crate) fn last() -> u32 {
        ACKNOWLEDGED
            .try_with(|scope| scope.last.get())
            .ok()
            .flatten()
            .unwrap_or(0)
    }
}

/// What a `redis+sentinel://` URL says.
#[derive(Debug, Clone)]
pub(crate) struct SentinelUrl {
    /// `redis://` or `rediss://`: the scheme of every connection, to sentinels and servers.
    scheme: &'static str,
    /// `host:port` of every sentinel.
    sentinels: Vec<String>,
    /// The name the sentinels monitor the master by.
    pub(crate) master_name: String,
    /// `user:password@` (as written, percent-encoded) for the servers, or empty.
    credentials: String,
    /// The database number.
    db: i64,
    /// Replicas that must acknowledge each grant and renewal (`WAIT`); 0: none.
    pub(crate) min_replicas: u32,
    /// How long a grant or renewal waits for them.
    pub(crate) replica_timeout: Duration,
}

impl SentinelUrl {
    /// Parses `redis+sentinel://[user:pw@]s1:26379,s2:26379/<master>[/db][?min_replicas=N&replica_timeout=D]`
    /// (`rediss+sentinel://` over TLS, to sentinels and servers alike).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the URL (password redacted) and what is wrong with it.
    pub(crate) fn parse(url: &str) -> Result<Self> {
        let bad = |reason: String| Error::config("backend", redact(url), reason);
        let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
        let scheme = if scheme.to_ascii_lowercase().starts_with("rediss") {
            "rediss"
        } else {
            "redis"
        };
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (credentials, hosts) = authority
            .rsplit_once('@')
            .map_or((String::new(), authority), |(user, hosts)| {
                (format!("{user}@"), hosts)
            });
        let sentinels: Vec<String> = hosts
            .split(',')
            .map(|host| {
                if host
                    .rsplit_once(':')
                    .is_some_and(|(_, port)| !port.contains(']'))
                {
                    host.to_owned()
                } else {
                    format!("{host}:26379")
                }
            })
            .collect();
        let mut segments = path.split('/').filter(|s| !s.is_empty());
        let master_name = segments.next().ok_or_else(|| {
            bad("expected the master's name after the sentinels: `redis+sentinel://s1:26379,s2:26379/mymaster`".into())
        })?;
        let master_name = percent_encoding::percent_decode_str(master_name)
            .decode_utf8()
            .map_err(|_| bad("the master's name is not valid UTF-8".into()))?
            .into_owned();
        let db = match segments.next() {
            None => 0,
            Some(db) => db
                .parse()
                .map_err(|_| bad(format!("`{db}` is not a database number")))?,
        };
        if let Some(extra) = segments.next() {
            return Err(bad(format!(
                "unexpected `/{extra}`: the path is `/<master name>[/<db>]`"
            )));
        }
        let mut parsed = Self {
            scheme,
            sentinels,
            master_name,
            credentials,
            db,
            min_replicas: 0,
            replica_timeout: Duration::from_secs(1),
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = percent_encoding::percent_decode_str(value).decode_utf8_lossy();
            let value = value.as_ref();
            match name {
                "min_replicas" => {
                    parsed.min_replicas = value.parse().map_err(|_| {
                        bad(format!(
                            "min_replicas={value}: expected a number of replicas"
                        ))
                    })?;
                }
                "replica_timeout" => {
                    parsed.replica_timeout = dlock_grammar::duration::parse(value)
                        .map_err(|e| bad(format!("replica_timeout={value}: {e}")))?;
                    if parsed.replica_timeout.is_zero() {
                        // `WAIT n 0` waits forever.
                        return Err(bad("replica_timeout=0: give a positive duration".into()));
                    }
                }
                other => {
                    return Err(bad(format!(
                        "unknown option `{other}`; a Sentinel URL takes min_replicas and replica_timeout"
                    )));
                }
            }
        }
        // Each address must be one the client takes.
        for sentinel in &parsed.sentinels {
            parsed
                .sentinel_info(sentinel)
                .map_err(|e| bad(format!("sentinel `{sentinel}`: {e}")))?;
        }
        Ok(parsed)
    }

    /// The settings of a connection to the sentinel at `address` (no credentials: a
    /// sentinel's password, if it has one, is its own; RESP2).
    fn sentinel_info(&self, address: &str) -> redis::RedisResult<redis::ConnectionInfo> {
        format!("{}://{address}", self.scheme).into_connection_info()
    }

    /// The settings of a connection to the server at `address` (`host:port`): the URL's
    /// credentials and database, RESP3 (for pub/sub pushes).
    pub(crate) fn server_info(&self, address: &str) -> redis::RedisResult<redis::ConnectionInfo> {
        format!(
            "{}://{}{address}/{}?protocol=resp3",
            self.scheme, self.credentials, self.db
        )
        .into_connection_info()
    }

    /// The settings of every sentinel (for the TLS files' check).
    pub(crate) fn sentinel_infos(&self) -> Vec<redis::ConnectionInfo> {
        self.sentinels
            .iter()
            .filter_map(|s| self.sentinel_info(s).ok())
            .collect()
    }
}

/// The master of one Sentinel-managed group as a backend's connections see it: where it is,
/// how many times it moved, and the connections that follow it. Background tasks listen to
/// every sentinel's `+switch-master` and find the master again when asked; they end when
/// this is dropped.
pub(crate) struct Sentinels {
    url: SentinelUrl,
    certs: Option<TlsCertificates>,
    timeout: Duration,
    master: Mutex<Master>,
    /// The generation of the master, bumped at each move.
    moved: watch::Sender<u64>,
    slots: Mutex<Vec<Weak<Slot>>>,
    /// Asks the background task to find the master again.
    look_again: Arc<Notify>,
    stop: CancellationToken,
}

impl std::fmt::Debug for Sentinels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sentinels")
            .field("master_name", &self.url.master_name)
            .field("sentinels", &self.url.sentinels)
            .field("master", &self.lock_master().address)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone)]
struct Master {
    /// `host:port`.
    address: String,
    generation: u64,
}

impl Drop for Sentinels {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Sentinels {
    /// Finds the master (within `timeout`) and starts following it.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] naming the sentinels when none of them names a master that says
    /// it is one within `timeout`.
    pub(crate) async fn connect(
        url: SentinelUrl,
        certs: Option<TlsCertificates>,
        timeout: Duration,
    ) -> Result<Arc<Self>> {
        let address = find_master(&url, certs.as_ref(), timeout).await?;
        let sentinels = Arc::new(Self {
            url,
            certs,
            timeout,
            master: Mutex::new(Master {
                address,
                generation: 0,
            }),
            moved: watch::Sender::new(0),
            slots: Mutex::new(Vec::new()),
            look_again: Arc::new(Notify::new()),
            stop: CancellationToken::new(),
        });
        tokio::spawn(follow(
            Arc::downgrade(&sentinels),
            Arc::clone(&sentinels.look_again),
            sentinels.stop.clone(),
        ));
        for sentinel in &sentinels.url.sentinels {
            let Ok(info) = sentinels.url.sentinel_info(sentinel) else {
                continue;
            };
            tokio::spawn(listen(
                info,
                sentinels.certs.clone(),
                sentinels.url.master_name.clone(),
                Arc::downgrade(&sentinels),
                sentinels.stop.clone(),
            ));
        }
        Ok(sentinels)
    }

    /// A connection to the master that follows it; with `pushes`, pub/sub messages arrive
    /// there (and a disconnection notice when the master moved, so subscribers subscribe
    /// again and look at what they missed).
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] when the master cannot be reached within the timeout.
    ///
    /// With `acknowledged`, the connection has a second one for the commands sent in
    /// [`ACKNOWLEDGED`]'s scope.
    pub(crate) async fn open(
        self: &Arc<Self>,
        pushes: Option<UnboundedSender<PushInfo>>,
        acknowledged: bool,
    ) -> Result<SentinelConn> {
        let slot = self.open_slot(pushes).await?;
        let replicated = if acknowledged {
            Some(self.open_slot(None).await?)
        } else {
            None
        };
        Ok(SentinelConn {
            slot,
            replicated,
            sentinels: Arc::clone(self),
        })
    }

    async fn open_slot(&self, pushes: Option<UnboundedSender<PushInfo>>) -> Result<Arc<Slot>> {
        let master = self.lock_master().clone();
        let client = self.client(&master.address)?;
        let config = super::conn::manager_config(self.timeout, pushes.clone());
        let manager = tokio::time::timeout(
            self.timeout,
            ConnectionManager::new_with_config(client, config),
        )
        .await
        .map_err(|_| Error::timeout("redis", "connect", self.timeout))?
        .map_err(|e| {
            Error::unavailable(
                "redis",
                format!("connecting to the master at {}: {e}", master.address),
            )
        })?;
        let slot = Arc::new(Slot {
            current: Mutex::new((master.generation, manager)),
            pushes,
            channels: Mutex::new(HashSet::new()),
        });
        self.lock_slots().push(Arc::downgrade(&slot));
        // The master may have moved while this connected: the next look re-points it.
        if self.lock_master().generation != master.generation {
            self.look_again.notify_one();
        }
        Ok(slot)
    }

    /// A client for the server at `address`, with the URL's TLS files.
    fn client(&self, address: &str) -> Result<Client> {
        let info = self
            .url
            .server_info(address)
            .map_err(|e| Error::config("backend", address.to_owned(), e.to_string()))?;
        super::conn::client(&info, self.certs.clone())
            .map_err(|e| Error::config("backend", address.to_owned(), e.to_string()))
    }

    /// The master is at `address`: every connection made for an earlier master's address
    /// (or left behind by a failed move) moves there.
    fn found_at(&self, address: String) {
        let (generation, moved) = {
            let mut master = self.lock_master();
            let moved = master.address != address;
            if moved {
                master.address.clone_from(&address);
                master.generation += 1;
            }
            (master.generation, moved)
        };
        if moved {
            tracing::warn!(
                master = %self.url.master_name,
                %address,
                "dlock: the Redis master moved (Sentinel failover); following it"
            );
        }
        let slots: Vec<Arc<Slot>> = {
            let mut slots = self.lock_slots();
            slots.retain(|slot| slot.strong_count() > 0);
            slots.iter().filter_map(Weak::upgrade).collect()
        };
        for slot in slots {
            if slot.lock().0 < generation {
                self.repoint(&slot, generation, &address);
            }
        }
        if moved {
            self.moved.send_replace(generation);
        }
    }

    /// Points `slot` at the master at `address` (of `generation`); if that fails, it stays
    /// behind and the next look tries again.
    fn repoint(&self, slot: &Slot, generation: u64, address: &str) {
        let Ok(client) = self.client(address) else {
            return;
        };
        let config = super::conn::manager_config(self.timeout, slot.pushes.clone());
        let Ok(manager) = ConnectionManager::new_lazy_with_config(client, config) else {
            return;
        };
        *slot.lock() = (generation, manager.clone());
        let Some(pushes) = &slot.pushes else {
            return;
        };
        // What was published on the old master is unknown: subscribers re-check, and every
        // channel is subscribed again on the new one (each confirmation wakes its waiters).
        let _ = pushes.send(PushInfo {
            kind: PushKind::Disconnection,
            data: Vec::new(),
        });
        let channels: Vec<String> = slot.channels().iter().cloned().collect();
        if !channels.is_empty() {
            let mut manager = manager;
            tokio::spawn(async move {
                for channel in channels {
                    let _ = manager.subscribe(&channel).await;
                }
            });
        }
    }

    /// Has the master looked for, and waits (at most the timeout) until it is found to have
    /// moved since `generation`; whether it did.
    async fn moved_since(&self, generation: u64) -> bool {
        let mut moved = self.moved.subscribe();
        self.look_again.notify_one();
        let waited = tokio::time::timeout(self.timeout, moved.wait_for(|g| *g > generation));
        matches!(waited.await, Ok(Ok(_)))
    }

    fn lock_master(&self) -> std::sync::MutexGuard<'_, Master> {
        self.master.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_slots(&self) -> std::sync::MutexGuard<'_, Vec<Weak<Slot>>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Finds the master again each time it is asked to, until it is found (backing off between
/// attempts), for as long as the [`Sentinels`] live.
async fn follow(sentinels: Weak<Sentinels>, asked: Arc<Notify>, stop: CancellationToken) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = asked.notified() => {}
        }
        let mut backoff = Duration::from_millis(50);
        loop {
            let Some(strong) = sentinels.upgrade() else {
                return;
            };
            let found = find_master(&strong.url, strong.certs.as_ref(), strong.timeout).await;
            if let Ok(address) = found {
                strong.found_at(address);
                break;
            }
            drop(strong);
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }
}

/// Listens to one sentinel's `+switch-master` (reconnecting after a second when it cannot
/// reach it) and has the master looked for at each announcement about ours, and after each
/// reconnect (an announcement may have been missed meanwhile).
async fn listen(
    sentinel: redis::ConnectionInfo,
    certs: Option<TlsCertificates>,
    master_name: String,
    sentinels: Weak<Sentinels>,
    stop: CancellationToken,
) {
    let mut connected_before = false;
    loop {
        let subscribed = async {
            let client = super::conn::client(&sentinel, certs.clone())?;
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(SWITCH_MASTER).await?;
            redis::RedisResult::Ok(pubsub)
        };
        let subscribed = tokio::select! {
            () = stop.cancelled() => return,
            subscribed = tokio::time::timeout(Duration::from_secs(5), subscribed) => subscribed,
        };
        if let Ok(Ok(mut pubsub)) = subscribed {
            let look_again = || match sentinels.upgrade() {
                Some(strong) => {
                    strong.look_again.notify_one();
                    true
                }
                None => false,
            };
            if connected_before && !look_again() {
                return;
            }
            connected_before = true;
            let mut messages = pubsub.on_message();
            loop {
                let message = tokio::select! {
                    () = stop.cancelled() => return,
                    message = messages.next() => message,
                };
                let Some(message) = message else { break };
                let payload: String = message.get_payload().unwrap_or_default();
                if payload.split(' ').next() == Some(master_name.as_str()) && !look_again() {
                    return;
                }
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(MAX_BACKOFF) => {}
        }
    }
}

/// Asks every sentinel at once where the master is (each within `timeout`), takes the
/// address most of them give — as soon as more than half agree — and checks that the server
/// there says it is the master (`ROLE`).
async fn find_master(
    url: &SentinelUrl,
    certs: Option<&TlsCertificates>,
    timeout: Duration,
) -> Result<String> {
    let mut asks: FuturesUnordered<_> = url
        .sentinels
        .iter()
        .map(|sentinel| async move {
            let asked = async {
                let info = url.sentinel_info(sentinel)?;
                let client = super::conn::client(&info, certs.cloned())?;
                let mut conn = client.get_multiplexed_async_connection().await?;
                redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(&url.master_name)
                    .query_async::<Option<(String, u16)>>(&mut conn)
                    .await
            };
            match tokio::time::timeout(timeout, asked).await {
                Ok(Ok(Some((host, port)))) => Ok(host_port(&host, port)),
                Ok(Ok(None)) => Err(format!(
                    "{sentinel} does not monitor a master named `{}`",
                    url.master_name
                )),
                Ok(Err(e)) => Err(format!("{sentinel}: {e}")),
                Err(_) => Err(format!("{sentinel}: no answer within {timeout:?}")),
            }
        })
        .collect();
    let mut votes: Vec<(String, usize)> = Vec::new();
    let mut failures = Vec::new();
    let majority = url.sentinels.len() / 2 + 1;
    let mut tried: Vec<String> = Vec::new();
    loop {
        let agreed = votes.iter().any(|(_, count)| *count >= majority);
        if !agreed && let Some(answer) = asks.next().await {
            match answer {
                Ok(address) => match votes.iter_mut().find(|(a, _)| *a == address) {
                    Some((_, count)) => *count += 1,
                    None => votes.push((address, 1)),
                },
                Err(failure) => failures.push(failure),
            }
            continue;
        }
        // Every sentinel answered, or a majority agree: the addresses named most first (a
        // sentinel that missed a failover may name the old master for a while), each taken
        // only if the server says it is the master.
        votes.sort_by_key(|(_, count)| std::cmp::Reverse(*count));
        for (address, _) in &votes {
            if tried.contains(address) {
                continue;
            }
            tried.push(address.clone());
            match role_of(url, certs, address, timeout).await {
                Ok(()) => return Ok(address.clone()),
                Err(failure) => failures.push(failure),
            }
        }
        if asks.is_empty() {
            break;
        }
        // A majority named a server that is not the master: hear the others out.
        votes.iter_mut().for_each(|(_, count)| *count = 0);
    }
    Err(Error::unavailable(
        "redis",
        format!(
            "no master `{}` found: {}",
            url.master_name,
            if failures.is_empty() {
                "no sentinel answered".to_owned()
            } else {
                failures.join("; ")
            }
        ),
    ))
}

/// Whether the server at `address` says it is the master (`ROLE`), within `timeout`; else
/// why not.
async fn role_of(
    url: &SentinelUrl,
    certs: Option<&TlsCertificates>,
    address: &str,
    timeout: Duration,
) -> std::result::Result<(), String> {
    let role = async {
        let info = url.server_info(address)?;
        let client = super::conn::client(&info, certs.cloned())?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        redis::cmd("ROLE").query_async::<Value>(&mut conn).await
    };
    match tokio::time::timeout(timeout, role).await {
        Ok(Ok(Value::Array(items))) if matches!(items.first(), Some(Value::BulkString(role)) if role == b"master") => {
            Ok(())
        }
        Ok(Ok(_)) => Err(format!(
            "a sentinel names {address}, which is not a master (a failover under way?)"
        )),
        Ok(Err(e)) => Err(format!("{address}: {e}")),
        Err(_) => Err(format!("{address}: no answer within {timeout:?}")),
    }
}

/// `host:port`, an IPv6 host in brackets.
fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// One connection that follows the master: the current server's connection, and the
/// master's generation it was made for.
struct Slot {
    current: Mutex<(u64, ConnectionManager)>,
    pushes: Option<UnboundedSender<PushInfo>>,
    /// The channels subscribed through it, subscribed again on a new master.
    channels: Mutex<HashSet<String>>,
}

impl Slot {
    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, ConnectionManager)> {
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn channels(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.channels.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn current(&self) -> (u64, ConnectionManager) {
        self.lock().clone()
    }
}

/// A connection to a Sentinel-managed master, wherever it is (see the module docs).
#[derive(Clone)]
pub(crate) struct SentinelConn {
    slot: Arc<Slot>,
    /// The connection of commands that replicas must acknowledge, if any.
    replicated: Option<Arc<Slot>>,
    sentinels: Arc<Sentinels>,
}

impl SentinelConn {
    /// What an error says about the master: a `READONLY` answer means it was demoted — if
    /// it is found to have moved, the request (which was not applied) may go again; a
    /// failed connection or a timeout has it looked for.
    async fn after_error(&self, generation: u64, error: &redis::RedisError) -> bool {
        if error.kind() == redis::ErrorKind::Server(ServerErrorKind::ReadOnly) {
            return self.sentinels.moved_since(generation).await;
        }
        if error.is_io_error()
            || error.is_timeout()
            || error.is_connection_dropped()
            || error.is_connection_refusal()
        {
            self.sentinels.look_again.notify_one();
        }
        false
    }

    pub(crate) async fn subscribe(&mut self, channel: &str) -> redis::RedisResult<()> {
        self.slot.channels().insert(channel.to_owned());
        let (generation, mut manager) = self.slot.current();
        let subscribed = manager.subscribe(channel).await;
        if let Err(error) = &subscribed {
            self.after_error(generation, error).await;
        }
        subscribed
    }

    pub(crate) async fn unsubscribe(&mut self, channel: &str) -> redis::RedisResult<()> {
        self.slot.channels().remove(channel);
        let (_, mut manager) = self.slot.current();
        manager.unsubscribe(channel).await
    }

    /// Sends `pipeline`'s commands `offset..offset + count` (a single command as a pipeline
    /// of one): on the connection that follows `WAIT` with them inside [`ACKNOWLEDGED`]'s
    /// scope, else on the shared one; once more to a new master after a `READONLY` answer.
    async fn send(&self, request: Request<'_>) -> redis::RedisResult<Vec<Value>> {
        let acknowledged = ACKNOWLEDGED.try_with(|s| (s.wanted, s.timeout)).ok();
        let slot = match (acknowledged, &self.replicated) {
            (Some(_), Some(replicated)) => replicated,
            _ => &self.slot,
        };
        let (generation, manager) = slot.current();
        let replies = request.send(manager, acknowledged).await;
        let error = match &replies {
            Err(error) => Some(error.clone()),
            // A server's error comes back as a value: the first command's tells whether
            // the server is a replica now (then no command of the request was applied).
            Ok(values) => match values.first() {
                Some(Value::ServerError(error)) => Some(error.clone().into()),
                _ => None,
            },
        };
        if let Some(error) = error
            && self.after_error(generation, &error).await
        {
            let (_, manager) = slot.current();
            return request.send(manager, acknowledged).await;
        }
        replies
    }
}

/// One request of a [`SentinelConn`]: a command, or some of a pipeline's.
#[derive(Clone, Copy)]
enum Request<'a> {
    Command(&'a Cmd),
    Pipeline(&'a redis::Pipeline, usize, usize),
}

impl Request<'_> {
    /// Sends it on `manager`, followed by `WAIT` when `acknowledged` says how many replicas
    /// for how long (whose count is kept in [`ACKNOWLEDGED`]). The replies of the request's
    /// commands.
    async fn send(
        self,
        mut manager: ConnectionManager,
        acknowledged: Option<(u32, Duration)>,
    ) -> redis::RedisResult<Vec<Value>> {
        let Some((wanted, timeout)) = acknowledged else {
            return match self {
                Self::Command(cmd) => manager.req_packed_command(cmd).await.map(|v| vec![v]),
                Self::Pipeline(pipeline, offset, count) => {
                    manager.req_packed_commands(pipeline, offset, count).await
                }
            };
        };
        let (mut pipeline, offset, count) = match self {
            Self::Command(cmd) => {
                let mut pipeline = redis::Pipeline::with_capacity(2);
                pipeline.add_command(cmd.clone());
                (pipeline, 0, 1)
            }
            Self::Pipeline(pipeline, offset, count) => (pipeline.clone(), offset, count),
        };
        pipeline
            .cmd("WAIT")
            .arg(wanted)
            .arg(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX));
        let mut replies = manager
            .req_packed_commands(&pipeline, offset, count + 1)
            .await?;
        let acked = match replies.pop() {
            Some(Value::Int(acked)) => u32::try_from(acked).unwrap_or(0),
            _ => 0,
        };
        let _ = ACKNOWLEDGED.try_with(|scope| scope.last.set(Some(acked)));
        Ok(replies)
    }
}

impl ConnectionLike for SentinelConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let mut replies = self.send(Request::Command(cmd)).await?;
            replies.pop().ok_or_else(|| {
                redis::RedisError::from((redis::ErrorKind::Client, "no reply to a command"))
            })
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(self.send(Request::Pipeline(pipeline, offset, count)))
    }

    fn get_db(&self) -> i64 {
        self.sentinels.url.db
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_the_sentinels_the_master_and_the_options() {
        let url = SentinelUrl::parse(
            "redis+sentinel://app:pw@a:1,b,c:3/mymaster/2?min_replicas=1&replica_timeout=250ms",
        )
        .unwrap();
        assert_eq!(url.sentinels, ["a:1", "b:26379", "c:3"]);
        assert_eq!(url.master_name, "mymaster");
        assert_eq!((url.db, url.min_replicas), (2, 1));
        assert_eq!(url.replica_timeout, Duration::from_millis(250));
        let server = url.server_info("10.0.0.1:6380").unwrap();
        assert_eq!(server.redis_settings().db(), 2);
        assert_eq!(server.redis_settings().username(), Some("app"));
        assert!(matches!(server.addr(), redis::ConnectionAddr::Tcp(..)));
        let tls = SentinelUrl::parse("rediss+sentinel://a:1/m").unwrap();
        assert!(matches!(
            tls.server_info("h:1").unwrap().addr(),
            redis::ConnectionAddr::TcpTls { .. }
        ));
    }

    #[test]
    fn bad_urls_say_what_is_wrong() {
        for (url, says) in [
            ("redis+sentinel://a:1", "master's name"),
            ("redis+sentinel://a:1/m/x", "not a database number"),
            ("redis+sentinel://a:1/m/0/z", "unexpected `/z`"),
            (
                "redis+sentinel://a:1/m?min_replicas=two",
                "min_replicas=two",
            ),
            (
                "redis+sentinel://a:1/m?replica_timeout=0s",
                "replica_timeout=0",
            ),
            ("redis+sentinel://a:1/m?wait=1", "unknown option `wait`"),
        ] {
            let error = SentinelUrl::parse(url).unwrap_err().to_string();
            assert!(error.contains(says), "{url}: {error}");
        }
    }
}
