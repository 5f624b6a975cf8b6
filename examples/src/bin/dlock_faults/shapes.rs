//! The backends and cluster shapes under test: starting their servers, the URL a worker
//! connects with (through its own proxies), and the server a fault hits.

use std::net::SocketAddr;

use dlock_harness::{
    EtcdCluster, EtcdServer, HarnessError, PostgresServer, RedisCluster, RedisNodes,
    RedisSentinels, RedisServer, ZkEnsemble, ZkServer,
};
use rand::Rng;
use rand::rngs::StdRng;

/// A backend in one cluster shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ShapeKind {
    Redis,
    RedisCluster,
    RedisSentinel,
    RedLock,
    Etcd,
    Etcd3,
    ZooKeeper,
    ZooKeeper3,
    Postgres,
}

impl ShapeKind {
    pub(crate) const ALL: [Self; 9] = [
        Self::Redis,
        Self::RedisCluster,
        Self::RedisSentinel,
        Self::RedLock,
        Self::Etcd,
        Self::Etcd3,
        Self::ZooKeeper,
        Self::ZooKeeper3,
        Self::Postgres,
    ];

    /// The name on the command line.
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Self::Redis => "redis",
            Self::RedisCluster => "redis-cluster",
            Self::RedisSentinel => "redis-sentinel",
            Self::RedLock => "redlock",
            Self::Etcd => "etcd",
            Self::Etcd3 => "etcd-3",
            Self::ZooKeeper => "zk",
            Self::ZooKeeper3 => "zk-3",
            Self::Postgres => "postgres",
        }
    }

    /// Whether the backend elects leaders (RedLock has no term to give a leader).
    pub(crate) const fn elects(self) -> bool {
        !matches!(self, Self::RedLock)
    }

    /// The name in the report.
    pub(crate) const fn title(self) -> &'static str {
        match self {
            Self::Redis => "Redis, 1 server",
            Self::RedisCluster => "Redis Cluster, 3 masters",
            Self::RedisSentinel => "Redis Sentinel, 1 master + 2 replicas",
            Self::RedLock => "RedLock, 5 masters",
            Self::Etcd => "etcd, 1 member",
            Self::Etcd3 => "etcd, 3 members",
            Self::ZooKeeper => "ZooKeeper, 1 server",
            Self::ZooKeeper3 => "ZooKeeper, 3 servers",
            Self::Postgres => "PostgreSQL",
        }
    }

    pub(crate) fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.name() == name)
    }

    /// Whether each worker can reach the servers through proxies of its own. A Redis Cluster
    /// client follows the addresses the nodes announce, and a Sentinel client the address
    /// the sentinels give, which a proxy cannot stand in for.
    pub(crate) const fn proxied(self) -> bool {
        !matches!(self, Self::RedisCluster | Self::RedisSentinel)
    }
}

/// A running shape: its servers, stopped when it is dropped.
pub(crate) enum Shape {
    Redis(RedisServer),
    RedisCluster(RedisCluster),
    RedisSentinel(RedisSentinels),
    RedLock(RedisNodes),
    Etcd(EtcdServer),
    Etcd3(EtcdCluster),
    ZooKeeper(ZkServer),
    ZooKeeper3(ZkEnsemble),
    Postgres(PostgresServer),
}

impl Shape {
    pub(crate) async fn start(kind: ShapeKind) -> Result<Self, HarnessError> {
        Ok(match kind {
            ShapeKind::Redis => Self::Redis(RedisServer::start().await?),
            ShapeKind::RedisCluster => Self::RedisCluster(RedisCluster::start(3).await?),
            // Servers that keep their data (a killed master restarted before a failover
            // comes back with its locks and fencing counters), and grants acknowledged by a
            // replica before they are handed out.
            ShapeKind::RedisSentinel => Self::RedisSentinel(
                RedisSentinels::start_with(2, &["--appendonly", "yes", "--appendfsync", "always"])
                    .await?,
            ),
            ShapeKind::RedLock => Self::RedLock(RedisNodes::start(5).await?),
            ShapeKind::Etcd => Self::Etcd(EtcdServer::start().await?),
            ShapeKind::Etcd3 => Self::Etcd3(EtcdCluster::start(3).await?),
            ShapeKind::ZooKeeper => Self::ZooKeeper(ZkServer::start().await?),
            ShapeKind::ZooKeeper3 => Self::ZooKeeper3(ZkEnsemble::start(3).await?),
            ShapeKind::Postgres => Self::Postgres(PostgresServer::start().await?),
        })
    }

    /// The URL an application would use: every server's `127.0.0.1:<port>`.
    pub(crate) fn url(&self) -> String {
        match self {
            Self::Redis(server) => server.url(),
            Self::RedisCluster(cluster) => cluster.url(),
            Self::RedisSentinel(group) => {
                format!("{}?min_replicas=1&replica_timeout=500ms", group.url())
            }
            Self::RedLock(nodes) => nodes.url(),
            Self::Etcd(server) => server.url(),
            Self::Etcd3(cluster) => cluster.url(),
            Self::ZooKeeper(server) => server.url(),
            Self::ZooKeeper3(ensemble) => ensemble.url(),
            Self::Postgres(server) => server.url(),
        }
    }

    /// Every server, in the order their addresses appear in [`url`](Self::url).
    pub(crate) fn nodes(&self) -> Vec<Node<'_>> {
        match self {
            Self::Redis(server) => vec![Node::Redis(server)],
            Self::RedisCluster(cluster) => cluster.nodes().iter().map(Node::Redis).collect(),
            Self::RedisSentinel(group) => group.servers().iter().map(Node::Redis).collect(),
            Self::RedLock(nodes) => nodes.nodes().iter().map(Node::Redis).collect(),
            Self::Etcd(server) => vec![Node::Etcd(server)],
            Self::Etcd3(cluster) => cluster.members().iter().map(Node::Etcd).collect(),
            Self::ZooKeeper(server) => vec![Node::ZooKeeper(server)],
            Self::ZooKeeper3(ensemble) => ensemble.members().iter().map(Node::ZooKeeper).collect(),
            Self::Postgres(server) => vec![Node::Postgres(server)],
        }
    }

    /// The servers' client addresses, for proxies to stand in front of.
    pub(crate) fn addresses(&self) -> Vec<SocketAddr> {
        self.nodes()
            .iter()
            .map(|node| SocketAddr::from(([127, 0, 0, 1], node.port())))
            .collect()
    }

    /// [`url`](Self::url) with each server's address replaced by the matching one of `via`.
    pub(crate) fn url_via(&self, via: &[SocketAddr]) -> String {
        let mut url = self.url();
        for (server, proxy) in self.addresses().iter().zip(via) {
            url = url.replacen(&server.to_string(), &proxy.to_string(), 1);
        }
        url
    }

    /// The server a server fault hits: the leader of an etcd or ZooKeeper ensemble, the Redis
    /// Cluster master serving `key`, the Sentinel group's master, one of RedLock's masters at random, or the only server.
    pub(crate) async fn fault_target(
        &self,
        key: &str,
        rng: &mut StdRng,
    ) -> Result<Node<'_>, HarnessError> {
        let mut nodes = self.nodes();
        let index = match self {
            Self::Etcd3(cluster) => cluster.leader().await?,
            Self::ZooKeeper3(ensemble) => ensemble.leader().await?,
            Self::RedisCluster(cluster) => master_of(cluster, key).await?,
            Self::RedisSentinel(group) => {
                let master = group.master().await?.port();
                let mut servers = group.servers().iter();
                servers.position(|s| s.port() == master).unwrap_or(0)
            }
            _ => rng.random_range(0..nodes.len()),
        };
        Ok(nodes.swap_remove(index))
    }

    /// Waits until the shape serves again after a server was restarted.
    pub(crate) async fn settle(&self) -> Result<(), HarnessError> {
        match self {
            Self::RedisCluster(cluster) => cluster.wait_until_healthy().await,
            Self::RedisSentinel(group) => group.wait_for_master().await.map(drop),
            Self::Etcd3(cluster) => cluster.leader().await.map(drop),
            Self::ZooKeeper3(ensemble) => ensemble.leader().await.map(drop),
            _ => Ok(()),
        }
    }
}

/// The index of the Redis Cluster master whose slots include the lock of `key` (dlock's
/// Redis name for it is the full key in braces: its hash tag).
async fn master_of(cluster: &RedisCluster, key: &str) -> Result<usize, HarnessError> {
    let name = format!("{{{}{key}}}", dlock_core::DlockConfig::default().key_prefix);
    let nodes = cluster.nodes();
    let slot: u16 = nodes[0]
        .command(&["CLUSTER", "KEYSLOT", &name])
        .await?
        .trim()
        .parse()
        .map_err(|e| HarnessError::Io(std::io::Error::other(format!("CLUSTER KEYSLOT: {e}"))))?;
    for (index, node) in nodes.iter().enumerate() {
        // `CLUSTER NODES`: the `myself` line ends with the node's slot ranges (`0-5460`).
        let listing = node.command(&["CLUSTER", "NODES"]).await?;
        let mine = listing.lines().find(|line| line.contains("myself"));
        let serves = mine.is_some_and(|line| {
            line.split_whitespace().skip(8).any(|range| {
                let (low, high) = range.split_once('-').unwrap_or((range, range));
                matches!((low.parse::<u16>(), high.parse::<u16>()), (Ok(low), Ok(high)) if (low..=high).contains(&slot))
            })
        });
        if serves {
            return Ok(index);
        }
    }
    Err(HarnessError::Io(std::io::Error::other(format!(
        "no master serves slot {slot}"
    ))))
}

/// One server of a shape, for faults.
pub(crate) enum Node<'a> {
    Redis(&'a RedisServer),
    Etcd(&'a EtcdServer),
    ZooKeeper(&'a ZkServer),
    Postgres(&'a PostgresServer),
}

impl Node<'_> {
    fn port(&self) -> u16 {
        match self {
            Self::Redis(server) => server.port(),
            Self::Etcd(server) => server.port(),
            Self::ZooKeeper(server) => server.port(),
            Self::Postgres(server) => server.port(),
        }
    }

    pub(crate) fn pause(&self) -> Result<(), HarnessError> {
        match self {
            Self::Redis(server) => server.pause(),
            Self::Etcd(server) => server.pause(),
            Self::ZooKeeper(server) => server.pause(),
            Self::Postgres(server) => server.pause(),
        }
    }

    pub(crate) fn resume(&self) -> Result<(), HarnessError> {
        match self {
            Self::Redis(server) => server.resume(),
            Self::Etcd(server) => server.resume(),
            Self::ZooKeeper(server) => server.resume(),
            Self::Postgres(server) => server.resume(),
        }
    }

    pub(crate) async fn kill(&self) -> Result<(), HarnessError> {
        match self {
            Self::Redis(server) => server.kill().await,
            Self::Etcd(server) => server.kill().await,
            Self::ZooKeeper(server) => server.kill().await,
            Self::Postgres(server) => server.kill().await,
        }
    }

    pub(crate) async fn restart(&self) -> Result<(), HarnessError> {
        match self {
            Self::Redis(server) => server.restart().await,
            Self::Etcd(server) => server.restart().await,
            Self::ZooKeeper(server) => server.restart().await,
            Self::Postgres(server) => server.restart().await,
        }
    }
}
