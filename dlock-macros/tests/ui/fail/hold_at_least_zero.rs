use dlock_core::{Error, distributed_lock};

#[distributed_lock(key = "cleanup", hold_at_least = "0s")]
async fn cleanup() -> Result<(), Error> {
    Ok(())
}

fn main() {
    let _ = cleanup();
}
