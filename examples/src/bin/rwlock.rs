//! A read-write lock over a price list: four readers read it side by side, a writer updates it
//! alone, and the timeline shows who held what when. The example checks what it shows: readers
//! did overlap, and no reader ever saw a half-updated list.
//!
//! Run with: `cargo run -p dlock-examples --bin rwlock`
//! (memory backend; set `DLOCK_URL` to another, e.g. `redis://127.0.0.1:6379` with `--features
//! redis`, or `etcd://127.0.0.1:2379` with `--features etcd`).

use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use dlock_core::{DlockConfig, Error, Locker};

/// The lock every reader and the writer take.
const KEY: &str = "price-list";

/// The protected resource: every price carries the version of the update that wrote it, so a
/// reader that sees two versions at once saw an update half-done.
#[derive(Debug)]
struct PriceList {
    /// (item, price, version)
    prices: Mutex<Vec<(&'static str, u32, u32)>>,
    readers_inside: Mutex<usize>,
    most_readers_inside: Mutex<usize>,
    torn_reads: Mutex<usize>,
    started: Instant,
}

impl PriceList {
    fn new() -> Self {
        Self {
            prices: Mutex::new(vec![
                ("apple", 100, 0),
                ("bread", 250, 0),
                ("cheese", 900, 0),
            ]),
            readers_inside: Mutex::new(0),
            most_readers_inside: Mutex::new(0),
            torn_reads: Mutex::new(0),
            started: Instant::now(),
        }
    }

    fn say(&self, who: &str, what: &str) {
        println!(
            "   {:>5} ms  {who:<9} {what}",
            self.started.elapsed().as_millis()
        );
    }

    /// One read, holding the read lock: the list must show one version throughout.
    async fn read(&self, who: &str) {
        let inside = {
            let mut inside = lock(&self.readers_inside);
            *inside += 1;
            let mut most = lock(&self.most_readers_inside);
            *most = (*most).max(*inside);
            *inside
        };
        let first = lock(&self.prices).clone();
        tokio::time::sleep(Duration::from_millis(30)).await;
        let again = lock(&self.prices).clone();
        let versions: Vec<u32> = first.iter().map(|(_, _, v)| *v).collect();
        let torn = first != again || versions.windows(2).any(|pair| pair[0] != pair[1]);
        if torn {
            *lock(&self.torn_reads) += 1;
        }
        self.say(
            who,
            &format!(
                "read version {} ({inside} reader(s) inside){}",
                versions[0],
                if torn { " — TORN" } else { "" }
            ),
        );
        *lock(&self.readers_inside) -= 1;
    }

    /// One update, holding the write lock: prices change one by one, with a pause between.
    async fn update(&self, version: u32) {
        self.say("writer", &format!("updates to version {version}"));
        for index in 0..3 {
            {
                let mut prices = lock(&self.prices);
                prices[index].1 += 10;
                prices[index].2 = version;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.say("writer", &format!("done with version {version}"));
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => dlock_examples::report_failure("rwlock", &error),
    }
}

async fn run() -> Result<bool, Error> {
    let config = DlockConfig::from_env()?;
    let locker = Locker::connect(&config).await?;
    println!("a read-write lock on `{}`\n", config.backend);
    let list = Arc::new(PriceList::new());

    let mut tasks = Vec::new();
    for reader in 1..=4 {
        let (locker, list) = (locker.clone(), Arc::clone(&list));
        tasks.push(tokio::spawn(async move {
            let who = format!("reader {reader}");
            for _ in 0..3 {
                let guard = locker.read_lock(KEY).await?;
                guard.run(list.read(&who)).await?;
                guard.release().await?;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Ok::<_, Error>(())
        }));
    }
    let (writer_locker, writer_list) = (locker.clone(), Arc::clone(&list));
    tasks.push(tokio::spawn(async move {
        for version in 1..=2 {
            tokio::time::sleep(Duration::from_millis(40)).await;
            let guard = writer_locker.write_lock(KEY).await?;
            guard.run(writer_list.update(version)).await?;
            guard.release().await?;
        }
        Ok(())
    }));
    for task in tasks {
        task.await.expect("a task panicked")?;
    }

    let most = *lock(&list.most_readers_inside);
    let torn = *lock(&list.torn_reads);
    println!("\nat most {most} readers held the lock at once; {torn} torn read(s)");
    if most < 2 || torn > 0 {
        eprintln!("rwlock failed: readers must overlap and never see a half-done update");
        return Ok(false);
    }
    println!("all checks passed");
    Ok(true)
}
