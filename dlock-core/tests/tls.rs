//! TLS problems on every backend, against real servers that require mutual TLS: a CA that did
//! not sign the server's certificate, a name the certificate is not for, no client
//! certificate, a missing file, TLS files on a plain-text URL. Each is an error that says what
//! is wrong, within the operation timeout; none hangs. (That locks work over TLS is the
//! conformance suites' `*_tls` targets.)

use std::time::{Duration, Instant};

use dlock_core::harness::{EtcdServer, PostgresServer, RedisServer, TestCerts, ZkServer};
use dlock_core::{BackendSpec, DlockConfig, Error, Locker};

const OPERATION_TIMEOUT: Duration = Duration::from_secs(1);

/// What connecting to `url` gave, and how long it took.
async fn connect_error(url: &str) -> (Error, Duration) {
    let config = DlockConfig {
        backend: BackendSpec::Url(url.to_owned()),
        operation_timeout: OPERATION_TIMEOUT,
        ..DlockConfig::default()
    };
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_tls_problems_are_clear_errors_within_the_operation_timeout() {
    let certs = TestCerts::generate().unwrap();
    let server = RedisServer::start_tls(&certs).await.unwrap();
    let tls_url = server.tls_url();

    let wrong_ca = format!("{tls_url}?{}", query(&certs, &certs.other_ca_file()));
    assert_fails(&wrong_ca, &["UnknownIssuer", "unknown issuer"]).await;

    let by_other_name = tls_url.replace("127.0.0.1", "localhost");
    let wrong_name = format!("{by_other_name}?{}", query(&certs, &certs.ca_file()));
    assert_fails(&wrong_name, &["NotValidForName", "not valid for name"]).await;

    let no_client_cert = format!("{tls_url}?tls_ca_file={}", certs.ca_file().display());
    assert_fails(&no_client_cert, &["CertificateRequired"]).await;

    let missing = format!("{tls_url}?tls_ca_file=/nonexistent/ca.pem");
    let message = assert_fails(&missing, &["/nonexistent/ca.pem"]).await;
    assert!(message.contains("tls.ca_file"), "{message}");

    let plain = format!("{}?tls_ca_file={}", server.url(), certs.ca_file().display());
    assert_fails(&plain, &["plain text"]).await;

    // And the right files connect.
    let right = format!("{tls_url}?{}", certs.url_query());
    let locker = Locker::connect_url(&right).await.unwrap();
    drop(locker.lock("tls").await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_tls_problems_are_clear_errors_within_the_operation_timeout() {
    let certs = TestCerts::generate().unwrap();
    let server = EtcdServer::start_tls(&certs).await.unwrap();
    let tls_url = server.tls_url();

    let wrong_ca = format!("{tls_url}?{}", query(&certs, &certs.other_ca_file()));
    assert_fails(&wrong_ca, &["UnknownIssuer", "unknown issuer"]).await;

    let by_other_name = tls_url.replace("127.0.0.1", "localhost");
    let wrong_name = format!("{by_other_name}?{}", query(&certs, &certs.ca_file()));
    assert_fails(&wrong_name, &["NotValidForName", "not valid for name"]).await;

    let no_client_cert = format!("{tls_url}?tls_ca_file={}", certs.ca_file().display());
    assert_fails(&no_client_cert, &["client certificate"]).await;

    let missing = format!("{tls_url}?tls_ca_file=/nonexistent/ca.pem");
    assert_fails(&missing, &["/nonexistent/ca.pem"]).await;

    let plain = format!("{}?tls_ca_file={}", server.url(), certs.ca_file().display());
    assert_fails(&plain, &["plain text"]).await;

    let right = format!("{tls_url}?{}", certs.url_query());
    let locker = Locker::connect_url(&right).await.unwrap();
    drop(locker.lock("tls").await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_tls_problems_are_clear_errors_within_the_operation_timeout() {
    let certs = TestCerts::generate().unwrap();
    let server = PostgresServer::start_tls(&certs).await.unwrap();
    let tls_url = server.tls_url();

    let wrong_ca = format!("{tls_url}&{}", query(&certs, &certs.other_ca_file()));
    assert_fails(&wrong_ca, &["UnknownIssuer", "unknown issuer"]).await;
    // `require` checks the chain too.
    let require = wrong_ca.replace("verify-full", "require");
    assert_fails(&require, &["UnknownIssuer", "unknown issuer"]).await;

    let by_other_name = tls_url.replace("127.0.0.1", "localhost");
    let wrong_name = format!("{by_other_name}&{}", query(&certs, &certs.ca_file()));
    assert_fails(&wrong_name, &["NotValidForName", "not valid for name"]).await;
    // `verify-ca` does not check the name.
    let any_name = wrong_name.replace("verify-full", "verify-ca");
    drop(Locker::connect_url(&any_name).await.unwrap());

    // libpq's own option names.
    let no_client_cert = format!("{tls_url}&sslrootcert={}", certs.ca_file().display());
    assert_fails(&no_client_cert, &["certificate"]).await;

    let missing = format!("{tls_url}&sslrootcert=/nonexistent/ca.pem");
    assert_fails(&missing, &["/nonexistent/ca.pem"]).await;

    let plain = format!("{}?sslrootcert={}", server.url(), certs.ca_file().display());
    assert_fails(&plain, &["does not ask for TLS"]).await;

    // The right files connect, and the server sees every dlock session as TLS.
    let right = format!("{tls_url}&{}", certs.url_query());
    let locker = Locker::connect_url(&right).await.unwrap();
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
    let tls_url = server.tls_url();

    let wrong_ca = format!("{tls_url}?{}", query(&certs, &certs.other_ca_file()));
    assert_fails(&wrong_ca, &["UnknownIssuer", "unknown issuer"]).await;

    let by_other_name = tls_url.replace("127.0.0.1", "localhost");
    let wrong_name = format!("{by_other_name}?{}", query(&certs, &certs.ca_file()));
    assert_fails(&wrong_name, &["NotValidForName", "not valid for name"]).await;

    let no_client_cert = format!("{tls_url}?tls_ca_file={}", certs.ca_file().display());
    assert_fails(&no_client_cert, &["client certificate"]).await;

    let no_ca = format!(
        "{tls_url}?tls_cert_file={}&tls_key_file={}",
        certs.client_cert_file().display(),
        certs.client_key_file().display()
    );
    assert_fails(&no_ca, &["needs the CA"]).await;

    let plain = format!("{}?tls_ca_file={}", server.url(), certs.ca_file().display());
    assert_fails(&plain, &["plain text"]).await;

    let right = format!("{tls_url}?{}", certs.url_query());
    let locker = Locker::connect_url(&right).await.unwrap();
    drop(locker.lock("tls").await.unwrap());
}
