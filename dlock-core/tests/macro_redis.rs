//! `#[distributed_lock]` against a real `redis-server` (started by the harness): two Lockers —
//! two clients, as two processes would be — take turns on one key, a caller gives up with
//! `Busy` after `wait`, and the body sees the fencing tokens it asked for.
//!
//! Needs the `macros`, `redis` and `harness` features (the README's test command enables all).
#![cfg(all(feature = "macros", feature = "redis"))]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlock_core::{Error, Locker, current_lock, distributed_lock};
use dlock_harness::RedisServer;

/// Balances updated with a read, a sleep and a write: overlapping updates lose one.
#[derive(Debug, Default)]
struct Ledger {
    balances: Mutex<HashMap<u64, u64>>,
    tokens: Mutex<Vec<u64>>,
}

#[distributed_lock(key = "account:<account>", ttl = "5s", fencing = true, locker = locker)]
async fn deposit(locker: &Locker, ledger: &Ledger, account: u64) -> Result<(), Error> {
    let before = *ledger.balances.lock().unwrap().get(&account).unwrap_or(&0);
    tokio::time::sleep(Duration::from_millis(2)).await;
    ledger.balances.lock().unwrap().insert(account, before + 1);
    let token = current_lock().and_then(|lock| lock.fencing_token());
    ledger
        .tokens
        .lock()
        .unwrap()
        .push(token.expect("asked for a fencing token"));
    Ok(())
}

#[distributed_lock(key = "account:<account>", locker = locker, wait = "100ms")]
async fn impatient(locker: &Locker, account: u64) -> Result<(), Error> {
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_attribute_excludes_across_redis_clients() {
    let server = RedisServer::start()
        .await
        .expect("redis-server (scripts/install-test-deps.sh)");
    let clients = [
        Locker::connect_url(&server.url()).await.unwrap(),
        Locker::connect_url(&server.url()).await.unwrap(),
    ];
    let ledger = Arc::new(Ledger::default());
    let tasks: Vec<_> = clients
        .iter()
        .flat_map(|locker| [locker.clone(), locker.clone()])
        .map(|locker| {
            let ledger = Arc::clone(&ledger);
            tokio::spawn(async move {
                for _ in 0..10 {
                    deposit(&locker, &ledger, 1).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("depositors finish")
            .unwrap();
    }
    assert_eq!(ledger.balances.lock().unwrap()[&1], 40, "no update lost");
    let tokens = ledger.tokens.lock().unwrap().clone();
    assert!(
        tokens.windows(2).all(|pair| pair[0] < pair[1]),
        "tokens strictly increase in grant order: {tokens:?}"
    );

    // One client holds the key: the other's annotated call gives up after `wait`.
    let held = clients[0].lock("account:2").await.unwrap();
    match impatient(&clients[1], 2).await {
        Err(Error::Busy { key, .. }) => assert_eq!(key, "account:2"),
        other => panic!("expected Busy, got {other:?}"),
    }
    held.release().await.unwrap();
    impatient(&clients[1], 2).await.unwrap();
}
