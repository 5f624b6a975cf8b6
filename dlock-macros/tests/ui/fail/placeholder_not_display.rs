use dlock_core::{Error, distributed_lock};

struct OrderId(u64);

#[distributed_lock(key = "order:<id>")]
async fn settle(id: OrderId) -> Result<u64, Error> {
    Ok(id.0)
}

fn main() {
    let _ = settle(OrderId(1));
}
