//! A small orders service: paying an order takes the lock `order:<id>` for the duration of
//! the handler, through `DistributedLockLayer` on an axum route.
//!
//! Run with: `cargo run -p dlock-examples --bin orders_http` (memory backend; set `DLOCK_URL`
//! for another one, `PORT` to choose the port). Then, in another shell:
//!
//! ```text
//! curl -X POST localhost:3000/orders/42/pay & curl -X POST localhost:3000/orders/42/pay
//! ```
//!
//! One answers `200 paid order 42`, the other `423 Locked` (with `Retry-After`) because the
//! first still holds the order. `POST /orders/42/pay-or-wait` waits up to 5 s instead, so both
//! succeed one after the other.

use std::process::ExitCode;
use std::time::Duration;

use axum::Router;
use axum::extract::Path;
use axum::routing::post;
use dlock_core::{DlockConfig, Error, Locker};
use dlock_tower::{DistributedLockLayer, path_key};

/// Settles a payment; slow on purpose, so concurrent requests meet the lock.
async fn pay(Path(id): Path<u64>) -> String {
    tokio::time::sleep(Duration::from_millis(500)).await;
    format!("paid order {id}\n")
}

fn app(locker: &Locker) -> Router {
    let key = path_key("order:<id>");
    key.check_route("/orders/{id}/pay")
        .expect("template matches the route");
    // The layer takes the Locker's configured wait (until free, unless the config bounds it);
    // this route answers at once instead.
    let no_wait = DistributedLockLayer::new(locker.clone(), key.clone())
        .ttl(Duration::from_secs(10))
        .wait(Duration::ZERO);
    let wait = no_wait.clone().wait(Duration::from_secs(5));
    Router::new()
        .route("/orders/{id}/pay", post(pay).route_layer(no_wait))
        .route("/orders/{id}/pay-or-wait", post(pay).route_layer(wait))
}

async fn run() -> Result<(), Error> {
    let config = DlockConfig::from_env()?;
    let locker = Locker::connect(&config).await?;
    let port = std::env::var("PORT").unwrap_or_else(|_| "3000".to_owned());
    let listener = tokio::net::TcpListener::bind(format!("127.0.0.1:{port}"))
        .await
        .map_err(|e| Error::config("PORT", &port, e.to_string()))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::unavailable("http", e))?;
    println!(
        "orders service on {}: listening on http://{addr}",
        config.backend
    );
    axum::serve(listener, app(&locker))
        .await
        .map_err(|e| Error::unavailable("http", e))
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => dlock_examples::report_failure("orders_http", &error),
    }
}
