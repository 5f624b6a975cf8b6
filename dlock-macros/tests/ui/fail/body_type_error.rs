use dlock_core::{Error, distributed_lock};

#[distributed_lock(key = "order:<id>")]
async fn settle(id: u64) -> Result<String, Error> {
    Ok(id)
}

fn main() {
    let _ = settle(1);
}
