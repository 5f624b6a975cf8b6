use dlock_core::{Error, distributed_lock};

const ORDER_KEY: &str = "order";

#[distributed_lock(key = ORDER_KEY)]
async fn settle(id: u64) -> Result<u64, Error> {
    Ok(id)
}

fn main() {
    let _ = settle(1);
}
