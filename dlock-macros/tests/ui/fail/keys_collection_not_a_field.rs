use dlock_core::{Error, distributed_lock};

#[distributed_lock(keys = ["sku:<sku>" for sku in skus.iter().rev()])]
async fn ship(skus: Vec<String>) -> Result<(), Error> {
    let _ = skus;
    Ok(())
}

fn main() {
    let _ = ship(Vec::new());
}
