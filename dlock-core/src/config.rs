//! [`DlockConfig`]: the one configuration struct, from code, TOML or `DLOCK_*` variables.

use std::time::Duration;

use dlock_grammar::duration as grammar;
use serde::{Deserialize, Serialize};

use crate::backend::BackendUrl;
use crate::backend::url_text::redact;
use crate::backend_spec::BackendSpec;
use crate::{Error, Result, TlsConfig};

/// Everything a [`Locker`](crate::Locker) needs: which backend, and the defaults of every lock.
///
/// Durations use humantime syntax (`"10s"`, `"1m 30s"`, `"250ms"`), the same as the
/// `#[distributed_lock]` attribute.
///
/// | field               | env variable               | default                |
/// |---------------------|----------------------------|------------------------|
/// | `backend`           | `DLOCK_URL`                | `memory://`            |
/// | `key_prefix`        | `DLOCK_KEY_PREFIX`         | `dlock:`               |
/// | `ttl`               | `DLOCK_TTL`                | `30s`                  |
/// | `wait`              | `DLOCK_WAIT`               | none: until acquired   |
/// | `watchdog_interval` | `DLOCK_WATCHDOG_INTERVAL`  | a third of the ttl     |
/// | `operation_timeout` | `DLOCK_OPERATION_TIMEOUT`  | `5s`                   |
/// | `fencing`           | `DLOCK_FENCING`            | `false`                |
/// | `max_hold`          | `DLOCK_MAX_HOLD`           | none: renewed while held |
/// | `metrics_raw_keys`  | `DLOCK_METRICS_RAW_KEYS`   | `false`                |
/// | `tls.ca_file`       | `DLOCK_TLS_CA_FILE`        | the system's roots     |
/// | `tls.cert_file`     | `DLOCK_TLS_CERT_FILE`      | none: no client certificate |
/// | `tls.key_file`      | `DLOCK_TLS_KEY_FILE`       | none                   |
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use dlock_core::DlockConfig;
///
/// let config = DlockConfig::from_toml_str(r#"
///     backend = "memory://"
///     ttl = "10s"
///     wait = "2s"
/// "#).unwrap();
/// assert_eq!(config.ttl, Duration::from_secs(10));
/// assert_eq!(config.wait, Some(Duration::from_secs(2)));
///
/// let err = DlockConfig::from_toml_str(r#"ttl = "10x""#).unwrap_err();
/// assert!(err.to_string().contains("`ttl`"), "{err}");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct DlockConfig {
    /// The backend: a URL (`memory://`, `redis://h:6379/0`, `redis+cluster://h1,h2,h3`,
    /// `redlock://h1,h2,h3`, `etcd://h1:2379,h2:2379`, `zk://h1:2181/chroot`,
    /// `postgres://user@h/db`) or a [table](crate::BackendTable).
    pub backend: BackendSpec,
    /// Prepended to every key, so several applications can share one lock service.
    pub key_prefix: String,
    /// The default lease: how long a crashed holder keeps a lock.
    #[serde(with = "crate::duration_serde::required")]
    pub ttl: Duration,
    /// How long an acquire waits by default; `None` (`"forever"`) waits until acquired.
    #[serde(with = "crate::duration_serde::wait")]
    pub wait: Option<Duration>,
    /// How often the watchdog renews a held lease; `None` means a third of its ttl.
    #[serde(with = "crate::duration_serde::optional")]
    pub watchdog_interval: Option<Duration>,
    /// The most any single backend round trip may take before it fails with
    /// [`Error::Timeout`].
    #[serde(with = "crate::duration_serde::required")]
    pub operation_timeout: Duration,
    /// Whether every grant must carry a fencing token
    /// ([`LockRequest::fencing`](crate::LockRequest::fencing) per lock). Memory and etcd
    /// issue tokens anyway; Redis only when asked, as a token costs it an `INCR` per grant
    /// and a counter key per lock name. `true` on a backend without tokens fails each
    /// acquire with [`Error::Unsupported`].
    pub fencing: bool,
    /// The longest any lock is held by default: after it the watchdog stops renewing, the
    /// guard is lost ([`LostReason::MaxHold`](crate::LostReason::MaxHold)) and the lock is
    /// released, so a stuck job cannot hold it forever. `None`: renewed for as long as the
    /// guard lives. Per lock: [`LockRequest::max_hold`](crate::LockRequest::max_hold).
    #[serde(with = "crate::duration_serde::optional")]
    pub max_hold: Option<Duration>,
    /// With the `metrics` feature: label a lock's metrics with its raw key when the request
    /// names no key template (the attribute and the layer always do). Off by default: one
    /// time series per key (`order:1`, `order:2`, …) can flood a metrics store; a request
    /// without a template is labelled `key="*"`.
    pub metrics_raw_keys: bool,
    /// The files of TLS connections (CA, client certificate and key); the URL says whether
    /// to use TLS (`rediss://`, `etcds://`, `zks://`, `sslmode=verify-full`, …) and its own
    /// `tls_*_file` options win over these. See [`TlsConfig`].
    pub tls: TlsConfig,
}

impl Default for DlockConfig {
    fn default() -> Self {
        Self {
            backend: BackendSpec::default(),
            key_prefix: "dlock:".to_owned(),
            ttl: Duration::from_secs(30),
            wait: None,
            watchdog_interval: None,
            operation_timeout: Duration::from_secs(5),
            fencing: false,
            max_hold: None,
            metrics_raw_keys: false,
            tls: TlsConfig::default(),
        }
    }
}

/// The environment variables [`DlockConfig::from_env`] reads.
const ENV_VARS: [&str; 12] = [
    "DLOCK_URL",
    "DLOCK_KEY_PREFIX",
    "DLOCK_TTL",
    "DLOCK_WAIT",
    "DLOCK_WATCHDOG_INTERVAL",
    "DLOCK_OPERATION_TIMEOUT",
    "DLOCK_FENCING",
    "DLOCK_MAX_HOLD",
    "DLOCK_METRICS_RAW_KEYS",
    "DLOCK_TLS_CA_FILE",
    "DLOCK_TLS_CERT_FILE",
    "DLOCK_TLS_KEY_FILE",
];

crate::setters::with_setters! {
    DlockConfig, "dlock_core::DlockConfig::default()";
    with_backend(backend: BackendSpec) = "dlock_core::BackendSpec::Url(\"redis://10.0.0.5:6379\".into())";
    with_key_prefix(key_prefix: String) = "String::from(\"billing:\")";
    with_ttl(ttl: Duration) = "std::time::Duration::from_secs(10)";
    with_wait(wait: Option<Duration>) = "Some(std::time::Duration::from_secs(2))";
    with_watchdog_interval(watchdog_interval: Option<Duration>) = "Some(std::time::Duration::from_secs(3))";
    with_operation_timeout(operation_timeout: Duration) = "std::time::Duration::from_secs(2)";
    with_fencing(fencing: bool) = "true";
    with_max_hold(max_hold: Option<Duration>) = "Some(std::time::Duration::from_secs(3600))";
    with_metrics_raw_keys(metrics_raw_keys: bool) = "true";
    with_tls(tls: TlsConfig) = "dlock_core::TlsConfig::default().with_ca_file(Some(\"/etc/ssl/ca.pem\".into()))";
}

impl DlockConfig {
    /// The defaults, overridden by the `DLOCK_*` variables that are set (see the table above).
    /// `DLOCK_WAIT=forever` waits until acquired.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the variable and its value when one does not parse or the
    /// result fails [`validate`](Self::validate).
    ///
    /// # Examples
    ///
    /// ```
    /// let config = dlock_core::DlockConfig::from_env().unwrap();
    /// assert!(config.ttl > std::time::Duration::ZERO);
    /// ```
    pub fn from_env() -> Result<Self> {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// Like [`from_env`](Self::from_env), reading variables through `lookup`.
    ///
    /// # Errors
    ///
    /// As [`from_env`](Self::from_env).
    ///
    /// # Examples
    ///
    /// ```
    /// use dlock_core::DlockConfig;
    /// let err = DlockConfig::from_vars(|name| (name == "DLOCK_TTL").then(|| "ten".to_owned()))
    ///     .unwrap_err();
    /// assert!(err.to_string().starts_with("invalid config `DLOCK_TTL` = `ten`"), "{err}");
    /// ```
    pub fn from_vars(lookup: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let config = Self::default().with_vars(lookup)?;
        // A bad combination is named as the variable that set the field.
        config.validate_as(|field| env_name(field).to_owned())?;
        Ok(config)
    }

    /// This config, overridden by the `DLOCK_*` variables that are set: a file's settings
    /// under the environment's, as the `dlock` command line reads them. Each value is
    /// checked as it is read; call [`validate`](Self::validate) once the last override is in.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the variable and its value when one does not parse.
    ///
    /// # Examples
    ///
    /// ```
    /// let from_file = dlock_core::DlockConfig::from_toml_str(r#"ttl = "10s""#).unwrap();
    /// let config = from_file.with_env().unwrap();
    /// config.validate().unwrap();
    /// ```
    pub fn with_env(self) -> Result<Self> {
        self.with_vars(|name| std::env::var(name).ok())
    }

    /// Like [`with_env`](Self::with_env), reading variables through `lookup`.
    ///
    /// # Errors
    ///
    /// As [`with_env`](Self::with_env).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use dlock_core::DlockConfig;
    /// let from_file = DlockConfig::from_toml_str("ttl = \"10s\"\nkey_prefix = \"jobs:\"").unwrap();
    /// let config = from_file
    ///     .with_vars(|name| (name == "DLOCK_TTL").then(|| "1m".to_owned()))
    ///     .unwrap();
    /// assert_eq!(config.ttl, Duration::from_secs(60));
    /// assert_eq!(config.key_prefix, "jobs:");
    /// ```
    pub fn with_vars(mut self, lookup: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let config = &mut self;
        for name in ENV_VARS {
            let Some(value) = lookup(name) else { continue };
            let value = value.trim().to_owned();
            match name {
                "DLOCK_URL" => config.backend = BackendSpec::Url(value),
                "DLOCK_KEY_PREFIX" => config.key_prefix = value,
                "DLOCK_TTL" => config.ttl = parse_duration(name, &value)?,
                // An empty variable is an unset one: the default.
                "DLOCK_WAIT" if value.is_empty() => config.wait = None,
                "DLOCK_WAIT" => config.wait = parse_with(name, &value, grammar::parse_wait)?,
                "DLOCK_WATCHDOG_INTERVAL" if value.is_empty() => config.watchdog_interval = None,
                "DLOCK_WATCHDOG_INTERVAL" => {
                    config.watchdog_interval = parse_with(name, &value, grammar::parse_optional)?;
                }
                "DLOCK_OPERATION_TIMEOUT" => {
                    config.operation_timeout = parse_duration(name, &value)?;
                }
                "DLOCK_FENCING" => config.fencing = parse_bool(name, &value)?,
                "DLOCK_MAX_HOLD" if value.is_empty() => config.max_hold = None,
                "DLOCK_MAX_HOLD" => {
                    config.max_hold = parse_with(name, &value, grammar::parse_optional)?;
                }
                "DLOCK_METRICS_RAW_KEYS" => config.metrics_raw_keys = parse_bool(name, &value)?,
                "DLOCK_TLS_CA_FILE" => config.tls.ca_file = non_empty_path(value),
                "DLOCK_TLS_CERT_FILE" => config.tls.cert_file = non_empty_path(value),
                "DLOCK_TLS_KEY_FILE" => config.tls.key_file = non_empty_path(value),
                _ => unreachable!("ENV_VARS and this match list the same names"),
            }
        }
        Ok(self)
    }

    /// Parses a TOML document with the fields of this struct (all optional).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the field and the value that does not parse, an unknown
    /// field, or a failed [`validate`](Self::validate).
    ///
    /// # Examples
    ///
    /// See the [type-level docs](Self).
    pub fn from_toml_str(toml_text: &str) -> Result<Self> {
        let config: Self = toml::from_str(toml_text).map_err(|e| toml_error(toml_text, &e))?;
        config.validate()?;
        Ok(config)
    }

    /// Checks the values together: a positive ttl, a watchdog interval of at most half the ttl,
    /// a positive operation timeout, and a backend URL this build supports.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the first bad field and its value.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let config = dlock_core::DlockConfig::default().with_ttl(Duration::ZERO);
    /// assert!(config.validate().unwrap_err().to_string().contains("`ttl` = `0s`"));
    /// ```
    pub fn validate(&self) -> Result<()> {
        self.validated_url().map(drop)
    }

    /// [`validate`](Self::validate), giving back the backend URL it parsed (a Locker connects
    /// with it: the URL is parsed once).
    pub(crate) fn validated_url(&self) -> Result<BackendUrl> {
        self.validate_as(ToOwned::to_owned)
    }

    fn validate_as(&self, name: impl Fn(&str) -> String) -> Result<BackendUrl> {
        let shown = |d: Duration| humantime::format_duration(d).to_string();
        if self.ttl < Duration::from_millis(10) {
            return Err(Error::config(
                name("ttl"),
                shown(self.ttl),
                "must be at least 10ms",
            ));
        }
        if let Some(interval) = self.watchdog_interval
            && (interval.is_zero() || interval > self.ttl / 2)
        {
            return Err(Error::config(
                name("watchdog_interval"),
                shown(interval),
                format!(
                    "must be positive and at most half the ttl ({}), so a failed renewal can be retried in time",
                    shown(self.ttl)
                ),
            ));
        }
        if self.operation_timeout.is_zero() {
            return Err(Error::config(
                name("operation_timeout"),
                "0s",
                "must be positive",
            ));
        }
        if self.max_hold.is_some_and(|cap| cap.is_zero()) {
            return Err(Error::config(name("max_hold"), "0s", "must be positive"));
        }
        crate::key::validate_prefix(&self.key_prefix)
            .map_err(|reason| Error::config(name("key_prefix"), &self.key_prefix, reason))?;
        self.tls.validate_as(&name)?;
        let url = BackendUrl::parse(&self.backend.to_url()).map_err(|e| match e {
            Error::Config { value, reason, .. } => {
                Error::config(name("backend"), redact(&value), reason)
            }
            other => other,
        })?;
        Ok(url.with_tls_defaults(&self.tls))
    }
}

fn env_name(field: &str) -> &'static str {
    match field {
        "backend" => "DLOCK_URL",
        "key_prefix" => "DLOCK_KEY_PREFIX",
        "ttl" => "DLOCK_TTL",
        "wait" => "DLOCK_WAIT",
        "watchdog_interval" => "DLOCK_WATCHDOG_INTERVAL",
        "fencing" => "DLOCK_FENCING",
        "max_hold" => "DLOCK_MAX_HOLD",
        "metrics_raw_keys" => "DLOCK_METRICS_RAW_KEYS",
        "tls.ca_file" => "DLOCK_TLS_CA_FILE",
        "tls.cert_file" => "DLOCK_TLS_CERT_FILE",
        "tls.key_file" => "DLOCK_TLS_KEY_FILE",
        _ => "DLOCK_OPERATION_TIMEOUT",
    }
}

/// Parses a backend URL, checked as [`Locker::connect`](crate::Locker::connect) would check
/// it (its scheme, hosts and options, and that this build includes its backend).
///
/// # Errors
///
/// [`Error::Config`](crate::Error::Config) naming `backend` and the URL (password hidden).
///
/// # Examples
///
/// ```
/// use dlock_core::BackendSpec;
/// let spec: BackendSpec = "memory://jobs".parse().unwrap();
/// assert_eq!(spec, BackendSpec::Url("memory://jobs".into()));
/// assert!("mongodb://h".parse::<BackendSpec>().unwrap_err().to_string().contains("unknown backend"));
/// ```
impl std::str::FromStr for BackendSpec {
    type Err = Error;

    fn from_str(url: &str) -> Result<Self> {
        BackendUrl::parse(url)?;
        Ok(Self::Url(url.to_owned()))
    }
}

/// A path from an environment variable; empty means none.
fn non_empty_path(value: String) -> Option<std::path::PathBuf> {
    (!value.is_empty()).then(|| value.into())
}

/// Parses a duration in dlock's one grammar ([`dlock_grammar::duration`]), naming `field`
/// on failure.
///
/// # Errors
///
/// [`Error::Config`] with the field, the value and the grammar's explanation and hint.
pub(crate) fn parse_duration(field: &str, value: &str) -> Result<Duration> {
    parse_with(field, value, grammar::parse)
}

/// Parses `value` with one of the grammar's parsers, naming `field` on failure.
fn parse_with<T>(
    field: &str,
    value: &str,
    parse: fn(&str) -> std::result::Result<T, grammar::DurationError>,
) -> Result<T> {
    parse(value).map_err(|e| Error::config(field, value, e.to_string()))
}

/// Parses `true`/`false` (also `1`/`0`, `yes`/`no`, `on`/`off`), naming `field` on failure.
fn parse_bool(field: &str, value: &str) -> Result<bool> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(Error::config(field, value, "expected true or false")),
    }
}

/// Turns a TOML error into [`Error::Config`], recovering the field and value from its span.
fn toml_error(text: &str, error: &toml::de::Error) -> Error {
    let mut message = error.message().trim().to_owned();
    if message.is_empty() {
        message = "not valid TOML".to_owned(); // the parser gives no words for a stray `\r`
    }
    let Some(span) = error.span() else {
        return Error::config("<document>", "", message);
    };
    let value = text
        .get(span.clone())
        .unwrap_or_default()
        .trim()
        .trim_matches(['"', '\''])
        .to_owned();
    let line_start = text[..span.start].rfind('\n').map_or(0, |i| i + 1);
    let line = &text[line_start
        ..text[line_start..]
            .find('\n')
            .map_or(text.len(), |i| line_start + i)];
    let field = line.split_once('=').map(|(field, _)| field.trim());
    let Some(field) = field.filter(|field| !field.is_empty()) else {
        // Nothing on the line names a field (a stray word or character): name the line.
        let number = text[..line_start].matches('\n').count() + 1;
        return Error::config(format!("<document> line {number}"), line.trim(), message);
    };
    Error::config(field, value, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn defaults_are_valid_and_documented_values() {
        let config = DlockConfig::default();
        config.validate().unwrap();
        assert_eq!(config.ttl, Duration::from_secs(30));
        assert_eq!(config.wait, None);
        assert_eq!(config.backend.to_url(), "memory://");
    }

    #[test]
    fn env_overrides_each_field() {
        let config = DlockConfig::from_vars(vars(&[
            ("DLOCK_URL", "memory://jobs"),
            ("DLOCK_KEY_PREFIX", "billing:"),
            ("DLOCK_TTL", "10s"),
            ("DLOCK_WAIT", "1s 500ms"),
            ("DLOCK_WATCHDOG_INTERVAL", "2s"),
            ("DLOCK_OPERATION_TIMEOUT", "750ms"),
            ("DLOCK_FENCING", "true"),
            ("DLOCK_MAX_HOLD", "1h"),
            ("DLOCK_METRICS_RAW_KEYS", "true"),
            ("DLOCK_TLS_CA_FILE", "/etc/dlock/ca.pem"),
            ("DLOCK_TLS_CERT_FILE", "/etc/dlock/client.pem"),
            ("DLOCK_TLS_KEY_FILE", "/etc/dlock/client.key"),
        ]))
        .unwrap();
        assert_eq!(
            config,
            DlockConfig {
                backend: BackendSpec::Url("memory://jobs".into()),
                key_prefix: "billing:".into(),
                ttl: Duration::from_secs(10),
                wait: Some(Duration::from_millis(1500)),
                watchdog_interval: Some(Duration::from_secs(2)),
                operation_timeout: Duration::from_millis(750),
                fencing: true,
                max_hold: Some(Duration::from_secs(3600)),
                metrics_raw_keys: true,
                tls: TlsConfig {
                    ca_file: Some("/etc/dlock/ca.pem".into()),
                    cert_file: Some("/etc/dlock/client.pem".into()),
                    key_file: Some("/etc/dlock/client.key".into()),
                },
            }
        );
        let half = DlockConfig::from_vars(vars(&[("DLOCK_TLS_KEY_FILE", "k.pem")])).unwrap_err();
        assert!(half.to_string().contains("`DLOCK_TLS_CERT_FILE`"), "{half}");
        let forever = DlockConfig::from_vars(vars(&[("DLOCK_WAIT", "forever")])).unwrap();
        assert_eq!(forever.wait, None);
    }

    #[test]
    fn env_errors_name_the_variable_and_value() {
        type Vars = &'static [(&'static str, &'static str)];
        let cases: [(Vars, &str, &str); 5] = [
            (&[("DLOCK_FENCING", "maybe")], "DLOCK_FENCING", "maybe"),
            (&[("DLOCK_TTL", "10x")], "DLOCK_TTL", "10x"),
            (&[("DLOCK_TTL", "0s")], "DLOCK_TTL", "0s"),
            (
                &[("DLOCK_TTL", "1s"), ("DLOCK_WATCHDOG_INTERVAL", "2s")],
                "DLOCK_WATCHDOG_INTERVAL",
                "2s",
            ),
            (&[("DLOCK_URL", "mongodb://h")], "DLOCK_URL", "mongodb://h"),
        ];
        for (pairs, field, value) in cases {
            let lookup = |name: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| (*v).to_owned())
            };
            match DlockConfig::from_vars(lookup) {
                Err(Error::Config {
                    field: f, value: v, ..
                }) => {
                    assert_eq!((f.as_str(), v.as_str()), (field, value));
                }
                other => panic!("{pairs:?}: expected a config error, got {other:?}"),
            }
        }
    }

    #[test]
    fn toml_junk_is_named_by_its_line() {
        for text in ["0", "\u{b}", "\r", "=", "ttl = \"1s\"\n?"] {
            match DlockConfig::from_toml_str(text) {
                Err(Error::Config { field, reason, .. }) => {
                    assert!(field.starts_with("<document>"), "{text:?}: {field}");
                    assert!(!reason.is_empty(), "{text:?}");
                }
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn toml_errors_name_the_field_and_value() {
        for (text, field, value) in [
            ("ttl = \"10x\"", "ttl", "10x"),
            ("wait = 5", "wait", "5"),
            (
                "backend = \"mongodb://127.0.0.1:27017\"",
                "backend",
                "mongodb://127.0.0.1:27017",
            ),
            ("operation_timeout = \"0s\"", "operation_timeout", "0s"),
        ] {
            match DlockConfig::from_toml_str(text) {
                Err(Error::Config {
                    field: f,
                    value: v,
                    reason,
                }) => {
                    assert_eq!((f.as_str(), v.as_str()), (field, value), "{text}: {reason}");
                }
                other => panic!("{text}: expected a config error, got {other:?}"),
            }
        }
        let unknown = DlockConfig::from_toml_str("tll = \"10s\"")
            .unwrap_err()
            .to_string();
        assert!(unknown.contains("tll"), "{unknown}");
    }

    #[test]
    fn serializes_back_to_humantime() {
        let config = DlockConfig {
            ttl: Duration::from_secs(90),
            ..DlockConfig::default()
        };
        let text = toml::to_string(&config).unwrap();
        assert!(text.contains("ttl = \"1m 30s\""), "{text}");
        assert_eq!(DlockConfig::from_toml_str(&text).unwrap(), config);
    }
}
