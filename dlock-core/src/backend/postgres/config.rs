//! The `postgres://` URL, the settings of every lock-holding connection, and the checks and
//! the fence table made once at connect.

use std::str::FromStr;
use std::time::Duration;

use tokio_postgres::config::SslMode;
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{Client, Config, Socket};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::errors::timed;
use super::keys;
use crate::backend::tls_files::{TlsFiles, refuse_for_plain_text};
use crate::backend::url_text::take_query_option;
use crate::{Error, Result, TlsConfig};

/// A client config for a connector that never makes a TLS connection (`sslmode=disable`
/// connections ask for none): it trusts nothing.
fn plain_text_only() -> rustls::ClientConfig {
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth()
}

/// The URL query option naming the fence table (dlock's own; the others are libpq's).
const FENCE_TABLE_OPTION: &str = "dlock_fence_table";
/// The fence table unless the URL names another.
pub(super) const DEFAULT_FENCE_TABLE: &str = "dlock_fence";
/// The oldest server with `idle_session_timeout` and `client_connection_check_interval`.
const MIN_SERVER_VERSION: i32 = 14_00_00;

/// A parsed `postgres://user:password@host:port/database[?options]` URL: libpq's URL syntax and
/// options (as tokio-postgres reads them), plus `dlock_fence_table=[schema.]table`.
#[derive(Clone)]
pub(crate) struct PgUrl {
    config: Config,
    /// The fence table as written in SQL (quoted).
    pub(super) fence_table: String,
    /// What `sslmode` asks for.
    tls: SslChoice,
    /// The TLS connector, made by [`with_tls`](Self::with_tls) from the TLS files (until
    /// then, and for plain text, one that is never used).
    connector: MakeRustlsConnect,
}

/// libpq's `sslmode`, as dlock treats it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SslChoice {
    /// `disable`, `allow`, `prefer` or none: plain text. dlock does not try TLS on the
    /// chance that the server offers it, as a connection that might be plain text protects
    /// nothing: ask for it with one of the others.
    Plain,
    /// `require` and `verify-ca`: TLS with a certificate chain leading to the CA (libpq
    /// checks nothing under `require` when it has no root certificate; dlock always checks),
    /// whatever name it is for.
    VerifyChain,
    /// `verify-full`: the chain, and the certificate is for the host the URL names.
    VerifyFull,
}

/// A lock connection's driver (its socket plain or TLS, as the URL says).
pub(super) type PgConnection =
    tokio_postgres::Connection<Socket, <MakeRustlsConnect as MakeTlsConnect<Socket>>::Stream>;

/// tokio-postgres' `Config` shows the password as `_`; the rest is useful when debugging.
impl std::fmt::Debug for PgUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgUrl")
            .field("user", &self.config.get_user())
            .field("hosts", &self.config.get_hosts())
            .field("ports", &self.config.get_ports())
            .field("dbname", &self.config.get_dbname())
            .field("fence_table", &self.fence_table)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

impl PgUrl {
    /// Parses `raw` (`postgres://` or `postgresql://`).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the URL (password redacted) and what is wrong.
    pub(crate) fn parse(raw: &str) -> Result<Self> {
        let bad = |reason: String| {
            Error::config("backend", crate::backend::url_text::redact(raw), reason)
        };
        let (without_ours, fence_table) = take_query_option(raw, FENCE_TABLE_OPTION);
        let (without_ours, sslmode) = take_query_option(&without_ours, "sslmode");
        let tls = match sslmode.as_deref() {
            None | Some("disable" | "allow" | "prefer") => SslChoice::Plain,
            Some("require" | "verify-ca") => SslChoice::VerifyChain,
            Some("verify-full") => SslChoice::VerifyFull,
            Some(other) => {
                return Err(Error::config(
                    "backend `sslmode` option",
                    other,
                    "expected disable, allow, prefer, require, verify-ca or verify-full",
                ));
            }
        };
        let fence_table = keys::quoted_table(fence_table.as_deref().unwrap_or(DEFAULT_FENCE_TABLE))
            .map_err(|reason| bad(format!("`{FENCE_TABLE_OPTION}`: {reason}")))?;
        let mut config = Config::from_str(&without_ours)
            .map_err(|error| bad(format!("not a PostgreSQL URL: {error}")))?;
        // A fencing token is as durable as the commit that bumped it: commit synchronously
        // even where the server's default is off, unless the URL's own options say otherwise
        // (they come later, so they win).
        let options = match config.get_options() {
            Some(own) => format!("-c synchronous_commit=on {own}"),
            None => "-c synchronous_commit=on".to_owned(),
        };
        config.options(options);
        if config.get_hosts().is_empty() {
            return Err(bad(
                "expected a host: `postgres://user@host:5432/database`".to_owned()
            ));
        }
        config.ssl_mode(if tls == SslChoice::Plain {
            SslMode::Disable
        } else {
            SslMode::Require
        });
        Ok(Self {
            config,
            fence_table,
            tls,
            connector: MakeRustlsConnect::new(plain_text_only()),
        })
    }

    /// This URL with its TLS connector made from `files` (the URL's `sslrootcert`, `sslcert`,
    /// `sslkey` or `tls_*_file` options, then the config's).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a file that cannot be read or used, or files named for a URL
    /// that does not ask for TLS.
    pub(super) fn with_tls(&self, files: &TlsConfig) -> Result<Self> {
        let mut url = self.clone();
        if self.tls == SslChoice::Plain {
            refuse_for_plain_text(files, self.hosts(), "add `sslmode=verify-full`")?;
            return Ok(url);
        }
        let config = TlsFiles::read(files)?.client_config(self.tls == SslChoice::VerifyFull)?;
        url.connector = MakeRustlsConnect::new(config);
        Ok(url)
    }

    /// The hosts, comma-separated, for messages.
    fn hosts(&self) -> String {
        let hosts = self.config.get_hosts().iter().map(|host| match host {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        });
        hosts.collect::<Vec<_>>().join(",")
    }

    /// The connector of this URL's connections (and of their cancel requests).
    pub(super) fn connector(&self) -> MakeRustlsConnect {
        self.connector.clone()
    }

    /// The settings of a lock connection whose locks have lease `ttl`, every round trip of
    /// the connect bounded by `timeout`. See [`PostgresBackend`](super::PostgresBackend) for
    /// why each is set.
    fn lock_connection(&self, ttl: Duration, timeout: Duration) -> Config {
        let millis = |d: Duration| d.as_millis().max(1);
        let mut config = self.probed(
            ttl,
            timeout,
            [
                format!("idle_session_timeout={}", millis(ttl)),
                "idle_in_transaction_session_timeout=0".to_owned(),
                "statement_timeout=0".to_owned(),
                format!("lock_timeout={}", millis(timeout / 2)),
                format!(
                    "client_connection_check_interval={}",
                    millis((ttl / 3).clamp(Duration::from_millis(100), Duration::from_secs(1)))
                ),
                format!("tcp_user_timeout={}", millis(ttl)),
            ],
        );
        config.tcp_user_timeout(ttl);
        config
    }

    /// The URL's settings plus the server-side `settings`, named `dlock`, the connect bounded
    /// by `timeout`, and TCP keepalives on both sides probing every third of `ttl` (at least
    /// each second), so that a dead path ends the connection within about `ttl`.
    fn probed<const N: usize>(
        &self,
        ttl: Duration,
        timeout: Duration,
        settings: [String; N],
    ) -> Config {
        let mut config = self.config.clone();
        let probe = (ttl / 3).max(Duration::from_secs(1));
        let mut options = config.get_options().map(str::to_owned).unwrap_or_default();
        let keepalives = [
            format!("tcp_keepalives_idle={}", probe.as_secs()),
            format!("tcp_keepalives_interval={}", probe.as_secs()),
            "tcp_keepalives_count=3".to_owned(),
        ];
        for setting in settings.iter().chain(&keepalives) {
            if !options.is_empty() {
                options.push(' ');
            }
            options.push_str("-c ");
            options.push_str(setting);
        }
        config
            .options(options)
            .application_name("dlock")
            .connect_timeout(timeout)
            .keepalives(true)
            .keepalives_idle(probe)
            .keepalives_interval(probe)
            .keepalives_retries(3);
        config
    }

    /// Opens a lock connection for locks with lease `ttl`; the connection's driver is the
    /// caller's to run.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] / [`Error::Timeout`] when the server cannot be reached;
    /// [`Error::Refused`] when it refuses the credentials or the database.
    pub(super) async fn open(
        &self,
        ttl: Duration,
        timeout: Duration,
    ) -> Result<(Client, PgConnection)> {
        let config = self.lock_connection(ttl, timeout);
        timed(timeout, "connect", config.connect(self.connector())).await
    }

    /// Checks that the server answers, is PostgreSQL 14 or later, and that the fence table
    /// exists (creating it if missing, under an advisory lock so that Lockers starting
    /// together do not trip over each other).
    ///
    /// # Errors
    ///
    /// As [`open`](Self::open); [`Error::Refused`] for an older server or a fence table that
    /// cannot be created.
    pub(super) async fn prepare(&self, timeout: Duration) -> Result<()> {
        let (client, connection) =
            timed(timeout, "connect", self.config.connect(self.connector())).await?;
        let mut driver = tokio::spawn(connection);
        let prepared = async {
            let version: i32 = timed(
                timeout,
                "connect",
                client.query_one("SELECT current_setting('server_version_num')::int", &[]),
            )
            .await?
            .get(0);
            if version < MIN_SERVER_VERSION {
                return Err(Error::refused(
                    "postgres",
                    format!(
                        "PostgreSQL {}.{} is too old: dlock needs 14 or later (idle_session_timeout, client_connection_check_interval)",
                        version / 10_000,
                        version % 10_000 / 100,
                    ),
                ));
            }
            timed(
                timeout,
                "create the fence table",
                self.create_fence_table(&client, timeout),
            )
                .await
                .map_err(|error| match error {
                    Error::Refused { source, .. } if source.to_string().contains("55P03") => Error::refused(
                        "postgres",
                        format!(
                            "adding columns to the fence table {table}: it stayed in use (a \
                             fenced wait of an older dlock?): {source}; add the missing ones when \
                             it is free: ALTER TABLE {table} ADD COLUMN kept_until timestamptz, \
                             ADD COLUMN kept text, ADD COLUMN kept_by text; CREATE INDEX ON \
                             {table} (kept_until) WHERE token = 0; ALTER TABLE {table} ADD COLUMN \
                             leader text, ADD COLUMN leader_pid integer, ADD COLUMN leader_token \
                             bigint, ADD COLUMN leader_ttl_ms bigint;",
                            table = self.fence_table
                        ),
                    ),
                    Error::Refused { source, .. } => Error::refused(
                        "postgres",
                        format!("creating the fence table {}: {source}", self.fence_table),
                    ),
                    other => other,
                })
        }
        .await;
        drop(client);
        // The connection ends once the server has answered what was sent; a statement cut
        // off by the time bound may never be answered.
        if tokio::time::timeout(timeout, &mut driver).await.is_err() {
            driver.abort();
        }
        prepared
    }

    /// Creates the fence table if missing, and adds the kept-record columns (tables made by
    /// earlier dlock versions lack them) with a partial index for the sweep of expired
    /// records. One Locker at a time, under a transaction-level advisory lock. A table that
    /// has the columns is not altered; adding them waits at most half of `timeout` for the
    /// table (a fenced wait of an older Locker holds it), then fails the connect — add them by
    /// hand then (see the backend's docs).
    async fn create_fence_table(
        &self,
        client: &Client,
        timeout: Duration,
    ) -> Result<(), tokio_postgres::Error> {
        let table = &self.fence_table;
        // Every wait bounded: `ALTER TABLE` waits for every statement using the table — a
        // fenced wait of an older Locker included — and queues every later one behind it;
        // and a backend waiting for a lock does not notice its client has gone.
        client
            .batch_execute(&format!(
                "BEGIN; SET LOCAL lock_timeout = '{}ms'; SELECT pg_advisory_xact_lock({ddl}); \
                 CREATE TABLE IF NOT EXISTS {table} (lock_key bigint PRIMARY KEY, token bigint NOT NULL, permits integer);",
                (timeout / 2).as_millis().max(1),
                ddl = keys::advisory_key("dlock\n#ddl"),
            ))
            .await?;
        let has_kept = client
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = $1::text::regclass \
                 AND attname = 'kept_until' AND NOT attisdropped)",
                &[table],
            )
            .await?
            .get::<_, bool>(0);
        if !has_kept {
            client
                .batch_execute(&format!(
                    "ALTER TABLE {table} ADD COLUMN kept_until timestamptz, \
                     ADD COLUMN kept text, ADD COLUMN kept_by text; \
                     CREATE INDEX ON {table} (kept_until) WHERE token = 0;"
                ))
                .await?;
        }
        let has_leader = client
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = $1::text::regclass \
                 AND attname = 'leader_token' AND NOT attisdropped)",
                &[table],
            )
            .await?
            .get::<_, bool>(0);
        if !has_leader {
            client
                .batch_execute(&format!(
                    "ALTER TABLE {table} ADD COLUMN leader text, ADD COLUMN leader_pid integer, \
                     ADD COLUMN leader_token bigint, ADD COLUMN leader_ttl_ms bigint;"
                ))
                .await?;
        }
        client.batch_execute("COMMIT").await
    }

    /// A connection for an election observer, which `LISTEN`s: no lock settings (an idle
    /// session must live), but keepalives both ways, so that a dead path ends it within
    /// about `ttl` rather than hours.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] / [`Error::Timeout`] when the server cannot be reached.
    pub(super) async fn open_listener(
        &self,
        ttl: Duration,
        timeout: Duration,
    ) -> Result<(Client, PgConnection)> {
        let config = self.probed(ttl, timeout, []);
        timed(timeout, "connect", config.connect(self.connector())).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_libpq_urls_and_the_fence_table() {
        let url = PgUrl::parse("postgres://app:s3cret@db.example:5433/orders").unwrap();
        assert_eq!(url.config.get_user(), Some("app"));
        assert_eq!(url.config.get_ports(), [5433]);
        assert_eq!(url.config.get_dbname(), Some("orders"));
        assert_eq!(url.fence_table, "\"dlock_fence\"");
        let shown = format!("{url:?}");
        assert!(!shown.contains("s3cret"), "{shown}");

        let url =
            PgUrl::parse("postgresql://app@h/db?dlock_fence_table=ops.fences&connect_timeout=3")
                .unwrap();
        assert_eq!(url.fence_table, "\"ops\".\"fences\"");
        assert_eq!(
            url.config.get_connect_timeout(),
            Some(&Duration::from_secs(3))
        );
    }

    #[test]
    fn refuses_what_it_cannot_use_naming_it() {
        for (raw, says) in [
            ("postgres://app:pw@h/db?bogus=1", "not a PostgreSQL URL"),
            (
                "postgres://app:pw@h/db?dlock_fence_table=a.b.c",
                "dlock_fence_table",
            ),
            ("postgres://app:pw@h/db?sslmode=requier", "sslmode"),
        ] {
            let error = PgUrl::parse(raw).unwrap_err().to_string();
            assert!(error.contains(says), "{raw}: {error}");
            assert!(!error.contains(":pw@"), "{raw}: password shown: {error}");
        }
    }

    #[test]
    fn lock_connections_carry_the_session_settings() {
        let url = PgUrl::parse("postgres://app@h/db?options=-c%20search_path%3Dops").unwrap();
        let config = url.lock_connection(Duration::from_secs(9), Duration::from_secs(2));
        let options = config.get_options().unwrap();
        assert!(
            options.starts_with("-c synchronous_commit=on "),
            "{options}"
        );
        for setting in [
            "search_path=ops",
            "-c idle_session_timeout=9000",
            "-c idle_in_transaction_session_timeout=0",
            "-c statement_timeout=0",
            "-c lock_timeout=1000",
            "-c client_connection_check_interval=1000",
            "-c tcp_keepalives_idle=3",
            "-c tcp_user_timeout=9000",
        ] {
            assert!(options.contains(setting), "{setting} missing: {options}");
        }
        assert_eq!(config.get_application_name(), Some("dlock"));
        assert_eq!(config.get_keepalives_idle(), Duration::from_secs(3));
        assert_eq!(config.get_tcp_user_timeout(), Some(&Duration::from_secs(9)));
    }

    #[test]
    fn sslmode_picks_plain_text_or_what_tls_checks() {
        for (mode, expected) in [
            ("", SslChoice::Plain),
            ("?sslmode=disable", SslChoice::Plain),
            ("?sslmode=prefer", SslChoice::Plain),
            ("?sslmode=require", SslChoice::VerifyChain),
            ("?sslmode=verify-ca", SslChoice::VerifyChain),
            ("?sslmode=verify-full", SslChoice::VerifyFull),
        ] {
            let url = PgUrl::parse(&format!("postgres://u@h/db{mode}")).unwrap();
            assert_eq!(url.tls, expected, "{mode}");
        }
    }

    #[test]
    fn takes_only_its_own_option() {
        assert_eq!(
            take_query_option(
                "postgres://h/db?a=1&dlock_fence_table=x%2Ey&b=2",
                FENCE_TABLE_OPTION
            ),
            ("postgres://h/db?a=1&b=2".to_owned(), Some("x.y".to_owned()))
        );
        assert_eq!(
            take_query_option("postgres://h/db?dlock_fence_table=t", FENCE_TABLE_OPTION),
            ("postgres://h/db".to_owned(), Some("t".to_owned()))
        );
        assert_eq!(
            take_query_option("postgres://h/db", FENCE_TABLE_OPTION),
            ("postgres://h/db".to_owned(), None)
        );
    }
}
