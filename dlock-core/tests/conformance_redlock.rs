//! The conformance suite against RedLock over five independent `redis-server`s (and over
//! three, the fewest it accepts), started by the harness for each test and stopped after it.

use std::sync::Arc;
use std::time::Duration;

use dlock_core::backend::{BackendUrl, RedLockBackend};
use dlock_core::conformance::{Expectations, Target};
use dlock_core::harness::RedisNodes;

const TIMEOUT: Duration = Duration::from_secs(2);

/// A target whose clients are new `RedLockBackend`s (a Locker each: its own connections and
/// subscriptions on every master) over `masters` fresh servers.
async fn masters(count: usize) -> Target<RedLockBackend> {
    let nodes = Arc::new(RedisNodes::start(count).await.expect("redis-servers"));
    let url = BackendUrl::parse(&nodes.url()).expect("harness URL");
    let probe = RedLockBackend::connect(&url, TIMEOUT)
        .await
        .expect("connect");
    let expect = Expectations::of(&probe)
        .ttl(Duration::from_millis(500))
        .slack(Duration::from_millis(300));
    Target::new(
        move || {
            let (url, nodes) = (url.clone(), Arc::clone(&nodes));
            async move {
                let _alive = nodes;
                Arc::new(
                    RedLockBackend::connect(&url, TIMEOUT)
                        .await
                        .expect("connect"),
                )
            }
        },
        expect,
    )
}

dlock_core::conformance_tests!(redlock_five, masters(5));
dlock_core::conformance_tests!(redlock_three, masters(3));
