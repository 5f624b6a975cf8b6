//! The future of an annotated fn is `Send` when its body is (compile-time assertions), so it
//! can be spawned on a multi-thread runtime.
use std::fmt::Display;
use std::future::Future;

use dlock_core::{Error, Locker, distributed_lock};

fn assert_send<F: Future + Send>(future: F) -> F {
    future
}

#[distributed_lock(key = "order:<id>", ttl = "10s")]
async fn settle(id: u64, amount: i64) -> Result<i64, Error> {
    tokio::task::yield_now().await;
    Ok(amount + id as i64)
}

pub struct Service {
    locker: Locker,
}

impl Service {
    #[distributed_lock(key = "order:<id>", locker = &self.locker)]
    async fn method(&self, id: u64) -> Result<u64, Error> {
        tokio::task::yield_now().await;
        Ok(id)
    }
}

#[distributed_lock(key = "job:<name>", locker = Locker::memory())]
async fn generic<N: Display + Send + Sync>(name: N) -> Result<String, Error> {
    tokio::task::yield_now().await;
    Ok(name.to_string())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    Locker::memory().install_global();
    let service = std::sync::Arc::new(Service {
        locker: Locker::memory(),
    });
    let a = tokio::spawn(assert_send(settle(1, 2)));
    let b = tokio::spawn(async move { assert_send(service.method(3)).await });
    let c = tokio::spawn(assert_send(generic("n")));
    assert_eq!(a.await.unwrap().unwrap(), 3);
    assert_eq!(b.await.unwrap().unwrap(), 3);
    assert_eq!(c.await.unwrap().unwrap(), "n");
}
