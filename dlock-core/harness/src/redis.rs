//! Standalone Redis servers: one ([`RedisServer`]) or several independent ones ([`RedisNodes`],
//! for RedLock).

use tempfile::TempDir;

use super::process::{
    STARTUP_TIMEOUT, ServerProcess, Spec, find_binary, probe, process_methods, retry_startup,
    temp_dir,
};
use super::tls::TestCerts;
use super::wire::{redis_ping, resp_command};
use super::{HarnessError, Result, ports};

/// A `redis-server` on a free loopback port, in its own temp dir, killed on drop.
///
/// Started without persistence (`--save '' --appendonly no`) unless
/// [`start_with`](Self::start_with) says otherwise, so a [`restart`](Self::restart) loses all
/// data.
#[derive(Debug)]
pub struct RedisServer {
    process: ServerProcess,
    /// The TLS port of a server started with [`start_tls`](Self::start_tls).
    tls_port: Option<u16>,
    _dir: TempDir,
}

process_methods!(RedisServer);

impl RedisServer {
    /// Starts a standalone Redis server and waits until it answers `PING`.
    ///
    /// # Errors
    ///
    /// [`HarnessError::MissingBinary`] if `redis-server` is not installed,
    /// [`HarnessError::Startup`] if it did not start (after one retry on new ports).
    pub async fn start() -> Result<Self> {
        Self::start_with(&[]).await
    }

    /// Like [`start`](Self::start), with extra `redis-server` arguments that override the
    /// defaults, e.g. `&["--appendonly", "yes"]`.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub async fn start_with(args: &[&str]) -> Result<Self> {
        let binary = find_binary("redis-server")?;
        retry_startup(|| Self::launch(&binary, args, None, ports::free_port)).await
    }

    /// Like [`start`](Self::start), also listening for TLS on a second port
    /// ([`tls_url`](Self::tls_url)) with `certs`' server certificate, and requiring a client
    /// certificate signed by their CA there (`--tls-auth-clients yes`).
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub async fn start_tls(certs: &TestCerts) -> Result<Self> {
        Self::start_tls_with(certs, &[]).await
    }

    /// Like [`start_tls`](Self::start_tls), with extra `redis-server` arguments.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub async fn start_tls_with(certs: &TestCerts, args: &[&str]) -> Result<Self> {
        let binary = find_binary("redis-server")?;
        retry_startup(|| Self::launch(&binary, args, Some(certs), ports::free_port)).await
    }

    /// The TLS port of a server started with [`start_tls`](Self::start_tls).
    #[must_use]
    pub const fn tls_port(&self) -> Option<u16> {
        self.tls_port
    }

    /// Starts one server on a port from `pick_port`, without retrying.
    pub(crate) async fn launch(
        binary: &std::path::Path,
        args: &[&str],
        tls: Option<&TestCerts>,
        pick_port: fn() -> std::io::Result<u16>,
    ) -> Result<Self> {
        let port = pick_port()?;
        let mut tls_args = Vec::new();
        let tls_port = match tls {
            Some(certs) => {
                let tls_port = ports::free_port()?;
                let file = |path: std::path::PathBuf| path.to_string_lossy().into_owned();
                tls_args = vec![
                    "--tls-port".to_owned(),
                    tls_port.to_string(),
                    "--tls-cert-file".to_owned(),
                    file(certs.server_cert_file()),
                    "--tls-key-file".to_owned(),
                    file(certs.server_key_file()),
                    "--tls-ca-cert-file".to_owned(),
                    file(certs.ca_file()),
                    "--tls-auth-clients".to_owned(),
                    "yes".to_owned(),
                ];
                if args.contains(&"--cluster-enabled") {
                    // Nodes talk TLS to each other and announce their TLS ports; the bus
                    // stays on `port + 10000` (by default it would follow the TLS port).
                    tls_args.extend([
                        "--tls-cluster".to_owned(),
                        "yes".to_owned(),
                        "--cluster-port".to_owned(),
                        (port + 10_000).to_string(),
                    ]);
                }
                Some(tls_port)
            }
            None => None,
        };
        let dir = temp_dir("redis")?;
        let server = format!("redis-server on 127.0.0.1:{port}");
        // A configuration file of its own, empty at first, so that `CONFIG REWRITE` (which
        // Sentinel sends after changing a server's role) keeps the role across a restart.
        let config = dir.path().join("redis.conf");
        std::fs::write(&config, "")?;
        // Loopback only, no persistence, in the temp dir; `args` may override any of it.
        let spec = Spec::new(server, binary, dir.path())
            .args([&config])
            .flags([
                ("--port", &port.to_string()),
                ("--bind", "127.0.0.1"),
                ("--save", ""),
                ("--appendonly", "no"),
                ("--dir", &dir.path().to_string_lossy()),
                ("--daemonize", "no"),
                ("--protected-mode", "no"),
            ])
            .args(tls_args.iter().map(String::as_str))
            .args(args.iter().copied());
        let process =
            ServerProcess::start(spec, port, probe(move || redis_ping(port)), STARTUP_TIMEOUT)
                .await?;
        Ok(Self {
            process,
            tls_port,
            _dir: dir,
        })
    }

    /// `rediss://127.0.0.1:TLS_PORT` of a server started with [`start_tls`](Self::start_tls).
    ///
    /// # Panics
    ///
    /// If the server does not listen for TLS.
    #[must_use]
    pub fn tls_url(&self) -> String {
        format!("rediss://{}", self.tls_addr())
    }

    /// `127.0.0.1:TLS_PORT`.
    ///
    /// # Panics
    ///
    /// If the server does not listen for TLS.
    #[must_use]
    pub fn tls_addr(&self) -> String {
        let port = self.tls_port.expect("a server started with `start_tls`");
        format!("127.0.0.1:{port}")
    }

    /// `redis://127.0.0.1:PORT`
    #[must_use]
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr())
    }

    /// `127.0.0.1:PORT`
    #[must_use]
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port())
    }

    /// Sends one command over a new connection (raw RESP) and returns the reply as `redis-cli`
    /// would print it: strings and integers as they are, nil as `(nil)`, arrays one element per
    /// line.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Io`] if the server does not answer within 2 s (e.g. it is paused), or
    /// answers with a Redis error (the error's text is the message).
    pub async fn command(&self, args: &[&str]) -> Result<String> {
        let reply = resp_command(self.port(), args).await?;
        reply
            .into_text()
            .map_err(|error| HarnessError::Io(std::io::Error::other(error)))
    }
}

/// `n` independent standalone Redis servers (the masters of a RedLock).
#[derive(Debug)]
pub struct RedisNodes {
    nodes: Vec<RedisServer>,
}

impl RedisNodes {
    /// Starts `n` standalone Redis servers, one after the other.
    ///
    /// # Errors
    ///
    /// As [`RedisServer::start`].
    pub async fn start(n: usize) -> Result<Self> {
        let mut nodes = Vec::with_capacity(n);
        for _ in 0..n {
            nodes.push(RedisServer::start().await?);
        }
        Ok(Self { nodes })
    }

    /// Like [`start`](Self::start), each server also listening for TLS
    /// ([`RedisServer::start_tls`]).
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub async fn start_tls(n: usize, certs: &TestCerts) -> Result<Self> {
        let mut nodes = Vec::with_capacity(n);
        for _ in 0..n {
            nodes.push(RedisServer::start_tls(certs).await?);
        }
        Ok(Self { nodes })
    }

    /// `redlocks://127.0.0.1:t1,127.0.0.1:t2,...`: every master over TLS.
    ///
    /// # Panics
    ///
    /// If the servers were not started with [`start_tls`](Self::start_tls).
    #[must_use]
    pub fn tls_url(&self) -> String {
        let addrs: Vec<String> = self.nodes.iter().map(RedisServer::tls_addr).collect();
        format!("redlocks://{}", addrs.join(","))
    }

    /// The servers.
    #[must_use]
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// `redis://127.0.0.1:PORT` for each server.
    #[must_use]
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// `redlock://127.0.0.1:p1,127.0.0.1:p2,...`
    #[must_use]
    pub fn url(&self) -> String {
        format!("redlock://{}", join_addrs(&self.nodes))
    }
}

/// `127.0.0.1:p1,127.0.0.1:p2,...`
pub(crate) fn join_addrs(nodes: &[RedisServer]) -> String {
    nodes
        .iter()
        .map(RedisServer::addr)
        .collect::<Vec<_>>()
        .join(",")
}
