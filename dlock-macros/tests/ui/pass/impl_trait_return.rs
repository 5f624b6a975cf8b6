//! `Result<impl Trait, E>` return types.
use std::fmt::Display;

use dlock_core::{Error, Locker, distributed_lock};

#[distributed_lock(key = "order:<id>", locker = Locker::memory())]
async fn describe(id: u64) -> Result<impl Display, Error> {
    Ok(format!("order {id}"))
}

#[distributed_lock(key = "order:<id>", locker = Locker::memory())]
async fn lines(id: u64) -> Result<impl Iterator<Item = u64> + Send, Error> {
    if id == 0 {
        return Err(Error::NoGlobalLocker);
    }
    Ok((0..id).map(|n| n * 2))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    assert_eq!(describe(1).await.unwrap().to_string(), "order 1");
    assert_eq!(lines(3).await.unwrap().collect::<Vec<_>>(), [0, 2, 4]);
    assert!(lines(0).await.is_err());
}
