//! Methods of `#[async_trait]` impls (`Send` and `?Send`), with `&self` and `&mut self`.
use async_trait::async_trait;
use dlock_core::{Error, Locker, current_lock, distributed_lock};

#[async_trait]
pub trait Orders {
    async fn settle(&self, id: u64, amount: i64) -> Result<String, Error>;
    async fn bump(&mut self, id: u64) -> Result<u64, Error>;
}

pub struct Service {
    locker: Locker,
    bumps: u64,
}

#[async_trait]
impl Orders for Service {
    #[distributed_lock(key = "order:<id>", ttl = "10s", locker = &self.locker)]
    async fn settle(&self, id: u64, amount: i64) -> Result<String, Error> {
        let lock = current_lock().expect("the body runs under the lock");
        Ok(format!("{} {amount}", lock.key()))
    }

    #[distributed_lock(key = "order:{id}", locker = self.locker.clone())]
    async fn bump(&mut self, id: u64) -> Result<u64, Error> {
        self.bumps += id;
        Ok(self.bumps)
    }
}

#[async_trait(?Send)]
pub trait LocalJobs {
    async fn run(&self, name: &str) -> Result<usize, Error>;
}

#[async_trait(?Send)]
impl LocalJobs for std::rc::Rc<Locker> {
    #[distributed_lock(key = "job:<name>", locker = &**self)]
    async fn run(&self, name: &str) -> Result<usize, Error> {
        Ok(name.len())
    }
}

fn assert_send<T: Send>(_: &T) {}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut service = Service {
        locker: Locker::memory(),
        bumps: 0,
    };
    let settle = service.settle(42, 5);
    assert_send(&settle);
    assert_eq!(settle.await.unwrap(), "order:42 5");
    assert_eq!(service.bump(2).await.unwrap(), 2);
    assert_eq!(service.bump(3).await.unwrap(), 5);
    let local = std::rc::Rc::new(Locker::memory());
    assert_eq!(local.run("abc").await.unwrap(), 3);
}
