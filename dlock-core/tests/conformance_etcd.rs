//! The conformance suite against real etcd: one member (in plain text and over mutual TLS),
//! and a 3-member cluster, each started by the harness once and shared by every test of this
//! binary (each test keys its locks apart), ending with it.
//!
//! etcd leases are whole seconds and at least 1.5 × the election timeout (the harness uses 1 s),
//! so the timing scenarios run with a 3 s ttl; a crashed client's lease ends when etcd's lessor
//! next looks (every 500 ms) after its ttl.

use std::time::Duration;

use dlock_core::backend::{BackendUrl, EtcdBackend};
use dlock_core::conformance::Target;
use dlock_harness::{EtcdCluster, EtcdServer, Proxies, TestCerts, shared};
use tokio::sync::OnceCell;

const TIMEOUT: Duration = Duration::from_secs(2);

/// A server (with what it needs, e.g. its certificates) shared by every test of this binary,
/// each test keying its locks apart, and the URL clients connect to.
type Serving = (Box<dyn Send + Sync>, String);

/// A target whose clients are new `EtcdBackend`s (a Locker each: its own connection, leases
/// and watches) on `url`, keeping `server` alive as long as the target.
async fn target<S: Send + Sync + 'static>(server: S, url: String) -> Target<EtcdBackend> {
    let url = BackendUrl::parse(&url).expect("harness URL");
    let connect = move || {
        let url = url.clone();
        async move { EtcdBackend::connect(&url, TIMEOUT).await.expect("connect") }
    };
    Target::serving(server, connect, |expect| {
        expect
            .ttl(Duration::from_secs(3))
            .slack(Duration::from_millis(800))
            // etcd's lessor looks for expired leases every 500 ms, then commits the revocation.
            .expiry_lag(Duration::from_millis(500))
            // A kept lock's lease is whole seconds, rounded up.
            .keep_rounding(Duration::from_secs(1))
    })
    .await
}

async fn single() -> Target<EtcdBackend> {
    static SERVER: OnceCell<Serving> = OnceCell::const_new();
    let (server, url) = shared(&SERVER, || async {
        let server = EtcdServer::start().await.expect("etcd");
        let url = server.url();
        (Box::new(server) as Box<dyn Send + Sync>, url)
    })
    .await;
    target(server, url.clone()).await
}

async fn cluster() -> Target<EtcdBackend> {
    static SERVER: OnceCell<Serving> = OnceCell::const_new();
    let (server, url) = shared(&SERVER, || async {
        let cluster = EtcdCluster::start(3).await.expect("etcd cluster");
        let url = cluster.url();
        (Box::new(cluster) as Box<dyn Send + Sync>, url)
    })
    .await;
    target(server, url.clone()).await
}

/// The member's TLS port, trusting the test CA and presenting a client certificate (the
/// member requires one).
async fn single_tls() -> Target<EtcdBackend> {
    static SERVER: OnceCell<Serving> = OnceCell::const_new();
    let (server, url) = shared(&SERVER, || async {
        let certs = TestCerts::generate().expect("certificates");
        let server = EtcdServer::start_tls(&certs).await.expect("etcd");
        let url = format!("{}?{}", server.tls_url(), certs.url_query());
        (Box::new((server, certs)) as Box<dyn Send + Sync>, url)
    })
    .await;
    target(server, url.clone()).await
}

dlock_core::conformance_tests!(etcd_single, single());
dlock_core::conformance_tests!(etcd_single_tls, single_tls());
dlock_core::conformance_tests!(etcd_cluster, cluster());

/// [`killed_sessions_campaign_again`](dlock_core::conformance::killed_sessions_campaign_again)
/// on a member of its own, every candidate through a proxy that cuts every connection for
/// twice the ttl (its leases expire on the server); the checker connects directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_killed_sessions_campaign_again() {
    let server = EtcdServer::start().await.expect("etcd");
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
/// on a 3-member cluster of its own, every candidate through a proxy per member, all cut for twice the
/// ttl (its leases expire on the cluster); the checker connects directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_cluster_killed_sessions_campaign_again() {
    let server = EtcdCluster::start(3).await.expect("etcd cluster");
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
