//! Connections to a single Redis server, a Redis Cluster or a Sentinel-managed master,
//! behind one type.
//!
//! All reconnect by themselves ([`ConnectionManager`], [`ClusterConnection`],
//! [`SentinelConn`], which also follows the master when it moves) and speak RESP3, so one
//! extra connection per backend can carry pub/sub pushes (resubscribed after a reconnect)
//! next to the command connection.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{
    Client, ClientTlsConfig, Cmd, ConnectionAddr, ConnectionInfo, IntoConnectionInfo,
    ProtocolVersion, PushInfo, RedisFuture, TlsCertificates, Value,
};
use tokio::sync::mpsc::UnboundedSender;

use super::sentinel::{SentinelConn, SentinelUrl, Sentinels};
use crate::backend::tls_files::{TlsFiles, refuse_for_plain_text};
use crate::backend::url_text::redact;
use crate::backend::{BackendKind, BackendUrl};
use crate::{Error, Result, TlsConfig};

/// What a `redis://` or `redis+cluster://` URL says, parsed once by
/// [`BackendUrl::parse`](crate::backend::BackendUrl::parse).
#[derive(Debug, Clone)]
pub(crate) enum RedisUrl {
    /// One server, RESP3 switched on. Boxed: with TLS compiled into the client (another
    /// crate of the build may ask for it), its settings are ten times a seed list's size.
    Single(Box<ConnectionInfo>),
    /// A cluster's seed nodes.
    Cluster(Vec<ConnectionInfo>),
    /// The sentinels of a master that can move.
    Sentinel(SentinelUrl),
}

impl RedisUrl {
    /// Parses `url` of `kind` into the client's connection settings.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the URL (password redacted) and what the client refused.
    pub(crate) fn parse(url: &str, kind: BackendKind) -> Result<Self> {
        let bad = |error: redis::RedisError| {
            Error::config("backend", redact(url), format!("not a Redis URL: {error}"))
        };
        Ok(match kind {
            BackendKind::RedisSentinel => Self::Sentinel(SentinelUrl::parse(url)?),
            BackendKind::RedisCluster => Self::Cluster(
                cluster_nodes(url)
                    .into_iter()
                    .map(|node| node.into_connection_info().map_err(bad))
                    .collect::<Result<_>>()?,
            ),
            _ => Self::Single(Box::new(
                resp3_url(url).into_connection_info().map_err(bad)?,
            )),
        })
    }
}

/// Room reserved in every command for its arguments: enough for a lock's commands and
/// scripts (a few keys of a few hundred bytes), so they are not copied over and over while
/// their arguments are written. Measured on the bench's `many-keys`: 0.81–0.84 of the floor
/// with commands that grow, 0.87–0.90 with this room (three runs each).
const COMMAND_ARGS: usize = 8;
const COMMAND_BYTES: usize = 512;

/// An empty command `name`, with room for a lock command's arguments.
pub(super) fn command(name: &str) -> Cmd {
    let mut cmd = Cmd::with_capacity(COMMAND_ARGS, COMMAND_BYTES);
    cmd.arg(name);
    cmd
}

/// A command connection (or the subscription connection) to Redis.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(SentinelConn),
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Single(_) => "Conn::Single",
            Self::Cluster(_) => "Conn::Cluster",
            Self::Sentinel(_) => "Conn::Sentinel",
        })
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
            Self::Sentinel(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Self::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
            Self::Sentinel(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
            Self::Sentinel(c) => c.get_db(),
        }
    }
}

impl Conn {
    pub(super) const fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster(_))
    }

    /// Whether each request is bounded by the connection itself (a single server's response
    /// and connect timeouts); a Cluster retries and a Sentinel connection follows the master
    /// on its own, so their requests get a timer of the caller's.
    pub(super) const fn bounds_itself(&self) -> bool {
        matches!(self, Self::Single(_))
    }

    pub(super) async fn subscribe(&mut self, channel: &str) -> redis::RedisResult<()> {
        match self {
            Self::Single(c) => c.subscribe(channel).await,
            Self::Cluster(c) => c.subscribe(channel).await,
            Self::Sentinel(c) => c.subscribe(channel).await,
        }
    }

    pub(super) async fn unsubscribe(&mut self, channel: &str) -> redis::RedisResult<()> {
        match self {
            Self::Single(c) => c.unsubscribe(channel).await,
            Self::Cluster(c) => c.unsubscribe(channel).await,
            Self::Sentinel(c) => c.unsubscribe(channel).await,
        }
    }
}

/// Opens a backend's two connections: one for commands, and one whose pub/sub messages are
/// delivered to `pushes`. A Sentinel URL's two follow one master together.
pub(super) async fn open_pair(
    url: &BackendUrl,
    timeout: Duration,
    pushes: UnboundedSender<PushInfo>,
) -> Result<(Conn, Conn)> {
    let certs = url_certificates(url)?;
    if let RedisUrl::Sentinel(sentinel) = redis_settings(url)? {
        let sentinels = Sentinels::connect(sentinel.clone(), certs, timeout).await?;
        let conn = sentinels.open(None, sentinel.min_replicas > 0).await?;
        let subscriber = sentinels.open(Some(pushes), false).await?;
        return Ok((Conn::Sentinel(conn), Conn::Sentinel(subscriber)));
    }
    let conn = open(url, certs.clone(), timeout, None).await?;
    let subscriber = open(url, certs, timeout, Some(pushes)).await?;
    Ok((conn, subscriber))
}

/// Opens a connection to a single server or Cluster; with `pushes`, pub/sub messages are
/// delivered there. `certs` are [`url_certificates`]' (read once for all of a backend's
/// connections).
async fn open(
    url: &BackendUrl,
    certs: Option<TlsCertificates>,
    timeout: Duration,
    pushes: Option<UnboundedSender<PushInfo>>,
) -> Result<Conn> {
    let settings = redis_settings(url)?;
    let connecting = async {
        match settings {
            RedisUrl::Cluster(nodes) => open_cluster(nodes, certs, timeout, pushes).await,
            RedisUrl::Single(info) => {
                let client = client(info, certs)?;
                open_client(client, timeout, pushes).await
            }
            RedisUrl::Sentinel(_) => unreachable!("opened by open_pair"),
        }
    };
    bounded_connect(&settings.infos(), timeout, connecting).await
}

/// Opens a connection through a client the application built (RESP3 switched on, its TLS
/// settings kept); with `pushes`, pub/sub messages are delivered there.
pub(super) async fn open_with_client(
    client: &Client,
    timeout: Duration,
    pushes: Option<UnboundedSender<PushInfo>>,
) -> Result<Conn> {
    let info = client.get_connection_info().clone();
    let resp3 = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    let info = info.set_redis_settings(resp3);
    let connecting = async {
        let client = Client::open(info.clone())?;
        open_client(client, timeout, pushes).await
    };
    bounded_connect(std::slice::from_ref(&info), timeout, connecting).await
}

/// Runs `connecting` within `timeout`; a failure names the servers it was connecting to, and
/// over TLS says what a server that speaks plain text looks like from here.
async fn bounded_connect(
    servers: &[ConnectionInfo],
    timeout: Duration,
    connecting: impl Future<Output = redis::RedisResult<Conn>>,
) -> Result<Conn> {
    let addresses: Vec<String> = servers.iter().map(|info| info.addr().to_string()).collect();
    let addresses = addresses.join(", ");
    let tls = servers
        .iter()
        .any(|info| matches!(info.addr(), ConnectionAddr::TcpTls { .. }));
    let hint = if tls {
        "; the URL asks for TLS (`rediss://`): if the server speaks plain text, use `redis://`, \
         or point at its `tls-port`"
    } else {
        ""
    };
    match tokio::time::timeout(timeout, connecting).await {
        Err(_) if tls => Err(Error::unavailable(
            "redis",
            format!("connecting to {addresses}: no TLS session within {timeout:?}{hint}"),
        )),
        Err(_) => Err(Error::timeout("redis", "connect", timeout)),
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(error)) => Err(match super::errors::from_redis(error) {
            Error::Unavailable { source, .. } => Error::unavailable(
                "redis",
                format!("connecting to {addresses}: {source}{hint}"),
            ),
            Error::Refused { source, .. } => {
                Error::refused("redis", format!("connecting to {addresses}: {source}"))
            }
            other => other,
        }),
    }
}

/// The TLS files of `url`'s connections, read once; `None` for plain text.
///
/// # Errors
///
/// As [`certificates`]; [`Error::Config`] for a URL that is not `redis://`.
pub(super) fn url_certificates(url: &BackendUrl) -> Result<Option<TlsCertificates>> {
    certificates(&redis_settings(url)?.infos(), url.tls())
}

fn redis_settings(url: &BackendUrl) -> Result<&RedisUrl> {
    url.redis()
        .ok_or_else(|| Error::config("backend", redact(url.as_str()), "not a `redis://` URL"))
}

/// `redis://...` with RESP3 switched on (pub/sub pushes need it).
fn resp3_url(url: &str) -> String {
    if url.contains("protocol=") {
        url.to_owned()
    } else if url.contains('?') {
        format!("{url}&protocol=resp3")
    } else if url
        .trim_start_matches("redis://")
        .trim_start_matches("rediss://")
        .contains('/')
    {
        format!("{url}?protocol=resp3")
    } else {
        format!("{url}/?protocol=resp3")
    }
}

impl RedisUrl {
    /// The connection settings of every server (or sentinel) the URL names.
    fn infos(&self) -> Vec<ConnectionInfo> {
        match self {
            Self::Single(info) => vec![(**info).clone()],
            Self::Cluster(nodes) => nodes.clone(),
            Self::Sentinel(sentinel) => sentinel.sentinel_infos(),
        }
    }
}

/// The TLS files of connections to `servers` (`rediss://`), read once; `None` for plain
/// text, where naming files is a config error (the user expects TLS).
///
/// # Errors
///
/// [`Error::Config`] naming a file that cannot be read or does not parse, or files named
/// for a `redis://` URL.
pub(crate) fn certificates(
    servers: &[ConnectionInfo],
    tls: &TlsConfig,
) -> Result<Option<TlsCertificates>> {
    let uses_tls = servers
        .iter()
        .any(|info| matches!(info.addr(), ConnectionAddr::TcpTls { .. }));
    if !uses_tls {
        let shown = servers.first().map(|info| info.addr().to_string());
        refuse_for_plain_text(
            tls,
            shown.unwrap_or_default(),
            "use `rediss://` (`rediss+cluster://`, `redlocks://`)",
        )?;
        return Ok(None);
    }
    crate::backend::tls_files::ensure_crypto_provider();
    let files = TlsFiles::read(tls)?;
    Ok(Some(TlsCertificates {
        root_cert: files.ca_pem().map(<[u8]>::to_vec),
        client_tls: files.identity.map(|identity| ClientTlsConfig {
            client_cert: identity.cert_pem,
            client_key: identity.key_pem,
        }),
    }))
}

/// A client for one server, with `certs` when it speaks TLS.
pub(super) fn client(
    info: &ConnectionInfo,
    certs: Option<TlsCertificates>,
) -> redis::RedisResult<Client> {
    match certs {
        Some(certs) => Client::build_with_tls(info.clone(), certs),
        None => Client::open(info.clone()),
    }
}

async fn open_client(
    client: Client,
    timeout: Duration,
    pushes: Option<UnboundedSender<PushInfo>>,
) -> redis::RedisResult<Conn> {
    let manager =
        ConnectionManager::new_with_config(client, manager_config(timeout, pushes)).await?;
    Ok(Conn::Single(manager))
}

/// A connection to one server that connects at its first request (and reconnects, like every
/// connection here): a RedLock master may be down when the Locker starts.
///
/// # Errors
///
/// [`Error::Config`] if the client refuses `info`.
#[cfg(feature = "redlock")]
pub(crate) fn open_lazy(
    info: &ConnectionInfo,
    certs: Option<TlsCertificates>,
    timeout: Duration,
    pushes: Option<UnboundedSender<PushInfo>>,
) -> Result<Conn> {
    let lazy = client(info, certs).and_then(|client| {
        ConnectionManager::new_lazy_with_config(client, manager_config(timeout, pushes))
    });
    lazy.map(Conn::Single)
        .map_err(|error| Error::config("backend", info.addr().to_string(), error.to_string()))
}

pub(super) fn manager_config(
    timeout: Duration,
    pushes: Option<UnboundedSender<PushInfo>>,
) -> ConnectionManagerConfig {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        // One reconnect attempt per failure (the next request starts another): a request
        // waiting for a reconnect then waits at most the connect timeout, and the backend
        // needs no timer of its own around each request.
        .set_number_of_retries(0)
        .set_max_delay(timeout);
    match pushes {
        Some(pushes) => config
            .set_push_sender(pushes)
            .set_automatic_resubscription(),
        None => config,
    }
}

/// `redis+cluster://[user:pass@]h1:p1,h2:p2/` → one `redis://` URL per seed node.
fn cluster_nodes(url: &str) -> Vec<String> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let (userinfo, hosts) = rest
        .rsplit_once('@')
        .map_or(("", rest), |(user, hosts)| (user, hosts));
    let hosts = hosts.split(['/', '?']).next().unwrap_or_default();
    let scheme = if url
        .get(..6)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("rediss"))
    {
        "rediss"
    } else {
        "redis"
    };
    let credentials = if userinfo.is_empty() {
        String::new()
    } else {
        format!("{userinfo}@")
    };
    hosts
        .split(',')
        .filter(|h| !h.is_empty())
        .map(|host| format!("{scheme}://{credentials}{host}"))
        .collect()
}

async fn open_cluster(
    nodes: &[ConnectionInfo],
    certs: Option<TlsCertificates>,
    timeout: Duration,
    pushes: Option<UnboundedSender<PushInfo>>,
) -> redis::RedisResult<Conn> {
    let mut builder = ClusterClient::builder(nodes.to_vec())
        .use_protocol(ProtocolVersion::RESP3)
        .connection_timeout(timeout)
        .response_timeout(timeout)
        .retries(2);
    if let Some(certs) = certs {
        builder = builder.certs(certs);
    }
    if let Some(pushes) = pushes {
        builder = builder.push_sender(pushes);
    }
    let connection = builder.build()?.get_async_connection().await?;
    Ok(Conn::Cluster(connection))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resp3_is_added_to_any_url_shape() {
        assert_eq!(resp3_url("redis://h:1"), "redis://h:1/?protocol=resp3");
        assert_eq!(resp3_url("redis://h:1/2"), "redis://h:1/2?protocol=resp3");
        assert_eq!(
            resp3_url("redis://h:1/2?x=y"),
            "redis://h:1/2?x=y&protocol=resp3"
        );
        assert_eq!(
            resp3_url("redis://h:1/?protocol=resp3"),
            "redis://h:1/?protocol=resp3"
        );
    }

    #[test]
    fn cluster_urls_become_seed_nodes() {
        assert_eq!(
            cluster_nodes("redis+cluster://a:1,b:2,c:3"),
            ["redis://a:1", "redis://b:2", "redis://c:3"]
        );
        assert_eq!(
            cluster_nodes("redis+cluster://u:p@a:1,b:2/"),
            ["redis://u:p@a:1", "redis://u:p@b:2"]
        );
        // TLS whatever the scheme's case.
        assert_eq!(
            cluster_nodes("Rediss+Cluster://a:1,b:2"),
            ["rediss://a:1", "rediss://b:2"]
        );
    }
}
