//! Reading a [`TlsConfig`]'s files once per connect, each problem a config error naming the
//! field and the file; and the rustls pieces every TLS backend shares (the crypto provider,
//! the client config of the backends that build their own).

use std::path::Path;
#[cfg(any(feature = "postgres", feature = "zookeeper"))]
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::{Error, Result, TlsConfig};

/// A [`TlsConfig`]'s files, read and checked: each CA and client certificate parses as PEM.
#[derive(Debug)]
pub(crate) struct TlsFiles {
    /// The CA file as written (PEM), and its certificates.
    pub(crate) ca: Option<(Vec<u8>, Vec<CertificateDer<'static>>)>,
    /// The client certificate chain and key as written (PEM).
    pub(crate) identity: Option<Identity>,
}

/// A client certificate chain and its private key (`Debug` shows neither).
pub(crate) struct Identity {
    #[cfg_attr(
        not(any(feature = "redis", feature = "etcd", feature = "zookeeper")),
        allow(dead_code)
    )]
    pub(crate) cert_pem: Vec<u8>,
    #[cfg_attr(
        not(any(feature = "redis", feature = "etcd", feature = "zookeeper")),
        allow(dead_code)
    )]
    pub(crate) key_pem: Vec<u8>,
    #[cfg_attr(
        not(any(feature = "postgres", feature = "zookeeper")),
        allow(dead_code)
    )]
    pub(crate) chain: Vec<CertificateDer<'static>>,
    #[cfg_attr(
        not(any(feature = "postgres", feature = "zookeeper")),
        allow(dead_code)
    )]
    pub(crate) key: PrivateKeyDer<'static>,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("chain", &self.chain.len())
            .finish_non_exhaustive()
    }
}

impl TlsFiles {
    /// Reads and checks the files `tls` names.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the field and the file: unreadable, no PEM certificate in a
    /// certificate file, no PEM private key in the key file, a certificate without its key.
    pub(crate) fn read(tls: &TlsConfig) -> Result<Self> {
        tls.validate_as(ToOwned::to_owned)?;
        let ca = match &tls.ca_file {
            Some(path) => {
                let pem = read_file("tls.ca_file", path)?;
                let certs = certificates("tls.ca_file", path, &pem)?;
                Some((pem, certs))
            }
            None => None,
        };
        let identity = match (&tls.cert_file, &tls.key_file) {
            (Some(cert_path), Some(key_path)) => {
                let cert_pem = read_file("tls.cert_file", cert_path)?;
                let chain = certificates("tls.cert_file", cert_path, &cert_pem)?;
                let key_pem = read_file("tls.key_file", key_path)?;
                let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|error| {
                    Error::config(
                        "tls.key_file",
                        key_path.display().to_string(),
                        format!("no PEM private key (PKCS#8, PKCS#1 or SEC1) in it: {error}"),
                    )
                })?;
                Some(Identity {
                    cert_pem,
                    key_pem,
                    chain,
                    key,
                })
            }
            _ => None,
        };
        Ok(Self { ca, identity })
    }

    /// The CA file's PEM, if one was named.
    #[cfg_attr(
        not(any(feature = "redis", feature = "etcd", feature = "zookeeper")),
        allow(dead_code)
    )]
    pub(crate) fn ca_pem(&self) -> Option<&[u8]> {
        self.ca.as_ref().map(|(pem, _)| pem.as_slice())
    }

    /// A rustls client config trusting the CA file (else the system's roots) and presenting
    /// the client certificate, if any; the server's name is checked only when `check_name`.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when no root can be loaded or rustls refuses a certificate or key.
    #[cfg(any(feature = "postgres", feature = "zookeeper"))]
    pub(crate) fn client_config(&self, check_name: bool) -> Result<rustls::ClientConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        match &self.ca {
            Some((_, certs)) => {
                for cert in certs {
                    roots.add(cert.clone()).map_err(|error| {
                        Error::config("tls.ca_file", "", format!("not a CA certificate: {error}"))
                    })?;
                }
            }
            None => {
                let native = rustls_native_certs::load_native_certs();
                roots.add_parsable_certificates(native.certs);
                if roots.is_empty() {
                    return Err(Error::config(
                        "tls.ca_file",
                        "",
                        "none given and no trusted root found on this system: name the CA that signed the server's certificate",
                    ));
                }
            }
        }
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::clone(&provider),
        )
        .build()
        .map_err(|error| Error::config("tls.ca_file", "", error.to_string()))?;
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|error| Error::config("tls", "", error.to_string()))?;
        let builder = if check_name {
            builder.with_webpki_verifier(verifier)
        } else {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyName(verifier)))
        };
        match &self.identity {
            Some(identity) => builder
                .with_client_auth_cert(identity.chain.clone(), identity.key.clone_key())
                .map_err(|error| {
                    Error::config(
                        "tls.key_file",
                        "",
                        format!("does not fit the client certificate: {error}"),
                    )
                }),
            None => Ok(builder.with_no_client_auth()),
        }
    }
}

/// Refuses TLS files named for a plain-text URL (`shown`): a user who names a CA expects TLS,
/// not a connection that ignores it. `use_instead` says how to ask for TLS.
///
/// # Errors
///
/// [`Error::Config`] naming the first file.
pub(crate) fn refuse_for_plain_text(
    files: &TlsConfig,
    shown: impl Into<String>,
    use_instead: &str,
) -> Result<()> {
    match [&files.ca_file, &files.cert_file]
        .into_iter()
        .flatten()
        .next()
    {
        Some(file) => Err(Error::config(
            "backend",
            shown,
            format!(
                "TLS file `{}` is set but the URL is plain text: {use_instead}",
                file.display()
            ),
        )),
        None => Ok(()),
    }
}

/// Makes ring the process's rustls crypto provider unless one is installed already. Clients
/// that build their rustls config with `ClientConfig::builder()` (redis, ZooKeeper) need one
/// when a build has both ring and aws-lc-rs; done at the first TLS connect, not at start, so
/// that an application installing its own provider first keeps it.
#[cfg(any(feature = "redis", feature = "zookeeper"))]
pub(crate) fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Err: another thread installed one first, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

fn read_file(field: &str, path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|error| {
        Error::config(
            field,
            path.display().to_string(),
            format!("cannot read it: {error}"),
        )
    })
}

fn certificates(field: &str, path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>> {
    let bad = |reason: String| Error::config(field, path.display().to_string(), reason);
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|error| bad(format!("not PEM: {error}")))?;
    if certs.is_empty() {
        return Err(bad("no `BEGIN CERTIFICATE` block in it".to_owned()));
    }
    Ok(certs)
}

/// libpq's `sslmode=verify-ca`: the chain must lead to a trusted root, whatever name the
/// certificate is for.
#[cfg(any(feature = "postgres", feature = "zookeeper"))]
#[derive(Debug)]
struct AnyName(Arc<rustls::client::WebPkiServerVerifier>);

#[cfg(any(feature = "postgres", feature = "zookeeper"))]
impl rustls::client::danger::ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &rustls::pki_types::ServerName<'_>,
        ocsp_response: &[u8],
        now: rustls::pki_types::UnixTime,
    ) -> std::result::Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        use rustls::CertificateError::{NotValidForName, NotValidForNameContext};
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                NotValidForName | NotValidForNameContext { .. },
            )) => Ok(rustls::client::danger::ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
