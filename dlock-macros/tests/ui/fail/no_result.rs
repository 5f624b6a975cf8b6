use dlock_core::distributed_lock;

#[distributed_lock(key = "order:<id>")]
async fn settle(id: u64) -> u64 {
    id
}

fn main() {
    let _ = settle(1);
}
