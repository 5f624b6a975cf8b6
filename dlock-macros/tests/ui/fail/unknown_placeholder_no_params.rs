use dlock_core::{Error, distributed_lock};

#[distributed_lock(key = "report:{day}")]
async fn nightly_report() -> Result<(), Error> {
    Ok(())
}

fn main() {
    let _ = nightly_report();
}
