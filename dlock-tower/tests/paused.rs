//! A handler whose whole server freezes past its lock's lease — the only runtime thread
//! blocked, as a GC pause or SIGSTOP would freeze the process — is never resumed after the
//! pause: the layer answers `503` and the handler's code after its next await point never
//! runs. On memory, Redis and etcd.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use dlock_core::Locker;
use dlock_harness::{EtcdServer, RedisServer};
use dlock_tower::DistributedLockLayer;
use tower::ServiceExt;

const TTL: Duration = Duration::from_secs(1);

async fn assert_handler_never_resumed(locker: Locker) {
    let resumed = Arc::new(AtomicBool::new(false));
    let handler = {
        let resumed = Arc::clone(&resumed);
        move || async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            std::thread::sleep(TTL * 3 / 2); // the process freezes past the lease
            tokio::task::yield_now().await;
            resumed.store(true, Ordering::SeqCst);
            "done"
        }
    };
    let layer =
        DistributedLockLayer::new(locker, |_: &Request<Body>| Some("job".to_owned())).ttl(TTL);
    let app = Router::new()
        .route("/job", post(handler))
        .route_layer(layer);
    let request = Request::post("/job").body(Body::empty()).unwrap();
    let response = app.oneshot(request).await.unwrap();
    assert!(
        !resumed.load(Ordering::SeqCst),
        "the handler resumed after its lease ran out"
    );
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
}

// `current_thread`: blocking the one thread freezes the Locker, its watchdog and its
// connections together, like a paused process.
#[tokio::test(flavor = "current_thread")]
async fn memory() {
    assert_handler_never_resumed(Locker::memory()).await;
}

#[tokio::test(flavor = "current_thread")]
async fn redis() {
    let server = RedisServer::start().await.unwrap();
    assert_handler_never_resumed(Locker::connect_url(&server.url()).await.expect("connect")).await;
}

#[tokio::test(flavor = "current_thread")]
async fn etcd() {
    let server = EtcdServer::start().await.unwrap();
    assert_handler_never_resumed(Locker::connect_url(&server.url()).await.expect("connect")).await;
}
