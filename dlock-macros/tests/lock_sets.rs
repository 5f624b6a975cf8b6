//! Lock sets through `#[distributed_lock(keys = [..])]`: a transfer between two accounts and an
//! order over its SKUs. Opposite orders of the same accounts never deadlock, and overlapping
//! orders never update one SKU at once — detected with a non-atomic read-sleep-write, never
//! with an atomic counter.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlock_core::{Error, Locker, distributed_lock};

use support::within_10s;

/// Stock per SKU and balances per account, updated with a read, a sleep and a write: two
/// overlapping updates of one entry lose one of them.
#[derive(Debug, Default)]
struct Books {
    entries: Mutex<HashMap<String, i64>>,
}

impl Books {
    async fn add(&self, entry: &str, amount: i64) {
        let before = *self.entries.lock().unwrap().get(entry).unwrap_or(&0);
        tokio::time::sleep(Duration::from_millis(1)).await;
        self.entries
            .lock()
            .unwrap()
            .insert(entry.to_owned(), before + amount);
    }

    fn get(&self, entry: &str) -> i64 {
        *self.entries.lock().unwrap().get(entry).unwrap_or(&0)
    }
}

#[distributed_lock(keys = ["account:<from>", "account:<to>"], wait = "10s", locker = locker)]
async fn transfer(locker: &Locker, books: &Books, from: &str, to: &str) -> Result<(), Error> {
    books.add(&format!("account:{from}"), -1).await;
    books.add(&format!("account:{to}"), 1).await;
    Ok(())
}

struct Order {
    id: u64,
    skus: Vec<String>,
}

#[distributed_lock(keys = ["order:<order.id>", "sku:<sku>" for sku in order.skus], locker = locker)]
async fn ship(locker: &Locker, books: &Books, order: &Order) -> Result<usize, Error> {
    for sku in &order.skus {
        books.add(&format!("sku:{sku}"), -1).await;
    }
    Ok(order.skus.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_in_opposite_directions_never_deadlock_nor_lose_money() {
    let (locker, books) = (Locker::memory(), Arc::new(Books::default()));
    let mut tasks = Vec::new();
    for worker in 0..4 {
        let (locker, books) = (locker.clone(), Arc::clone(&books));
        tasks.push(tokio::spawn(async move {
            let (from, to) = if worker % 2 == 0 {
                ("alice", "bob")
            } else {
                ("bob", "alice")
            };
            for _ in 0..50 {
                transfer(&locker, &books, from, to).await.expect("transfer");
            }
        }));
    }
    within_10s("the workers", async {
        for task in tasks {
            task.await.expect("a worker panicked");
        }
    })
    .await;
    // Half the transfers go each way: nothing lost, nothing made.
    assert_eq!(books.get("account:alice"), 0);
    assert_eq!(books.get("account:bob"), 0);
    assert_eq!(locker.watched_leases(), 0, "a set was left held");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_lock_one_key_per_sku_and_overlapping_orders_take_turns() {
    let (locker, books) = (Locker::memory(), Arc::new(Books::default()));
    let mut tasks = Vec::new();
    for id in 0..6_u64 {
        let (locker, books) = (locker.clone(), Arc::clone(&books));
        // Every order ships sku-1; the others overlap pairwise, in both orders.
        let skus = if id % 2 == 0 {
            vec!["sku-2".to_owned(), "sku-1".to_owned(), "sku-3".to_owned()]
        } else {
            vec!["sku-3".to_owned(), "sku-1".to_owned(), "sku-2".to_owned()]
        };
        tasks.push(tokio::spawn(async move {
            let order = Order { id, skus };
            for _ in 0..10 {
                assert_eq!(ship(&locker, &books, &order).await.expect("ship"), 3);
            }
        }));
    }
    within_10s("the workers", async {
        for task in tasks {
            task.await.expect("a worker panicked");
        }
    })
    .await;
    for sku in ["sku-1", "sku-2", "sku-3"] {
        assert_eq!(
            books.get(&format!("sku:{sku}")),
            -60,
            "lost updates on {sku}"
        );
    }
}

#[tokio::test]
async fn a_busy_member_fails_the_call_before_the_body_runs() {
    let (locker, books) = (Locker::memory(), Books::default());
    let held = locker.lock("sku:b").await.expect("acquire");
    let other = locker.clone();
    let outcome = tokio::spawn(async move {
        let order = Order { id: 9, skus: vec!["a".into(), "b".into()] };
        #[distributed_lock(keys = ["sku:<sku>" for sku in order.skus], wait = "50ms", locker = locker)]
        async fn ship_quickly(locker: &Locker, order: &Order) -> Result<(), Error> {
            unreachable!("the body ran with `sku:b` held elsewhere: {}", order.id)
        }
        ship_quickly(&other, &order).await
    })
    .await
    .expect("the task ran");
    assert!(
        matches!(outcome, Err(Error::Busy { ref key, .. }) if key == "sku:b"),
        "{outcome:?}"
    );
    assert_eq!(books.get("sku:a"), 0);
    assert!(
        locker.try_lock("sku:a").await.is_ok(),
        "the set kept `sku:a`"
    );
    drop(held);
}
