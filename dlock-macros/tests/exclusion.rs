//! Mutual exclusion through `#[distributed_lock]`: callers with the same key take turns, callers
//! with different keys run at once. Exclusion is detected with a non-atomic read-sleep-write
//! (a lost update shows up in the final count), never with an atomic counter.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use dlock_core::{Error, Locker, distributed_lock};
use tokio::sync::Barrier;

use support::within_10s;

/// Balances per account, updated with a read, a sleep and a write: two overlapping updates
/// of one account lose one of them.
#[derive(Debug, Default)]
struct Ledger {
    balances: Mutex<HashMap<u64, u64>>,
    /// How many bodies of one account were inside at once, at most (a second detector).
    inside: Mutex<HashMap<u64, (u32, u32)>>,
}

impl Ledger {
    fn read(&self, account: u64) -> u64 {
        *self.balances.lock().unwrap().get(&account).unwrap_or(&0)
    }

    fn write(&self, account: u64, value: u64) {
        self.balances.lock().unwrap().insert(account, value);
    }

    fn enter(&self, account: u64) {
        let mut inside = self.inside.lock().unwrap();
        let (now, max) = inside.entry(account).or_default();
        *now += 1;
        *max = (*max).max(*now);
    }

    fn leave(&self, account: u64) {
        self.inside.lock().unwrap().get_mut(&account).unwrap().0 -= 1;
    }

    fn max_inside(&self, account: u64) -> u32 {
        self.inside.lock().unwrap()[&account].1
    }

    /// The unprotected read-sleep-write.
    async fn deposit_unprotected(&self, account: u64) {
        self.enter(account);
        let before = self.read(account);
        tokio::time::sleep(Duration::from_millis(1)).await;
        self.write(account, before + 1);
        self.leave(account);
    }
}

#[distributed_lock(key = "account:<account>", locker = locker)]
async fn deposit(locker: &Locker, ledger: &Ledger, account: u64) -> Result<(), Error> {
    ledger.deposit_unprotected(account).await;
    Ok(())
}

const TASKS: u64 = 8;
const ROUNDS: u64 = 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tasks_calling_with_the_same_id_take_turns() {
    let locker = Locker::memory();
    let ledger = Arc::new(Ledger::default());
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (locker, ledger) = (locker.clone(), Arc::clone(&ledger));
            tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    deposit(&locker, &ledger, 7).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        within_10s("depositor", task).await.unwrap();
    }
    assert_eq!(ledger.read(7), TASKS * ROUNDS, "no update lost");
    assert_eq!(ledger.max_inside(7), 1, "never two bodies at once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_detector_sees_overlap_without_the_lock() {
    // The same read-sleep-write without the attribute, with every task reading before any
    // writes (a barrier, not luck): updates are lost, so the test above would notice.
    let ledger = Arc::new(Ledger::default());
    let barrier = Arc::new(Barrier::new(TASKS as usize));
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (ledger, barrier) = (Arc::clone(&ledger), Arc::clone(&barrier));
            tokio::spawn(async move {
                let before = ledger.read(7);
                barrier.wait().await;
                ledger.write(7, before + 1);
            })
        })
        .collect();
    for task in tasks {
        within_10s("unprotected writer", task).await.unwrap();
    }
    assert_eq!(
        ledger.read(7),
        1,
        "every task read 0: all but one update lost"
    );
}

#[distributed_lock(key = "account:<account>", locker = locker)]
async fn meet(locker: &Locker, account: u64, barrier: &Barrier) -> Result<(), Error> {
    // Returns only once every caller is inside its body at the same time.
    barrier.wait().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn different_ids_do_not_exclude_each_other() {
    let locker = Locker::memory();
    let barrier = Arc::new(Barrier::new(3));
    let tasks: Vec<_> = [1, 2, 3]
        .into_iter()
        .map(|account| {
            let (locker, barrier) = (locker.clone(), Arc::clone(&barrier));
            tokio::spawn(async move { meet(&locker, account, &barrier).await })
        })
        .collect();
    for task in tasks {
        // Had the ids excluded each other, the barrier would never open.
        within_10s("three accounts inside at once", task)
            .await
            .unwrap()
            .unwrap();
    }
}

#[async_trait]
trait Accounts {
    async fn deposit(&self, account: u64) -> Result<(), Error>;
}

#[derive(Debug)]
struct Bank {
    locker: Locker,
    ledger: Ledger,
}

#[async_trait]
impl Accounts for Bank {
    #[distributed_lock(key = "account:<account>", locker = &self.locker)]
    async fn deposit(&self, account: u64) -> Result<(), Error> {
        self.ledger.deposit_unprotected(account).await;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn async_trait_methods_exclude_too() {
    let bank = Arc::new(Bank {
        locker: Locker::memory(),
        ledger: Ledger::default(),
    });
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let bank = Arc::clone(&bank);
            tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    bank.deposit(3).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        within_10s("depositor", task).await.unwrap();
    }
    assert_eq!(bank.ledger.read(3), TASKS * ROUNDS, "no update lost");
    assert_eq!(bank.ledger.max_inside(3), 1, "never two bodies at once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn separate_lockers_on_one_table_exclude_like_separate_processes() {
    // Two Lockers connected to the same named memory table are two clients of one server.
    let a = Locker::connect_url("memory://exclusion-two-clients")
        .await
        .unwrap();
    let b = Locker::connect_url("memory://exclusion-two-clients")
        .await
        .unwrap();
    let ledger = Arc::new(Ledger::default());
    let tasks: Vec<_> = [a, b]
        .into_iter()
        .map(|locker| {
            let ledger = Arc::clone(&ledger);
            tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    deposit(&locker, &ledger, 11).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        within_10s("client", task).await.unwrap();
    }
    assert_eq!(ledger.read(11), 2 * ROUNDS);
    assert_eq!(ledger.max_inside(11), 1);
}
