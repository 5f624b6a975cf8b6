//! Every argument: `ttl`, `wait` (a duration, `"0s"`, `"forever"`), `watchdog = false`,
//! `max_hold`, `fencing = true`,
//! `locker` as a `Locker`, a `&Locker` or a `Result<Locker>`, `crate`, trailing comma.
use dlock_core::{Error, Locker, distributed_lock};

mod reexport {
    pub use dlock_core as dlock;
}

#[distributed_lock(key = "a:<id>", ttl = "1m 30s", wait = "250ms", watchdog = false, fencing = true, locker = Locker::memory())]
async fn all(id: u64) -> Result<u64, Error> {
    Ok(id)
}

#[distributed_lock(key = "b:<id>", wait = "0s", fencing = false, locker = locker)]
async fn one_attempt(locker: &Locker, id: u64) -> Result<u64, Error> {
    Ok(id)
}

#[distributed_lock(key = "c:<id>", wait = "forever", watchdog = true, max_hold = "1h 30m", locker = Locker::global())]
async fn forever(id: u64) -> Result<u64, Error> {
    Ok(id)
}

#[distributed_lock(key = "d:<id>", locker = Locker::memory(), crate = "crate::reexport::dlock")]
async fn renamed_crate(id: u64) -> Result<u64, Error> {
    Ok(id)
}

#[distributed_lock(key = "e:<id>", locker = Locker::memory(), crate = ::dlock_core,)]
async fn crate_path_and_trailing_comma(id: u64) -> Result<u64, Error> {
    Ok(id)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    Locker::memory().install_global();
    assert_eq!(all(1).await.unwrap(), 1);
    assert_eq!(one_attempt(&Locker::memory(), 2).await.unwrap(), 2);
    assert_eq!(forever(3).await.unwrap(), 3);
    assert_eq!(renamed_crate(4).await.unwrap(), 4);
    assert_eq!(crate_path_and_trailing_comma(5).await.unwrap(), 5);
}
