//! `#[distributed_lock]` on an order service: one settlement per order at a time, fencing
//! tokens in the body, busy callers, a lost lease cancelling the work, nested calls re-entering.
//!
//! Run with: `cargo run -p dlock-examples --bin orders_macro`
//! (memory backend; set `DLOCK_URL` to use another backend).

use std::collections::HashMap;
use std::fmt;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use dlock_core::{DlockConfig, Error, Locker, current_lock, distributed_lock};

/// The service's error type: lock failures are one kind of it.
#[derive(Debug)]
enum AppError {
    Lock(Error),
    StaleToken { token: u64, newest: u64 },
}

impl From<Error> for AppError {
    fn from(error: Error) -> Self {
        Self::Lock(error)
    }
}

impl fmt::Display for AppError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Lock(error) => write!(f, "{error}"),
            Self::StaleToken { token, newest } => {
                write!(
                    f,
                    "write with fencing token {token} refused (newest seen: {newest})"
                )
            }
        }
    }
}

/// What a settlement returns.
#[derive(Debug)]
struct Receipt {
    id: u64,
    balance: i64,
    fencing_token: u64,
}

impl fmt::Display for Receipt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "order {}: balance {}, fencing token {}",
            self.id, self.balance, self.fencing_token
        )
    }
}

/// The protected resource: balances per order, and the newest fencing token it has seen per
/// order. It refuses writes carrying an older token (a holder that lost its lease).
#[derive(Debug, Default)]
struct Store {
    rows: Mutex<HashMap<u64, (i64, u64)>>,
}

impl Store {
    fn read(&self, id: u64) -> i64 {
        self.rows.lock().unwrap().get(&id).map_or(0, |row| row.0)
    }

    fn write(&self, id: u64, balance: i64, token: u64) -> Result<(), AppError> {
        let mut rows = self.rows.lock().unwrap();
        let row = rows.entry(id).or_default();
        if token < row.1 {
            return Err(AppError::StaleToken {
                token,
                newest: row.1,
            });
        }
        *row = (balance, token);
        Ok(())
    }
}

fn store() -> &'static Store {
    static STORE: OnceLock<Store> = OnceLock::new();
    STORE.get_or_init(Store::default)
}

/// The fencing token of the lock this body runs under.
fn token() -> u64 {
    current_lock()
        .and_then(|lock| lock.fencing_token())
        .expect("called inside a #[distributed_lock] body, on a backend with tokens")
}

/// Adds `amount` to order `id`: a read, some thinking, a write — safe only under the lock.
#[distributed_lock(key = "order:<id>", ttl = "10s", fencing = true)]
async fn settle(id: u64, amount: i64) -> Result<Receipt, AppError> {
    let balance = store().read(id);
    tokio::time::sleep(Duration::from_millis(2)).await; // talk to the payment provider
    let fencing_token = token();
    store().write(id, balance + amount, fencing_token)?;
    audit(id).await?; // the same key, in the same task: re-enters at once
    Ok(Receipt {
        id,
        balance: balance + amount,
        fencing_token,
    })
}

/// Also locks `order:<id>`; called from `settle`, it re-enters the lock `settle` holds.
#[distributed_lock(key = "order:<id>", ttl = "10s", wait = "0s")]
async fn audit(id: u64) -> Result<(), AppError> {
    debug_assert_eq!(
        current_lock().map(|l| l.key().to_owned()),
        Some(format!("order:{id}"))
    );
    Ok(())
}

/// Gives up after 100ms if someone else is settling the order.
#[distributed_lock(key = "order:<id>", ttl = "10s", wait = "100ms", fencing = true)]
async fn refund(id: u64, amount: i64) -> Result<Receipt, AppError> {
    let balance = store().read(id) - amount;
    store().write(id, balance, token())?;
    Ok(Receipt {
        id,
        balance,
        fencing_token: token(),
    })
}

/// A job whose lease is not renewed (`watchdog = false`): it must finish within 300ms.
#[distributed_lock(key = "order:<id>:export", ttl = "300ms", watchdog = false)]
async fn slow_export(id: u64, reached_the_end: Arc<Mutex<bool>>) -> Result<(), AppError> {
    tokio::time::sleep(Duration::from_secs(5)).await; // far longer than its lease
    *reached_the_end.lock().unwrap() = true;
    let _ = id;
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(AppError::Lock(error)) => dlock_examples::report_failure("orders_macro", &error),
        Err(error) => {
            eprintln!("orders_macro failed: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), AppError> {
    let config = DlockConfig::from_env()?;
    Locker::connect(&config).await?.install_global();
    println!("#[distributed_lock] on `{}`\n", config.backend);

    four_workers_settle_one_order().await?;
    busy_callers_give_up().await?;
    lost_lease_cancels_the_body().await?;

    println!("\nall three demonstrations passed");
    Ok(())
}

/// Four workers each settle order 42 five times, concurrently: no settlement is lost.
async fn four_workers_settle_one_order() -> Result<(), AppError> {
    println!("1. four workers settle order 42, five times each, at the same time");
    let workers: Vec<_> = (1..=4)
        .map(|worker| {
            tokio::spawn(async move {
                let mut tokens = Vec::new();
                for _ in 0..5 {
                    tokens.push(settle(42, 10).await?.fencing_token);
                }
                println!("   worker {worker} done, fencing tokens {tokens:?}");
                Ok::<_, AppError>(())
            })
        })
        .collect();
    for worker in workers {
        worker.await.expect("worker panicked")?;
    }
    let balance = store().read(42);
    println!("   balance of order 42: {balance} (4 workers x 5 x 10: nothing lost)");
    assert_eq!(balance, 200);
    Ok(())
}

/// While one task holds order 7, `refund` (wait = "100ms") gives up with `Error::Busy`.
async fn busy_callers_give_up() -> Result<(), AppError> {
    println!("2. a refund while order 7 is being settled elsewhere");
    let receipt = settle(7, 50).await?;
    println!("   settled {receipt}");
    let held = Locker::global()?.lock("order:7").await?; // someone else is on it
    let outcome = tokio::spawn(refund(7, 20)).await.expect("refund panicked");
    match outcome {
        Err(AppError::Lock(Error::Busy { key, waited, .. })) => {
            println!("   refund gave up: `{key}` busy after {waited:?}");
        }
        other => panic!("expected Busy, got {other:?}"),
    }
    held.release().await?;
    let receipt = refund(7, 20).await?;
    println!("   after the release the refund goes through: {receipt}");
    Ok(())
}

/// A body that outlives its (unrenewed) lease is cancelled, and the call says so.
async fn lost_lease_cancels_the_body() -> Result<(), AppError> {
    println!("3. an export that outlives its 300ms lease (watchdog = false)");
    let reached_the_end = Arc::new(Mutex::new(false));
    match slow_export(7, Arc::clone(&reached_the_end)).await {
        Err(AppError::Lock(error @ Error::LeaseLost { .. })) => {
            println!("   cancelled: {error}");
        }
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    assert!(!*reached_the_end.lock().unwrap(), "the body was cancelled");
    println!("   the body never reached its end");
    Ok(())
}
