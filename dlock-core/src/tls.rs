//! [`TlsConfig`]: which certificate authority a backend connection trusts and which client
//! certificate it presents, from the config, `DLOCK_TLS_*` variables or the URL's query.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::backend::url_text::take_query_option;
use crate::{Error, Result};

/// The files a TLS connection to the backend reads: the CA that signed the server's
/// certificate, and for mutual TLS a client certificate and its key, all PEM.
///
/// Whether a connection uses TLS is the URL's choice (`rediss://`, `rediss+cluster://`,
/// `redlocks://`, `etcds://`, `zks://`, `postgres://…?sslmode=verify-full`); these files only
/// say how. Without `ca_file` the system's trusted roots are used (ZooKeeper, whose client
/// has none, needs one). The server's name is checked against its certificate, except under
/// PostgreSQL's `sslmode=require` and `verify-ca` (which check the chain only). The files are
/// read when a Locker connects: a rotated certificate takes a new Locker.
///
/// Each field can also come from the URL's query (`?tls_ca_file=/etc/ca.pem`; for PostgreSQL
/// also libpq's `sslrootcert`, `sslcert`, `sslkey`), which wins over the config, or from
/// `DLOCK_TLS_CA_FILE`, `DLOCK_TLS_CERT_FILE`, `DLOCK_TLS_KEY_FILE`.
///
/// # Examples
///
/// ```
/// use dlock_core::DlockConfig;
///
/// // With `backend = "rediss://cache.internal:6380"` (the `redis` feature):
/// let config = DlockConfig::from_toml_str(r#"
///     [tls]
///     ca_file = "/etc/dlock/ca.pem"
///     cert_file = "/etc/dlock/client.pem"
///     key_file = "/etc/dlock/client.key"
/// "#).unwrap();
/// assert_eq!(config.tls.ca_file.as_deref(), Some("/etc/dlock/ca.pem".as_ref()));
///
/// // A certificate without its key is refused before anything connects.
/// let err = DlockConfig::from_toml_str(r#"
///     [tls]
///     cert_file = "/etc/dlock/client.pem"
/// "#).unwrap_err();
/// assert!(err.to_string().contains("`tls.key_file`"), "{err}");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct TlsConfig {
    /// The PEM file of the certificate authorities to trust instead of the system's roots.
    pub ca_file: Option<PathBuf>,
    /// The PEM file of the client certificate (chain) for mutual TLS; needs `key_file`.
    pub cert_file: Option<PathBuf>,
    /// The PEM file of `cert_file`'s private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: Option<PathBuf>,
}

/// The URL query options every backend reads, and the field each sets.
const QUERY_OPTIONS: [(&str, Field); 3] = [
    ("tls_ca_file", Field::Ca),
    ("tls_cert_file", Field::Cert),
    ("tls_key_file", Field::Key),
];

/// libpq's names for the same files, read from `postgres://` URLs.
const LIBPQ_OPTIONS: [(&str, Field); 3] = [
    ("sslrootcert", Field::Ca),
    ("sslcert", Field::Cert),
    ("sslkey", Field::Key),
];

#[derive(Clone, Copy)]
enum Field {
    Ca,
    Cert,
    Key,
}

crate::setters::with_setters! {
    TlsConfig, "dlock_core::TlsConfig::default()";
    with_ca_file(ca_file: Option<PathBuf>) = "Some(\"/etc/ssl/ca.pem\".into())";
    with_cert_file(cert_file: Option<PathBuf>) = "Some(\"/etc/ssl/client.pem\".into())";
    with_key_file(key_file: Option<PathBuf>) = "Some(\"/etc/ssl/client.key\".into())";
}

impl TlsConfig {
    /// Whether no file is named.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(dlock_core::TlsConfig::default().is_empty());
    /// ```
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.ca_file.is_none() && self.cert_file.is_none() && self.key_file.is_none()
    }

    /// Checks that a client certificate comes with its key and the other way round;
    /// `name` turns a field name (`tls.key_file`) into what the user wrote.
    pub(crate) fn validate_as(&self, name: impl Fn(&str) -> String) -> Result<()> {
        let shown = |path: &PathBuf| path.display().to_string();
        match (&self.cert_file, &self.key_file) {
            (Some(cert), None) => Err(Error::config(
                name("tls.key_file"),
                "",
                format!(
                    "the client certificate `{}` needs its private key",
                    shown(cert)
                ),
            )),
            (None, Some(key)) => Err(Error::config(
                name("tls.cert_file"),
                "",
                format!("the private key `{}` needs its certificate", shown(key)),
            )),
            _ => Ok(()),
        }
    }

    /// This config with every field it lacks taken from `defaults`.
    pub(crate) fn or(self, defaults: &Self) -> Self {
        Self {
            ca_file: self.ca_file.or_else(|| defaults.ca_file.clone()),
            cert_file: self.cert_file.or_else(|| defaults.cert_file.clone()),
            key_file: self.key_file.or_else(|| defaults.key_file.clone()),
        }
    }

    /// Takes the TLS options out of `url`'s query (libpq's names too when `libpq_names`),
    /// giving back the URL without them and the files they name.
    pub(crate) fn take_from_query(url: &str, libpq_names: bool) -> (String, Self) {
        let mut tls = Self::default();
        let mut rest = url.to_owned();
        let libpq: &[(&str, Field)] = if libpq_names { &LIBPQ_OPTIONS } else { &[] };
        for (name, field) in QUERY_OPTIONS.iter().chain(libpq) {
            let (without, value) = take_query_option(&rest, name);
            rest = without;
            if let Some(value) = value {
                let slot = match field {
                    Field::Ca => &mut tls.ca_file,
                    Field::Cert => &mut tls.cert_file,
                    Field::Key => &mut tls.key_file,
                };
                *slot = Some(PathBuf::from(value));
            }
        }
        (rest, tls)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_options_are_taken_out_of_the_url() {
        let (rest, tls) = TlsConfig::take_from_query(
            "rediss://h:6380/0?tls_ca_file=%2Fetc%2Fca.pem&protocol=resp3&tls_cert_file=c.pem&tls_key_file=k.pem",
            false,
        );
        assert_eq!(rest, "rediss://h:6380/0?protocol=resp3");
        assert_eq!(tls.ca_file, Some("/etc/ca.pem".into()));
        assert_eq!(tls.cert_file, Some("c.pem".into()));
        assert_eq!(tls.key_file, Some("k.pem".into()));

        let (rest, tls) = TlsConfig::take_from_query(
            "postgres://u@h/db?sslmode=verify-full&sslrootcert=ca.pem",
            true,
        );
        assert_eq!(rest, "postgres://u@h/db?sslmode=verify-full");
        assert_eq!(tls.ca_file, Some("ca.pem".into()));
        let (rest, tls) = TlsConfig::take_from_query("redis://h?sslrootcert=ca.pem", false);
        assert_eq!(rest, "redis://h?sslrootcert=ca.pem");
        assert!(tls.is_empty());
    }

    #[test]
    fn the_url_wins_over_the_config_field_by_field() {
        let from_url = TlsConfig {
            ca_file: Some("url-ca.pem".into()),
            ..TlsConfig::default()
        };
        let from_config = TlsConfig {
            ca_file: Some("config-ca.pem".into()),
            cert_file: Some("c.pem".into()),
            key_file: Some("k.pem".into()),
        };
        let merged = from_url.or(&from_config);
        assert_eq!(merged.ca_file, Some("url-ca.pem".into()));
        assert_eq!(merged.key_file, Some("k.pem".into()));
    }

    #[test]
    fn a_key_without_its_certificate_is_refused() {
        let tls = TlsConfig {
            key_file: Some("k.pem".into()),
            ..TlsConfig::default()
        };
        let error = tls.validate_as(ToOwned::to_owned).unwrap_err();
        assert!(error.to_string().contains("`tls.cert_file`"), "{error}");
    }
}
