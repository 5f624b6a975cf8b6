//! Without `locker = ..`, the attribute locks through `Locker::global()`. (Its own test binary:
//! the global Locker is process-wide.)

use dlock_core::{Error, Locker, distributed_lock};

#[distributed_lock(key = "order:<id>", ttl = "10s")]
async fn settle(id: u64, ran: &mut bool) -> Result<u64, Error> {
    *ran = true;
    Ok(id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_global_locker_is_used_and_required() {
    let mut ran = false;
    let outcome = settle(1, &mut ran).await;
    assert!(matches!(outcome, Err(Error::NoGlobalLocker)), "{outcome:?}");
    assert!(!ran, "no lock, no body");

    let locker = Locker::memory();
    locker.install_global();
    assert_eq!(settle(2, &mut ran).await.unwrap(), 2);
    assert!(ran);

    // It really went through the installed Locker: its table has the key's grant history.
    let guard = locker.lock("order:2").await.unwrap();
    assert!(
        guard.fencing_token().unwrap() >= 2,
        "the attribute's grant came first"
    );
}
