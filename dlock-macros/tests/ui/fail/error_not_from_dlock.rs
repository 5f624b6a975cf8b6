use dlock_core::distributed_lock;

#[derive(Debug)]
struct AppError;

#[distributed_lock(key = "order:<id>")]
async fn settle(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

fn main() {
    let _ = settle(1);
}
