//! A test harness that starts real lock servers from the system's binaries, for dlock's tests
//! (and the benchmark and fault binaries in `examples/`). Not published: the library never
//! compiles it.
//!
//! Every server runs on free loopback ports, in its own temporary directory, with its output
//! logged to `server.log` there. It is killed (`SIGKILL`) and reaped when its handle is dropped,
//! so a failing test leaves no orphan behind. Startup waits for a protocol-level readiness check
//! (a Redis `PING`, etcd's `/health`, ZooKeeper's `srvr` mode, a PostgreSQL startup handshake).
//!
//! | Server | Single | Cluster |
//! |---|---|---|
//! | Redis | [`RedisServer`] | [`RedisCluster`] (masters only), [`RedisNodes`] (independent, for RedLock), [`RedisSentinels`] (a master, replicas, three sentinels) |
//! | etcd | [`EtcdServer`] | [`EtcdCluster`] |
//! | ZooKeeper | [`ZkServer`] | [`ZkEnsemble`] |
//! | PostgreSQL | [`PostgresServer`] | – |
//!
//! Each server handle can [`pause`](RedisServer::pause) (`SIGSTOP`),
//! [`resume`](RedisServer::resume) (`SIGCONT`), [`kill`](RedisServer::kill) (`SIGKILL`) and
//! [`restart`](RedisServer::restart) (same ports, same data directory) its process.
//!
//! Peer clients that share a backend's layout run as real processes too: [`Curator`] (Apache
//! Curator's lock recipes, in a JVM), [`Kazoo`] and [`RedisPy`] (Python's kazoo and redis-py,
//! in the virtualenv the install script makes) and [`NodeRedlock`] (node-redlock, from npm),
//! with a [`SharedCounter`] both sides increment under one lock. A [`TcpProxy`] between a client and a server cuts the
//! connection, or drops the server's replies, on command.
//!
//! A server can also be [`shared`] by every test of a test binary: started once, it dies with
//! the binary.
//!
//! A missing binary is an error ([`HarnessError::MissingBinary`]) that names
//! `scripts/install-test-deps.sh`, never a silent skip.

mod counter;
mod curator;
mod error;
mod etcd;
mod kazoo;
mod node_redlock;
mod peer;
mod ports;
mod postgres;
mod process;
mod proxy;
mod redis;
mod redis_cluster;
mod redis_py;
mod redis_sentinel;
mod shared;
mod tls;
mod wire;
mod zookeeper;

pub use counter::SharedCounter;
pub use curator::Curator;
pub use error::HarnessError;
pub use etcd::{EtcdCluster, EtcdServer};
pub use kazoo::Kazoo;
pub use node_redlock::NodeRedlock;
pub use postgres::{PostgresServer, PsqlSession};
pub use proxy::{Proxies, ProxyMode, TcpProxy};
pub use redis::{RedisNodes, RedisServer};
pub use redis_cluster::RedisCluster;
pub use redis_py::RedisPy;
pub use redis_sentinel::{MASTER_NAME as SENTINEL_MASTER_NAME, RedisSentinels, SentinelServer};
pub use shared::shared;
pub use tls::{SERVER_NAME, TestCerts};
pub use zookeeper::{ZkEnsemble, ZkServer};

/// The result type of the harness.
pub type Result<T, E = HarnessError> = std::result::Result<T, E>;
