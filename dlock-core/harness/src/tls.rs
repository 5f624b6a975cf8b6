//! [`TestCerts`]: a throw-away certificate authority, a server certificate and a client
//! certificate, written as PEM files for the TLS servers the harness starts.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use tempfile::TempDir;

use super::process::temp_dir;
use super::{HarnessError, Result};

/// The name the server certificate is for: the loopback address every harness URL uses.
/// `localhost` is deliberately left out, so that connecting by that name is a name mismatch.
pub const SERVER_NAME: &str = "127.0.0.1";

/// PEM files in a temp dir (removed on drop): a CA, a server certificate it signed for
/// [`SERVER_NAME`] (server and client use, as etcd dials itself with it), a client
/// certificate it signed (common name `postgres`, the harness's PostgreSQL superuser), and a
/// second, unrelated CA that signed nothing the servers use.
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> dlock_harness::Result<()> {
/// let certs = dlock_harness::TestCerts::generate()?;
/// assert!(certs.ca_file().exists());
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct TestCerts {
    dir: TempDir,
}

impl TestCerts {
    /// Generates the certificates (ECDSA P-256) and writes them.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Io`] if a file cannot be written or a certificate cannot be made.
    pub fn generate() -> Result<Self> {
        let dir = temp_dir("certs")?;
        let (ca_pem, issuer) = authority("dlock test CA")?;
        let (other_ca_pem, _) = authority("an unrelated CA")?;
        let (server_pem, server_key) = leaf(
            &issuer,
            vec![SERVER_NAME.to_owned()],
            "dlock test server",
            &[
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        )?;
        let (client_pem, client_key) = leaf(
            &issuer,
            Vec::new(),
            "postgres",
            &[ExtendedKeyUsagePurpose::ClientAuth],
        )?;
        let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text);
        write("ca.pem", &ca_pem)?;
        write("other-ca.pem", &other_ca_pem)?;
        write("server.pem", &server_pem)?;
        write("server.key", &server_key)?;
        write("server-keystore.pem", &format!("{server_pem}{server_key}"))?;
        write("client.pem", &client_pem)?;
        write("client.key", &client_key)?;
        Ok(Self { dir })
    }

    /// The directory of the files.
    #[must_use]
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The CA's certificate (`ca.pem`).
    #[must_use]
    pub fn ca_file(&self) -> PathBuf {
        self.dir().join("ca.pem")
    }

    /// An unrelated CA's certificate (`other-ca.pem`): trusting it instead of
    /// [`ca_file`](Self::ca_file) must fail every handshake.
    #[must_use]
    pub fn other_ca_file(&self) -> PathBuf {
        self.dir().join("other-ca.pem")
    }

    /// The server's certificate (`server.pem`).
    #[must_use]
    pub fn server_cert_file(&self) -> PathBuf {
        self.dir().join("server.pem")
    }

    /// The server's private key (`server.key`, PKCS#8).
    #[must_use]
    pub fn server_key_file(&self) -> PathBuf {
        self.dir().join("server.key")
    }

    /// The server's certificate followed by its key in one file (ZooKeeper's PEM key store).
    #[must_use]
    pub fn server_keystore_file(&self) -> PathBuf {
        self.dir().join("server-keystore.pem")
    }

    /// The client's certificate (`client.pem`).
    #[must_use]
    pub fn client_cert_file(&self) -> PathBuf {
        self.dir().join("client.pem")
    }

    /// The client's private key (`client.key`, PKCS#8).
    #[must_use]
    pub fn client_key_file(&self) -> PathBuf {
        self.dir().join("client.key")
    }

    /// `tls_ca_file=…&tls_cert_file=…&tls_key_file=…`: the URL query options of mutual TLS
    /// with these files.
    #[must_use]
    pub fn url_query(&self) -> String {
        format!(
            "tls_ca_file={}&tls_cert_file={}&tls_key_file={}",
            self.ca_file().display(),
            self.client_cert_file().display(),
            self.client_key_file().display()
        )
    }
}

fn authority(name: &str) -> Result<(String, Issuer<'static, KeyPair>)> {
    let key = KeyPair::generate().map_err(failed)?;
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(failed)?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.distinguished_name.push(DnType::CommonName, name);
    let cert = params.self_signed(&key).map_err(failed)?;
    Ok((cert.pem(), Issuer::new(params, key)))
}

fn leaf(
    issuer: &Issuer<'static, KeyPair>,
    names: Vec<String>,
    common_name: &str,
    usages: &[ExtendedKeyUsagePurpose],
) -> Result<(String, String)> {
    let key = KeyPair::generate().map_err(failed)?;
    let mut params = CertificateParams::new(names).map_err(failed)?;
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = usages.to_vec();
    params.use_authority_key_identifier_extension = true;
    let cert = params.signed_by(&key, issuer).map_err(failed)?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn failed(error: rcgen::Error) -> HarnessError {
    HarnessError::Io(std::io::Error::other(format!(
        "cannot make a test certificate: {error}"
    )))
}
