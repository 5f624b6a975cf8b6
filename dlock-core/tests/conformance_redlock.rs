//! The conformance suite against RedLock over five independent `redis-server`s (and over
//! three, the fewest it accepts; and over three speaking mutual TLS only), started by the
//! harness for each test and stopped after it.

use std::time::Duration;

use dlock_core::backend::{BackendUrl, RedLockBackend};
use dlock_core::conformance::Target;
use dlock_harness::{RedisNodes, TestCerts};

const TIMEOUT: Duration = Duration::from_secs(2);

/// A target whose clients are new `RedLockBackend`s (a Locker each: its own connections and
/// subscriptions on every master) over `masters` fresh servers.
async fn masters(count: usize) -> Target<RedLockBackend> {
    let nodes = RedisNodes::start(count).await.expect("redis-servers");
    let url = nodes.url();
    target(nodes, url).await
}

/// Three masters reached over TLS, trusting the test CA and presenting a client certificate
/// (each server requires one).
async fn tls_masters() -> Target<RedLockBackend> {
    let certs = TestCerts::generate().expect("certificates");
    let nodes = RedisNodes::start_tls(3, &certs)
        .await
        .expect("redis-servers");
    // A master's share of the 500 ms ttl is 25 ms, floored at 50 ms: too tight for a TLS
    // round on a loaded 2-core runner (CI saw all three masters miss it at once), so each
    // gets a fifth of the ttl here.
    let url = format!("{}?{}&node_timeout=20%", nodes.tls_url(), certs.url_query());
    target((nodes, certs), url).await
}

async fn target<S: Send + Sync + 'static>(nodes: S, url: String) -> Target<RedLockBackend> {
    let url = BackendUrl::parse(&url).expect("harness URL");
    let connect = move || {
        let url = url.clone();
        async move {
            RedLockBackend::connect(&url, TIMEOUT)
                .await
                .expect("connect")
        }
    };
    Target::serving(nodes, connect, |expect| {
        expect
            .ttl(Duration::from_millis(500))
            .slack(Duration::from_millis(300))
            // Racers that each win a different master leave nobody a majority.
            .split_votes(true)
    })
    .await
}

dlock_core::conformance_tests!(redlock_five, masters(5));
dlock_core::conformance_tests!(redlock_three, masters(3));
dlock_core::conformance_tests!(redlock_tls, tls_masters());
