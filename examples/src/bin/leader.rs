//! Leader election: three instances of a service want to run its scheduler, one at a time.
//! Each `lead`s the name `scheduler`; an observer prints every change of leader; the leader
//! stamps its writes with its term, and the store refuses a write whose term is older than
//! one it already took. The first leader resigns after a few writes; the next one's lease is
//! then broken behind its back (an operator's `force_release`, as a frozen process loses it):
//! the third is elected at once, the deposed one's writes are refused by term until its next
//! renewal tells it, and then its work is cancelled. The example checks what it shows: terms
//! never go back, the leaders follow the line, the deposed leader's writes were refused and
//! stopped.
//!
//! Run with: `cargo run -p dlock-examples --bin leader`
//! (memory backend; set `DLOCK_URL` to another, e.g. `etcd://127.0.0.1:2379` with `--features
//! etcd`, `zk://127.0.0.1:2181` with `--features zookeeper`, or `redis://127.0.0.1:6379` with
//! `--features redis`; PostgreSQL elects too, but has no `force_release` for the operator's
//! step).

use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use dlock_core::{DlockConfig, Error, Leader, Locker};
use futures_util::StreamExt;

const NAME: &str = "scheduler";

/// The resource the leader writes to: it keeps the highest term it saw and refuses older ones
/// (how a fenced store protects itself from a deposed leader).
#[derive(Debug, Default)]
struct Store {
    highest_term: Mutex<u64>,
    writes: Mutex<Vec<(String, u64)>>,
    refused: Mutex<usize>,
}

impl Store {
    fn write(&self, who: &str, term: u64) -> bool {
        let mut highest = lock(&self.highest_term);
        if term < *highest {
            *lock(&self.refused) += 1;
            return false;
        }
        *highest = term;
        lock(&self.writes).push((who.to_owned(), term));
        true
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
        Err(error) => dlock_examples::report_failure("leader", &error),
    }
}

async fn run() -> Result<bool, Error> {
    let ttl = Duration::from_millis(1500);
    let config = DlockConfig::from_env()?.with_ttl(ttl);
    println!("leader election on `{}`\n", config.backend);
    let started = Instant::now();
    let say = move |what: String| println!("   {:>5} ms  {what}", started.elapsed().as_millis());

    // The observer: a Locker of its own, printing each leader as it changes.
    let watcher = Locker::connect(&config).await?;
    let observed = Arc::new(Mutex::new(Vec::<Leader>::new()));
    let observing = tokio::spawn({
        let observed = Arc::clone(&observed);
        async move {
            let mut leaders = Box::pin(watcher.observe(NAME));
            while let Some(leader) = leaders.next().await {
                match leader {
                    Ok(Some(leader)) => {
                        say(format!(
                            "observer: {} leads, term {}",
                            leader.value, leader.term
                        ));
                        lock(&observed).push(leader);
                    }
                    Ok(None) => say("observer: nobody leads".to_owned()),
                    Err(error) => say(format!("observer: {error}")),
                }
            }
        }
    });

    let store = Arc::new(Store::default());
    let mut instances = Vec::new();
    for instance in ["node-a", "node-b", "node-c"] {
        let locker = Locker::connect(&config).await?;
        let store = Arc::clone(&store);
        instances.push((
            locker.clone(),
            tokio::spawn(async move {
                locker
                    .lead(NAME, instance, |leader| {
                        let store = Arc::clone(&store);
                        async move { schedule(instance, leader, &store, started).await }
                    })
                    .await
            }),
        ));
        tokio::time::sleep(Duration::from_millis(20)).await; // they line up in this order
    }

    // node-a resigns after its writes (its work returns); node-b's lease is broken while it
    // works: it must stop, and its late write must be refused.
    let admin = Locker::connect(&config).await?;
    wait_for_writes(&store, "node-b", 2).await;
    let deposed_term = lock(&store.writes).last().map_or(0, |(_, term)| *term);
    say("operator: force_release (node-b's lease ends, as if its process froze)".to_owned());
    admin.force_release(NAME).await?;
    wait_for_writes(&store, "node-c", 2).await;
    let stale = !store.write("node-b (late)", deposed_term);
    say(format!(
        "store: node-b's late write with term {deposed_term} refused: {stale}"
    ));
    // node-b learns at its next renewal (a third of the ttl): its work is cancelled then.
    tokio::time::sleep(ttl).await;
    let refused_then = *lock(&store.refused);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stopped = *lock(&store.refused) == refused_then;
    say(format!(
        "store: {refused_then} stale write(s) refused; node-b stopped writing: {stopped}"
    ));

    for (locker, instance) in instances {
        locker.shutdown().await?;
        instance.await.expect("an instance panicked")?;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    observing.abort();

    let writes = lock(&store.writes).clone();
    let terms: Vec<u64> = writes.iter().map(|(_, term)| *term).collect();
    let leaders: Vec<String> = lock(&observed).iter().map(|l| l.value.clone()).collect();
    let checks = [
        (
            "terms never went back",
            terms.windows(2).all(|w| w[0] <= w[1]),
        ),
        (
            "three leaders, in line order",
            leaders.starts_with(&["node-a".into(), "node-b".into(), "node-c".into()]),
        ),
        (
            "the deposed leader's writes were refused",
            stale && *lock(&store.refused) >= 1,
        ),
        ("the deposed leader's work was cancelled", stopped),
    ];
    println!();
    let mut all = true;
    for (check, ok) in checks {
        println!("{} {check}", if ok { "ok  " } else { "FAIL" });
        all &= ok;
    }
    println!(
        "{}",
        if all {
            "all checks passed"
        } else {
            "some checks FAILED"
        }
    );
    Ok(all)
}

/// The scheduler's loop while `instance` leads: a write stamped with the term every 50 ms.
/// `node-a` steps down after three writes; the others run until their leadership ends (the
/// future is then dropped at its next await: that is the cancellation).
async fn schedule(instance: &str, leader: Leader, store: &Store, started: Instant) {
    let say = |what: String| println!("   {:>5} ms  {what}", started.elapsed().as_millis());
    say(format!("{instance}: leading, term {}", leader.term));
    for round in 1.. {
        if store.write(instance, leader.term) {
            say(format!("{instance}: wrote with term {}", leader.term));
        } else {
            say(format!(
                "{instance}: write with term {} refused",
                leader.term
            ));
        }
        if instance == "node-a" && round == 3 {
            say(format!("{instance}: stepping down"));
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `instance` has written `count` times.
async fn wait_for_writes(store: &Store, instance: &str, count: usize) {
    while lock(&store.writes)
        .iter()
        .filter(|(who, _)| who == instance)
        .count()
        < count
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
