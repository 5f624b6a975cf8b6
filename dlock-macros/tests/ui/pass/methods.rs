//! `&self`, `&mut self` and `self` methods, with `locker = &self.locker` and `<self.field>`.
use dlock_core::{Error, Locker, distributed_lock};

pub struct Inventory {
    locker: Locker,
    warehouse: String,
    stock: u32,
}

impl Inventory {
    #[distributed_lock(key = "stock:<self.warehouse>:<sku>", locker = &self.locker)]
    async fn count(&self, sku: &str) -> Result<u32, Error> {
        Ok(self.stock)
    }

    #[distributed_lock(key = "stock:<self.warehouse>:<sku>", locker = &self.locker, ttl = "5s")]
    async fn take(&mut self, sku: &str, n: u32) -> Result<u32, Error> {
        self.stock -= n;
        Ok(self.stock)
    }

    #[distributed_lock(key = "stock:<self.warehouse>", locker = self.locker.clone())]
    async fn close(self) -> Result<String, Error> {
        Ok(self.warehouse)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut inventory = Inventory {
        locker: Locker::memory(),
        warehouse: "north".into(),
        stock: 10,
    };
    assert_eq!(inventory.count("sku-1").await.unwrap(), 10);
    assert_eq!(inventory.take("sku-1", 3).await.unwrap(), 7);
    assert_eq!(inventory.close().await.unwrap(), "north");
}
