//! One hot key (`--scenario hot-key`): W waiters spread evenly over L Lockers (processes, as
//! far as the lock service can tell: each has its own connections), each taking the key three
//! times with a 1 ms hold (`--hot W:L,W:L,...`; by default 10:2, 100:10, 1000:50 and
//! 1000:2). Per row: grants per second and the p50/p99/max wait; the server's commands per
//! grant (Redis: every command it ran, those inside scripts included, and of them the scripts
//! and `PUBLISH`es; PostgreSQL: statements; etcd: gRPC messages received; ZooKeeper: packets
//! received) and the backend calls per grant where the server counts nothing else; the
//! fairness across Lockers — the fewest grants any Locker got in each half of the run, as a
//! share of its fair share (1.0 = exactly fair) — and the longest wait over the FIFO ideal
//! (the waiters ahead of it, each holding and handing on: W − 1 grant cycles).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dlock_core::conformance::CountingBackend;
use dlock_core::{DlockConfig, Locker};

use crate::stats::{Row, Samples};
use crate::target::Target;

const TTL: Duration = Duration::from_secs(30);
const GRANTS_EACH: usize = 3;

/// The row's name for `waiters` over `lockers`.
fn scenario(waiters: usize, lockers: usize) -> &'static str {
    match (waiters, lockers) {
        (10, 2) => "hot-key 10w/2L",
        (10, 10) => "hot-key 10w/10L",
        (100, 10) => "hot-key 100w/10L",
        (100, 50) => "hot-key 100w/50L",
        (1000, 50) => "hot-key 1000w/50L",
        (1000, 2) => "hot-key 1000w/2L",
        (1000, 10) => "hot-key 1000w/10L",
        _ => "hot-key",
    }
}

/// `waiters` tasks over `lockers` Lockers, each taking one key [`GRANTS_EACH`] times.
pub(crate) async fn hot_key(
    target: &Target,
    waiters: usize,
    lockers: usize,
    hold: Duration,
) -> Row {
    let config = DlockConfig::default().with_ttl(TTL);
    let mut counted = Vec::new();
    let mut connected = Vec::new();
    for _ in 0..lockers {
        let locker = target.locker(TTL).await;
        let counting = Arc::new(CountingBackend::new(Arc::clone(locker.backend())));
        counted.push(Locker::with_config(counting.clone(), &config).expect("config"));
        connected.push((locker, counting));
    }
    let key = format!("bench:hot:{waiters}:{lockers}:{}", std::process::id());
    let (commands_before, requests_before) = (
        target.server_commands().await,
        target.server_requests().await,
    );
    // (when, which Locker) of every grant.
    let grants = Arc::new(Mutex::new(Vec::with_capacity(waiters * GRANTS_EACH)));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(waiters);
    for waiter in 0..waiters {
        let index = waiter % lockers;
        let (locker, key, grants) = (counted[index].clone(), key.clone(), Arc::clone(&grants));
        tasks.push(tokio::spawn(async move {
            let (mut waits, mut refused) = (Vec::with_capacity(GRANTS_EACH), Vec::new());
            for _ in 0..GRANTS_EACH {
                let asked = Instant::now();
                let guard = match locker.lock(&key).wait(Duration::from_secs(600)).await {
                    Ok(guard) => guard,
                    Err(error) => {
                        refused.push(error.to_string());
                        continue;
                    }
                };
                let granted = Instant::now();
                waits.push(granted - asked);
                grants.lock().unwrap().push((granted, index));
                tokio::time::sleep(hold).await;
                if let Err(error) = guard.release().await {
                    refused.push(error.to_string());
                }
            }
            (waits, refused)
        }));
    }
    let (mut run, mut refused) = (Samples::default(), Vec::new());
    for task in tasks {
        let (waits, errors) = task.await.expect("hot-key waiter");
        run.latencies.extend(waits);
        refused.extend(errors);
    }
    run.elapsed = started.elapsed();
    let total = run.latencies.len().max(1);
    let per_grant = |n: f64| n / total as f64;
    let mut note = match (commands_before, target.server_commands().await) {
        (Some(before), Some(after)) => {
            let grew = |name: &str| {
                after.get(name).copied().unwrap_or(0) - before.get(name).copied().unwrap_or(0)
            };
            let all: u64 = after.keys().map(|name| grew(name)).sum();
            let scripts = grew("evalsha") + grew("eval");
            if matches!(target, Target::Postgres { .. }) {
                format!("{:.1} statements per grant", per_grant(all as f64))
            } else {
                format!(
                    "{:.1} server commands per grant ({:.2} scripts, {:.2} PUBLISH)",
                    per_grant(all as f64),
                    per_grant(scripts as f64),
                    per_grant(grew("publish") as f64),
                )
            }
        }
        _ => {
            let calls: usize = connected
                .iter()
                .map(|(_, counting)| counting.acquires() + counting.releases())
                .sum();
            let calls = format!("{:.2} backend calls per grant", per_grant(calls as f64));
            match (requests_before, target.server_requests().await) {
                (Some(before), Some(after)) => format!(
                    "{:.1} server requests per grant, {calls}",
                    per_grant(after.saturating_sub(before) as f64)
                ),
                _ => calls,
            }
        }
    };
    let mut grants = grants.lock().unwrap().clone();
    grants.sort();
    let half = grants.len() / 2;
    let fair = |part: &[(Instant, usize)]| {
        let mut per_locker = vec![0_usize; lockers];
        for &(_, index) in part {
            per_locker[index] += 1;
        }
        let fair_share = part.len() as f64 / lockers as f64;
        per_locker.iter().copied().min().unwrap_or(0) as f64 / fair_share
    };
    let cycle = run.elapsed / u32::try_from(total).unwrap_or(u32::MAX);
    let ideal = cycle * u32::try_from(waiters.saturating_sub(1)).unwrap_or(u32::MAX);
    let longest = run.latencies.iter().max().copied().unwrap_or_default();
    note += &format!(
        "; fewest grants of a Locker: {:.2} and {:.2} of its fair share (first, second half); \
         longest wait {:.2} of the FIFO ideal ({} waiters × {:.2} ms per grant)",
        fair(&grants[..half]),
        fair(&grants[half..]),
        longest.as_secs_f64() / ideal.as_secs_f64().max(f64::EPSILON),
        waiters.saturating_sub(1),
        cycle.as_secs_f64() * 1e3,
    );
    if let Some(first) = refused.first() {
        note += &format!("; {} failed, the first: {first}", refused.len());
    }
    drop(connected);
    Row::new(
        target.name(),
        scenario(waiters, lockers),
        &run,
        f64::NAN,
        note,
    )
}
