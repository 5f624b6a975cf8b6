//! The conformance suite against a real PostgreSQL (in plain text and over mutual TLS),
//! started by the harness once and shared by every test of this binary (each test keys its
//! locks apart), ending with it.
//!
//! PostgreSQL frees a session's advisory locks when its connection closes: a crashed client
//! (its runtime shut down, its sockets closed) frees its locks at once, which the suite
//! expects (`frees_on_disconnect`). A frozen one keeps them until its session's
//! `idle_session_timeout`, one ttl.

use std::time::Duration;

use dlock_core::backend::{BackendUrl, PostgresBackend};
use dlock_core::conformance::Target;
use dlock_harness::{PostgresServer, Proxies, TestCerts, shared};
use tokio::sync::OnceCell;

const TIMEOUT: Duration = Duration::from_secs(2);

/// A server (with what it needs, e.g. its certificates) shared by every test of this binary,
/// each test keying its locks apart, and the URL clients connect to.
type Serving = (Box<dyn Send + Sync>, String);

/// A target whose clients are new `PostgresBackend`s on one harness-started server (the
/// suite sees a waiter queued in `inspect`: `pg_locks` rows not granted).
async fn single() -> Target<PostgresBackend> {
    static SERVER: OnceCell<Serving> = OnceCell::const_new();
    let (server, url) = shared(&SERVER, || async {
        let server = PostgresServer::start().await.expect("postgres");
        let url = server.url();
        (Box::new(server) as Box<dyn Send + Sync>, url)
    })
    .await;
    target(server, url).await
}

/// Every client connection over TLS, checking the server's name and presenting a client
/// certificate for the user (the server requires one on TLS sessions).
async fn single_tls() -> Target<PostgresBackend> {
    static SERVER: OnceCell<Serving> = OnceCell::const_new();
    let (server, url) = shared(&SERVER, || async {
        let certs = TestCerts::generate().expect("certificates");
        let server = PostgresServer::start_tls(&certs).await.expect("postgres");
        let url = format!("{}&{}", server.tls_url(), certs.url_query());
        (Box::new((server, certs)) as Box<dyn Send + Sync>, url)
    })
    .await;
    target(server, url).await
}

/// The target of clients on `url`; keeps `server` alive as long as the target.
async fn target<S: Send + Sync + 'static>(server: S, url: &str) -> Target<PostgresBackend> {
    let url = BackendUrl::parse(url).expect("harness URL");
    let connect = move || {
        let url = url.clone();
        async move {
            PostgresBackend::connect(&url, TIMEOUT)
                .await
                .expect("connect")
        }
    };
    Target::serving(server, connect, |expect| {
        expect
            .ttl(Duration::from_secs(1))
            .slack(Duration::from_millis(500))
            .frees_on_disconnect(true)
            .force_release(false)
    })
    .await
}

dlock_core::conformance_tests!(pg_single, single());
dlock_core::conformance_tests!(pg_single_tls, single_tls());

/// [`killed_sessions_campaign_again`](dlock_core::conformance::killed_sessions_campaign_again)
/// on a server of its own, every candidate through a proxy that cuts every connection for
/// twice the ttl (their sessions end as their sockets close); the checker connects directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_killed_sessions_campaign_again() {
    let server = PostgresServer::start().await.expect("postgres");
    let proxies = Proxies::in_front_of(&server.url(), &[server.port()])
        .await
        .expect("proxies");
    let proxied = target((), &proxies.url()).await;
    let direct = target((), &server.url()).await;
    let checker = direct.locker_with_prefix(&proxied.expect.prefix).await;
    let cut = proxied.expect.ttl * 2 + proxied.expect.slack;
    dlock_core::conformance::killed_sessions_campaign_again(&proxied, checker, || {
        proxies.cut_for(cut)
    })
    .await;
}
