//! etcd: a single server ([`EtcdServer`]) or a cluster ([`EtcdCluster`]).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tempfile::TempDir;

use super::process::{
    STARTUP_TIMEOUT, ServerProcess, Spec, find_binary, poll_for, probe, process_methods,
    retry_startup, temp_dir,
};
use super::tls::TestCerts;
use super::wire::{http, json_string_field};
use super::{HarnessError, Result, ports};

/// Raft timing (ms): shorter than etcd's defaults (100/1000) would risk spurious elections on a
/// busy 2-core machine.
const HEARTBEAT_MS: &str = "100";
const ELECTION_TIMEOUT_MS: &str = "1000";

/// One etcd member on free loopback client and peer ports, with its data in its own temp dir,
/// killed on drop. On its own (from [`EtcdServer::start`]) it is a one-member cluster.
#[derive(Debug)]
pub struct EtcdServer {
    process: ServerProcess,
    name: String,
    peer_port: u16,
    /// The TLS client port of a member started with [`start_tls`](Self::start_tls).
    tls_port: Option<u16>,
    _dir: TempDir,
}

process_methods!(EtcdServer);

impl EtcdServer {
    /// Starts a single-member etcd cluster and waits until `GET /health` says it is healthy.
    ///
    /// # Errors
    ///
    /// [`HarnessError::MissingBinary`] if `etcd` is not installed, [`HarnessError::Startup`] if
    /// it did not start (after one retry on new ports).
    pub async fn start() -> Result<Self> {
        Self::start_with(&[]).await
    }

    /// Like [`start`](Self::start), with more command-line flags for `etcd`, each whole
    /// (`--name=value`): for example `--auto-compaction-retention=5m`, which compacts the
    /// key history every five minutes as a production etcd does.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start); a flag etcd rejects fails its startup.
    pub async fn start_with(flags: &[&str]) -> Result<Self> {
        let mut members = start_members(1, None, flags).await?;
        Ok(members.remove(0))
    }

    /// Like [`start`](Self::start), also serving clients over TLS on a second port
    /// ([`tls_url`](Self::tls_url)) with `certs`' server certificate, where it requires a
    /// client certificate signed by their CA (`--client-cert-auth`).
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub async fn start_tls(certs: &TestCerts) -> Result<Self> {
        let mut members = start_members(1, Some(certs), &[]).await?;
        Ok(members.remove(0))
    }

    /// `etcds://127.0.0.1:TLS_PORT` of a member started with [`start_tls`](Self::start_tls).
    ///
    /// # Panics
    ///
    /// If the member does not serve TLS.
    #[must_use]
    pub fn tls_url(&self) -> String {
        let port = self.tls_port.expect("a member started with `start_tls`");
        format!("etcds://127.0.0.1:{port}")
    }

    /// The member name (`m0`, `m1`, ...).
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `http://127.0.0.1:PORT`, the client URL.
    #[must_use]
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port())
    }

    /// [`endpoint`](Self::endpoint) as a one-element list, as [`EtcdCluster::endpoints`].
    #[must_use]
    pub fn endpoints(&self) -> Vec<String> {
        vec![self.endpoint()]
    }

    /// `etcd://127.0.0.1:PORT`
    #[must_use]
    pub fn url(&self) -> String {
        format!("etcd://127.0.0.1:{}", self.port())
    }

    /// The Raft peer port.
    #[must_use]
    pub fn peer_port(&self) -> u16 {
        self.peer_port
    }

    /// Whether this member answers and believes itself the leader.
    async fn is_leader(&self) -> bool {
        let Ok((200, status)) = http(self.port(), "POST", "/v3/maintenance/status", "{}").await
        else {
            return false;
        };
        let member = json_string_field(&status, "member_id");
        member.is_some() && member == json_string_field(&status, "leader")
    }
}

/// An etcd cluster of `n` members on loopback, killed on drop.
#[derive(Debug)]
pub struct EtcdCluster {
    members: Vec<EtcdServer>,
}

impl EtcdCluster {
    /// Starts `members` etcd members as one cluster and waits until every member is healthy
    /// (which needs an elected leader).
    ///
    /// # Panics
    ///
    /// If `members` is 0.
    ///
    /// # Errors
    ///
    /// As [`EtcdServer::start`].
    pub async fn start(members: usize) -> Result<Self> {
        assert!(members > 0, "an etcd cluster needs at least one member");
        Ok(Self {
            members: start_members(members, None, &[]).await?,
        })
    }

    /// The members, in the order of [`endpoints`](Self::endpoints).
    #[must_use]
    pub fn members(&self) -> &[EtcdServer] {
        &self.members
    }

    /// The member at `index`.
    ///
    /// # Panics
    ///
    /// If `index` is out of range.
    #[must_use]
    pub fn member(&self, index: usize) -> &EtcdServer {
        &self.members[index]
    }

    /// `http://127.0.0.1:PORT` for each member.
    #[must_use]
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(EtcdServer::endpoint).collect()
    }

    /// `etcd://127.0.0.1:p1,127.0.0.1:p2,...`
    #[must_use]
    pub fn url(&self) -> String {
        let addrs: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.port()))
            .collect();
        format!("etcd://{}", addrs.join(","))
    }

    /// The index of the current leader: the first reachable member whose status
    /// (`/v3/maintenance/status`) names itself as leader. Waits up to 20 s for one, e.g. while
    /// a new leader is elected after the old one was killed.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Timeout`] if no member claims leadership in time.
    pub async fn leader(&self) -> Result<usize> {
        let leader = poll_for(STARTUP_TIMEOUT, || self.find_leader()).await;
        leader.ok_or_else(|| HarnessError::Timeout {
            what: "an elected etcd leader".to_owned(),
            after: STARTUP_TIMEOUT,
        })
    }

    async fn find_leader(&self) -> Option<usize> {
        for (index, member) in self.members.iter().enumerate() {
            if member.is_leader().await {
                return Some(index);
            }
        }
        None
    }
}

/// Starts `n` members of one new cluster (retrying once on new ports), each with the extra
/// `flags`, and waits for all.
async fn start_members(
    n: usize,
    tls: Option<&TestCerts>,
    flags: &[&str],
) -> Result<Vec<EtcdServer>> {
    let etcd = find_binary("etcd")?;
    retry_startup(|| launch_members(&etcd, n, tls, flags)).await
}

/// One member's name and ports.
struct Plan {
    name: String,
    client_port: u16,
    peer_port: u16,
    tls_port: Option<u16>,
}

async fn launch_members(
    etcd: &Path,
    n: usize,
    tls: Option<&TestCerts>,
    flags: &[&str],
) -> Result<Vec<EtcdServer>> {
    let plans = (0..n)
        .map(|i| {
            Ok(Plan {
                name: format!("m{i}"),
                client_port: ports::free_port()?,
                peer_port: ports::free_port()?,
                tls_port: tls.map(|_| ports::free_port()).transpose()?,
            })
        })
        .collect::<std::io::Result<Vec<_>>>()?;
    let initial_cluster: Vec<String> = plans
        .iter()
        .map(|p| format!("{}=http://127.0.0.1:{}", p.name, p.peer_port))
        .collect();
    let initial_cluster = initial_cluster.join(",");
    let token = cluster_token();
    let members = plans
        .into_iter()
        .map(|plan| spawn_member(etcd, plan, &initial_cluster, &token, tls, flags))
        .collect::<Result<Vec<_>>>()?;
    for member in &members {
        member.process.wait_ready().await?;
    }
    Ok(members)
}

fn spawn_member(
    etcd: &Path,
    plan: Plan,
    initial_cluster: &str,
    token: &str,
    tls: Option<&TestCerts>,
    flags: &[&str],
) -> Result<EtcdServer> {
    let dir = temp_dir("etcd")?;
    let mut client_url = format!("http://127.0.0.1:{}", plan.client_port);
    let mut tls_flags = Vec::new();
    if let (Some(certs), Some(tls_port)) = (tls, plan.tls_port) {
        // Plain HTTP stays for the readiness probe; clients of the TLS port need a
        // certificate the CA signed.
        client_url.push_str(&format!(",https://127.0.0.1:{tls_port}"));
        let file = |path: std::path::PathBuf| path.to_string_lossy().into_owned();
        tls_flags = vec![
            "--cert-file".to_owned(),
            file(certs.server_cert_file()),
            "--key-file".to_owned(),
            file(certs.server_key_file()),
            "--trusted-ca-file".to_owned(),
            file(certs.ca_file()),
            "--client-cert-auth".to_owned(),
        ];
    }
    let peer_url = format!("http://127.0.0.1:{}", plan.peer_port);
    let server = format!("etcd member {} on {client_url}", plan.name);
    let spec = Spec::new(server, etcd, dir.path())
        .flags([
            ("--name", &plan.name),
            ("--data-dir", &dir.path().join("data").to_string_lossy()),
            ("--listen-client-urls", &client_url),
            ("--advertise-client-urls", &client_url),
            ("--listen-peer-urls", &peer_url),
            ("--initial-advertise-peer-urls", &peer_url),
            ("--initial-cluster", initial_cluster),
            ("--initial-cluster-token", token),
            ("--initial-cluster-state", "new"),
            ("--heartbeat-interval", HEARTBEAT_MS),
            ("--election-timeout", ELECTION_TIMEOUT_MS),
            ("--logger", "zap"),
            ("--log-outputs", "stderr"),
        ])
        .args(tls_flags)
        .args(flags);
    let port = plan.client_port;
    let process =
        ServerProcess::spawn(spec, port, probe(move || is_healthy(port)), STARTUP_TIMEOUT)?;
    Ok(EtcdServer {
        process,
        name: plan.name,
        peer_port: plan.peer_port,
        tls_port: plan.tls_port,
        _dir: dir,
    })
}

/// A token unique to this cluster, so members of different clusters never mix.
fn cluster_token() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    format!(
        "dlock-{}-{}-{}",
        std::process::id(),
        nanos.as_nanos(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Whether `GET /health` on the client port says `"health":"true"`.
async fn is_healthy(port: u16) -> bool {
    matches!(http(port, "GET", "/health", "").await, Ok((200, body)) if body.contains(r#""health":"true""#))
}
