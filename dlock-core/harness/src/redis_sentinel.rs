//! A Redis master with replicas, monitored by Redis Sentinel ([`RedisSentinels`]).

use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::process::{
    STARTUP_TIMEOUT, ServerProcess, Spec, find_binary, probe, process_methods, retry_startup,
    temp_dir,
};
use super::redis::RedisServer;
use super::tls::TestCerts;
use super::wire::{redis_ping, resp_command};
use super::{HarnessError, Result, ports};

/// The name the sentinels monitor the master by.
pub const MASTER_NAME: &str = "dlock-master";

/// How long a failover may take, from the request to every sentinel naming the new master.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(30);

/// One master, `replicas` replicas of it and three sentinels (quorum 2), each a process of
/// its own on free loopback ports, killed on drop. The sentinels consider a server down after
/// one second without an answer (`down-after-milliseconds 1000`), so a killed or frozen
/// master is failed over within a few seconds; [`failover`](Self::failover) forces one at
/// once (`SENTINEL FAILOVER`).
///
/// The servers keep no data on disk, like [`RedisServer`]; a server restarted after a
/// failover comes back as a master with no data and is turned into a replica by the
/// sentinels.
#[derive(Debug)]
pub struct RedisSentinels {
    /// The servers: the first was the master at the start.
    servers: Vec<RedisServer>,
    sentinels: Vec<SentinelServer>,
}

/// One `redis-server --sentinel`, with a configuration file of its own (sentinels rewrite
/// theirs).
#[derive(Debug)]
pub struct SentinelServer {
    process: ServerProcess,
    tls_port: Option<u16>,
    _dir: TempDir,
}

process_methods!(SentinelServer);

impl RedisSentinels {
    /// Starts a master, `replicas` replicas and three sentinels, and waits until every
    /// sentinel knows every replica and the other sentinels (so a failover can be agreed).
    ///
    /// # Errors
    ///
    /// [`HarnessError::MissingBinary`] without `redis-server`; [`HarnessError::Startup`] if a
    /// process did not start or the sentinels did not find each other within 30 s.
    pub async fn start(replicas: usize) -> Result<Self> {
        Self::launch(replicas, None, &[]).await
    }

    /// Like [`start`](Self::start), every server with extra `redis-server` arguments, e.g.
    /// `&["--appendonly", "yes"]` for servers that keep their data across a restart.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub async fn start_with(replicas: usize, server_args: &[&str]) -> Result<Self> {
        Self::launch(replicas, None, server_args).await
    }

    /// Like [`start`](Self::start), everything over TLS with `certs`: clients, replication,
    /// and the sentinels (which listen for TLS too, and talk TLS to the servers). Each
    /// process keeps a plain port for the harness's own requests.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub async fn start_tls(replicas: usize, certs: &TestCerts) -> Result<Self> {
        Self::launch(replicas, Some(certs), &[]).await
    }

    async fn launch(
        replicas: usize,
        tls: Option<&TestCerts>,
        server_args: &[&str],
    ) -> Result<Self> {
        let binary = find_binary("redis-server")?;
        let start = async |args: &[&str]| {
            let mut args = args.to_vec();
            args.extend(server_args);
            match tls {
                Some(certs) => {
                    args.extend(["--tls-replication", "yes"]);
                    RedisServer::start_tls_with(certs, &args).await
                }
                None => RedisServer::start_with(&args).await,
            }
        };
        let master = start(&[]).await?;
        // Replicas, and sentinels, reach the master where clients do.
        let master_port = master.tls_port().unwrap_or(master.port());
        let replica_of = master_port.to_string();
        let mut servers = vec![master];
        for _ in 0..replicas {
            // Made a replica at run time and the role written to its configuration file, as
            // Sentinel does when it moves roles: a server restarted later keeps the role it
            // had last (a `--replicaof` argument would bring back the first one).
            let replica = start(&[]).await?;
            for command in [
                &["REPLICAOF", "127.0.0.1", replica_of.as_str()][..],
                &["CONFIG", "REWRITE"],
            ] {
                replica.command(command).await?;
            }
            servers.push(replica);
        }
        let mut sentinels = Vec::new();
        for _ in 0..3 {
            sentinels
                .push(retry_startup(|| SentinelServer::launch(&binary, master_port, tls)).await?);
        }
        let group = Self { servers, sentinels };
        group.wait_until_known(replicas).await?;
        Ok(group)
    }

    /// `redis+sentinel://127.0.0.1:s1,127.0.0.1:s2,127.0.0.1:s3/dlock-master`; over TLS
    /// (a group started with [`start_tls`](Self::start_tls)) `rediss+sentinel://` with the
    /// sentinels' TLS ports.
    #[must_use]
    pub fn url(&self) -> String {
        let sentinels: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.tls_port.unwrap_or(s.port())))
            .collect();
        let scheme = if self.sentinels.iter().any(|s| s.tls_port.is_some()) {
            "rediss+sentinel"
        } else {
            "redis+sentinel"
        };
        format!("{scheme}://{}/{MASTER_NAME}", sentinels.join(","))
    }

    /// The Redis servers: the master at the start first, then the replicas.
    #[must_use]
    pub fn servers(&self) -> &[RedisServer] {
        &self.servers
    }

    /// The sentinels.
    #[must_use]
    pub fn sentinels(&self) -> &[SentinelServer] {
        &self.sentinels
    }

    /// The server the sentinels name as master now (asking the first that answers).
    ///
    /// # Errors
    ///
    /// [`HarnessError::Io`] if no sentinel answers, or names a server not of this group.
    pub async fn master(&self) -> Result<&RedisServer> {
        let port = self.master_port().await?;
        self.servers
            .iter()
            .find(|server| announces(server, port))
            .ok_or_else(|| io_error(format!("the sentinels name port {port} as master")))
    }

    /// The replicas now: every server but [`master`](Self::master).
    ///
    /// # Errors
    ///
    /// As [`master`](Self::master).
    pub async fn replicas(&self) -> Result<Vec<&RedisServer>> {
        let port = self.master_port().await?;
        Ok(self
            .servers
            .iter()
            .filter(|s| !announces(s, port))
            .collect())
    }

    /// Forces a failover (`SENTINEL FAILOVER`) and waits until every sentinel names the new
    /// master and it says it is one (`ROLE`). Returns the new master.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Io`] if a sentinel refuses, or the failover did not end within 30 s.
    pub async fn failover(&self) -> Result<&RedisServer> {
        let before = self.master().await?.port();
        let sentinel = self.sentinels[0].port();
        resp_command(sentinel, &["SENTINEL", "FAILOVER", MASTER_NAME])
            .await?
            .into_text()
            .map_err(io_error)?;
        self.wait_for_new_master(before).await
    }

    /// Waits until every answering sentinel names a master other than the server whose
    /// (plain) [`port`](RedisServer::port) is `before`, and it says it is one (`ROLE`): after a failover (forced, or caused by a
    /// killed or frozen master). Returns the new master.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Io`] if that did not happen within 30 s.
    pub async fn wait_for_new_master(&self, before: u16) -> Result<&RedisServer> {
        let give_up = Instant::now() + FAILOVER_TIMEOUT;
        loop {
            let mut named = Vec::new();
            for sentinel in &self.sentinels {
                if let Ok(port) = master_port_from(sentinel.port()).await {
                    named.push(port);
                }
            }
            if let Some(&port) = named.first()
                && named.iter().all(|&p| p == port)
                && let Some(server) = self.servers.iter().find(|s| announces(s, port))
                && server.port() != before
                && role(server.port()).await.as_deref() == Some("master")
            {
                return Ok(server);
            }
            if Instant::now() >= give_up {
                return Err(io_error(format!(
                    "no failover away from port {before} within {FAILOVER_TIMEOUT:?} (sentinels name {named:?})"
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the sentinels name a master and it says it is one (`ROLE`): after a
    /// server came back, or a failover. Returns it.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Io`] if that did not happen within 30 s.
    pub async fn wait_for_master(&self) -> Result<&RedisServer> {
        let give_up = Instant::now() + FAILOVER_TIMEOUT;
        loop {
            if let Ok(master) = self.master().await
                && role(master.port()).await.as_deref() == Some("master")
            {
                return Ok(master);
            }
            if Instant::now() >= give_up {
                return Err(io_error(format!("no master within {FAILOVER_TIMEOUT:?}")));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn master_port(&self) -> Result<u16> {
        let mut last = None;
        for sentinel in &self.sentinels {
            match master_port_from(sentinel.port()).await {
                Ok(port) => return Ok(port),
                Err(error) => last = Some(error),
            }
        }
        Err(last.unwrap_or_else(|| io_error("no sentinel")))
    }

    /// Waits until the master has `replicas` replicas in sync (`state=online`), and each
    /// sentinel lists them and the two other sentinels.
    async fn wait_until_known(&self, replicas: usize) -> Result<()> {
        let give_up = Instant::now() + FAILOVER_TIMEOUT;
        let master = self.servers[0].port();
        loop {
            let info = resp_command(master, &["INFO", "replication"]).await?;
            let info = info.into_text().unwrap_or_default();
            if info.matches("state=online").count() >= replicas {
                break;
            }
            if Instant::now() >= give_up {
                return Err(io_error(format!(
                    "the master's replicas were not in sync within {FAILOVER_TIMEOUT:?}: {info}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for sentinel in &self.sentinels {
            loop {
                let count = |what: &'static str| async move {
                    match resp_command(sentinel.port(), &["SENTINEL", what, MASTER_NAME]).await {
                        Ok(reply) => reply
                            .into_text()
                            .map_or(0, |text| text.lines().filter(|l| *l == "name").count()),
                        Err(_) => 0,
                    }
                };
                if count("replicas").await >= replicas && count("sentinels").await >= 2 {
                    break;
                }
                if Instant::now() >= give_up {
                    return Err(HarnessError::Startup {
                        server: format!("redis sentinel on 127.0.0.1:{}", sentinel.port()),
                        reason: format!(
                            "it did not list {replicas} replicas and 2 other sentinels within {FAILOVER_TIMEOUT:?}"
                        ),
                        log_tail: std::fs::read_to_string(sentinel.log_path()).unwrap_or_default(),
                    });
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }
}

impl SentinelServer {
    /// Starts one sentinel monitoring the master on `master_port`, without retrying.
    async fn launch(
        binary: &std::path::Path,
        master_port: u16,
        tls: Option<&TestCerts>,
    ) -> Result<Self> {
        let port = ports::free_port()?;
        let dir = temp_dir("sentinel")?;
        let config = dir.path().join("sentinel.conf");
        let mut text = format!(
            "port {port}\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\ndir {dir}\n",
            dir = dir.path().display()
        );
        let tls_port = match tls {
            Some(certs) => {
                let tls_port = ports::free_port()?;
                text.push_str(&format!(
                    "tls-port {tls_port}\ntls-cert-file {}\ntls-key-file {}\n\
                     tls-ca-cert-file {}\ntls-auth-clients yes\ntls-replication yes\n",
                    certs.server_cert_file().display(),
                    certs.server_key_file().display(),
                    certs.ca_file().display()
                ));
                Some(tls_port)
            }
            None => None,
        };
        text.push_str(&format!(
            "sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 2\n\
             sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
             sentinel failover-timeout {MASTER_NAME} 5000\n\
             sentinel parallel-syncs {MASTER_NAME} 2\n"
        ));
        std::fs::write(&config, text)?;
        let server = format!("redis sentinel on 127.0.0.1:{port}");
        let spec = Spec::new(server, binary, dir.path())
            .args([config.to_string_lossy().as_ref(), "--sentinel"]);
        let process =
            ServerProcess::start(spec, port, probe(move || redis_ping(port)), STARTUP_TIMEOUT)
                .await?;
        Ok(Self {
            process,
            tls_port,
            _dir: dir,
        })
    }
}

/// Whether the sentinels know `server` by `port` (its TLS port in a TLS group).
fn announces(server: &RedisServer, port: u16) -> bool {
    server.port() == port || server.tls_port() == Some(port)
}

/// The master's port as the sentinel on `port` names it.
async fn master_port_from(port: u16) -> Result<u16> {
    let reply = resp_command(port, &["SENTINEL", "get-master-addr-by-name", MASTER_NAME]).await?;
    let text = reply.into_text().map_err(io_error)?;
    text.lines()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| io_error(format!("sentinel on {port} answered {text:?}")))
}

/// The first word of `ROLE` on the server at `port`.
async fn role(port: u16) -> Option<String> {
    let reply = resp_command(port, &["ROLE"]).await.ok()?;
    reply.into_text().ok()?.lines().next().map(str::to_owned)
}

fn io_error(message: impl Into<String>) -> HarnessError {
    HarnessError::Io(std::io::Error::other(message.into()))
}
