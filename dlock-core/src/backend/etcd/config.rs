//! `etcd://` URLs and the client connection.
//!
//! `etcd://[user:password@]host1:2379,host2:2379[/namespace]`: one or more members (port 2379
//! when omitted), optional credentials for etcd's auth, and an optional namespace prepended to
//! every etcd key dlock writes (`etcd://h:2379/app1/` puts lock `dlock:job` under
//! `app1/dlock:job/`). Percent-encoding is decoded in credentials and namespace.

use std::time::Duration;

use etcd_client::{Client, ConnectOptions, GetOptions};

use crate::backend::url::HostsUrl;
use crate::backend_spec::redact;
use crate::{Error, Result};

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
}

impl std::fmt::Debug for EtcdUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdUrl")
            .field("endpoints", &self.endpoints)
            .field("namespace", &self.namespace)
            .field("user", &self.user.as_ref().map(|(user, _)| user))
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
        match scheme.to_ascii_lowercase().as_str() {
            "etcd" => {}
            "etcds" => {
                return Err(bad(
                    "TLS (`etcds://`) is not supported by this build; use `etcd://` on a trusted network",
                ));
            }
            _ => return Err(bad("not an `etcd://` URL")),
        }
        let parts = HostsUrl::parse(
            raw,
            DEFAULT_PORT,
            "hosts, optional user:password@, optional /namespace",
        )?;
        let endpoints = parts.hosts.iter().map(|h| format!("http://{h}")).collect();
        Ok(Self {
            endpoints,
            namespace: parts.path,
            user: parts.user,
        })
    }

    /// Connects and checks, within `timeout`, that the cluster answers a linearizable read
    /// (so it has a leader and a quorum).
    pub(super) async fn connect(&self, timeout: Duration) -> Result<Client> {
        let mut options = ConnectOptions::new()
            .with_connect_timeout(timeout)
            .with_keep_alive(HTTP2_PING_INTERVAL, timeout)
            .with_keep_alive_while_idle(false);
        if let Some((user, password)) = &self.user {
            // A long-lived process outlives etcd's auth token (`--auth-token-ttl`): fetch a
            // new one when it expires.
            options = options
                .with_user(user.clone(), password.clone())
                .with_auto_token_refresh(true);
        }
        let started = std::time::Instant::now();
        let client =
            match tokio::time::timeout(timeout, Client::connect(&self.endpoints, Some(options)))
                .await
            {
                Ok(Ok(client)) => client,
                Ok(Err(error)) => return Err(super::errors::from_etcd(error)),
                Err(_) => {
                    return Err(Error::Timeout {
                        backend: "etcd",
                        operation: "connect",
                        after: timeout,
                    });
                }
            };
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
        .await?;
        Ok(client)
    }
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
    }

    #[test]
    fn the_table_form_gives_the_same_settings() {
        let table = crate::BackendSpec::Table(crate::BackendTable {
            kind: "etcd".into(),
            hosts: vec!["10.0.0.1:2379".into(), "10.0.0.2:2379".into()],
            path: Some("app1/".into()),
            username: Some("app".into()),
            password: Some("p@ss word".into()),
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
            ("etcds://h:2379", "TLS"),
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
