use dlock_core::{Error, distributed_lock};

#[distributed_lock(keys = ["report:<day>"], once = "48h")]
async fn report(day: u32) -> Result<(), Error> {
    let _ = day;
    Ok(())
}

fn main() {
    let _ = report(1);
}
