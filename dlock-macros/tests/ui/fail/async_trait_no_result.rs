use async_trait::async_trait;
use dlock_core::distributed_lock;

#[async_trait]
trait Orders {
    async fn settle(&self, id: u64) -> u64;
}

struct Service;

#[async_trait]
impl Orders for Service {
    #[distributed_lock(key = "order:<id>")]
    async fn settle(&self, id: u64) -> u64 {
        id
    }
}

fn main() {
    let _ = Service.settle(1);
}
