use dlock_core::{Error, distributed_lock};

#[distributed_lock(keys = ["order:<id>", "sku:<sku>"])]
async fn ship(id: u64, skus: Vec<String>) -> Result<(), Error> {
    let _ = (id, skus);
    Ok(())
}

fn main() {
    let _ = ship(1, Vec::new());
}
