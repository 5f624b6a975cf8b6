//! Work under `#[distributed_lock]` whose whole client freezes past its lease — the only
//! runtime thread blocked, as a GC pause, swap or SIGSTOP would freeze a process — is never
//! resumed after the pause: the call returns `Error::LeaseLost`, on memory, Redis, etcd and
//! ZooKeeper.
//! (`guard.run` is the conformance scenario `paused_holder_never_resumes_its_work`; the tower
//! layer has its own test in dlock-tower.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use dlock_core::{Error, Locker, distributed_lock};
use dlock_harness::{EtcdServer, RedisServer, ZkServer};

const TTL: Duration = Duration::from_secs(1);

/// Starts, freezes its thread for 1.5 ttls at once, and records whether it got past its
/// next await point.
#[distributed_lock(key = "paused:<id>", ttl = "1s", locker = locker)]
async fn frozen_job(locker: &Locker, id: u32, resumed: &AtomicBool) -> Result<(), Error> {
    tokio::time::sleep(Duration::from_millis(10)).await;
    std::thread::sleep(TTL * 3 / 2);
    tokio::task::yield_now().await;
    resumed.store(true, Ordering::SeqCst);
    Ok(())
}

async fn assert_never_resumed(locker: &Locker) {
    let resumed = AtomicBool::new(false);
    let outcome = frozen_job(locker, 7, &resumed).await;
    assert!(
        !resumed.load(Ordering::SeqCst),
        "the body resumed after its lease ran out"
    );
    assert!(
        matches!(outcome, Err(Error::LeaseLost { .. })),
        "{outcome:?}"
    );
}

// `current_thread`: blocking the one thread freezes the Locker, its watchdog and its
// connections together, like a paused process.
#[tokio::test(flavor = "current_thread")]
async fn memory() {
    assert_never_resumed(&Locker::memory()).await;
}

#[tokio::test(flavor = "current_thread")]
async fn redis() {
    let server = RedisServer::start().await.unwrap();
    assert_never_resumed(&Locker::connect_url(&server.url()).await.expect("connect")).await;
}

#[tokio::test(flavor = "current_thread")]
async fn etcd() {
    let server = EtcdServer::start().await.unwrap();
    assert_never_resumed(&Locker::connect_url(&server.url()).await.expect("connect")).await;
}

#[tokio::test(flavor = "current_thread")]
async fn zookeeper() {
    let server = ZkServer::start().await.unwrap();
    assert_never_resumed(&Locker::connect_url(&server.url()).await.expect("connect")).await;
}
