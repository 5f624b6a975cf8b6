//! The conformance suite against real ZooKeeper: a standalone server (in plain text and over
//! mutual TLS), and a 3-server ensemble, each started by the harness once and shared by every
//! test of this binary (each test keys its locks apart), ending with it.
//!
//! The harness runs ZooKeeper with `tickTime=500` and session timeouts from 1 s: the timing
//! scenarios run with a 2 s ttl (the session timeout the server grants). The server expires a
//! crashed client's session at the first tick after its timeout.

use std::time::Duration;

use dlock_core::backend::{BackendUrl, ZooKeeperBackend};
use dlock_core::conformance::Target;
use dlock_harness::{Proxies, TestCerts, ZkEnsemble, ZkServer, shared};
use tokio::sync::OnceCell;

const TIMEOUT: Duration = Duration::from_secs(2);

/// A server (with what it needs, e.g. its certificates) shared by every test of this binary,
/// each test keying its locks apart, and the URL clients connect to.
type Serving = (Box<dyn Send + Sync>, String);

/// A target whose clients are new `ZooKeeperBackend`s (a Locker each: its own sessions and
/// watches) on `url`, keeping `server` alive as long as the target.
async fn target<S: Send + Sync + 'static>(server: S, url: String) -> Target<ZooKeeperBackend> {
    let url = BackendUrl::parse(&url).expect("harness URL");
    let connect = move || {
        let url = url.clone();
        async move {
            ZooKeeperBackend::connect(&url, TIMEOUT)
                .await
                .expect("connect")
        }
    };
    Target::serving(server, connect, |expect| {
        expect
            .ttl(Duration::from_secs(2))
            .slack(Duration::from_millis(800))
            // The session expires at the first tick (500 ms) after its timeout.
            .expiry_lag(Duration::from_millis(500))
    })
    .await
}

/// The server's TLS port, trusting the test CA and presenting a client certificate (the
/// server requires one).
async fn single_tls() -> Target<ZooKeeperBackend> {
    static SERVER: OnceCell<Serving> = OnceCell::const_new();
    let (server, url) = shared(&SERVER, || async {
        let certs = TestCerts::generate().expect("certificates");
        let server = ZkServer::start_tls(&certs).await.expect("zookeeper");
        let url = format!("{}?{}", server.tls_url(), certs.url_query());
        (Box::new((server, certs)) as Box<dyn Send + Sync>, url)
    })
    .await;
    target(server, url.clone()).await
}

async fn single() -> Target<ZooKeeperBackend> {
    static SERVER: OnceCell<Serving> = OnceCell::const_new();
    let (server, url) = shared(&SERVER, || async {
        let server = ZkServer::start().await.expect("zookeeper");
        let url = server.url();
        (Box::new(server) as Box<dyn Send + Sync>, url)
    })
    .await;
    target(server, url.clone()).await
}

async fn ensemble() -> Target<ZooKeeperBackend> {
    static SERVER: OnceCell<Serving> = OnceCell::const_new();
    let (server, url) = shared(&SERVER, || async {
        let ensemble = ZkEnsemble::start(3).await.expect("zookeeper ensemble");
        let url = ensemble.url();
        (Box::new(ensemble) as Box<dyn Send + Sync>, url)
    })
    .await;
    target(server, url.clone()).await
}

dlock_core::conformance_tests!(zk_single, single());
dlock_core::conformance_tests!(zk_ensemble, ensemble());
dlock_core::conformance_tests!(zk_single_tls, single_tls());

/// [`killed_sessions_campaign_again`](dlock_core::conformance::killed_sessions_campaign_again)
/// on a server of its own, every candidate through a proxy that cuts every connection for
/// twice the ttl (the server expires their sessions); the checker connects directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_killed_sessions_campaign_again() {
    let server = ZkServer::start().await.expect("zookeeper");
    let proxies = Proxies::in_front_of(&server.url(), &[server.port()])
        .await
        .expect("proxies");
    let proxied = target((), proxies.url()).await;
    let direct = target((), server.url()).await;
    let checker = direct.locker_with_prefix(&proxied.expect.prefix).await;
    let cut = proxied.expect.ttl * 2 + proxied.expect.slack;
    dlock_core::conformance::killed_sessions_campaign_again(&proxied, checker, || {
        proxies.cut_for(cut)
    })
    .await;
}

/// [`killed_sessions_campaign_again`](dlock_core::conformance::killed_sessions_campaign_again)
/// on a 3-server ensemble of its own, every candidate through a proxy per member, all cut for twice the
/// ttl (the ensemble expires their sessions); the checker connects directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_ensemble_killed_sessions_campaign_again() {
    let server = ZkEnsemble::start(3).await.expect("zookeeper ensemble");
    let proxies = Proxies::in_front_of(
        &server.url(),
        &server
            .members()
            .iter()
            .map(|m| m.port())
            .collect::<Vec<_>>(),
    )
    .await
    .expect("proxies");
    let proxied = target((), proxies.url()).await;
    let direct = target((), server.url()).await;
    let checker = direct.locker_with_prefix(&proxied.expect.prefix).await;
    let cut = proxied.expect.ttl * 2 + proxied.expect.slack;
    dlock_core::conformance::killed_sessions_campaign_again(&proxied, checker, || {
        proxies.cut_for(cut)
    })
    .await;
}
