use dlock_core::{Error, distributed_lock};

// A fire is skipped when busy, never waited for.
#[distributed_lock(key = "report:<day>", once = "48h", wait = "5s")]
async fn report(day: u32) -> Result<(), Error> {
    let _ = day;
    Ok(())
}

fn main() {
    let _ = report(1);
}
