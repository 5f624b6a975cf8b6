//! A Redis Cluster of masters only, created with `redis-cli --cluster create`.

use std::path::Path;
use std::process::Stdio;

use tokio::process::Command;

use super::process::{STARTUP_TIMEOUT, find_binary, poll_until, retry_startup};
use super::redis::{RedisServer, join_addrs};
use super::tls::TestCerts;
use super::wire::resp_command;
use super::{HarnessError, Result, ports};

/// Cluster-mode settings for each node; a short node timeout so failures are noticed fast.
const CLUSTER_ARGS: &[&str] = &[
    "--cluster-enabled",
    "yes",
    "--cluster-config-file",
    "nodes.conf",
    "--cluster-node-timeout",
    "2000",
];

/// A Redis Cluster of `masters` nodes without replicas, each on a free loopback port (its bus
/// port, `port + 10000`, is free too), killed on drop.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts the nodes, joins them with `redis-cli --cluster create` (slots spread evenly), and
    /// waits until every node reports `cluster_state:ok`.
    ///
    /// # Panics
    ///
    /// If `masters < 3`: Redis Cluster needs at least three masters.
    ///
    /// # Errors
    ///
    /// [`HarnessError::MissingBinary`] if `redis-server` or `redis-cli` is not installed,
    /// [`HarnessError::Startup`] if a node or the cluster did not come up (after one retry on
    /// new ports).
    pub async fn start(masters: usize) -> Result<Self> {
        assert!(
            masters >= 3,
            "a Redis Cluster needs at least 3 masters, not {masters}"
        );
        let server = find_binary("redis-server")?;
        let cli = find_binary("redis-cli")?;
        retry_startup(|| Self::launch(&server, &cli, masters, None)).await
    }

    /// Like [`start`](Self::start), every node also listening for TLS with `certs`
    /// ([`RedisServer::start_tls`]) and the nodes talking TLS to each other
    /// (`--tls-cluster yes`), so that the cluster announces its TLS ports.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub async fn start_tls(masters: usize, certs: &TestCerts) -> Result<Self> {
        assert!(
            masters >= 3,
            "a Redis Cluster needs at least 3 masters, not {masters}"
        );
        let server = find_binary("redis-server")?;
        let cli = find_binary("redis-cli")?;
        retry_startup(|| Self::launch(&server, &cli, masters, Some(certs))).await
    }

    async fn launch(
        server: &Path,
        cli: &Path,
        masters: usize,
        tls: Option<&TestCerts>,
    ) -> Result<Self> {
        let mut nodes = Vec::with_capacity(masters);
        for _ in 0..masters {
            nodes.push(
                RedisServer::launch(server, CLUSTER_ARGS, tls, ports::free_cluster_port).await?,
            );
        }
        let cluster = Self { nodes };
        cluster.create(cli).await?;
        cluster.wait_until_healthy().await?;
        Ok(cluster)
    }

    /// Runs `redis-cli --cluster create ... --cluster-replicas 0 --cluster-yes`.
    async fn create(&self, cli: &Path) -> Result<()> {
        let addrs: Vec<String> = self.nodes.iter().map(RedisServer::addr).collect();
        let run = Command::new(cli)
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output();
        let failure = match tokio::time::timeout(STARTUP_TIMEOUT, run).await {
            Ok(Ok(output)) if output.status.success() => return Ok(()),
            Ok(Ok(output)) => format!(
                "`redis-cli --cluster create` failed ({}):\n{}{}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
            Ok(Err(error)) => return Err(error.into()),
            Err(_) => {
                format!("`redis-cli --cluster create` did not finish within {STARTUP_TIMEOUT:?}")
            }
        };
        Err(HarnessError::Startup {
            server: self.name(),
            reason: failure,
            log_tail: self.log_tails(),
        })
    }

    /// Waits (up to 20 s) until `CLUSTER INFO` says `cluster_state:ok` on every node, e.g. after
    /// a node was restarted.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Startup`] (with the nodes' log tails) if the cluster is not ok in time.
    pub async fn wait_until_healthy(&self) -> Result<()> {
        let ok = poll_until(STARTUP_TIMEOUT, || async {
            for node in &self.nodes {
                if !is_cluster_ok(node.port()).await {
                    return false;
                }
            }
            true
        })
        .await;
        if ok {
            return Ok(());
        }
        let reason = format!("not every node reported cluster_state:ok within {STARTUP_TIMEOUT:?}");
        Err(HarnessError::Startup {
            server: self.name(),
            reason,
            log_tail: self.log_tails(),
        })
    }

    fn name(&self) -> String {
        format!("Redis Cluster {}", join_addrs(&self.nodes))
    }

    fn log_tails(&self) -> String {
        let tails = self.nodes.iter().map(|node| {
            format!(
                "== {} ==\n{}",
                node.addr(),
                super::process::log_tail(node.log_path())
            )
        });
        tails.collect::<Vec<_>>().join("\n")
    }

    /// The nodes, each a master owning a share of the slots.
    #[must_use]
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// `redis://127.0.0.1:PORT` for each node.
    #[must_use]
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// `redis+cluster://127.0.0.1:p1,127.0.0.1:p2,...`
    #[must_use]
    pub fn url(&self) -> String {
        format!("redis+cluster://{}", join_addrs(&self.nodes))
    }

    /// `rediss+cluster://127.0.0.1:t1,127.0.0.1:t2,...`: the TLS ports.
    ///
    /// # Panics
    ///
    /// If the cluster was not started with [`start_tls`](Self::start_tls).
    #[must_use]
    pub fn tls_url(&self) -> String {
        let addrs: Vec<String> = self.nodes.iter().map(RedisServer::tls_addr).collect();
        format!("rediss+cluster://{}", addrs.join(","))
    }
}

/// Whether the node on `port` reports `cluster_state:ok`.
async fn is_cluster_ok(port: u16) -> bool {
    let reply = resp_command(port, &["CLUSTER", "INFO"]).await;
    reply
        .ok()
        .and_then(|reply| reply.into_text().ok())
        .is_some_and(|info| info.contains("cluster_state:ok"))
}
