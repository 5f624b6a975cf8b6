use dlock_core::{Error, distributed_lock};

#[distributed_lock(keys = "account:<from>")]
async fn transfer(from: u64) -> Result<(), Error> {
    let _ = from;
    Ok(())
}

fn main() {
    let _ = transfer(1);
}
