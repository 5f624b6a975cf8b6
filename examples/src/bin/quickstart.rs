//! dlock in a few seconds: mutual exclusion, the watchdog, reentrancy, fencing, lost leases.
//!
//! Run with: `cargo run -p dlock-examples --bin quickstart`
//! (memory backend; set `DLOCK_URL` to use another backend).

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dlock_core::backend::Fencing;
use dlock_core::{DlockConfig, Error, Locker};

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => dlock_examples::report_failure("quickstart", &error),
    }
}

async fn run() -> Result<(), Error> {
    let config = DlockConfig::from_env()?;
    let locker = Locker::connect(&config).await?;
    println!("dlock quickstart on `{}`\n", config.backend);

    three_workers_race(&locker).await?;
    watchdog_outlives_ttl(&locker).await?;
    reentrancy_in_one_task(&locker).await?;
    let fenced = fencing_rejects_a_stale_holder(&locker).await?;
    lost_lease_cancels_work(&locker).await?;

    if fenced {
        println!("\nall five demonstrations passed");
    } else {
        println!("\nall four demonstrations this backend can show passed");
    }
    Ok(())
}

/// Three workers settle order 42 five times each; the lock makes each read-modify-write whole.
async fn three_workers_race(locker: &Locker) -> Result<(), Error> {
    println!("1. three workers race for `order:42`");
    let balance = Arc::new(Mutex::new(0_i64));
    let inside = Arc::new(Mutex::new(None::<usize>));
    let mut workers = Vec::new();
    for worker in 1..=3 {
        let (locker, balance, inside) = (locker.clone(), balance.clone(), inside.clone());
        workers.push(tokio::spawn(async move {
            for _ in 0..5 {
                let guard = locker.lock("order:42").await?;
                let previous = inside.lock().unwrap().replace(worker);
                assert_eq!(previous, None, "two workers inside at once");
                let read = *balance.lock().unwrap(); // read ...
                tokio::time::sleep(Duration::from_millis(5)).await; // ... think ...
                *balance.lock().unwrap() = read + 10; // ... write: safe only under the lock
                inside.lock().unwrap().take();
                guard.release().await?;
            }
            println!("   worker {worker} done");
            Ok::<_, Error>(())
        }));
    }
    for worker in workers {
        worker.await.expect("worker panicked")?;
    }
    let balance = *balance.lock().unwrap();
    assert_eq!(balance, 150);
    println!("   balance = {balance} (3 workers x 5 payments x 10): no update lost\n");
    Ok(())
}

/// A 1.5 s job under a 500 ms lease: the watchdog renews it every ttl/3.
async fn watchdog_outlives_ttl(locker: &Locker) -> Result<(), Error> {
    println!("2. a job outlives its ttl thanks to the watchdog");
    let ttl = Duration::from_millis(500);
    let started = Instant::now();
    let guard = locker.lock("report:nightly").ttl(ttl).await?;
    tokio::time::sleep(ttl * 3).await;
    let rival = spawn_try_lock(locker, "report:nightly").await;
    println!(
        "   after {:?} (3x the {ttl:?} ttl) still held: {}; a rival's try_lock: {}",
        started.elapsed(),
        guard.is_held(),
        describe(&rival)
    );
    assert!(guard.is_held() && matches!(rival, Err(Error::Busy { .. })));
    guard.release().await?;
    println!();
    Ok(())
}

/// The task holding a key re-enters it at once; only the outermost release releases.
async fn reentrancy_in_one_task(locker: &Locker) -> Result<(), Error> {
    println!("3. reentrancy in one task");
    let outer = locker.lock("account:7").await?;
    let inner = locker.try_lock("account:7").await?;
    println!(
        "   outer token {:?}, inner nested: {}",
        outer.fencing_token(),
        inner.is_nested()
    );
    inner.release().await?;
    let rival = spawn_try_lock(locker, "account:7").await;
    println!(
        "   after the inner release, another task: {}",
        describe(&rival)
    );
    assert!(matches!(rival, Err(Error::Busy { .. })));
    outer.release().await?;
    let rival = spawn_try_lock(locker, "account:7").await;
    println!(
        "   after the outer release, another task: {}\n",
        describe(&rival)
    );
    assert!(rival.is_ok());
    Ok(())
}

/// A storage service that accepts a write only with the highest fencing token it has seen.
#[derive(Default)]
struct FencedStorage {
    highest_token: u64,
    value: String,
}

impl FencedStorage {
    fn write(&mut self, token: u64, value: &str) -> Result<(), String> {
        if token < self.highest_token {
            return Err(format!(
                "token {token} < {}: stale holder",
                self.highest_token
            ));
        }
        self.highest_token = token;
        self.value = value.to_owned();
        Ok(())
    }
}

/// Client 1 stalls past its lease (think GC pause); client 2 takes over and writes; client 1
/// wakes up and writes with its old token: the storage refuses. `false` if the backend has no
/// tokens to show.
async fn fencing_rejects_a_stale_holder(locker: &Locker) -> Result<bool, Error> {
    println!("4. fencing tokens stop a holder whose lease ran out");
    if locker.capabilities().fencing == Fencing::None {
        println!("   this backend issues no fencing tokens (RedLock cannot): nothing to show\n");
        return Ok(false);
    }
    let mut storage = FencedStorage::default();
    let ttl = Duration::from_millis(200);
    let first = locker
        .lock("file:ledger")
        .ttl(ttl)
        .watchdog(false)
        .fencing(true) // Redis issues tokens only when asked; memory and etcd always do
        .await?;
    let old_token = first.fencing_token().unwrap_or(0);
    tokio::time::sleep(ttl * 2).await; // client 1 stalls; its lease expires
    let second = spawn_lock(locker, "file:ledger").await?;
    println!("   client 2 took over with token {second}");
    storage
        .write(second, "written by client 2")
        .expect("current holder");
    let stale = storage.write(old_token, "written by client 1");
    println!(
        "   client 1 (token {old_token}) writes: {}",
        stale.clone().err().unwrap_or_default()
    );
    assert!(stale.is_err() && storage.value == "written by client 2");
    drop(first);
    println!();
    Ok(true)
}

/// Work under `guard.run` is cancelled as soon as the lease is lost.
async fn lost_lease_cancels_work(locker: &Locker) -> Result<(), Error> {
    println!("5. a lost lease cancels the protected work");
    let ttl = Duration::from_millis(300);
    let guard = locker.lock("stock:sku-9").ttl(ttl).watchdog(false).await?;
    let started = Instant::now();
    let outcome = guard
        .run(async {
            tokio::time::sleep(Duration::from_secs(10)).await;
            "finished"
        })
        .await;
    println!("   after {:?}: {}", started.elapsed(), describe(&outcome));
    assert!(matches!(outcome, Err(Error::LeaseLost { .. })));
    Ok(())
}

async fn spawn_try_lock(locker: &Locker, key: &'static str) -> Result<(), Error> {
    let locker = locker.clone();
    tokio::spawn(async move { locker.try_lock(key).await.map(drop) })
        .await
        .expect("task panicked")
}

/// Takes `key` from another task and returns its fencing token.
async fn spawn_lock(locker: &Locker, key: &'static str) -> Result<u64, Error> {
    let locker = locker.clone();
    tokio::spawn(async move {
        let guard = locker
            .lock(key)
            .wait(Duration::from_secs(5))
            .fencing(true)
            .await?;
        let token = guard.fencing_token().unwrap_or(0);
        guard.release().await?;
        Ok(token)
    })
    .await
    .expect("task panicked")
}

fn describe<T>(outcome: &Result<T, Error>) -> String {
    match outcome {
        Ok(_) => "acquired".to_owned(),
        Err(e) => e.to_string(),
    }
}
