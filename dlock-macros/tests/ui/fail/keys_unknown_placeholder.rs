use dlock_core::{Error, distributed_lock};

#[distributed_lock(keys = ["account:<from>", "account:<too>"])]
async fn transfer(from: u64, to: u64) -> Result<(), Error> {
    let _ = (from, to);
    Ok(())
}

fn main() {
    let _ = transfer(1, 2);
}
