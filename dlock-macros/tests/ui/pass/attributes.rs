//! Doc comments, outer and inner attributes and `pub` are kept; `mut` parameters and early
//! `return` / `?` in the body behave as without the attribute.
#![deny(unused_mut, unused_variables)]

use dlock_core::{Error, Locker, distributed_lock};

/// Settles an order.
#[must_use = "the receipt says whether it worked"]
#[distributed_lock(key = "order:<id>", locker = Locker::memory())]
pub async fn settle(id: u64, mut attempts: u32) -> Result<u32, Error> {
    #![allow(clippy::needless_return)]
    attempts += 1;
    if id == 0 {
        return Ok(attempts);
    }
    let parsed: u32 = "12".parse().map_err(|_| Error::NoGlobalLocker)?;
    Ok(parsed + attempts)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    assert_eq!(settle(0, 1).await.unwrap(), 2);
    assert_eq!(settle(1, 1).await.unwrap(), 14);
}
