//! The conformance suite against real Redis: one `redis-server`, and a 3-master Redis Cluster,
//! each in plain text and over mutual TLS, and in the plain layout (`?layout=plain`), and a
//! Sentinel-managed master with two replicas,
//! started by the harness once and shared by every
//! test of this binary (each test keys its locks apart), ending with it.

use std::time::Duration;

use dlock_core::backend::{BackendUrl, RedisBackend};
use dlock_core::conformance::Target;
use dlock_harness::{Proxies, RedisCluster, RedisSentinels, RedisServer, TestCerts, shared};
use tokio::sync::OnceCell;

const TIMEOUT: Duration = Duration::from_secs(2);

/// A server (with what it needs, e.g. its certificates) shared by every test of this binary,
/// each test keying its locks apart, and the URL clients connect to.
type Serving = (Box<dyn Send + Sync>, String);

/// Over TLS the slack is wider: the two scenarios that run at once on the shared servers
/// open TLS connections to every node, and beside a busy neighbour on two cores a crashed
/// holder's ttl was once waited out 413 ms after it ended (300 ms allowed).
const TLS_SLACK: Duration = Duration::from_millis(600);

/// A target whose clients are new `RedisBackend`s (a Locker each: its own connections and
/// subscription) on `url`, keeping `server` alive as long as the target.
async fn target<S: Send + Sync + 'static>(server: S, url: String) -> Target<RedisBackend> {
    let slack = if url.starts_with("rediss") {
        TLS_SLACK
    } else {
        Duration::from_millis(300)
    };
    let url = BackendUrl::parse(&url).expect("harness URL");
    let connect = move || {
        let url = url.clone();
        async move { RedisBackend::connect(&url, TIMEOUT).await.expect("connect") }
    };
    Target::serving(server, connect, |expect| {
        expect
            .ttl(Duration::from_millis(500))
            .slack(slack)
            .lists_share_waiters(false)
    })
    .await
}

async fn single() -> Target<RedisBackend> {
    single_with("").await
}

/// The single server, in the plain layout (`?layout=plain`: redis-py's and node-redlock's).
async fn single_plain() -> Target<RedisBackend> {
    single_with("?layout=plain").await
}

async fn single_with(query: &str) -> Target<RedisBackend> {
    static SERVER: OnceCell<Serving> = OnceCell::const_new();
    let (server, url) = shared(&SERVER, || async {
        let server = RedisServer::start().await.expect("redis-server");
        let url = server.url();
        (Box::new(server) as Box<dyn Send + Sync>, url)
    })
    .await;
    target(server, format!("{url}{query}")).await
}

async fn cluster() -> Target<RedisBackend> {
    cluster_with("").await
}

/// The cluster in the plain layout: each lock's own key decides its slot.
async fn cluster_plain() -> Target<RedisBackend> {
    cluster_with("?layout=plain").await
}

async fn cluster_with(query: &str) -> Target<RedisBackend> {
    static SERVER: OnceCell<Serving> = OnceCell::const_new();
    let (server, url) = shared(&SERVER, || async {
        let cluster = RedisCluster::start(3).await.expect("redis cluster");
        let url = cluster.url();
        (Box::new(cluster) as Box<dyn Send + Sync>, url)
    })
    .await;
    target(server, format!("{url}{query}")).await
}

/// The server's TLS port, trusting the test CA and presenting a client certificate (the
/// server requires one).
async fn single_tls() -> Target<RedisBackend> {
    static SERVER: OnceCell<Serving> = OnceCell::const_new();
    let (server, url) = shared(&SERVER, || async {
        let certs = TestCerts::generate().expect("certificates");
        let server = RedisServer::start_tls(&certs).await.expect("redis-server");
        let url = format!("{}?{}", server.tls_url(), certs.url_query());
        (Box::new((server, certs)) as Box<dyn Send + Sync>, url)
    })
    .await;
    target(server, url.clone()).await
}

/// A cluster whose nodes talk TLS to each other and to clients.
async fn cluster_tls() -> Target<RedisBackend> {
    static SERVER: OnceCell<Serving> = OnceCell::const_new();
    let (server, url) = shared(&SERVER, || async {
        let certs = TestCerts::generate().expect("certificates");
        let cluster = RedisCluster::start_tls(3, &certs)
            .await
            .expect("redis cluster");
        let url = format!("{}?{}", cluster.tls_url(), certs.url_query());
        (Box::new((cluster, certs)) as Box<dyn Send + Sync>, url)
    })
    .await;
    target(server, url.clone()).await
}

/// A master with two replicas behind three sentinels (`redis+sentinel://`), every grant and
/// renewal acknowledged by a replica before it counts (`min_replicas=1`).
async fn sentinel() -> Target<RedisBackend> {
    sentinel_with("").await
}

/// The same group in the plain layout.
async fn sentinel_plain() -> Target<RedisBackend> {
    sentinel_with("&layout=plain").await
}

async fn sentinel_with(query: &str) -> Target<RedisBackend> {
    static SERVER: OnceCell<Serving> = OnceCell::const_new();
    let (server, url) = shared(&SERVER, || async {
        let group = RedisSentinels::start(2).await.expect("redis sentinels");
        let url = format!("{}?min_replicas=1&replica_timeout=500ms", group.url());
        (Box::new(group) as Box<dyn Send + Sync>, url)
    })
    .await;
    target(server, format!("{url}{query}")).await
}

/// The same over TLS: clients, replication and sentinels.
async fn sentinel_tls() -> Target<RedisBackend> {
    static SERVER: OnceCell<Serving> = OnceCell::const_new();
    let (server, url) = shared(&SERVER, || async {
        let certs = TestCerts::generate().expect("certificates");
        let group = RedisSentinels::start_tls(2, &certs)
            .await
            .expect("redis sentinels");
        let url = format!(
            "{}?min_replicas=1&replica_timeout=500ms&{}",
            group.url(),
            certs.url_query()
        );
        (Box::new((group, certs)) as Box<dyn Send + Sync>, url)
    })
    .await;
    target(server, url.clone()).await
}

dlock_core::conformance_tests!(redis_single, single());
dlock_core::conformance_tests!(redis_sentinel_tls, sentinel_tls());
dlock_core::conformance_tests!(redis_sentinel, sentinel());
dlock_core::conformance_tests!(redis_single_tls, single_tls());
dlock_core::conformance_tests!(redis_cluster_tls, cluster_tls());
dlock_core::conformance_tests!(redis_cluster, cluster());
dlock_core::conformance_tests!(redis_plain, single_plain());
dlock_core::conformance_tests!(redis_cluster_plain, cluster_plain());
dlock_core::conformance_tests!(redis_sentinel_plain, sentinel_plain());

/// [`killed_sessions_campaign_again`](dlock_core::conformance::killed_sessions_campaign_again)
/// on a server of its own, every candidate through a proxy that cuts every connection for
/// twice the ttl (the leader's lock and the waiter's place in line expire); the checker connects directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_sessions_campaign_again() {
    let server = RedisServer::start().await.expect("redis-server");
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
/// on a 3-master Cluster of its own (whose client follows the nodes' own addresses, so no
/// proxy can stand in front of it): every master is frozen (SIGSTOP) for twice the ttl, so
/// the leader's lock and the waiter's place in line are past their expiry when they wake;
/// the checker connects directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_killed_sessions_campaign_again() {
    let cluster = RedisCluster::start(3).await.expect("redis cluster");
    let frozen = target((), cluster.url()).await;
    let direct = target((), cluster.url()).await;
    let checker = direct.locker_with_prefix(&frozen.expect.prefix).await;
    let cut = frozen.expect.ttl * 2 + frozen.expect.slack;
    dlock_core::conformance::killed_sessions_campaign_again(&frozen, checker, || async {
        for node in cluster.nodes() {
            node.pause().expect("SIGSTOP");
        }
        tokio::time::sleep(cut).await;
        for node in cluster.nodes() {
            node.resume().expect("SIGCONT");
        }
    })
    .await;
}
