use async_trait::async_trait;
use dlock_core::{Error, distributed_lock};

#[async_trait]
trait Orders {
    async fn settle(&self, id: u64) -> Result<(), Error>;
}

struct Service;

#[async_trait]
impl Orders for Service {
    #[distributed_lock(key = "order:<order_id>")]
    async fn settle(&self, id: u64) -> Result<(), Error> {
        let _ = id;
        Ok(())
    }
}

fn main() {
    let _ = Service.settle(1);
}
