//! Return types: `Result<T, E>` with `E: From<dlock_core::Error>`, path-qualified `Result`s,
//! and aliases whose name ends in `Result`.
use dlock_core::{Locker, distributed_lock};

#[derive(Debug)]
pub enum AppError {
    Lock(dlock_core::Error),
    Invalid,
}

impl From<dlock_core::Error> for AppError {
    fn from(error: dlock_core::Error) -> Self {
        Self::Lock(error)
    }
}

pub type AppResult<T> = Result<T, AppError>;

#[distributed_lock(key = "a:<id>", locker = Locker::memory())]
async fn app_error(id: u64) -> Result<u64, AppError> {
    if id == 0 {
        return Err(AppError::Invalid);
    }
    Ok(id)
}

#[distributed_lock(key = "b:<id>", locker = Locker::memory())]
async fn alias(id: u64) -> AppResult<u64> {
    let checked = app_error(id).await?;
    Ok(checked)
}

#[distributed_lock(key = "c:<id>", locker = Locker::memory())]
async fn core_result(id: u64) -> dlock_core::Result<u64> {
    Ok(id)
}

#[distributed_lock(key = "d:<id>", locker = Locker::memory())]
async fn std_result(id: u64) -> std::result::Result<u64, Box<dyn std::error::Error + Send + Sync>> {
    Ok(id)
}

#[distributed_lock(key = "e:<id>", locker = Locker::memory())]
async fn unit(id: u64) -> Result<(), dlock_core::Error> {
    let _ = id;
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    assert_eq!(app_error(1).await.unwrap(), 1);
    assert!(matches!(app_error(0).await, Err(AppError::Invalid)));
    assert_eq!(alias(2).await.unwrap(), 2);
    assert!(matches!(alias(0).await, Err(AppError::Invalid)));
    assert_eq!(core_result(3).await.unwrap(), 3);
    assert_eq!(std_result(4).await.unwrap(), 4);
    unit(5).await.unwrap();
}
