//! TLS problems on every backend, against real servers that require mutual TLS: a CA that did
//! not sign the server's certificate, a name the certificate is not for, no client
//! certificate, a missing file, TLS files on a plain-text URL. Each is an error that says what
//! is wrong, within the operation timeout; none hangs. (That locks work over TLS is the
//! conformance suites' `*_tls` targets.)

use std::time::{Duration, Instant};

use dlock_core::{BackendSpec, DlockConfig, Error, Locker};
use dlock_harness::{EtcdServer, PostgresServer, RedisServer, TestCerts, ZkServer};

const OPERATION_TIMEOUT: Duration = Duration::from_secs(1);

/// What connecting to `url` gave, and how long it took.
async fn connect_error(url: &str) -> (Error, Duration) {
    let config = DlockConfig::default()
        .with_backend(BackendSpec::Url(url.to_owned()))
        .with_operation_timeout(OPERATION_TIMEOUT);
    let started = Instant::now();
    let outcome = Locker::connect(&config).await;
    let took = started.elapsed();
    match outcome {
        Ok(_) => panic!("connected to `{url}`"),
        Err(error) => (error, took),
    }
}

/// Connecting to `url` fails within the operation timeout (and a little for the machine) with
/// an error whose message contains one of `expected`; gives the message.
async fn assert_fails(url: &str, expected: &[&str]) -> String {
    let (error, took) = connect_error(url).await;
    let message = format!("{error}");
    eprintln!("{url}\n  -> {message} ({took:?})");
    assert!(
        took < OPERATION_TIMEOUT + Duration::from_millis(500),
        "`{url}` took {took:?} to fail: {message}"
    );
    assert!(
        expected.iter().any(|part| message.contains(part)),
        "`{url}`: expected one of {expected:?} in: {message}"
    );
    message
}

/// The URL query of mutual TLS with `ca`, the test client certificate and its key.
fn query(certs: &TestCerts, ca: &std::path::Path) -> String {
    format!(
        "tls_ca_file={}&tls_cert_file={}&tls_key_file={}",
        ca.display(),
        certs.client_cert_file().display(),
        certs.client_key_file().display()
    )
}

/// A server's TLS and plain-text URLs.
struct Server {
    tls_url: String,
    /// What joins the next option to the TLS URL: `?`, or `&` after a query it has.
    join: char,
    plain_url: String,
}

impl Server {
    fn new(tls_url: String, plain_url: String) -> Self {
        let join = if tls_url.contains('?') { '&' } else { '?' };
        Self {
            tls_url,
            join,
            plain_url,
        }
    }

    /// The TLS URL with the CA and no client certificate.
    fn ca_only(&self, certs: &TestCerts) -> String {
        self.with(&format!("tls_ca_file={}", certs.ca_file().display()))
    }

    fn with(&self, options: &str) -> String {
        format!("{}{}{options}", self.tls_url, self.join)
    }

    /// The right files connect and lock; then the problems every backend reports alike: a CA
    /// that did not sign the server's certificate, a name the certificate is not for, a CA
    /// file that is not there, TLS files on the plain-text URL (`use_tls` is how the message
    /// says to ask for TLS). The good connect comes first so that no problem meets a cold
    /// server: a JVM's first TLS handshake, beside a busy loop on two cores, took longer than
    /// the 1 s operation timeout, and a server that does not answer in time is only
    /// "unavailable".
    async fn assert_common_problems(&self, certs: &TestCerts, use_tls: &str) {
        let locker = Locker::connect_url(&self.with(&certs.url_query()))
            .await
            .unwrap();
        drop(locker.lock("tls").await.unwrap());
        locker.shutdown().await.unwrap();

        let wrong_ca = self.with(&query(certs, &certs.other_ca_file()));
        assert_fails(&wrong_ca, &["UnknownIssuer"]).await;

        let wrong_name = format!(
            "{}{}{}",
            self.tls_url.replace("127.0.0.1", "localhost"),
            self.join,
            query(certs, &certs.ca_file())
        );
        assert_fails(&wrong_name, &["certificate not valid for name"]).await;

        let missing = self.with("tls_ca_file=/nonexistent/ca.pem");
        assert_fails(&missing, &["`tls.ca_file` = `/nonexistent/ca.pem`"]).await;

        let plain = format!(
            "{}?tls_ca_file={}",
            self.plain_url,
            certs.ca_file().display()
        );
        assert_fails(&plain, &[&format!("plain text: {use_tls}")]).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_tls_problems_are_clear_errors_within_the_operation_timeout() {
    let certs = TestCerts::generate().unwrap();
    let server = RedisServer::start_tls(&certs).await.unwrap();
    let server = Server::new(server.tls_url(), server.url());
    server
        .assert_common_problems(&certs, "use `rediss://`")
        .await;

    let no_client_cert = server.ca_only(&certs);
    assert_fails(&no_client_cert, &["CertificateRequired"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_tls_problems_are_clear_errors_within_the_operation_timeout() {
    let certs = TestCerts::generate().unwrap();
    let server = EtcdServer::start_tls(&certs).await.unwrap();
    let server = Server::new(server.tls_url(), server.url());
    server
        .assert_common_problems(&certs, "use `etcds://`")
        .await;

    // etcd's server hangs up after the handshake (TLS 1.3): dlock says what that may mean.
    let no_client_cert = server.ca_only(&certs);
    assert_fails(&no_client_cert, &["set tls.cert_file and tls.key_file"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_tls_problems_are_clear_errors_within_the_operation_timeout() {
    let certs = TestCerts::generate().unwrap();
    let server = PostgresServer::start_tls(&certs).await.unwrap();
    let pg = Server::new(server.tls_url(), server.url());
    pg.assert_common_problems(&certs, "add `sslmode=verify-full`")
        .await;

    // `require` checks the chain too; `verify-ca` does not check the name.
    let require = pg
        .with(&query(&certs, &certs.other_ca_file()))
        .replace("verify-full", "require");
    assert_fails(&require, &["UnknownIssuer"]).await;
    let any_name = format!(
        "{}&{}",
        pg.tls_url.replace("127.0.0.1", "localhost"),
        certs.url_query()
    )
    .replace("verify-full", "verify-ca");
    drop(Locker::connect_url(&any_name).await.unwrap());

    // libpq's own option names; the server's refusal as it says it.
    let no_client_cert = pg.with(&format!("sslrootcert={}", certs.ca_file().display()));
    assert_fails(&no_client_cert, &["requires a valid client certificate"]).await;

    // The server sees every dlock session as TLS.
    let locker = Locker::connect_url(&pg.with(&certs.url_query()))
        .await
        .unwrap();
    let guard = locker.lock("tls").await.unwrap();
    let mut psql = server.psql().await.unwrap();
    let sessions = psql
        .run(
            "SELECT count(*) FILTER (WHERE ssl), count(*) FROM pg_stat_ssl \
             JOIN pg_stat_activity USING (pid) WHERE application_name = 'dlock';",
        )
        .await
        .unwrap();
    let (over_tls, all) = sessions[0].split_once('|').unwrap();
    assert!(
        all != "0" && over_tls == all,
        "TLS sessions|all: {sessions:?}"
    );
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_tls_problems_are_clear_errors_within_the_operation_timeout() {
    let certs = TestCerts::generate().unwrap();
    let server = ZkServer::start_tls(&certs).await.unwrap();
    let server = Server::new(server.tls_url(), server.url());
    server.assert_common_problems(&certs, "use `zks://`").await;

    let no_client_cert = server.ca_only(&certs);
    assert_fails(
        &no_client_cert,
        &["BadCertificate; if the server requires a client certificate"],
    )
    .await;

    let no_ca = server.with(&format!(
        "tls_cert_file={}&tls_key_file={}",
        certs.client_cert_file().display(),
        certs.client_key_file().display()
    ));
    assert_fails(&no_ca, &["needs the CA"]).await;
}
