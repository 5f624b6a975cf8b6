//! Warming a server that compiles its hot paths while it runs, before a scenario measures it.
//!
//! ZooKeeper is a JVM: a server started for a scenario runs interpreted at first and is
//! compiled by its JIT under the load. On 2026-12-07, a fresh server's semaphore hand-offs
//! took 2.6 ms each in the scenario's first four seconds (the warm-up repetition), 2.0 ms in
//! the next four and 1.5–1.8 ms after that, for dlock and Curator alike: one warm-up
//! repetition left the first measured ones on a server still speeding up, and whichever side
//! ran later in a repetition ran on a faster server. Every scenario on a started ZooKeeper
//! therefore begins after [`WARM_UP`] of mixed load (none in a `--quick` smoke run).

use std::time::{Duration, Instant};

use dlock_core::LockMode;

use crate::target::Target;

/// How long a started ZooKeeper is loaded before a scenario measures it (the settings'
/// `warm_up`).
pub(crate) const WARM_UP: Duration = Duration::from_secs(10);

/// Tasks of the warm-up load, spread over two Lockers.
const TASKS: usize = 8;

/// Locks taken on one key before the load moves to a fresh one (which makes the server create
/// and reap lock paths, as the scenarios' fresh keys do).
const LOCKS_PER_KEY: usize = 200;

/// Whether `target` is a server that gets faster as it runs (see the module's docs).
pub(crate) fn needs_warm_up(target: &Target) -> bool {
    target.name() == "zookeeper"
}

/// Loads `target` for `time`: `TASKS` tasks on two Lockers take, on shared keys, write, read
/// and semaphore locks in turn (a mutex sends the server the requests a write lock sends:
/// a sequential node, a listing, a watch, a deletion), while the raw client runs its lock
/// cycle beside them — the requests the scenarios send, dlock's and the floors'.
pub(crate) async fn warm_up(target: &Target, time: Duration) {
    const TTL: Duration = Duration::from_secs(30);
    if time.is_zero() {
        return;
    }
    let lockers = [target.locker(TTL).await, target.locker(TTL).await];
    let until = Instant::now() + time;
    let mut handles = Vec::with_capacity(TASKS);
    for task in 0..TASKS {
        let locker = lockers[task % lockers.len()].clone();
        handles.push(tokio::spawn(async move {
            let mut cycle = 0;
            while Instant::now() < until {
                let key = format!("bench:warm:{}", cycle / LOCKS_PER_KEY);
                let mode = match (task + cycle) % 4 {
                    0 => LockMode::Exclusive,
                    1 => LockMode::Shared,
                    _ => LockMode::Permit { limit: 4 },
                };
                // Exclusive and shared locks on one key, permits on another: a key takes one
                // kind of lock at a time.
                let key = match mode {
                    LockMode::Permit { .. } => format!("{key}:permits"),
                    _ => key,
                };
                let guard = locker.lock_as(&key, mode).await.expect("warm-up acquire");
                guard.release().await.expect("warm-up release");
                cycle += 1;
            }
        }));
    }
    let mut raw = target.raw();
    let mut cycle = 0;
    while Instant::now() < until {
        let key = format!("dlock:bench:warm-raw:{}", cycle / LOCKS_PER_KEY);
        if raw.acquire(&key, "bench-warm", TTL).await {
            raw.release(&key, "bench-warm", TTL).await;
        }
        cycle += 1;
    }
    for handle in handles {
        handle.await.expect("warm-up task");
    }
    for locker in lockers {
        locker.shutdown().await.expect("warm-up shutdown");
    }
}
