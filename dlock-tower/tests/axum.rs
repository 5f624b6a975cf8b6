//! The layer in a real axum `Router`: in-process (`oneshot`) and over TCP with a real HTTP
//! client sending concurrent requests.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{Request, StatusCode};
use axum::routing::post;
use dlock_core::Locker;
use dlock_harness::RedisServer;
use dlock_tower::{DistributedLockLayer, path_key};
use tower::ServiceExt;

/// Per-order balances updated with a deliberately non-atomic read-sleep-write, plus a record
/// of overlaps: a handler that finds another request for the same order inside.
#[derive(Default)]
struct Orders {
    balance: Mutex<HashMap<String, u64>>,
    inside: Mutex<HashMap<String, usize>>,
    overlaps_same_order: AtomicUsize,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

async fn pay(State(orders): State<Arc<Orders>>, Path(id): Path<String>) -> &'static str {
    {
        let mut inside = orders.inside.lock().unwrap();
        let count = inside.entry(id.clone()).or_default();
        if *count > 0 {
            orders.overlaps_same_order.fetch_add(1, Ordering::SeqCst);
        }
        *count += 1;
    }
    let now = orders.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    orders.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let read = orders
        .balance
        .lock()
        .unwrap()
        .get(&id)
        .copied()
        .unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(20)).await;
    orders.balance.lock().unwrap().insert(id.clone(), read + 1);
    orders.in_flight.fetch_sub(1, Ordering::SeqCst);
    *orders.inside.lock().unwrap().get_mut(&id).unwrap() -= 1;
    "paid"
}

fn orders_app(layer: DistributedLockLayer<dlock_tower::PathKey>) -> (Router, Arc<Orders>) {
    let orders = Arc::new(Orders::default());
    let app = Router::new()
        .route("/orders/{id}/pay", post(pay))
        .route_layer(layer)
        .with_state(Arc::clone(&orders));
    (app, orders)
}

async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// The problem-details body of a refusal, checked for its content type, status and key.
async fn problem(response: axum::response::Response, status: StatusCode, key: &str) -> String {
    use http_body_util::BodyExt;
    assert_eq!(response.status(), status);
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(body["status"], status.as_u16());
    assert_eq!(body["title"], status.canonical_reason().unwrap());
    let detail = body["detail"].as_str().unwrap().to_owned();
    assert!(detail.contains(&format!("`{key}`")), "{detail}");
    detail
}

fn post_to(path: &str) -> Request<Body> {
    Request::post(path).body(Body::empty()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_for_one_order_exclude_each_other_while_other_orders_run_in_parallel() {
    let layer = DistributedLockLayer::new(Locker::memory(), path_key("order:<id>"))
        .wait(Duration::from_secs(10));
    let (app, orders) = orders_app(layer);
    let addr = serve(app).await;
    let client = reqwest::Client::new();
    let mut requests = Vec::new();
    for i in 0..16 {
        let url = format!("http://{addr}/orders/{}/pay", i % 2);
        let client = client.clone();
        requests.push(tokio::spawn(async move {
            client.post(url).send().await.unwrap().status()
        }));
    }
    for request in requests {
        assert_eq!(request.await.unwrap(), StatusCode::OK);
    }
    let balance = orders.balance.lock().unwrap().clone();
    assert_eq!(balance.get("0"), Some(&8), "updates to order 0 were lost");
    assert_eq!(balance.get("1"), Some(&8), "updates to order 1 were lost");
    assert_eq!(orders.overlaps_same_order.load(Ordering::SeqCst), 0);
    assert_eq!(
        orders.max_in_flight.load(Ordering::SeqCst),
        2,
        "the two orders should run side by side"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_order_answers_423_with_retry_after() {
    let locker = Locker::memory();
    let layer =
        DistributedLockLayer::new(locker.clone(), path_key("order:<id>")).wait(Duration::ZERO);
    let (app, _orders) = orders_app(layer);
    // Another instance of the service holds order 7 (another task: not re-entrant).
    let holder = locker.clone();
    let held = tokio::spawn(async move {
        holder
            .lock("order:7")
            .ttl(Duration::from_secs(20))
            .await
            .unwrap()
    })
    .await
    .unwrap();
    let response = app.clone().oneshot(post_to("/orders/7/pay")).await.unwrap();
    assert_eq!(response.status(), StatusCode::LOCKED);
    let retry_after: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=20).contains(&retry_after), "Retry-After {retry_after}");
    problem(response, StatusCode::LOCKED, "order:7").await;
    let other_order = app.clone().oneshot(post_to("/orders/8/pay")).await.unwrap();
    assert_eq!(other_order.status(), StatusCode::OK);
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_busy_replaces_the_default_response_and_is_given_the_key() {
    use http_body_util::BodyExt;
    let locker = Locker::memory();
    let layer = DistributedLockLayer::new(locker.clone(), path_key("order:<id>"))
        .wait(Duration::ZERO)
        .on_busy(|key, _error| {
            let mut response = axum::http::Response::new(format!("{key} is busy"));
            *response.status_mut() = StatusCode::CONFLICT;
            response
        });
    let (app, _orders) = orders_app(layer);
    let holder = locker.clone();
    let held = tokio::spawn(async move { holder.lock("order:3").await.unwrap() })
        .await
        .unwrap();
    let response = app.oneshot(post_to("/orders/3/pay")).await.unwrap();
    assert_eq!(response.status(), StatusCode::CONFLICT);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"order:3 is busy");
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_wait_a_second_request_waits_and_then_succeeds() {
    let layer = DistributedLockLayer::new(Locker::memory(), path_key("order:<id>"))
        .wait(Duration::from_secs(5));
    let (app, orders) = orders_app(layer);
    let (a, b) = tokio::join!(
        app.clone().oneshot(post_to("/orders/3/pay")),
        app.clone().oneshot(post_to("/orders/3/pay"))
    );
    assert_eq!(a.unwrap().status(), StatusCode::OK);
    assert_eq!(b.unwrap().status(), StatusCode::OK);
    assert_eq!(orders.balance.lock().unwrap().get("3"), Some(&2));
}

/// A handler that answers, fails, panics or runs until the client leaves, selected by path.
async fn misbehave(Path(how): Path<String>) -> Result<&'static str, StatusCode> {
    match how.as_str() {
        "ok" => Ok("fine"),
        "error" => Err(StatusCode::CONFLICT),
        "panic" => panic!("handler panicked on purpose"),
        _ => {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok("too late")
        }
    }
}

/// After each way a handler can end, the lock is free: the next request (which does not wait)
/// gets through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_is_released_after_return_error_panic_and_client_disconnect() {
    let layer = DistributedLockLayer::new(Locker::memory(), |_: &Request<Body>| {
        Some("shared".to_owned())
    })
    .wait(Duration::from_secs(2));
    let app = Router::new()
        .route("/{how}", post(misbehave))
        .route_layer(layer);
    let addr = serve(app.clone()).await;
    let probe = |app: Router| async move { app.oneshot(post_to("/ok")).await.unwrap().status() };

    assert_eq!(
        app.clone().oneshot(post_to("/ok")).await.unwrap().status(),
        StatusCode::OK
    );
    assert_eq!(
        probe(app.clone()).await,
        StatusCode::OK,
        "after a normal return"
    );

    assert_eq!(
        app.clone()
            .oneshot(post_to("/error"))
            .await
            .unwrap()
            .status(),
        StatusCode::CONFLICT
    );
    assert_eq!(probe(app.clone()).await, StatusCode::OK, "after an error");

    let panicked = tokio::spawn(app.clone().oneshot(post_to("/panic"))).await;
    assert!(panicked.unwrap_err().is_panic());
    assert_eq!(probe(app.clone()).await, StatusCode::OK, "after a panic");

    let client = reqwest::Client::new();
    let abandoned = client
        .post(format!("http://{addr}/slow"))
        .timeout(Duration::from_millis(200))
        .send()
        .await;
    assert!(abandoned.unwrap_err().is_timeout());
    let started = Instant::now();
    let after_disconnect = client
        .post(format!("http://{addr}/ok"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        after_disconnect.status(),
        StatusCode::OK,
        "after the client disconnected"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the slow handler's lock was kept"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_lock_service_answers_503() {
    let server = RedisServer::start().await.unwrap();
    let config = dlock_core::DlockConfig::from_toml_str(&format!(
        "backend = \"{}\"\noperation_timeout = \"300ms\"",
        server.url()
    ))
    .unwrap();
    let locker = Locker::connect(&config).await.unwrap();
    let (app, orders) = orders_app(DistributedLockLayer::new(locker, path_key("order:<id>")));
    assert_eq!(
        app.clone()
            .oneshot(post_to("/orders/1/pay"))
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    server.kill().await.unwrap();
    let response = app.oneshot(post_to("/orders/1/pay")).await.unwrap();
    let detail = problem(response, StatusCode::SERVICE_UNAVAILABLE, "order:1").await;
    assert!(
        !detail.contains("127.0.0.1"),
        "the server's address stays out of the response: {detail}"
    );
    assert_eq!(
        orders.balance.lock().unwrap().get("1"),
        Some(&1),
        "the handler ran without the lock"
    );
}

/// A handler that takes 5 s, then sets `finished` (which a cancelled one never does).
fn five_second_handler(
    finished: &Arc<AtomicBool>,
) -> impl Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = &'static str> + Send>>
+ Clone
+ Send
+ Sync
+ 'static {
    let finished = Arc::clone(finished);
    move || {
        let finished = Arc::clone(&finished);
        Box::pin(async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            finished.store(true, Ordering::SeqCst);
            "done"
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_cancels_the_handler_and_answers_503() {
    let finished = Arc::new(AtomicBool::new(false));
    let handler = five_second_handler(&finished);
    let layer =
        DistributedLockLayer::new(Locker::memory(), |_: &Request<Body>| Some("job".to_owned()))
            .ttl(Duration::from_millis(200))
            .watchdog(false);
    let app = Router::new()
        .route("/job", post(handler))
        .route_layer(layer);
    let started = Instant::now();
    let response = app.oneshot(post_to("/job")).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the handler was not cancelled"
    );
    let detail = problem(response, StatusCode::SERVICE_UNAVAILABLE, "job").await;
    assert!(detail.contains("was lost"), "{detail}");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!finished.load(Ordering::SeqCst));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_past_max_hold_is_cancelled_and_answers_503() {
    let finished = Arc::new(AtomicBool::new(false));
    let handler = five_second_handler(&finished);
    // Renewed every 33 ms, yet ended at 300 ms.
    let locker = Locker::memory();
    let layer = DistributedLockLayer::new(locker.clone(), |_: &Request<Body>| {
        Some("import".to_owned())
    })
    .ttl(Duration::from_millis(100))
    .max_hold(Duration::from_millis(300));
    let app = Router::new()
        .route("/import", post(handler))
        .route_layer(layer);
    let started = Instant::now();
    let response = app.oneshot(post_to("/import")).await.unwrap();
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(2),
        "the handler ran {took:?} under a 300 ms max_hold"
    );
    let detail = problem(response, StatusCode::SERVICE_UNAVAILABLE, "import").await;
    assert!(detail.contains("max_hold"), "{detail}");
    assert!(!finished.load(Ordering::SeqCst));
    let next = locker
        .lock("import")
        .wait(Duration::from_secs(1))
        .await
        .expect("released after max_hold");
    next.release().await.expect("release");
}

#[tokio::test]
async fn a_template_naming_an_unknown_parameter_answers_500_and_is_caught_at_start_up() {
    let key = path_key("order:<order_id>");
    assert!(key.check_route("/orders/{id}/pay").is_err());
    let (app, orders) = orders_app(DistributedLockLayer::new(Locker::memory(), key));
    let response = app.oneshot(post_to("/orders/1/pay")).await.unwrap();
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    assert!(
        orders.balance.lock().unwrap().is_empty(),
        "the handler ran without its lock"
    );
}

#[tokio::test]
async fn requests_without_a_key_pass_through_unlocked() {
    let locker = Locker::memory();
    let layer = DistributedLockLayer::new(locker.clone(), |req: &Request<Body>| {
        req.headers().get("x-lock").map(|_| "k".to_owned())
    })
    .wait(Duration::ZERO);
    let app = Router::new()
        .route("/", post(|| async { "ok" }))
        .route_layer(layer);
    let holder = locker.clone();
    let _held = tokio::spawn(async move { holder.lock("k").await.unwrap() })
        .await
        .unwrap();
    assert_eq!(
        app.clone().oneshot(post_to("/")).await.unwrap().status(),
        StatusCode::OK
    );
    let locked = Request::post("/")
        .header("x-lock", "1")
        .body(Body::empty())
        .unwrap();
    assert_eq!(
        app.oneshot(locked).await.unwrap().status(),
        StatusCode::LOCKED
    );
}

/// A Locker whose config bounds waits at `wait`, on an in-process table of its own.
async fn locker_waiting(wait: Duration) -> Locker {
    let config = dlock_core::DlockConfig::default()
        .with_backend(dlock_core::BackendSpec::Url(format!(
            "memory://layer-wait-{}",
            wait.as_millis()
        )))
        .with_wait(Some(wait));
    Locker::connect(&config).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layer_waits_as_the_lockers_config_says() {
    // The config says wait up to 10 s: a request that finds the order held waits for it
    // rather than answering 423 at once.
    let locker = locker_waiting(Duration::from_secs(10)).await;
    let (app, _orders) = orders_app(DistributedLockLayer::new(
        locker.clone(),
        path_key("order:<id>"),
    ));
    let holder = locker.clone();
    let held = tokio::spawn(async move { holder.lock("order:5").await.unwrap() })
        .await
        .unwrap();
    let request = tokio::spawn(app.clone().oneshot(post_to("/orders/5/pay")));
    tokio::time::sleep(Duration::from_millis(200)).await;
    held.release().await.unwrap();
    let response = request.await.unwrap().unwrap();
    assert_eq!(
        response.status(),
        StatusCode::OK,
        "the request did not wait"
    );

    // The layer's own `wait` wins over the config's.
    let (app, _orders) = orders_app(
        DistributedLockLayer::new(locker.clone(), path_key("order:<id>")).wait(Duration::ZERO),
    );
    let holder = locker.clone();
    let held = tokio::spawn(async move { holder.lock("order:5").await.unwrap() })
        .await
        .unwrap();
    let response = app.oneshot(post_to("/orders/5/pay")).await.unwrap();
    assert_eq!(response.status(), StatusCode::LOCKED);
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_follows_the_observed_holds_not_the_ttl() {
    // Handlers hold the lock about 300 ms under a 10 s ttl: a refused client is told to come
    // back in 1 s (the floor), not in 10.
    let (inside, mut entered) = tokio::sync::mpsc::unbounded_channel();
    let handler = move || {
        let inside = inside.clone();
        async move {
            inside.send(()).unwrap();
            tokio::time::sleep(Duration::from_millis(300)).await;
            "done"
        }
    };
    let app = Router::new()
        .route("/jobs/{id}", post(handler))
        .route_layer(
            DistributedLockLayer::new(Locker::memory(), path_key("job:<id>"))
                .ttl(Duration::from_secs(10))
                .wait(Duration::ZERO),
        );
    let first = app.clone().oneshot(post_to("/jobs/1")).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    entered.recv().await.unwrap();

    let running = tokio::spawn(app.clone().oneshot(post_to("/jobs/1")));
    entered.recv().await.unwrap();
    let refused = app.clone().oneshot(post_to("/jobs/1")).await.unwrap();
    assert_eq!(refused.status(), StatusCode::LOCKED);
    assert_eq!(refused.headers()["retry-after"], "1");
    assert_eq!(running.await.unwrap().unwrap().status(), StatusCode::OK);
}
