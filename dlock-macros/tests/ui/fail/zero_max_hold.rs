use dlock_core::{Error, distributed_lock};

#[distributed_lock(key = "report:<day>", max_hold = "0s")]
async fn nightly(day: u32) -> Result<u32, Error> {
    Ok(day)
}

fn main() {
    let _ = nightly(1);
}
