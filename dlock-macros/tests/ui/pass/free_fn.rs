//! The design card's line on a free fn, with the global Locker.
use dlock_core::{Error, Locker, distributed_lock};

#[derive(Debug, PartialEq)]
pub struct Receipt {
    id: u64,
    amount: i64,
}

#[distributed_lock(key = "order:<id>", ttl = "10s")]
async fn settle(id: u64, amount: i64) -> Result<Receipt, Error> {
    Ok(Receipt { id, amount })
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    Locker::memory().install_global();
    assert_eq!(settle(42, 7).await.unwrap(), Receipt { id: 42, amount: 7 });
}
