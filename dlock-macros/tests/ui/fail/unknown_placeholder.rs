use dlock_core::{Error, distributed_lock};

#[distributed_lock(key = "order:<idd>", ttl = "10s")]
async fn settle(id: u64, amount: i64) -> Result<i64, Error> {
    let _ = id;
    Ok(amount)
}

fn main() {
    let _ = settle(1, 2);
}
