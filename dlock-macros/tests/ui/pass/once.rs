//! `once` on the two return types a skipped fire can answer, and `hold_at_least`.

use dlock_core::{Error, Locker, distributed_lock};

#[distributed_lock(key = "report:<day>", once = "48h", locker = Locker::memory())]
async fn report(day: u32) -> Result<Option<u32>, Error> {
    Ok(Some(day))
}

#[distributed_lock(key = "cleanup:<day>", once = "1d", ttl = "30s", locker = Locker::memory())]
async fn cleanup(day: u32) -> Result<(), Error> {
    let _ = day;
    Ok(())
}

#[distributed_lock(key = "poll", hold_at_least = "1m", wait = "0s", locker = Locker::memory())]
async fn poll() -> Result<(), Error> {
    Ok(())
}

fn main() {
    let _ = (report(1), cleanup(1), poll());
}
