use dlock_core::{Error, distributed_lock};

struct Order {
    skus: Vec<String>,
}

#[distributed_lock(keys = ["sku:<sku>" for sku in orders.skus])]
async fn ship(order: &Order) -> Result<(), Error> {
    let _ = &order.skus;
    Ok(())
}

fn main() {
    let _ = ship(&Order { skus: Vec::new() });
}
