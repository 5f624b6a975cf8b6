//! `zk://` URLs and sessions' connections.
//!
//! `zk://[user:password@]host1:2181,host2:2181[/chroot]` (also `zookeeper://`): one or more
//! servers (port 2181 when omitted), optional credentials added to every session as
//! ZooKeeper `digest` auth, and an optional chroot under which every lock path lives (created
//! if missing). Percent-encoding is decoded in credentials and chroot.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncReadExt as _;

use zookeeper_client::{Acls, Client, CreateMode, TlsOptions};

use super::errors::timed;
use crate::backend::host_list::HostsUrl;
use crate::backend::tls_files::{TlsFiles, refuse_for_plain_text};
use crate::backend::url_text::{redact, take_query_option};
use crate::{Error, Result, TlsConfig};

const DEFAULT_PORT: u16 = 2181;
/// The port of `zks://` hosts that name none (ZooKeeper's documentation's `secureClientPort`).
const DEFAULT_TLS_PORT: u16 = 2281;

/// What a `zk://` URL says.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct ZkUrl {
    /// `host:port,host:port`, ZooKeeper's connect string without chroot.
    pub(super) hosts: String,
    /// The chroot (`/app1`), or `None` for the root.
    pub(super) chroot: Option<String>,
    /// User and password for `digest` auth.
    pub(super) user: Option<(String, String)>,
    /// `?election=latch`: campaigns take Curator's `LeaderLatch` layout (`…-latch-<seq>`)
    /// rather than its `LeaderSelector`'s (the mutex's `…-lock-<seq>`).
    pub(super) latch: bool,
    /// `zks://`: every server over TLS.
    tls: bool,
    /// The PEM files of TLS sessions, read by [`with_tls`](Self::with_tls).
    pem: Option<Arc<ZkPem>>,
}

/// A TLS session's CA and client certificate, PEM; and the same as a rustls config, for a
/// handshake of dlock's own that explains a failed connect. `Debug` shows no key.
struct ZkPem {
    ca: String,
    identity: Option<(String, String)>,
    diagnosis: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for ZkPem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkPem")
            .field("client_certificate", &self.identity.is_some())
            .finish_non_exhaustive()
    }
}

/// The same files.
impl PartialEq for ZkPem {
    fn eq(&self, other: &Self) -> bool {
        self.ca == other.ca && self.identity == other.identity
    }
}

impl Eq for ZkPem {}

impl std::fmt::Debug for ZkUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkUrl")
            .field("hosts", &self.hosts)
            .field("chroot", &self.chroot)
            .field("user", &self.user.as_ref().map(|(user, _)| user))
            .field("latch", &self.latch)
            .field("tls", &self.tls)
            .finish()
    }
}

impl ZkUrl {
    /// Parses `zk://[user:password@]h1[:p1],h2[:p2][/chroot][?election=selector|latch]`;
    /// called once, by [`BackendUrl::parse`](crate::backend::BackendUrl::parse).
    pub(crate) fn parse(raw: &str) -> Result<Self> {
        let bad = |reason: &str| Error::config("backend", redact(raw), reason);
        let (without_ours, election) = take_query_option(raw, "election");
        let latch = match election.as_deref() {
            None | Some("selector") => false,
            Some("latch") => true,
            Some(_) => {
                return Err(bad(
                    "`election` is `selector` (Curator's LeaderSelector, the default) or `latch` (its LeaderLatch)",
                ));
            }
        };
        let raw = without_ours.as_str();
        let (scheme, _) = raw
            .split_once("://")
            .ok_or_else(|| bad("expected `zk://host:2181`"))?;
        let tls = match scheme.to_ascii_lowercase().as_str() {
            "zk" | "zookeeper" => false,
            "zks" => true,
            _ => return Err(bad("not a `zk://` URL")),
        };
        let parts = HostsUrl::parse(
            raw,
            if tls { DEFAULT_TLS_PORT } else { DEFAULT_PORT },
            "hosts, optional user:password@, optional /chroot",
        )?;
        let chroot = parts.path.trim_end_matches('/');
        let chroot = if chroot.is_empty() {
            None
        } else {
            let path = format!("/{chroot}");
            if path
                .split('/')
                .skip(1)
                .any(|s| s.is_empty() || s == "." || s == "..")
            {
                return Err(bad(
                    "the chroot must be a ZooKeeper path: no empty, `.` or `..` segment",
                ));
            }
            Some(path)
        };
        Ok(Self {
            hosts: parts.hosts.join(","),
            chroot,
            user: parts.user,
            latch,
            tls,
            pem: None,
        })
    }

    /// This URL with the TLS files its sessions use read from `files`.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a file that cannot be read or used, no CA file for `zks://`
    /// (ZooKeeper's client has no system roots), or files named for a `zk://` URL.
    pub(super) fn with_tls(&self, files: &TlsConfig) -> Result<Self> {
        let mut url = self.clone();
        if !self.tls {
            refuse_for_plain_text(files, &self.hosts, "use `zks://`")?;
            return Ok(url);
        }
        let read = TlsFiles::read(files)?;
        let text = |pem: &[u8]| String::from_utf8_lossy(pem).into_owned();
        let ca = read.ca_pem().map(text).ok_or_else(|| {
            Error::config(
                "tls.ca_file",
                "",
                "`zks://` needs the CA that signed the servers' certificates: ZooKeeper's client has no system roots",
            )
        })?;
        let diagnosis = Arc::new(read.client_config(true)?);
        url.pem = Some(Arc::new(ZkPem {
            diagnosis,
            ca,
            identity: read
                .identity
                .map(|identity| (text(&identity.cert_pem), text(&identity.key_pem))),
        }));
        Ok(url)
    }

    /// Opens a session asking for `session_timeout`, within `timeout`. The chroot must exist.
    pub(super) async fn session(
        &self,
        session_timeout: Duration,
        timeout: Duration,
    ) -> Result<Client> {
        let mut connector = Client::connector()
            .with_session_timeout(session_timeout)
            .with_connection_timeout(timeout)
            .with_fail_eagerly();
        if let Some((user, password)) = &self.user {
            connector = connector.with_auth("digest", format!("{user}:{password}").as_bytes());
        }
        let hosts = match &self.chroot {
            Some(chroot) => format!("{}{chroot}", self.hosts),
            None => self.hosts.clone(),
        };
        let Some(pem) = &self.pem else {
            return timed(timeout, "connect", connector.connect(&hosts)).await;
        };
        crate::backend::tls_files::ensure_crypto_provider();
        let bad_file = |field: &str, error: zookeeper_client::Error| {
            Error::config(field, "", format!("ZooKeeper's client refused it: {error}"))
        };
        let mut options = TlsOptions::new()
            .with_pem_ca(&pem.ca)
            .map_err(|error| bad_file("tls.ca_file", error))?;
        if let Some((cert, key)) = &pem.identity {
            options = options
                .with_pem_identity(cert, key)
                .map_err(|error| bad_file("tls.key_file", error))?;
        }
        let deadline = tokio::time::Instant::now() + timeout;
        let connecting = timed(
            timeout,
            "connect",
            connector.with_tls(options).secure_connect(&hosts),
        );
        // The client says only "no available hosts" when it fails, possibly after using the
        // whole operation timeout (a cold server's first handshake, a busy machine): a
        // connect not done by half the timeout has a handshake of dlock's own find out why,
        // beside it.
        let diagnosis = async {
            tokio::time::sleep(timeout / 2).await;
            handshake_failure(&self.hosts, &pem.diagnosis).await
        };
        tokio::pin!(connecting, diagnosis);
        let mut diagnosed = None;
        let connected = loop {
            tokio::select! {
                connected = &mut connecting => break connected,
                why = &mut diagnosis, if diagnosed.is_none() => diagnosed = Some(why),
            }
        };
        match connected {
            Err(Error::Unavailable { source, .. }) => {
                // Else the handshake runs now, in what is left of the operation timeout.
                let why = match diagnosed {
                    Some(why) => why,
                    None => {
                        let diagnosis = handshake_failure(&self.hosts, &pem.diagnosis);
                        tokio::time::timeout_at(deadline, diagnosis)
                            .await
                            .ok()
                            .flatten()
                    }
                };
                let why = match why {
                    Some(why) if pem.identity.is_none() && why.contains("alert") => format!(
                        "{source}: {why}; if the server requires a client certificate, set tls.cert_file and tls.key_file"
                    ),
                    Some(why) => format!("{source}: {why}"),
                    None => source.to_string(),
                };
                Err(Error::unavailable("zookeeper", why))
            }
            other => other,
        }
    }

    /// Checks, within `timeout`, that the ensemble answers and accepts the credentials, and
    /// creates the chroot if it is missing (a persistent node, open to all like Curator's).
    pub(super) async fn prepare(&self, timeout: Duration) -> Result<()> {
        let root = Self {
            chroot: None,
            ..self.clone()
        };
        // zookeeper-client gives one connect attempt the whole connection timeout only when
        // that is at most 3/5 of the session timeout (else a 20th of the session, times 8:
        // 0.8 s of a 2 s operation timeout, which the first TLS handshake of a cold server
        // missed). This session only checks the root, so it asks for 5/3 of the timeout.
        let client = root.session(timeout * 5 / 3, timeout).await?;
        let check = async {
            match &self.chroot {
                Some(chroot) => {
                    client
                        .mkdir(
                            chroot,
                            &CreateMode::Persistent.with_acls(Acls::anyone_all()),
                        )
                        .await
                }
                None => client.check_stat("/").await.map(drop),
            }
        };
        timed(timeout, "connect", check).await
    }
}

/// The first TLS error a handshake with one of `hosts` (`h1:p1,h2:p2`) fails with, with the
/// files of `config`; `None` if each handshake succeeds or no host answers (the caller
/// bounds the time).
async fn handshake_failure(hosts: &str, config: &Arc<rustls::ClientConfig>) -> Option<String> {
    let connector = tokio_rustls::TlsConnector::from(Arc::clone(config));
    for host in hosts.split(',') {
        let name = host
            .rsplit_once(':')
            .map_or(host, |(name, _)| name)
            .trim_start_matches('[')
            .trim_end_matches(']');
        let Ok(server_name) = rustls::pki_types::ServerName::try_from(name.to_owned()) else {
            continue;
        };
        let attempt = async {
            let stream = tokio::net::TcpStream::connect(host).await.ok()?;
            match connector.connect(server_name, stream).await {
                Err(error) => Some(error.to_string()),
                // Under TLS 1.3 a server refuses the client's certificate (or its absence)
                // in an alert after the handshake; ZooKeeper's server sends nothing before
                // the client's first request, so anything read is that alert.
                Ok(mut tls) => {
                    let mut byte = [0_u8; 1];
                    let read = tls.read(&mut byte);
                    match tokio::time::timeout(Duration::from_millis(200), read).await {
                        Ok(Err(error)) => Some(error.to_string()),
                        _ => None,
                    }
                }
            }
        };
        if let Some(why) = attempt.await {
            return Some(why);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BackendUrl;

    fn parse(url: &str) -> Result<ZkUrl> {
        BackendUrl::parse(url)?
            .zookeeper()
            .cloned()
            .ok_or_else(|| Error::config("backend", url, "not zk"))
    }

    #[test]
    fn hosts_ports_chroot_and_credentials() {
        let url =
            parse("zk://app:p%40ss@10.0.0.1:2181,10.0.0.2,[::1]:2182/team%20a/locks/").unwrap();
        assert_eq!(url.hosts, "10.0.0.1:2181,10.0.0.2:2181,[::1]:2182");
        assert_eq!(url.chroot.as_deref(), Some("/team a/locks"));
        assert_eq!(url.user, Some(("app".into(), "p@ss".into())));
        assert!(!format!("{url:?}").contains("p@ss"));

        let plain = parse("zookeeper://127.0.0.1:2181").unwrap();
        assert_eq!(plain.chroot, None);
        assert_eq!(plain.user, None);
        assert_eq!(parse("zk://h/").unwrap().chroot, None);

        let tls = parse("zks://h1,h2:3000/app").unwrap();
        assert!(tls.tls);
        assert_eq!(tls.hosts, "h1:2281,h2:3000");
        assert!(!tls.latch);

        let latch = parse("zk://h:2181/app?election=latch").unwrap();
        assert!(latch.latch);
        assert_eq!(latch.chroot.as_deref(), Some("/app"));
        assert!(!parse("zk://h?election=selector").unwrap().latch);
    }

    #[test]
    fn the_table_form_gives_the_same_settings() {
        let table = crate::BackendSpec::Table(crate::BackendTable {
            kind: "zk".into(),
            hosts: vec!["10.0.0.1:2181".into(), "10.0.0.2:2181".into()],
            path: Some("app1".into()),
            username: Some("app".into()),
            password: Some("p@ss word".into()),
            options: Default::default(),
        });
        let url = parse(&table.to_url()).unwrap();
        assert_eq!(url.hosts, "10.0.0.1:2181,10.0.0.2:2181");
        assert_eq!(url.chroot.as_deref(), Some("/app1"));
        assert_eq!(url.user, Some(("app".into(), "p@ss word".into())));
    }

    #[test]
    fn rejects_queries_bad_chroots_and_empty_hosts_without_showing_the_password() {
        for (url, expected) in [
            ("zk://h:2181?timeout=1s", "no query options"),
            ("zk://a:1,,b:2", "at least one"),
            ("zk://u:secret@h:2181/a//b", "chroot"),
            ("zk://u:secret@h:2181/a/../b?x", "no query options"),
            ("zk://u:secret@h:2181/a/../b", "chroot"),
            ("zk://u:secret@h:2181/app?election=bully", "`selector`"),
        ] {
            let err = parse(url).unwrap_err().to_string();
            assert!(err.contains(expected), "{url}: {err}");
            assert!(!err.contains("secret"), "{url}: {err}");
        }
    }
}
