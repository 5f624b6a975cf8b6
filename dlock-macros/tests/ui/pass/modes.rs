//! `mode = "read"` locks shared (two readers overlap), `mode = "write"` exclusive, and
//! `permits = N` takes one of N permits; the guard's mode is what was asked for.
use std::sync::Arc;
use std::time::Duration;

use dlock_core::{Error, LockMode, Locker, distributed_lock};

#[distributed_lock(key = "report:<id>", mode = "read", locker = locker.clone())]
async fn read(locker: Locker, id: u64, both_in: Arc<tokio::sync::Barrier>) -> Result<u64, Error> {
    // Both readers hold the lock here at once, or this never returns.
    both_in.wait().await;
    Ok(id)
}

#[distributed_lock(key = "report:<id>", mode = "write", wait = "0s", locker = locker)]
async fn write(locker: &Locker, id: u64) -> Result<u64, Error> {
    Ok(id)
}

#[distributed_lock(key = "exports", permits = 2, locker = locker)]
async fn export(locker: &Locker) -> Result<LockMode, Error> {
    Ok(locker.lock_as("exports", LockMode::Permit { limit: 2 }).await?.mode())
}

#[tokio::main]
async fn main() {
    let locker = Locker::memory();
    // Two tasks (one task's second read lock would only re-enter its first).
    let both_in = Arc::new(tokio::sync::Barrier::new(2));
    let a = tokio::spawn(read(locker.clone(), 7, Arc::clone(&both_in)));
    let b = tokio::spawn(read(locker.clone(), 7, Arc::clone(&both_in)));
    let (a, b) = tokio::time::timeout(Duration::from_secs(10), async { tokio::join!(a, b) })
        .await
        .expect("two readers did not overlap");
    assert_eq!((a.unwrap().unwrap(), b.unwrap().unwrap()), (7, 7));
    assert_eq!(write(&locker, 7).await.unwrap(), 7);
    // The body holds one permit and takes the second: permits do not re-enter.
    assert_eq!(export(&locker).await.unwrap(), LockMode::Permit { limit: 2 });
}
