//! What is measured: a backend (through dlock) and its raw-client floor.

use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use dlock_core::backend::PostgresBackend;
use dlock_core::backend::{
    AcquireOutcome, AcquireRequest, BackendKind, BackendUrl, LockBackend, MemoryBackend, OwnerId,
};
use dlock_core::{DlockConfig, Locker};
use dlock_harness::{EtcdServer, PostgresServer, RedisNodes, RedisServer, ZkServer};
use redis::aio::ConnectionManager;

use crate::redis_raw;
use crate::redlock::RedLockRaw;

/// The backends `--servers auto` measures, in order, each on servers started for it.
pub(crate) const STARTED: [&str; 6] = [
    "memory",
    "redis",
    "etcd",
    "zookeeper",
    "postgres",
    "redlock",
];

/// The backend under test.
pub(crate) enum Target {
    Memory(MemoryBackend),
    Redis {
        url: String,
        raw: ConnectionManager,
        _server: Option<Arc<RedisServer>>,
    },
    Etcd {
        url: String,
        raw: Box<etcd_client::KvClient>,
        _server: Option<Arc<EtcdServer>>,
    },
    ZooKeeper {
        url: String,
        raw: zookeeper_client::Client,
        _server: Option<Arc<ZkServer>>,
    },
    Postgres {
        url: String,
        raw: PgRaw,
        _server: Option<Arc<PostgresServer>>,
    },
    RedLock {
        url: String,
        raw: RedLockRaw,
        _masters: Option<Arc<RedisNodes>>,
    },
}

/// The PostgreSQL floor's client: one connection (tasks of the floor never meet on a key, so
/// advisory locks' re-entry within a session never shows), its statements prepared once.
#[derive(Clone)]
pub(crate) struct PgRaw {
    client: Arc<tokio_postgres::Client>,
    lock: tokio_postgres::Statement,
    unlock: tokio_postgres::Statement,
    ping: tokio_postgres::Statement,
    /// dlock's fenced grant, raw: the lock and the token bump in one statement.
    lock_fenced: tokio_postgres::Statement,
}

impl PgRaw {
    /// The statements the server ran so far (its own reads of the counts left out), by
    /// their first words; `None` without `pg_stat_statements`.
    async fn statements(&self) -> Option<std::collections::BTreeMap<String, u64>> {
        const SHOWN: usize = 32;
        let rows = self
            .client
            .query(
                "SELECT query, calls FROM pg_stat_statements \
                 WHERE query NOT LIKE '%pg_stat_statements%'",
                &[],
            )
            .await
            .ok()?;
        let mut counts = std::collections::BTreeMap::new();
        for row in rows {
            let words: Vec<&str> = row.get::<_, &str>(0).split_whitespace().collect();
            let mut name: String = words.join(" ").chars().take(SHOWN).collect();
            if name.chars().count() == SHOWN {
                name.push('…');
            }
            let calls = u64::try_from(row.get::<_, i64>(1)).unwrap_or_default();
            *counts.entry(format!("`{name}`")).or_default() += calls;
        }
        Some(counts)
    }

    /// A new session with the floor's statements prepared (dlock's fence table must exist).
    async fn connect(url: &str) -> Result<Self, String> {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        let prepare = async |sql: &str| client.prepare(sql).await.map_err(|e| e.to_string());
        Ok(Self {
            lock: prepare("SELECT pg_advisory_lock($1)").await?,
            unlock: prepare("SELECT pg_advisory_unlock($1)").await?,
            ping: prepare("SELECT 1").await?,
            lock_fenced: prepare(
                "INSERT INTO dlock_fence AS f (lock_key, token) SELECT $1, 1 \
                 FROM (SELECT pg_advisory_lock($1)) AS l \
                 ON CONFLICT (lock_key) DO UPDATE SET token = f.token + 1 RETURNING f.token",
            )
            .await?,
            client: Arc::new(client),
        })
    }
}

/// Where the bench's own ZooKeeper keeps every lock path. ZooKeeper 3.7 and 3.8 keep read
/// and write statistics per top-level node (`read_per_namespace`, `write_per_namespace`) for
/// as long as the server runs, deleted nodes' included: the bench's hundreds of thousands of
/// fresh keys, each its own top-level path, filled a 1 GB heap with them (1,047,105
/// `AvgMinMaxCounter`s). Under one chroot they are one namespace. `--url` runs use the URL's
/// chroot, if any.
const ZK_CHROOT: &str = "/dlock-bench";

/// How the bench's own etcd compacts its key history: every minute, keeping the last minute
/// (etcd's periodic compactor runs every retention period below an hour). etcd keeps every
/// revision until it is compacted — its maintenance guide: "this history should be
/// periodically compacted to avoid performance degradation" — and every lock + unlock adds
/// two. Uncompacted, `many-keys`, `watchdog` and `uncontended` left ~2.4 M revisions in
/// ~450 MB of etcd's heap, and the semaphore's p99 wait went from 17.4 ms on a fresh server to
/// 43.4 ms. Compacting every minute keeps the heap small but not the tail (33.7 ms, measured
/// 2026-12-02: each compaction ran 0.6–5.4 s of forced commits); it is kept because a
/// production etcd compacts. `--url` runs use the server's own setting.
const ETCD_COMPACTION: [&str; 2] = [
    "--auto-compaction-mode=periodic",
    "--auto-compaction-retention=1m",
];

/// The session timeout of the raw ZooKeeper client (the server caps it at its maximum).
const TTL_FOR_RAW: Duration = Duration::from_secs(30);

impl Target {
    pub(crate) async fn from_url(url: &str) -> Result<Self, String> {
        let parsed = BackendUrl::parse(url).map_err(|e| e.to_string())?;
        match parsed.kind() {
            BackendKind::Memory => Ok(Self::Memory(MemoryBackend::new())),
            BackendKind::Redis => Self::redis(url.to_owned(), None).await,
            BackendKind::Etcd => Self::etcd(url.to_owned(), None).await,
            BackendKind::ZooKeeper => Self::zookeeper(url.to_owned(), None).await,
            BackendKind::Postgres => Self::postgres(url.to_owned(), None).await,
            BackendKind::RedLock => Self::redlock(url.to_owned(), None).await,
            other => Err(format!(
                "dlock-bench does not know a floor for the {other} backend yet"
            )),
        }
    }

    /// The backend named `kind` (one of [`STARTED`]) on servers started for it.
    pub(crate) async fn started(kind: &str) -> Result<Self, String> {
        match kind {
            "memory" => Ok(Self::Memory(MemoryBackend::new())),
            "redis" => Self::redis_started().await,
            "etcd" => Self::etcd_started().await,
            "zookeeper" => Self::zookeeper_started().await,
            "postgres" => Self::postgres_started().await,
            "redlock" => Self::redlock_started().await,
            other => Err(format!("dlock-bench starts no server for `{other}`")),
        }
    }

    async fn redis_started() -> Result<Self, String> {
        let server = RedisServer::start().await.map_err(|e| e.to_string())?;
        let url = server.url();
        Self::redis(url, Some(Arc::new(server))).await
    }

    /// An etcd started for the bench, compacting its key history every minute as a
    /// production etcd compacts it ([`ETCD_COMPACTION`]).
    async fn etcd_started() -> Result<Self, String> {
        let server = EtcdServer::start_with(&ETCD_COMPACTION)
            .await
            .map_err(|e| e.to_string())?;
        let url = server.url();
        Self::etcd(url, Some(Arc::new(server))).await
    }

    /// A ZooKeeper started for the bench, every side (dlock, the floor, the peers) under the
    /// chroot [`ZK_CHROOT`].
    async fn zookeeper_started() -> Result<Self, String> {
        let server = ZkServer::start().await.map_err(|e| e.to_string())?;
        let root = zookeeper_client::Client::connect(&server.connect_string())
            .await
            .map_err(|e| e.to_string())?;
        let persistent = zookeeper_client::CreateMode::Persistent
            .with_acls(zookeeper_client::Acls::anyone_all());
        root.create(ZK_CHROOT, &[], &persistent)
            .await
            .map_err(|e| e.to_string())?;
        let url = format!("{}{ZK_CHROOT}", server.url());
        Self::zookeeper(url, Some(Arc::new(server))).await
    }

    /// RedLock over five masters started for the bench.
    async fn redlock_started() -> Result<Self, String> {
        let masters = RedisNodes::start(5).await.map_err(|e| e.to_string())?;
        let url = masters.url();
        Self::redlock(url, Some(Arc::new(masters))).await
    }

    async fn redlock(url: String, masters: Option<Arc<RedisNodes>>) -> Result<Self, String> {
        Ok(Self::RedLock {
            raw: RedLockRaw::connect(&url).await?,
            url,
            _masters: masters,
        })
    }

    async fn postgres_started() -> Result<Self, String> {
        // Counting statements, as Redis counts commands (see `server_commands`); room for the
        // `held` scenario's 100,000 advisory locks in the server's shared lock table, which
        // has max_locks_per_transaction × max_connections slots (6,400 by default).
        let server = PostgresServer::start_with(&[
            "shared_preload_libraries=pg_stat_statements",
            "max_locks_per_transaction=2048",
        ])
        .await
        .map_err(|e| e.to_string())?;
        let url = server.url();
        Self::postgres(url, Some(Arc::new(server))).await
    }

    async fn postgres(url: String, server: Option<Arc<PostgresServer>>) -> Result<Self, String> {
        // The fenced floor bumps dlock's own fence table (created by a Locker's connect).
        let config = DlockConfig::from_toml_str(&format!("backend = \"{url}\""))
            .map_err(|e| e.to_string())?;
        drop(Locker::connect(&config).await.map_err(|e| e.to_string())?);
        let raw = PgRaw::connect(&url).await?;
        // Where the server loaded it (ours does); elsewhere the counts are left out.
        let _ = raw
            .client
            .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            .await;
        Ok(Self::Postgres {
            url,
            raw,
            _server: server,
        })
    }

    async fn zookeeper(url: String, server: Option<Arc<ZkServer>>) -> Result<Self, String> {
        let raw = zookeeper_client::Client::connector()
            .with_session_timeout(TTL_FOR_RAW)
            .connect(&zk_connect_string(&url))
            .await
            .map_err(|e| e.to_string())?;
        Ok(Self::ZooKeeper {
            url,
            raw,
            _server: server,
        })
    }

    async fn etcd(url: String, server: Option<Arc<EtcdServer>>) -> Result<Self, String> {
        let hosts = url
            .trim_start_matches("etcd://")
            .split('/')
            .next()
            .unwrap_or_default();
        let endpoints: Vec<String> = hosts.split(',').map(|h| format!("http://{h}")).collect();
        let client = etcd_client::Client::connect(endpoints, None)
            .await
            .map_err(|e| e.to_string())?;
        Ok(Self::Etcd {
            url,
            raw: Box::new(client.kv_client()),
            _server: server,
        })
    }

    async fn redis(url: String, server: Option<Arc<RedisServer>>) -> Result<Self, String> {
        let client = redis::Client::open(url.as_str()).map_err(|e| e.to_string())?;
        let raw = ConnectionManager::new(client)
            .await
            .map_err(|e| e.to_string())?;
        Ok(Self::Redis {
            url,
            raw,
            _server: server,
        })
    }

    /// The ZooKeeper connect string (`host:port,...[/chroot]`), for a peer client on the
    /// same ensemble and under the same chroot; `None` on other backends.
    pub(crate) fn zookeeper_hosts(&self) -> Option<String> {
        let Self::ZooKeeper { url, .. } = self else {
            return None;
        };
        Some(zk_connect_string(url))
    }

    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::Memory(_) => "memory",
            Self::Redis { .. } => "redis",
            Self::Etcd { .. } => "etcd",
            Self::ZooKeeper { .. } => "zookeeper",
            Self::Postgres { .. } => "postgres",
            Self::RedLock { .. } => "redlock",
        }
    }

    /// A new Locker ("process") on the backend, with the bench's ttl and the default
    /// settings otherwise.
    pub(crate) async fn locker(&self, ttl: Duration) -> Locker {
        self.locker_with(ttl, false).await
    }

    /// A new Locker with the bench's ttl, asking for a fencing token with every lock when
    /// `fencing`.
    pub(crate) async fn locker_with(&self, ttl: Duration, fencing: bool) -> Locker {
        let backend_url = match self {
            Self::Memory(table) => {
                let config = DlockConfig::default().with_ttl(ttl).with_fencing(fencing);
                return Locker::with_config(Arc::new(table.clone()), &config).expect("config");
            }
            Self::Redis { url, .. }
            | Self::Etcd { url, .. }
            | Self::ZooKeeper { url, .. }
            | Self::Postgres { url, .. }
            | Self::RedLock { url, .. } => url.clone(),
        };
        let config = DlockConfig::from_toml_str(&format!(
            "backend = \"{backend_url}\"\nttl = \"{}\"\nfencing = {fencing}",
            humantime::format_duration(ttl)
        ))
        .expect("config");
        Locker::connect(&config).await.expect("connect")
    }

    /// Whether fencing tokens cost this backend extra work, so a lock asking for one is
    /// measured in rows of its own (Redis: an `INCR` per grant; PostgreSQL: a row update and
    /// its commit). Memory, etcd and ZooKeeper issue them with every grant anyway.
    pub(crate) const fn tokens_cost_extra(&self) -> bool {
        matches!(self, Self::Redis { .. } | Self::Postgres { .. })
    }

    /// A handle for the raw floor: the minimal commands for one acquire and one release.
    pub(crate) fn raw(&self) -> Raw {
        match self {
            Self::Memory(table) => Raw::Memory(table.clone()),
            Self::Redis { raw, .. } => Raw::Redis(raw.clone()),
            Self::Etcd { raw, .. } => Raw::Etcd(raw.clone()),
            Self::ZooKeeper { raw, .. } => Raw::ZooKeeper {
                client: raw.clone(),
                held: None,
                known: std::collections::HashSet::new(),
            },
            Self::Postgres { raw, .. } => Raw::Postgres(raw.clone()),
            Self::RedLock { raw, .. } => Raw::RedLock(raw.clone()),
        }
    }

    /// One network round trip (PING / a read of a missing key), the unit of the floors;
    /// zero for memory. The best of 200.
    pub(crate) async fn round_trip(&self) -> Duration {
        let mut best = Duration::MAX;
        for _ in 0..200 {
            let started = Instant::now();
            match self {
                Self::Memory(_) => return Duration::ZERO,
                Self::Redis { raw, .. } => {
                    let mut conn = raw.clone();
                    let _: String = redis::cmd("PING")
                        .query_async(&mut conn)
                        .await
                        .expect("PING");
                }
                Self::Etcd { raw, .. } => {
                    let mut kv = (**raw).clone();
                    kv.get("dlock:bench:rtt", None).await.expect("etcd get");
                }
                Self::ZooKeeper { raw, .. } => {
                    raw.check_stat("/dlock-bench-rtt")
                        .await
                        .expect("zookeeper exists");
                }
                Self::Postgres { raw, .. } => {
                    raw.client.query(&raw.ping, &[]).await.expect("SELECT 1");
                }
                Self::RedLock { raw, .. } => raw.ping().await,
            }
            best = best.min(started.elapsed());
        }
        best
    }

    /// One raw lock + unlock (the `uncontended` floor's cycle: two round trips, and on etcd
    /// two commits), the median of 200; the unit of the floors whose locks change hands.
    pub(crate) async fn lock_cycle(&self) -> Duration {
        let mut raw = self.raw();
        let mut cycles = Vec::with_capacity(200);
        for _ in 0..200 {
            let started = Instant::now();
            assert!(
                raw.acquire("dlock:bench:cycle", "bench-cycle", Duration::from_secs(30))
                    .await
            );
            raw.release("dlock:bench:cycle", "bench-cycle", Duration::from_secs(30))
                .await;
            cycles.push(started.elapsed());
        }
        cycles.sort();
        cycles[cycles.len() / 2]
    }

    /// The contended scenario done raw, where the server queues waiters itself (PostgreSQL):
    /// `tasks` raw sessions, each `rounds` times blocking in `pg_advisory_lock` on one key,
    /// holding it `hold`, then unlocking. Returns each hand-off (the unlock's send to the next
    /// grant), measured as dlock's contended row measures its own. `None` for other backends.
    pub(crate) async fn raw_contended_handoffs(
        &self,
        tasks: usize,
        rounds: usize,
        hold: Duration,
    ) -> Option<Vec<Duration>> {
        let Self::Postgres { url, .. } = self else {
            return None;
        };
        let key = PostgresBackend::advisory_key("dlock:bench:handoff");
        let released = Arc::new(std::sync::Mutex::new((None::<Instant>, Vec::new())));
        let mut running = Vec::with_capacity(tasks);
        for _ in 0..tasks {
            let (session, released) = (
                PgRaw::connect(url).await.expect("connect"),
                released.clone(),
            );
            running.push(tokio::spawn(async move {
                for _ in 0..rounds {
                    session
                        .client
                        .query(&session.lock, &[&key])
                        .await
                        .expect("pg_advisory_lock");
                    let granted = Instant::now();
                    {
                        let mut r = released.lock().unwrap();
                        if let Some(at) = r.0.take() {
                            r.1.push(granted.saturating_duration_since(at));
                        }
                    }
                    tokio::time::sleep(hold).await;
                    released.lock().unwrap().0 = Some(Instant::now());
                    session
                        .client
                        .query(&session.unlock, &[&key])
                        .await
                        .expect("pg_advisory_unlock");
                }
            }));
        }
        for task in running {
            task.await.expect("raw task");
        }
        let handoffs = std::mem::take(&mut released.lock().unwrap().1);
        Some(handoffs)
    }

    /// The contended load with the peer a user of this backend would pick instead, where the
    /// bench has one that waits (RedLock: `rslock`'s `acquire`); `None` elsewhere.
    pub(crate) async fn peer_contended(
        &self,
        tasks: usize,
        rounds: usize,
        hold: Duration,
    ) -> Option<crate::stats::Samples> {
        let Self::RedLock { raw, .. } = self else {
            return None;
        };
        Some(
            raw.peer_contended("dlock:bench:cp", tasks, rounds.max(1), hold)
                .await,
        )
    }

    /// Scripts Redis ran so far (`EVALSHA` + `EVAL`), to count renewal round trips; `None`
    /// on other backends.
    pub(crate) async fn server_scripts(&self) -> Option<u64> {
        if !matches!(self, Self::Redis { .. }) {
            return None;
        }
        let commands = self.server_commands().await?;
        let calls = |name: &str| commands.get(name).copied().unwrap_or(0);
        Some(calls("evalsha") + calls("eval"))
    }

    /// Requests the server has received so far: on etcd its gRPC messages
    /// (`grpc_server_msg_received_total` on `/metrics`: unary calls and every message on a
    /// stream — keepalives, watch requests), on ZooKeeper its packets (`zk_packets_received`
    /// of `mntr`: requests and pings). The first endpoint of the URL only (the bench's servers
    /// are single members); `None` on other backends or when the server does not answer.
    pub(crate) async fn server_requests(&self) -> Option<u64> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (url, request, name): (&str, &[u8], &str) = match self {
            Self::Etcd { url, .. } => (
                url,
                b"GET /metrics HTTP/1.0\r\nHost: etcd\r\n\r\n",
                "grpc_server_msg_received_total",
            ),
            Self::ZooKeeper { url, .. } => (url, b"mntr", "zk_packets_received"),
            _ => return None,
        };
        // `scheme://[user:pw@]host:port[,host:port...][/path]` → the first `host:port`.
        let hosts = url.split_once("://")?.1;
        let hosts = hosts.rsplit_once('@').map_or(hosts, |(_, rest)| rest);
        let address = hosts.split([',', '/', '?']).next()?;
        let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
        stream.write_all(request).await.ok()?;
        let mut reply = String::new();
        stream.read_to_string(&mut reply).await.ok()?;
        let total: f64 = reply
            .lines()
            .filter(|line| {
                line.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with(['{', ' ', '\t']))
            })
            .filter_map(|line| line.split_whitespace().last()?.parse::<f64>().ok())
            .sum();
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "a count, printed by the server as a float"
        )]
        Some(total as u64)
    }

    /// Redis's `INFO section`; `None` on other backends.
    async fn redis_info(&self, section: &str) -> Option<String> {
        let Self::Redis { raw, .. } = self else {
            return None;
        };
        let mut conn = raw.clone();
        redis::cmd("INFO")
            .arg(section)
            .query_async(&mut conn)
            .await
            .ok()
    }

    /// The memory Redis uses for its data (`used_memory`); `None` on other backends.
    pub(crate) async fn server_memory(&self) -> Option<u64> {
        let info = self.redis_info("memory").await?;
        info.lines()
            .find_map(|line| line.strip_prefix("used_memory:"))
            .and_then(|bytes| bytes.trim().parse().ok())
    }

    /// Commands Redis ran so far, by name (`INFO` left out), counting those a script runs
    /// inside it; on PostgreSQL the statements it ran (`pg_stat_statements`, top level), by
    /// their first words; `None` on other backends or when the server does not count.
    pub(crate) async fn server_commands(&self) -> Option<std::collections::BTreeMap<String, u64>> {
        if let Self::Postgres { raw, .. } = self {
            return raw.statements().await;
        }
        let info = self.redis_info("commandstats").await?;
        let calls = info
            .lines()
            .filter_map(|line| {
                let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(":calls=")?;
                let calls = rest.split(',').next()?.parse::<u64>().ok()?;
                (name != "info").then(|| (name.to_owned(), calls))
            })
            .collect();
        Some(calls)
    }
}

/// The raw client of the floor.
#[derive(Clone)]
pub(crate) enum Raw {
    Memory(MemoryBackend),
    Redis(ConnectionManager),
    /// etcd's floor: a put-if-absent transaction, then a delete.
    Etcd(Box<etcd_client::KvClient>),
    /// ZooKeeper's floor: create an ephemeral sequential node under the lock path and list the
    /// children right behind it (one round trip), delete the node — without Curator's names,
    /// watches or lost-reply handling. A lock path this client has not used is made with the
    /// node in one multi, as dlock makes it (where the recipe's create would be answered
    /// `NoNode`, then `mkdir`, then created again).
    ZooKeeper {
        client: zookeeper_client::Client,
        /// The node this client holds.
        held: Option<String>,
        /// The lock paths this client used.
        known: std::collections::HashSet<String>,
    },
    /// PostgreSQL's floor: `pg_advisory_lock` and `pg_advisory_unlock` (prepared), on the
    /// key dlock would use.
    Postgres(PgRaw),
    /// RedLock's floor: `SET NX PX` on every master at once, then the owner-checked delete
    /// on every master at once.
    RedLock(RedLockRaw),
}

impl Raw {
    /// One attempt to take `key`; `true` if taken.
    pub(crate) async fn acquire(&mut self, key: &str, owner: &str, ttl: Duration) -> bool {
        match self {
            Self::Memory(table) => {
                let req = AcquireRequest::new(key, OwnerId::from_string(owner), ttl);
                let outcome = table
                    .acquire(&req, Some(Instant::now()))
                    .await
                    .expect("memory");
                matches!(outcome, AcquireOutcome::Acquired(_))
            }
            Self::Redis(conn) => redis_raw::set_nx_px(conn, key, owner, ttl).await,
            Self::Etcd(kv) => {
                use etcd_client::{Compare, CompareOp, Txn, TxnOp};
                let txn = Txn::new()
                    .when([Compare::create_revision(key, CompareOp::Equal, 0)])
                    .and_then([TxnOp::put(key, owner, None)]);
                kv.txn(txn).await.expect("etcd txn").succeeded()
            }
            Self::ZooKeeper {
                client,
                held,
                known,
            } => {
                use futures_util::future::join;
                use zookeeper_client::{Acls, CreateMode, Error, MultiWriteResult};
                let dir = format!("/{key}");
                let node = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
                let container = CreateMode::Container.with_acls(Acls::anyone_all());
                let prefix = format!("{dir}/lock-");
                let mut with_dir = known.insert(dir.clone());
                // Each create goes with the listing right behind it (one round trip: a
                // session's requests are served in order), as dlock sends them.
                let (created, listed) = loop {
                    if with_dir {
                        let mut multi = client.new_multi_writer();
                        multi.add_create(&dir, &[], &container).expect("a path");
                        multi
                            .add_create(&prefix, owner.as_bytes(), &node)
                            .expect("a path");
                        let (committed, listed) =
                            join(multi.commit(), client.list_children(&dir)).await;
                        match committed.map_err(Error::from) {
                            Ok(results) => match &results[1] {
                                MultiWriteResult::Create { path, .. } => {
                                    let name = path.rsplit('/').next().unwrap_or_default();
                                    break (name.to_owned(), listed);
                                }
                                other => panic!("zookeeper multi: {other:?}"),
                            },
                            Err(Error::NodeExists) => with_dir = false,
                            Err(Error::NoNode) => {
                                client
                                    .mkdir(&dir, &container)
                                    .await
                                    .expect("zookeeper mkdir");
                                with_dir = false;
                            }
                            Err(error) => panic!("zookeeper multi: {error}"),
                        }
                    } else {
                        let created = client.create(&prefix, owner.as_bytes(), &node);
                        match join(created, client.list_children(&dir)).await {
                            (Ok((_, sequence)), listed) => {
                                break (format!("lock-{sequence}"), listed);
                            }
                            (Err(Error::NoNode), _) => with_dir = true,
                            (Err(error), _) => panic!("zookeeper create: {error}"),
                        }
                    }
                };
                let children = match listed {
                    Ok(children) if children.contains(&created) => children,
                    _ => client.list_children(&dir).await.expect("zookeeper list"),
                };
                let path = format!("{dir}/{created}");
                if children.iter().min() == Some(&created) {
                    *held = Some(path);
                    true
                } else {
                    client.delete(&path, None).await.expect("zookeeper delete");
                    false
                }
            }
            Self::Postgres(raw) => {
                let key = PostgresBackend::advisory_key(key);
                raw.client
                    .query(&raw.lock, &[&key])
                    .await
                    .expect("pg_advisory_lock");
                true
            }
            Self::RedLock(raw) => raw.acquire(key, owner, ttl).await,
        }
    }

    /// The owner-checked release.
    pub(crate) async fn release(&mut self, key: &str, owner: &str, ttl: Duration) {
        match self {
            Self::Memory(table) => {
                let req = AcquireRequest::new(key, OwnerId::from_string(owner), ttl);
                let lease = dlock_core::backend::Lease::new(&req, Instant::now());
                table.release(&lease).await.expect("memory");
            }
            Self::Redis(conn) => redis_raw::compare_and_delete(conn, key, owner).await,
            Self::Etcd(kv) => {
                kv.delete(key, None).await.expect("etcd delete");
            }
            Self::ZooKeeper { client, held, .. } => {
                if let Some(path) = held.take() {
                    client.delete(&path, None).await.expect("zookeeper delete");
                }
            }
            Self::Postgres(raw) => {
                let key = PostgresBackend::advisory_key(key);
                raw.client
                    .query(&raw.unlock, &[&key])
                    .await
                    .expect("pg_advisory_unlock");
            }
            Self::RedLock(raw) => raw.release(key, owner).await,
        }
    }

    /// One acquire + release with the peer a user of this backend would pick instead:
    /// ZooKeeper, `zookeeper-client`'s own lock (`Client::lock` with Curator's `lock-` names),
    /// released by deleting its node; RedLock, `rslock`. `None` for other backends.
    pub(crate) async fn peer_cycle(&mut self, key: &str) -> Option<()> {
        use zookeeper_client::{Acls, CreateMode, LockOptions, LockPrefix};
        if let Self::RedLock(raw) = self {
            raw.peer_cycle(key, Duration::from_secs(30)).await;
            return Some(());
        }
        let Self::ZooKeeper { client, .. } = self else {
            return None;
        };
        let dir = format!("/{key}");
        let options = LockOptions::new(Acls::anyone_all())
            .with_ancestor_options(CreateMode::Container.with_acls(Acls::anyone_all()))
            .expect("options");
        let prefix = LockPrefix::new_curator(&dir, "lock-").expect("prefix");
        let lock = client.lock(prefix, b"", options).await.expect("peer lock");
        client
            .delete(lock.lock_path(), None)
            .await
            .expect("peer unlock");
        // Its drop would delete the node again, in the background.
        std::mem::forget(lock);
        Some(())
    }

    /// The same work as dlock's uncontended fenced acquire + release, raw. Redis: `SET NX PX`
    /// and `INCR` of the fencing counter in one pipeline, and dlock's release script (an
    /// owner-checked delete that publishes when a waiter marked the lock). PostgreSQL: the
    /// statement that takes the lock and bumps the fence row, then the unlock. Tells how much
    /// of the gap to the floor is the protocol (the fencing token, the release notification)
    /// rather than dlock's code. `None` for backends without one.
    pub(crate) async fn cycle_with_fencing_and_notify(
        &mut self,
        key: &str,
        owner: &str,
        ttl: Duration,
    ) -> Option<()> {
        if let Self::Postgres(raw) = self {
            let key = PostgresBackend::advisory_key(key);
            raw.client
                .query(&raw.lock_fenced, &[&key])
                .await
                .expect("fenced grant");
            raw.client
                .query(&raw.unlock, &[&key])
                .await
                .expect("pg_advisory_unlock");
            return Some(());
        }
        let Self::Redis(conn) = self else {
            return None;
        };
        static RELEASE: LazyLock<redis::Script> = LazyLock::new(|| {
            redis::Script::new(
                "local holder = redis.pcall('get', KEYS[1]) \
                 if holder == ARGV[1] then redis.call('del', KEYS[1]) if not KEYS[2] then return 0 end \
                 elseif holder == ARGV[1] .. '|waited' then redis.call('del', KEYS[1]) \
                 else return -1 end \
                 if KEYS[2] then redis.call('set', KEYS[2], '1', 'PX', ARGV[3]) end \
                 return redis.call('publish', KEYS[1] .. ':released', ARGV[2] or ARGV[1])",
            )
        });
        let (set, token): (Option<String>, i64) = redis::pipe()
            .cmd("SET")
            .arg(key)
            .arg(owner)
            .arg("NX")
            .arg("PX")
            .arg(ttl.as_millis() as u64)
            .cmd("INCR")
            .arg(format!("{key}:fence"))
            .query_async(conn)
            .await
            .expect("pipelined acquire");
        assert!(set.is_some() && token >= 1, "key {key} unexpectedly held");
        let _: i64 = RELEASE
            .key(key)
            .arg(owner)
            .invoke_async(conn)
            .await
            .expect("EVALSHA release");
        Some(())
    }
}

/// A `zk://` URL's connect string: its hosts and chroot, without credentials or options.
fn zk_connect_string(url: &str) -> String {
    let rest = url.trim_start_matches("zk://");
    let rest = rest.split('?').next().unwrap_or_default();
    let (hosts, chroot) = rest.split_once('/').unwrap_or((rest, ""));
    let hosts = hosts.rsplit('@').next().unwrap_or_default(); // no credentials
    if chroot.is_empty() {
        hosts.to_owned()
    } else {
        format!("{hosts}/{chroot}")
    }
}
