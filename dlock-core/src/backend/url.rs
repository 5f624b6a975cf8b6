//! Backend URLs: the one place that maps a URL's scheme to the backend serving it — the
//! scheme table ([`BackendKind`]), the cargo feature of each backend, and [`connect`]. A new
//! backend is its module, its feature, and its lines here.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::LockBackend;
use crate::{Error, Result};

/// Connects to the backend `url` names, every round trip bounded by `operation_timeout`.
/// `memory://name` is the process-wide table `name`.
///
/// # Errors
///
/// [`Error::Unavailable`] / [`Error::Timeout`] when the server cannot be reached within the
/// operation timeout; [`Error::Refused`] when it refuses the credentials; [`Error::Config`]
/// for what the backend finds wrong in its URL.
#[cfg_attr(
    not(any(
        feature = "redis",
        feature = "etcd",
        feature = "zookeeper",
        feature = "postgres"
    )),
    allow(clippy::unused_async, unused_variables)
)]
#[cfg_attr(
    not(any(
        feature = "memory",
        feature = "redis",
        feature = "etcd",
        feature = "zookeeper",
        feature = "postgres"
    )),
    allow(unreachable_code)
)]
pub(crate) async fn connect(
    url: &BackendUrl,
    operation_timeout: Duration,
) -> Result<Arc<dyn LockBackend>> {
    Ok(match url.kind() {
        #[cfg(feature = "memory")]
        BackendKind::Memory => {
            Arc::new(super::MemoryBackend::shared_table(url.memory_table_name()))
        }
        #[cfg(feature = "redis")]
        BackendKind::Redis | BackendKind::RedisCluster | BackendKind::RedisSentinel => {
            Arc::new(super::RedisBackend::connect(url, operation_timeout).await?)
        }
        #[cfg(feature = "redlock")]
        BackendKind::RedLock => {
            Arc::new(super::RedLockBackend::connect(url, operation_timeout).await?)
        }
        #[cfg(feature = "etcd")]
        BackendKind::Etcd => Arc::new(super::EtcdBackend::connect(url, operation_timeout).await?),
        #[cfg(feature = "zookeeper")]
        BackendKind::ZooKeeper => {
            Arc::new(super::ZooKeeperBackend::connect(url, operation_timeout).await?)
        }
        #[cfg(feature = "postgres")]
        BackendKind::Postgres => {
            Arc::new(super::PostgresBackend::connect(url, operation_timeout).await?)
        }
        // `BackendUrl::parse` refuses the kinds this build does not include (with every
        // feature on, there are none).
        #[allow(unreachable_patterns)]
        other => {
            return Err(Error::config(
                "backend",
                crate::backend::url_text::redact(url.as_str()),
                format!("backend `{other}` is not available in this build"),
            ));
        }
    })
}

/// The backends dlock knows, whether or not this build includes them.
///
/// # Examples
///
/// ```
/// use dlock_core::backend::{BackendKind, BackendUrl};
/// let kind = BackendUrl::parse("memory://").unwrap().kind();
/// assert_eq!((kind, kind.feature()), (BackendKind::Memory, "memory"));
/// assert!(kind.is_built_in());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendKind {
    /// `memory://[name]`: in-process locks; every Locker connected to the same name shares
    /// one table.
    Memory,
    /// `redis://` / `rediss://`: one Redis server.
    Redis,
    /// `redis+cluster://h1,h2,h3`: a Redis Cluster.
    RedisCluster,
    /// `redis+sentinel://s1:26379,s2:26379/<master>`: a Redis master (with replicas) that
    /// Redis Sentinel fails over.
    RedisSentinel,
    /// `redlock://h1,h2,h3`: RedLock over independent Redis masters.
    RedLock,
    /// `etcd://h1:2379,h2:2379`.
    Etcd,
    /// `zk://h1:2181,h2:2181/chroot`.
    ZooKeeper,
    /// `postgres://user@host/db`.
    Postgres,
}

impl BackendKind {
    /// The cargo feature of `dlock-core` that provides this backend.
    #[must_use]
    pub const fn feature(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Redis | Self::RedisCluster | Self::RedisSentinel => "redis",
            Self::RedLock => "redlock",
            Self::Etcd => "etcd",
            Self::ZooKeeper => "zookeeper",
            Self::Postgres => "postgres",
        }
    }

    /// Whether this build of `dlock-core` includes the backend.
    #[must_use]
    pub const fn is_built_in(self) -> bool {
        match self {
            Self::Memory => cfg!(feature = "memory"),
            Self::Redis | Self::RedisCluster | Self::RedisSentinel => cfg!(feature = "redis"),
            Self::Etcd => cfg!(feature = "etcd"),
            Self::ZooKeeper => cfg!(feature = "zookeeper"),
            Self::Postgres => cfg!(feature = "postgres"),
            Self::RedLock => cfg!(feature = "redlock"),
        }
    }

    /// The backend a URL names by its scheme, whether or not this build includes it; `None`
    /// for a string that is not a URL or an unknown scheme. Nothing else of the URL is checked
    /// (that is [`BackendUrl::parse`]'s job).
    ///
    /// # Examples
    ///
    /// ```
    /// use dlock_core::backend::BackendKind;
    /// assert_eq!(BackendKind::from_url("redis+cluster://a:1,b:2"), Some(BackendKind::RedisCluster));
    /// assert_eq!(BackendKind::from_url("mongodb://h"), None);
    /// ```
    #[must_use]
    pub fn from_url(url: &str) -> Option<Self> {
        let (scheme, _) = url.split_once("://")?;
        Self::from_scheme(&scheme.to_ascii_lowercase())
    }

    fn from_scheme(scheme: &str) -> Option<Self> {
        Some(match scheme {
            "memory" => Self::Memory,
            // `redis+unix:///path/redis.sock` and `unix:///path/redis.sock`: a local socket.
            "redis" | "rediss" | "redis+unix" | "unix" => Self::Redis,
            "redis+cluster" | "rediss+cluster" => Self::RedisCluster,
            "redis+sentinel" | "rediss+sentinel" => Self::RedisSentinel,
            "redlock" | "redlocks" => Self::RedLock,
            "etcd" | "etcds" => Self::Etcd,
            "zk" | "zks" | "zookeeper" => Self::ZooKeeper,
            "postgres" | "postgresql" => Self::Postgres,
            _ => return None,
        })
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Memory => "memory",
            Self::Redis => "redis",
            Self::RedisCluster => "redis cluster",
            Self::RedisSentinel => "redis sentinel",
            Self::RedLock => "redlock",
            Self::Etcd => "etcd",
            Self::ZooKeeper => "zookeeper",
            Self::Postgres => "postgres",
        })
    }
}

/// A parsed backend URL.
///
/// # Examples
///
/// ```
/// use dlock_core::backend::{BackendKind, BackendUrl};
/// let url = BackendUrl::parse("memory://jobs").unwrap();
/// assert_eq!(url.kind(), BackendKind::Memory);
/// assert_eq!(url.memory_table_name(), "jobs");
///
/// // A backend this build lacks is a config error naming its cargo feature.
/// match BackendUrl::parse("etcd://127.0.0.1:2379") {
///     Ok(url) => assert_eq!(url.kind(), BackendKind::Etcd),
///     Err(err) => assert!(err.to_string().contains("needs the `etcd` feature"), "{err}"),
/// }
/// ```
#[derive(Clone)]
pub struct BackendUrl {
    kind: BackendKind,
    url: String,
    /// What the URL says, parsed once.
    settings: Settings,
    /// The TLS files from the URL's query, then from the config.
    tls: crate::TlsConfig,
}

/// Shows the URL with its password redacted, like every error that names it.
impl fmt::Debug for BackendUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackendUrl")
            .field("kind", &self.kind)
            .field("url", &crate::backend::url_text::redact(&self.url))
            .field("settings", &self.settings)
            .field("tls", &self.tls)
            .finish()
    }
}

/// Two URLs are equal when they are written alike (their settings follow from the text).
impl PartialEq for BackendUrl {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && self.url == other.url
    }
}

impl Eq for BackendUrl {}

/// Typed settings of a URL, one variant per backend this build includes.
#[derive(Debug, Clone)]
enum Settings {
    /// `memory://name`: the table's name.
    Memory { table: String },
    /// The connection settings, and where the locks live (`?layout=plain`).
    #[cfg(feature = "redis")]
    Redis(super::redis::RedisUrl, super::redis::Layout),
    #[cfg(feature = "redlock")]
    RedLock(super::redlock::RedLockUrl),
    #[cfg(feature = "etcd")]
    Etcd(super::etcd::EtcdUrl),
    #[cfg(feature = "zookeeper")]
    ZooKeeper(super::zookeeper::ZkUrl),
    /// Boxed: tokio-postgres' `Config` is several times larger than the other settings.
    #[cfg(feature = "postgres")]
    Postgres(Box<super::postgres::PgUrl>),
    /// A backend this build does not include (refused before this is used).
    Other,
}

impl BackendUrl {
    /// Parses `url` and checks that this build includes its backend.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a malformed URL, an unknown scheme, or a backend whose cargo
    /// feature is off (the message names the feature).
    pub fn parse(url: &str) -> Result<Self> {
        let bad = |reason: String| {
            Error::config("backend", crate::backend::url_text::redact(url), reason)
        };
        let (scheme, _) = url.split_once("://").ok_or_else(|| {
            bad("expected a URL such as `memory://` or `redis://127.0.0.1:6379`".into())
        })?;
        let kind = BackendKind::from_scheme(&scheme.to_ascii_lowercase()).ok_or_else(|| {
            bad(format!(
                "unknown backend `{scheme}`; known: memory, redis, rediss, redis+unix, unix, redis+cluster, rediss+cluster, redis+sentinel, rediss+sentinel, redlock, redlocks, etcd, etcds, zk, zks, postgres"
            ))
        })?;
        if !kind.is_built_in() {
            return Err(bad(format!(
                "backend `{kind}` needs the `{}` feature of dlock-core, which this build does not include",
                kind.feature()
            )));
        }
        // The TLS files are the same options on every backend: taken out here, so that each
        // backend's parser sees only its own.
        let (without_tls, tls) =
            crate::TlsConfig::take_from_query(url, kind == BackendKind::Postgres);
        tls.validate_as(|field| format!("backend `{field}` option"))?;
        let full_url = url;
        let url = without_tls.as_str();
        // Hosts and options are checked by each backend when it connects; here only that the
        // URL is well-formed. Several hosts (`h1:p1,h2:p2`) are checked one by one.
        if kind != BackendKind::RedLock {
            // A RedLock URL has credentials per master: its parser checks each one.
            super::host_list::check_hosts(url).map_err(bad)?;
        }
        let settings = match kind {
            BackendKind::Memory => Settings::Memory {
                table: url
                    .split_once("://")
                    .map_or("", |(_, rest)| rest.trim_matches('/'))
                    .to_owned(),
            },
            #[cfg(feature = "redis")]
            BackendKind::Redis | BackendKind::RedisCluster | BackendKind::RedisSentinel => {
                let (layout, url) = super::redis::Layout::take_from_query(url)?;
                Settings::Redis(super::redis::RedisUrl::parse(&url, kind)?, layout)
            }
            #[cfg(feature = "redlock")]
            BackendKind::RedLock => Settings::RedLock(super::redlock::RedLockUrl::parse(url)?),
            #[cfg(feature = "etcd")]
            BackendKind::Etcd => Settings::Etcd(super::etcd::EtcdUrl::parse(url)?),
            #[cfg(feature = "zookeeper")]
            BackendKind::ZooKeeper => Settings::ZooKeeper(super::zookeeper::ZkUrl::parse(url)?),
            #[cfg(feature = "postgres")]
            BackendKind::Postgres => {
                Settings::Postgres(Box::new(super::postgres::PgUrl::parse(url)?))
            }
            // A backend this build does not include (none with every feature on).
            #[allow(unreachable_patterns)]
            _ => Settings::Other,
        };
        Ok(Self {
            kind,
            url: full_url.to_owned(),
            settings,
            tls,
        })
    }

    /// This URL with every TLS file its query does not name taken from `config`.
    #[must_use]
    pub(crate) fn with_tls_defaults(mut self, config: &crate::TlsConfig) -> Self {
        self.tls = self.tls.or(config);
        self
    }

    /// The TLS files of the URL's connections (used only if the URL asks for TLS).
    #[cfg_attr(
        not(any(
            feature = "redis",
            feature = "etcd",
            feature = "zookeeper",
            feature = "postgres"
        )),
        allow(dead_code)
    )]
    pub(crate) const fn tls(&self) -> &crate::TlsConfig {
        &self.tls
    }

    /// The backend the URL selects.
    #[must_use]
    pub const fn kind(&self) -> BackendKind {
        self.kind
    }

    /// The URL as given.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.url
    }

    /// For `memory://name`, the table name (`""` for `memory://` and other backends).
    #[must_use]
    pub fn memory_table_name(&self) -> &str {
        match &self.settings {
            Settings::Memory { table } => table,
            _ => "",
        }
    }

    /// A `redis://` or `redis+cluster://` URL's settings.
    #[cfg(feature = "redis")]
    pub(crate) const fn redis(&self) -> Option<&super::redis::RedisUrl> {
        match &self.settings {
            Settings::Redis(settings, _) => Some(settings),
            _ => None,
        }
    }

    /// Where a `redis://`, `redis+cluster://` or `redis+sentinel://` URL's locks live.
    #[cfg(feature = "redis")]
    pub(crate) const fn redis_layout(&self) -> super::redis::Layout {
        match &self.settings {
            Settings::Redis(_, layout) => *layout,
            _ => super::redis::Layout::Dlock,
        }
    }

    /// A `redlock://` URL's settings.
    #[cfg(feature = "redlock")]
    pub(crate) const fn redlock(&self) -> Option<&super::redlock::RedLockUrl> {
        match &self.settings {
            Settings::RedLock(settings) => Some(settings),
            _ => None,
        }
    }

    /// An `etcd://` URL's settings.
    #[cfg(feature = "etcd")]
    pub(crate) const fn etcd(&self) -> Option<&super::etcd::EtcdUrl> {
        match &self.settings {
            Settings::Etcd(settings) => Some(settings),
            _ => None,
        }
    }
}

impl BackendUrl {
    /// A `zk://` URL's settings.
    #[cfg(feature = "zookeeper")]
    pub(crate) const fn zookeeper(&self) -> Option<&super::zookeeper::ZkUrl> {
        match &self.settings {
            Settings::ZooKeeper(settings) => Some(settings),
            _ => None,
        }
    }

    /// A `postgres://` URL's settings.
    #[cfg(feature = "postgres")]
    pub(crate) fn postgres(&self) -> Option<&super::postgres::PgUrl> {
        match &self.settings {
            Settings::Postgres(settings) => Some(settings),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_missing_feature_for_each_unbuilt_backend() {
        for (url, feature) in [
            ("redis://127.0.0.1:6379/0", "redis"),
            ("redis+cluster://a:1,b:2,c:3", "redis"),
            ("redlock://a:1,b:2,c:3", "redlock"),
            ("etcd://a:2379,b:2379", "etcd"),
            ("zk://a:2181/app", "zookeeper"),
            ("postgres://u@h/db", "postgres"),
        ] {
            let kind = BackendKind::from_scheme(url.split_once("://").unwrap().0).unwrap();
            if kind.is_built_in() {
                assert!(BackendUrl::parse(url).is_ok(), "{url}");
                continue;
            }
            let err = BackendUrl::parse(url).unwrap_err().to_string();
            assert!(
                err.contains(&format!("needs the `{feature}` feature")),
                "{url}: {err}"
            );
            assert!(err.contains(url), "{url}: {err}");
        }
    }

    #[test]
    fn debug_output_redacts_the_password() {
        let url = BackendUrl::parse("memory://").unwrap();
        assert!(format!("{url:?}").contains("memory://"));
        #[cfg(feature = "redis")]
        {
            let url = BackendUrl::parse("redis://app:s3cret@127.0.0.1:6379/0").unwrap();
            let shown = format!("{url:?}");
            assert!(
                !shown.contains("s3cret") && shown.contains("app"),
                "{shown}"
            );
        }
    }

    #[test]
    fn tls_files_come_from_the_query_then_the_config() {
        let url = BackendUrl::parse("memory://t?tls_ca_file=%2Furl%2Fca.pem").unwrap();
        assert_eq!(url.memory_table_name(), "t");
        let config = crate::TlsConfig {
            ca_file: Some("/config/ca.pem".into()),
            cert_file: Some("/config/c.pem".into()),
            key_file: Some("/config/k.pem".into()),
        };
        let url = url.with_tls_defaults(&config);
        assert_eq!(url.tls().ca_file, Some("/url/ca.pem".into()));
        assert_eq!(url.tls().cert_file, Some("/config/c.pem".into()));
        let half = BackendUrl::parse("memory://?tls_cert_file=c.pem").unwrap_err();
        assert!(half.to_string().contains("tls.key_file"), "{half}");
    }

    #[test]
    fn rejects_unknown_and_malformed_urls() {
        assert!(
            BackendUrl::parse("mongodb://h")
                .unwrap_err()
                .to_string()
                .contains("unknown backend `mongodb`")
        );
        assert!(
            BackendUrl::parse("localhost:6379")
                .unwrap_err()
                .to_string()
                .contains("expected a URL")
        );
    }

    /// A URL is parsed once, by `BackendUrl::parse`: what a backend's own settings refuse is
    /// a config error before any connection.
    #[test]
    fn backend_settings_are_checked_when_the_url_is_parsed() {
        #[cfg(feature = "redis")]
        {
            let error = BackendUrl::parse("redis://127.0.0.1:6379/not-a-db").unwrap_err();
            assert!(error.to_string().contains("not a Redis URL"), "{error}");
            assert!(
                BackendUrl::parse("redis+cluster://a:1,b:2")
                    .unwrap()
                    .redis()
                    .is_some()
            );
        }
        assert_eq!(
            BackendUrl::parse("memory://jobs/")
                .unwrap()
                .memory_table_name(),
            "jobs"
        );
    }
}
