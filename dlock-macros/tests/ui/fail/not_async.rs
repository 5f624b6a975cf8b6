use dlock_core::{Error, distributed_lock};

#[distributed_lock(key = "order:<id>")]
fn settle(id: u64) -> Result<(), Error> {
    let _ = id;
    Ok(())
}

fn main() {
    settle(1).unwrap();
}
