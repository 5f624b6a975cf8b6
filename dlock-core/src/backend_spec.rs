//! [`BackendSpec`]: which backend a config selects, as a URL or as a table.

use std::fmt;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// What a query option keeps as it is: letters, digits and `-._~` (RFC 3986's unreserved).
const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

use crate::backend::url_text::redact;
use serde::{Deserialize, Serialize};

/// The backend of a [`DlockConfig`](crate::DlockConfig): a URL, or the same information as a
/// table (handy in TOML when hosts or credentials come from elsewhere).
///
/// `Display` shows the URL as written (a table as the URL it stands for); passwords are never
/// shown by `Display`, `Debug` or in errors.
///
/// # Examples
///
/// ```
/// use dlock_core::{BackendSpec, DlockConfig};
/// use dlock_core::backend::BackendUrl;
///
/// let from_url = DlockConfig::from_toml_str(r#"backend = "memory://jobs""#).unwrap();
/// let from_table = DlockConfig::from_toml_str(r#"
///     [backend]
///     kind = "memory"
///     path = "jobs"
/// "#).unwrap();
/// let table_name = |c: &DlockConfig| {
///     BackendUrl::parse(&c.backend.to_url()).unwrap().memory_table_name().to_owned()
/// };
/// assert_eq!(table_name(&from_url), "jobs");
/// assert_eq!(table_name(&from_table), "jobs");
///
/// let spec = BackendSpec::Url("redis://app:s3cret@cache:6379/0".into());
/// assert_eq!(spec.to_string(), "redis://app:<redacted>@cache:6379/0");
/// assert!(!format!("{spec:?}").contains("s3cret"));
/// assert_eq!(DlockConfig::default().backend.to_string(), "memory://");
/// ```
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum BackendSpec {
    /// `memory://`, `redis://h:6379/0`, `redis+cluster://h1,h2,h3`, `redlock://h1,h2,h3`,
    /// `etcd://h1:2379,h2:2379`, `zk://h1:2181/chroot`, `postgres://user@h/db`.
    Url(String),
    /// The parts of such a URL.
    Table(BackendTable),
}

/// The table form of a [`BackendSpec`].
///
/// # Examples
///
/// ```
/// use dlock_core::{BackendSpec, BackendTable};
/// let table = BackendTable::default()
///     .with_kind("redis+cluster".into())
///     .with_hosts(vec!["10.0.0.1:6379".into(), "10.0.0.2:6379".into()]);
/// assert_eq!(
///     BackendSpec::Table(table).to_url(),
///     "redis+cluster://10.0.0.1:6379,10.0.0.2:6379"
/// );
///
/// // A Sentinel-managed master, in TOML: the sentinels, the master's name, and options.
/// let config = dlock_core::DlockConfig::from_toml_str(r#"
///     [backend]
///     kind = "redis+sentinel"
///     hosts = ["10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"]
///     path = "mymaster"
///     options = { min_replicas = "1", replica_timeout = "500ms" }
/// "#).unwrap();
/// assert_eq!(
///     config.backend.to_url(),
///     "redis+sentinel://10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379/mymaster?min_replicas=1&replica_timeout=500ms"
/// );
/// ```
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct BackendTable {
    /// The URL scheme: `memory`, `redis`, `redis+cluster`, `redis+sentinel`, `redlock`,
    /// `etcd`, `zk`, `postgres`.
    pub kind: String,
    /// `host:port` of every server or node.
    pub hosts: Vec<String>,
    /// What follows the hosts: a Redis database number, a ZooKeeper chroot, a PostgreSQL
    /// database, a memory table name.
    pub path: Option<String>,
    /// The user to authenticate as.
    pub username: Option<String>,
    /// The password (kept out of `Debug` output).
    pub password: Option<String>,
    /// The URL's query options, e.g. a Sentinel URL's `min_replicas` (values percent-encoded
    /// into the URL).
    pub options: std::collections::BTreeMap<String, String>,
}

impl BackendSpec {
    /// The backend as a URL (credentials percent-encoded).
    #[must_use]
    pub fn to_url(&self) -> String {
        match self {
            Self::Url(url) => url.clone(),
            Self::Table(table) => table.to_url(),
        }
    }
}

impl Default for BackendSpec {
    fn default() -> Self {
        Self::Url("memory://".to_owned())
    }
}

impl fmt::Display for BackendSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact(&self.to_url()))
    }
}

impl fmt::Debug for BackendSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Url(url) => f.debug_tuple("Url").field(&redact(url)).finish(),
            Self::Table(table) => f.debug_tuple("Table").field(table).finish(),
        }
    }
}

crate::setters::with_setters! {
    BackendTable, "dlock_core::BackendTable::default()";
    with_kind(kind: String) = "String::from(\"redis+cluster\")";
    with_hosts(hosts: Vec<String>) = "vec![String::from(\"10.0.0.1:6379\")]";
    with_path(path: Option<String>) = "Some(String::from(\"app1\"))";
    with_username(username: Option<String>) = "Some(String::from(\"app\"))";
    with_password(password: Option<String>) = "Some(String::from(\"s3cret\"))";
    with_options(options: std::collections::BTreeMap<String, String>) = "[(String::from(\"min_replicas\"), String::from(\"1\"))].into()";
}

impl BackendTable {
    fn to_url(&self) -> String {
        let encode = |s: &str| utf8_percent_encode(s, NON_ALPHANUMERIC).to_string();
        let credentials = match (&self.username, &self.password) {
            (None, None) => String::new(),
            (user, None) => format!("{}@", encode(user.as_deref().unwrap_or_default())),
            (user, Some(password)) => format!(
                "{}:{}@",
                encode(user.as_deref().unwrap_or_default()),
                encode(password)
            ),
        };
        let path = self
            .path
            .as_deref()
            .map_or(String::new(), |p| format!("/{}", p.trim_start_matches('/')));
        let query: Vec<String> = self
            .options
            .iter()
            .map(|(name, value)| {
                let encode = |s: &str| utf8_percent_encode(s, UNRESERVED).to_string();
                format!("{}={}", encode(name), encode(value))
            })
            .collect();
        let query = if query.is_empty() {
            String::new()
        } else {
            format!("?{}", query.join("&"))
        };
        format!(
            "{}://{credentials}{}{path}{query}",
            self.kind,
            self.hosts.join(",")
        )
    }
}

impl fmt::Debug for BackendTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackendTable")
            .field("kind", &self.kind)
            .field("hosts", &self.hosts)
            .field("path", &self.path)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("options", &self.options)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_encode_credentials_and_paths() {
        let table = BackendTable {
            kind: "postgres".into(),
            hosts: vec!["db:5432".into()],
            path: Some("/locks".into()),
            username: Some("app".into()),
            password: Some("p@ss word".into()),
            options: Default::default(),
        };
        assert_eq!(
            BackendSpec::Table(table).to_url(),
            "postgres://app:p%40ss%20word@db:5432/locks"
        );
    }

    #[test]
    fn display_shows_the_url_without_its_password() {
        let table = BackendTable {
            kind: "redis".into(),
            hosts: vec!["h:6379".into()],
            username: Some("app".into()),
            password: Some("s3cret".into()),
            ..BackendTable::default()
        };
        assert_eq!(
            BackendSpec::Table(table).to_string(),
            "redis://app:<redacted>@h:6379"
        );
        assert_eq!(
            BackendSpec::Url("memory://jobs".into()).to_string(),
            "memory://jobs"
        );
    }
}
