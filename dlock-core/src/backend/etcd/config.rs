//! `etcd://` URLs and the client connection.
//!
//! `etcd://[user:password@]host1:2379,host2:2379[/namespace]`: one or more members (port 2379
//! when omitted), optional credentials for etcd's auth, and an optional namespace prepended to
//! every etcd key dlock writes (`etcd://h:2379/app1/` puts lock `dlock:job` under
//! `app1/dlock:job/`). Percent-encoding is decoded in credentials and namespace.

use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, GetOptions, Identity, TlsOptions};

use crate::backend::host_list::HostsUrl;
use crate::backend::tls_files::{TlsFiles, refuse_for_plain_text};
use crate::backend::url_text::redact;
use crate::error::within;
use crate::{Error, Result, TlsConfig};

/// HTTP/2 pings on busy connections, so a member that vanished without closing its sockets is
/// noticed. etcd refuses pings more often than every 5 s (`--grpc-keepalive-min-time`), and
/// pings on idle connections altogether.
const HTTP2_PING_INTERVAL: Duration = Duration::from_secs(10);

const DEFAULT_PORT: u16 = 2379;

/// What an `etcd://` URL says.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct EtcdUrl {
    /// `http://host:port` of every member given.
    pub(super) endpoints: Vec<String>,
    /// Prepended to every key.
    pub(super) namespace: String,
    /// User and password for etcd's auth.
    pub(super) user: Option<(String, String)>,
    /// `etcds://`: every member over TLS (`https://` endpoints).
    tls: bool,
}

impl std::fmt::Debug for EtcdUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdUrl")
            .field("endpoints", &self.endpoints)
            .field("namespace", &self.namespace)
            .field("user", &self.user.as_ref().map(|(user, _)| user))
            .field("tls", &self.tls)
            .finish()
    }
}

impl EtcdUrl {
    /// Parses `etcd://[user:password@]h1[:p1],h2[:p2][/namespace]`; called once, by
    /// [`BackendUrl::parse`](crate::backend::BackendUrl::parse).
    pub(crate) fn parse(raw: &str) -> Result<Self> {
        let bad = |reason: &str| Error::config("backend", redact(raw), reason);
        let (scheme, _) = raw
            .split_once("://")
            .ok_or_else(|| bad("expected `etcd://host:2379`"))?;
        let tls = match scheme.to_ascii_lowercase().as_str() {
            "etcd" => false,
            "etcds" => true,
            _ => return Err(bad("not an `etcd://` URL")),
        };
        let parts = HostsUrl::parse(
            raw,
            DEFAULT_PORT,
            "hosts, optional user:password@, optional /namespace",
        )?;
        let protocol = if tls { "https" } else { "http" };
        let endpoints = parts
            .hosts
            .iter()
            .map(|h| format!("{protocol}://{h}"))
            .collect();
        Ok(Self {
            endpoints,
            namespace: parts.path,
            user: parts.user,
            tls,
        })
    }

    /// The TLS settings of an `etcds://` URL from `files`: their CA (else the system's
    /// roots) and client certificate; `None` for `etcd://`, where naming files is an error.
    fn tls_options(&self, files: &TlsConfig) -> Result<Option<TlsOptions>> {
        if !self.tls {
            refuse_for_plain_text(files, self.endpoints.join(","), "use `etcds://`")?;
            return Ok(None);
        }
        let files = TlsFiles::read(files)?;
        let options = match files.ca_pem() {
            Some(pem) => TlsOptions::new().ca_certificate(Certificate::from_pem(pem)),
            None => TlsOptions::new().with_native_roots(),
        };
        Ok(Some(match files.identity {
            Some(identity) => {
                options.identity(Identity::from_pem(identity.cert_pem, identity.key_pem))
            }
            None => options,
        }))
    }

    /// Connects and checks, within `timeout`, that the cluster answers a linearizable read
    /// (so it has a leader and a quorum).
    pub(super) async fn connect(&self, tls: &TlsConfig, timeout: Duration) -> Result<Client> {
        let mut options = ConnectOptions::new()
            .with_connect_timeout(timeout)
            .with_keep_alive(HTTP2_PING_INTERVAL, timeout)
            .with_keep_alive_while_idle(false)
            // A member that lost the leader ends the streams it serves (watches, keepalives)
            // instead of keeping them open and silent: the client moves to another member.
            .with_require_leader(true);
        let without_client_cert = self.tls && tls.cert_file.is_none();
        if let Some(tls) = self.tls_options(tls)? {
            options = options.with_tls(tls);
        }
        if let Some((user, password)) = &self.user {
            // A long-lived process outlives etcd's auth token (`--auth-token-ttl`): fetch a
            // new one when it expires.
            options = options
                .with_user(user.clone(), password.clone())
                .with_auto_token_refresh(true);
        }
        let started = std::time::Instant::now();
        let client = within(
            "etcd",
            "connect",
            timeout,
            Client::connect(&self.endpoints, Some(options)),
        )
        .await?
        .map_err(super::errors::from_etcd)?;
        let probe = format!("{}dlock:connect-check", self.namespace);
        let left = timeout.saturating_sub(started.elapsed());
        super::call(left, "connect", || {
            let mut kv = client.kv_client();
            let probe = probe.clone();
            async move {
                kv.get(probe, Some(GetOptions::new().with_count_only()))
                    .await
            }
        })
        .await
        .map_err(|error| match error {
            // A TLS 1.3 server that wants a client certificate closes the connection after
            // the handshake, and the client sees only that.
            Error::Unavailable { source, .. }
                if without_client_cert && closed_during_tls(&source.to_string()) =>
            {
                Error::unavailable(
                    "etcd",
                    format!(
                        "{source}; the server closed the TLS connection: if it requires a client certificate (`--client-cert-auth`), set tls.cert_file and tls.key_file"
                    ),
                )
            }
            other => other,
        })?;
        Ok(client)
    }
}

/// Whether a failed first request looks like a server that hung up right after the TLS
/// handshake (what a TLS 1.3 server that wanted a client certificate does).
fn closed_during_tls(message: &str) -> bool {
    [
        "connection closed",
        "broken pipe",
        "CertificateRequired",
        "BadCertificate",
    ]
    .iter()
    .any(|sign| message.contains(sign))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BackendUrl;

    fn parse(url: &str) -> Result<EtcdUrl> {
        BackendUrl::parse(url)?
            .etcd()
            .cloned()
            .ok_or_else(|| Error::config("backend", url, "not etcd"))
    }

    #[test]
    fn hosts_ports_namespace_and_credentials() {
        let url = parse("etcd://app:p%40ss@10.0.0.1:2379,10.0.0.2,[::1]:2380/team%2Fa/").unwrap();
        assert_eq!(
            url.endpoints,
            [
                "http://10.0.0.1:2379",
                "http://10.0.0.2:2379",
                "http://[::1]:2380"
            ]
        );
        assert_eq!(url.namespace, "team/a/");
        assert_eq!(url.user, Some(("app".into(), "p@ss".into())));
        assert!(!format!("{url:?}").contains("p@ss"));

        let plain = parse("etcd://127.0.0.1:2379").unwrap();
        assert_eq!(plain.namespace, "");
        assert_eq!(plain.user, None);

        let tls = parse("etcds://h1,h2:2380?tls_ca_file=/etc/ca.pem").unwrap();
        assert_eq!(tls.endpoints, ["https://h1:2379", "https://h2:2380"]);
    }

    #[test]
    fn the_table_form_gives_the_same_settings() {
        let table = crate::BackendSpec::Table(crate::BackendTable {
            kind: "etcd".into(),
            hosts: vec!["10.0.0.1:2379".into(), "10.0.0.2:2379".into()],
            path: Some("app1/".into()),
            username: Some("app".into()),
            password: Some("p@ss word".into()),
            options: Default::default(),
        });
        let url = parse(&table.to_url()).unwrap();
        assert_eq!(
            url.endpoints,
            ["http://10.0.0.1:2379", "http://10.0.0.2:2379"]
        );
        assert_eq!(url.namespace, "app1/");
        assert_eq!(url.user, Some(("app".into(), "p@ss word".into())));
    }

    #[test]
    fn rejects_tls_queries_and_empty_hosts_without_showing_the_password() {
        for (url, expected) in [
            ("etcd://h:2379?timeout=1s", "no query options"),
            ("etcd://a:1,,b:2", "at least one"),
            ("etcd://u:secret@h:2379?x=1", "no query options"),
        ] {
            let err = parse(url).unwrap_err().to_string();
            assert!(err.contains(expected), "{url}: {err}");
            assert!(!err.contains("secret"), "{url}: {err}");
        }
    }
}
