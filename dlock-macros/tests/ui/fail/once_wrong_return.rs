use dlock_core::{Error, distributed_lock};

// A skipped fire must have a value to return: `Result<Option<T>, E>` or `Result<(), E>`.
#[distributed_lock(key = "report:<day>", once = "48h")]
async fn report(day: u32) -> Result<u64, Error> {
    Ok(u64::from(day))
}

fn main() {
    let _ = report(1);
}
