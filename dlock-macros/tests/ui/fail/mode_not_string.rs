use dlock_core::{Error, distributed_lock};

#[distributed_lock(key = "order:<id>", mode = read)]
async fn settle(id: u64) -> Result<u64, Error> {
    Ok(id)
}

fn main() {
    let _ = settle(1);
}
