//! The conformance suite against a real PostgreSQL (in plain text and over mutual TLS),
//! started by the harness for each test and stopped after it.
//!
//! PostgreSQL frees a session's advisory locks when its connection closes: a crashed client
//! (its runtime shut down, its sockets closed) frees its locks at once, which the suite
//! expects (`frees_on_disconnect`). A frozen one keeps them until its session's
//! `idle_session_timeout`, one ttl.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use dlock_core::backend::{BackendUrl, PostgresBackend};
use dlock_core::conformance::{Expectations, Target};
use dlock_core::harness::{PostgresServer, TestCerts};

const TIMEOUT: Duration = Duration::from_secs(2);

/// A target whose clients are new `PostgresBackend`s on one harness-started server. The queue
/// probe counts a key's waiters that both a client says it has sent and the server shows
/// queued (`pg_locks` rows not granted), so a waiter counts only once it is in the server's
/// queue.
async fn single() -> Target<PostgresBackend> {
    let server = PostgresServer::start().await.expect("postgres");
    let (admin_url, url) = (server.url(), server.url());
    target(server, &admin_url, &url).await
}

/// Every client connection over TLS, checking the server's name and presenting a client
/// certificate for the user (the server requires one on TLS sessions).
async fn single_tls() -> Target<PostgresBackend> {
    let certs = TestCerts::generate().expect("certificates");
    let server = PostgresServer::start_tls(&certs).await.expect("postgres");
    let url = format!("{}&{}", server.tls_url(), certs.url_query());
    let admin_url = server.url();
    target((server, certs), &admin_url, &url).await
}

/// The target of clients on `url`, counting queued waiters through a plain connection to
/// `admin_url`; keeps `server` alive as long as the target.
async fn target<S: Send + Sync + 'static>(
    server: S,
    admin_url: &str,
    url: &str,
) -> Target<PostgresBackend> {
    let server = Arc::new(server);
    let url = BackendUrl::parse(url).expect("harness URL");
    let probe = PostgresBackend::connect(&url, TIMEOUT)
        .await
        .expect("connect");
    let expect = Expectations::of(&probe)
        .ttl(Duration::from_secs(1))
        .slack(Duration::from_millis(500))
        .frees_on_disconnect(true)
        .force_release(false);
    let (admin, connection) = tokio_postgres::connect(admin_url, tokio_postgres::NoTls)
        .await
        .expect("admin connection");
    tokio::spawn(connection);
    let clients: Arc<Mutex<Vec<Weak<PostgresBackend>>>> = Arc::default();
    let counted = Arc::clone(&clients);
    Target::new(
        move || {
            let (url, server, clients) = (url.clone(), Arc::clone(&server), Arc::clone(&clients));
            async move {
                let _alive = server;
                let client = Arc::new(
                    PostgresBackend::connect(&url, TIMEOUT)
                        .await
                        .expect("connect"),
                );
                clients.lock().unwrap().push(Arc::downgrade(&client));
                client
            }
        },
        expect,
    )
    .with_queue_probe(move |key| {
        let sent: usize = counted
            .lock()
            .unwrap()
            .iter()
            .filter_map(Weak::upgrade)
            .map(|client| client.waiters(key))
            .sum();
        let lock = PostgresBackend::advisory_key(key);
        let queued: i64 = tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(async {
                admin
                    .query_one(
                        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
                         AND objsubid = 1 AND (classid::int8 << 32 | objid::int8) = $1",
                        &[&lock],
                    )
                    .await
                    .expect("pg_locks")
                    .get(0)
            })
        });
        sent.min(usize::try_from(queued).unwrap_or(0))
    })
}

dlock_core::conformance_tests!(pg_single, single());
dlock_core::conformance_tests!(pg_single_tls, single_tls());
