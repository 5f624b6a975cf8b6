//! ZooKeeper (the Debian package's jar on Java): a standalone server ([`ZkServer`]) or an
//! ensemble ([`ZkEnsemble`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use tempfile::TempDir;

use super::process::{
    STARTUP_TIMEOUT, ServerProcess, Spec, find_binary, poll_for, probe, process_methods,
    retry_startup, temp_dir,
};
use super::tls::TestCerts;
use super::wire::four_letter_word;
use super::{HarnessError, Result, ports};

/// The server jar; its manifest's `Class-Path` pulls in its dependencies.
const ZOOKEEPER_JAR: &str = "/usr/share/java/zookeeper.jar";
/// An slf4j binding, so that the server logs to stderr (there is none on the jar's classpath).
const SLF4J_SIMPLE_JAR: &str = "/usr/share/java/slf4j-simple.jar";
/// Netty's codecs: ZooKeeper's TLS port runs on Netty, whose codec jar the server jar's
/// manifest does not name.
const NETTY_CODEC_JAR: &str = "/usr/share/java/netty-codec.jar";
/// An ensemble needs its quorum to elect a leader: more time than a single server.
const ENSEMBLE_TIMEOUT: Duration = Duration::from_secs(30);

/// One ZooKeeper server on free loopback ports, with its data in its own temp dir, killed on
/// drop. On its own (from [`ZkServer::start`]) it runs standalone.
#[derive(Debug)]
pub struct ZkServer {
    process: ServerProcess,
    myid: u32,
    /// The TLS client port of a server started with [`start_tls`](Self::start_tls).
    secure_port: Option<u16>,
    _dir: TempDir,
}

process_methods!(ZkServer);

impl ZkServer {
    /// Starts a standalone ZooKeeper server and waits until `srvr` says `Mode: standalone`.
    ///
    /// # Errors
    ///
    /// [`HarnessError::MissingBinary`] if `java` or ZooKeeper's jar is not installed,
    /// [`HarnessError::Startup`] if it did not start (after one retry on new ports).
    pub async fn start() -> Result<Self> {
        let mut members = start_members(1, None).await?;
        Ok(members.remove(0))
    }

    /// Like [`start`](Self::start), also serving clients over TLS on a second port
    /// ([`tls_url`](Self::tls_url)) with `certs`' server certificate, where it requires a
    /// client certificate signed by their CA (ZooKeeper's default `ssl.clientAuth=need`).
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start); [`HarnessError::MissingBinary`] without Netty's codec jar.
    pub async fn start_tls(certs: &TestCerts) -> Result<Self> {
        let mut members = start_members(1, Some(certs)).await?;
        Ok(members.remove(0))
    }

    /// `zks://127.0.0.1:SECURE_PORT` of a server started with [`start_tls`](Self::start_tls).
    ///
    /// # Panics
    ///
    /// If the server does not serve TLS.
    #[must_use]
    pub fn tls_url(&self) -> String {
        let port = self.secure_port.expect("a server started with `start_tls`");
        format!("zks://127.0.0.1:{port}")
    }

    /// `127.0.0.1:PORT`
    #[must_use]
    pub fn connect_string(&self) -> String {
        format!("127.0.0.1:{}", self.port())
    }

    /// `zk://127.0.0.1:PORT`
    #[must_use]
    pub fn url(&self) -> String {
        format!("zk://{}", self.connect_string())
    }

    /// The server id (`myid`): 1, 2, ... in an ensemble, 1 when standalone.
    #[must_use]
    pub fn myid(&self) -> u32 {
        self.myid
    }

    /// The server's mode from the `srvr` command: `leader`, `follower` or `standalone`; `None`
    /// if it does not answer or does not serve (e.g. no quorum).
    pub async fn mode(&self) -> Option<String> {
        server_mode(self.port()).await
    }

    /// One number of the server's `mntr` report (e.g. `zk_watch_count`, `zk_znode_count`);
    /// `None` if the server does not answer or has no such line.
    pub async fn monitor(&self, name: &str) -> Option<f64> {
        let reply = four_letter_word(self.port(), "mntr").await.ok()?;
        reply.lines().find_map(|line| {
            let (key, value) = line.split_once('\t')?;
            (key == name).then(|| value.trim().parse().ok())?
        })
    }
}

/// A ZooKeeper ensemble of `n` servers on loopback, killed on drop.
#[derive(Debug)]
pub struct ZkEnsemble {
    members: Vec<ZkServer>,
}

impl ZkEnsemble {
    /// Starts `members` servers as one ensemble and waits (up to 30 s) until every one of them
    /// is a leader or a follower.
    ///
    /// # Panics
    ///
    /// If `members` is 0.
    ///
    /// # Errors
    ///
    /// As [`ZkServer::start`].
    pub async fn start(members: usize) -> Result<Self> {
        assert!(
            members > 0,
            "a ZooKeeper ensemble needs at least one member"
        );
        Ok(Self {
            members: start_members(members, None).await?,
        })
    }

    /// The members, in the order of [`connect_string`](Self::connect_string).
    #[must_use]
    pub fn members(&self) -> &[ZkServer] {
        &self.members
    }

    /// The member at `index`.
    ///
    /// # Panics
    ///
    /// If `index` is out of range.
    #[must_use]
    pub fn member(&self, index: usize) -> &ZkServer {
        &self.members[index]
    }

    /// `127.0.0.1:p1,127.0.0.1:p2,...`
    #[must_use]
    pub fn connect_string(&self) -> String {
        self.members
            .iter()
            .map(ZkServer::connect_string)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `zk://127.0.0.1:p1,127.0.0.1:p2,...`
    #[must_use]
    pub fn url(&self) -> String {
        format!("zk://{}", self.connect_string())
    }

    /// The index of the member whose `srvr` says `Mode: leader`. Waits up to 20 s for one, e.g.
    /// while a new leader is elected after the old one was killed.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Timeout`] if no member is leader in time.
    pub async fn leader(&self) -> Result<usize> {
        let leader = poll_for(STARTUP_TIMEOUT, || self.find_leader()).await;
        leader.ok_or_else(|| HarnessError::Timeout {
            what: "an elected ZooKeeper leader".to_owned(),
            after: STARTUP_TIMEOUT,
        })
    }

    async fn find_leader(&self) -> Option<usize> {
        for (index, member) in self.members.iter().enumerate() {
            if member.mode().await.as_deref() == Some("leader") {
                return Some(index);
            }
        }
        None
    }
}

/// How to launch java with ZooKeeper.
struct Java {
    java: PathBuf,
    classpath: String,
}

impl Java {
    /// With `tls`, Netty's codec jar goes on the classpath (and must exist).
    fn find(tls: bool) -> Result<Self> {
        let java = find_binary("java")?;
        if !Path::new(ZOOKEEPER_JAR).is_file() {
            return Err(HarnessError::MissingBinary {
                binary: "zookeeper.jar".to_owned(),
                hint: format!(
                    "{ZOOKEEPER_JAR} is missing (Debian package `zookeeper`): {}",
                    super::error::INSTALL_HINT
                ),
            });
        }
        let mut classpath = ZOOKEEPER_JAR.to_owned();
        if Path::new(SLF4J_SIMPLE_JAR).is_file() {
            classpath = format!("{classpath}:{SLF4J_SIMPLE_JAR}");
        }
        if tls {
            if !Path::new(NETTY_CODEC_JAR).is_file() {
                return Err(HarnessError::MissingBinary {
                    binary: "netty-codec.jar".to_owned(),
                    hint: format!(
                        "{NETTY_CODEC_JAR} is missing (Debian package `libnetty-java`), needed for ZooKeeper over TLS: {}",
                        super::error::INSTALL_HINT
                    ),
                });
            }
            classpath = format!("{classpath}:{NETTY_CODEC_JAR}");
        }
        Ok(Self { java, classpath })
    }
}

/// One member's id and ports.
struct Plan {
    myid: u32,
    client_port: u16,
    peer_port: u16,
    election_port: u16,
    secure_port: Option<u16>,
}

async fn start_members(n: usize, tls: Option<&TestCerts>) -> Result<Vec<ZkServer>> {
    let java = Java::find(tls.is_some())?;
    retry_startup(|| launch_members(&java, n, tls)).await
}

async fn launch_members(java: &Java, n: usize, tls: Option<&TestCerts>) -> Result<Vec<ZkServer>> {
    let plans = (1..=n)
        .map(|myid| {
            Ok(Plan {
                myid: u32::try_from(myid).expect("small ensemble"),
                client_port: ports::free_port()?,
                peer_port: ports::free_port()?,
                election_port: ports::free_port()?,
                secure_port: tls.map(|_| ports::free_port()).transpose()?,
            })
        })
        .collect::<std::io::Result<Vec<_>>>()?;
    let servers = if n == 1 {
        String::new()
    } else {
        server_lines(&plans)
    };
    let members = plans
        .iter()
        .map(|plan| spawn_member(java, plan, &servers, n == 1, tls))
        .collect::<Result<Vec<_>>>()?;
    for member in &members {
        member.process.wait_ready().await?;
    }
    Ok(members)
}

/// `server.N=127.0.0.1:peer:election` for every member.
fn server_lines(plans: &[Plan]) -> String {
    let lines = plans.iter().map(|p| {
        format!(
            "server.{}=127.0.0.1:{}:{}\n",
            p.myid, p.peer_port, p.election_port
        )
    });
    lines.collect()
}

fn spawn_member(
    java: &Java,
    plan: &Plan,
    servers: &str,
    standalone: bool,
    tls: Option<&TestCerts>,
) -> Result<ZkServer> {
    let dir = temp_dir("zookeeper")?;
    let data = dir.path().join("data");
    std::fs::create_dir(&data)?;
    std::fs::write(data.join("myid"), format!("{}\n", plan.myid))?;
    let config = dir.path().join("zoo.cfg");
    let mut settings = zoo_cfg(&data, plan.client_port, servers);
    if let (Some(certs), Some(port)) = (tls, plan.secure_port) {
        // The plain port stays (the readiness probe's four-letter words use it). The key
        // store is the server's certificate and key in one PEM file.
        settings.push_str(&format!(
            "secureClientPort={port}\nsecureClientPortAddress=127.0.0.1\n\
             serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n\
             ssl.keyStore.location={}\nssl.trustStore.location={}\n",
            certs.server_keystore_file().display(),
            certs.ca_file().display()
        ));
    }
    std::fs::write(&config, settings)?;
    let server = format!(
        "ZooKeeper server {} on 127.0.0.1:{}",
        plan.myid, plan.client_port
    );
    let spec = Spec::new(server, &java.java, dir.path()).args([
        // A ceiling, not a reservation: a test uses a few MB; 100,000 held locks (the
        // bench's `held` scenario: 200,000 nodes, 100,000 watches) thrash the collector
        // past their session timeout in 256 MB and hold steady in 1 GB.
        "-Xmx1g",
        "-XX:+UseSerialGC",
        "-XX:-UsePerfData",
        "-Djava.net.preferIPv4Stack=true",
        "-Dzookeeper.forceSync=no",
        // Empty container nodes (lock paths) go after a second, not a minute.
        "-Dznode.container.checkIntervalMs=1000",
        // And as fast as they empty: the default (10,000 a minute, 166 a second) falls behind
        // the bench's fresh keys (over a thousand lock paths a second), whose empty
        // containers then pile up until the heap is full (seen: 1 GB, the server stalled in
        // its collector and the bench's requests timed out).
        "-Dznode.container.maxPerMinute=1000000",
        "-Dorg.slf4j.simpleLogger.showDateTime=true",
        "-cp",
        &java.classpath,
        "org.apache.zookeeper.server.quorum.QuorumPeerMain",
        &config.to_string_lossy(),
    ]);
    let port = plan.client_port;
    let timeout = if standalone {
        STARTUP_TIMEOUT
    } else {
        ENSEMBLE_TIMEOUT
    };
    let secure_port = plan.secure_port;
    let check = probe(move || async move {
        // The TLS port opens after the plain one.
        is_serving(port).await
            && match secure_port {
                Some(secure) => tokio::net::TcpStream::connect(("127.0.0.1", secure))
                    .await
                    .is_ok(),
                None => true,
            }
    });
    let process = ServerProcess::spawn(spec, port, check, timeout)?;
    Ok(ZkServer {
        process,
        myid: plan.myid,
        secure_port: plan.secure_port,
        _dir: dir,
    })
}

/// The server configuration. Session timeouts keep ZooKeeper's default bounds, 2 and 20 ticks:
/// a client asking for less than 1 s gets 1 s, one asking for more than 10 s gets 10 s.
fn zoo_cfg(data: &Path, client_port: u16, servers: &str) -> String {
    format!(
        "tickTime=500\ninitLimit=20\nsyncLimit=10\n\
         dataDir={}\nclientPort={client_port}\nclientPortAddress=127.0.0.1\n\
         admin.enableServer=false\n4lw.commands.whitelist=ruok,srvr,stat,mntr\n{servers}",
        data.display()
    )
}

/// Whether the server serves clients: `srvr` reports a mode (`ruok` already says `imok` before
/// that, and in an ensemble without quorum).
async fn is_serving(port: u16) -> bool {
    matches!(
        server_mode(port).await.as_deref(),
        Some("leader" | "follower" | "standalone")
    )
}

/// `Mode: ...` from `srvr`.
async fn server_mode(port: u16) -> Option<String> {
    let reply = four_letter_word(port, "srvr").await.ok()?;
    reply
        .lines()
        .find_map(|line| line.strip_prefix("Mode: "))
        .map(|mode| mode.trim().to_owned())
}
