//! `shared_for_safe_methods`: in a real axum `Router`, two GETs of one order hold its lock at
//! once, and a POST to the same order waits for both and runs alone. Each step waits for the
//! one before it to be seen (both readers inside, the POST queued), never for a time.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{Request, StatusCode};
use axum::routing::{get, post};
use dlock_core::Locker;
use dlock_tower::{DistributedLockLayer, path_key};
use tokio::sync::{Barrier, watch};
use tower::ServiceExt;

/// What the handlers saw, in order, a barrier the two GETs meet at, and whether the POST is
/// queued behind them.
struct Order {
    events: Mutex<Vec<String>>,
    readers_inside: Mutex<usize>,
    both_readers_in: Barrier,
    post_queued: watch::Sender<bool>,
}

impl Order {
    fn log(&self, event: impl Into<String>) {
        self.events.lock().unwrap().push(event.into());
    }
}

/// A read: waits (holding its lock) until the other GET is inside too — it only gets there
/// if the two hold the lock at once — then until the POST waits for the lock.
async fn show(State(order): State<Arc<Order>>, Path(id): Path<u64>) -> String {
    *order.readers_inside.lock().unwrap() += 1;
    order.log("get in");
    let met = tokio::time::timeout(Duration::from_secs(5), order.both_readers_in.wait()).await;
    let mut queued = order.post_queued.subscribe();
    let _ = tokio::time::timeout(Duration::from_secs(5), queued.wait_for(|queued| *queued)).await;
    order.log("get out");
    *order.readers_inside.lock().unwrap() -= 1;
    if met.is_ok() {
        format!("order {id}")
    } else {
        "the other reader never came in".to_owned()
    }
}

/// A write: records whether any reader was inside when it ran.
async fn pay(State(order): State<Arc<Order>>) -> &'static str {
    let readers = *order.readers_inside.lock().unwrap();
    order.log(format!("post in with {readers} readers inside"));
    "paid"
}

fn request(method: &str, path: &str) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(path)
        .body(Body::empty())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gets_of_one_order_overlap_and_a_post_waits_for_both() {
    let order = Arc::new(Order {
        events: Mutex::default(),
        readers_inside: Mutex::default(),
        both_readers_in: Barrier::new(2),
        post_queued: watch::Sender::new(false),
    });
    let locker = Locker::memory();
    let layer = DistributedLockLayer::new(locker.clone(), path_key("order:<id>"))
        .shared_for_safe_methods()
        .wait(Duration::from_secs(10));
    let app = Router::new()
        .route("/orders/{id}", get(show))
        .route("/orders/{id}/pay", post(pay))
        .route_layer(layer)
        .with_state(Arc::clone(&order));

    let first = tokio::spawn(app.clone().oneshot(request("GET", "/orders/7")));
    let second = tokio::spawn(app.clone().oneshot(request("GET", "/orders/7")));
    // The POST is sent once both GETs hold the lock: it must wait for both.
    let give_up = Instant::now() + Duration::from_secs(5);
    while *order.readers_inside.lock().unwrap() < 2 {
        assert!(
            Instant::now() < give_up,
            "the two GETs never held the lock at once"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let write = tokio::spawn(app.clone().oneshot(request("POST", "/orders/7/pay")));
    loop {
        let info = locker.inspect("order:7").await.unwrap();
        if info
            .waiters
            .as_ref()
            .is_some_and(|waiters| waiters.len() == 1)
        {
            break;
        }
        assert!(Instant::now() < give_up, "the POST never waited: {info:?}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    order.post_queued.send_replace(true);

    for read in [first, second] {
        let response = read.await.unwrap().unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        assert_eq!(
            body, "order 7",
            "the two GETs did not hold the lock at once"
        );
    }
    let response = write.await.unwrap().unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        *order.events.lock().unwrap(),
        [
            "get in",
            "get in",
            "get out",
            "get out",
            "post in with 0 readers inside"
        ],
        "the POST ran next to a GET"
    );
}

#[tokio::test]
async fn a_backend_without_read_write_locks_answers_500_naming_the_key() {
    use dlock_core::backend::{
        AcquireOutcome, AcquireRequest, Capabilities, Lease, LockBackend, MemoryBackend,
        ReleaseOutcome, RenewOutcome,
    };

    /// The memory backend, claiming exclusive locks only.
    #[derive(Debug)]
    struct ExclusiveOnly(MemoryBackend);

    #[async_trait::async_trait]
    impl LockBackend for ExclusiveOnly {
        async fn acquire(
            &self,
            req: &AcquireRequest,
            deadline: Option<std::time::Instant>,
        ) -> dlock_core::Result<AcquireOutcome> {
            self.0.acquire(req, deadline).await
        }
        async fn renew(&self, leases: &[Lease]) -> dlock_core::Result<Vec<RenewOutcome>> {
            self.0.renew(leases).await
        }
        async fn release(&self, lease: &Lease) -> dlock_core::Result<ReleaseOutcome> {
            self.0.release(lease).await
        }
        fn capabilities(&self) -> Capabilities {
            self.0.capabilities().read_write(false).semaphore(false)
        }
    }

    let locker = Locker::from_backend(ExclusiveOnly(MemoryBackend::new()));
    let layer = DistributedLockLayer::new(locker, path_key("order:<id>")).shared_for_safe_methods();
    let app = Router::new()
        .route(
            "/orders/{id}",
            get(|| async { "order" }).post(|| async { "paid" }),
        )
        .route_layer(layer);
    let read = app
        .clone()
        .oneshot(request("GET", "/orders/7"))
        .await
        .unwrap();
    assert_eq!(read.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let body = axum::body::to_bytes(read.into_body(), 4096).await.unwrap();
    let body = String::from_utf8(body.to_vec()).unwrap();
    assert!(
        body.contains("order:7") && body.contains("set-up is invalid"),
        "{body}"
    );
    let write = app.oneshot(request("POST", "/orders/7")).await.unwrap();
    assert_eq!(write.status(), StatusCode::OK, "exclusive locks still work");
}
