use dlock_core::distributed_lock;

#[distributed_lock(key = "order:<id>")]
async fn settle(id: u64) {
    let _ = id;
}

fn main() {
    let _ = settle(1);
}
