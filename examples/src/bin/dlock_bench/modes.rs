//! The scenarios of locks with many holders: a read-mostly read-write lock and a semaphore.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dlock_core::{LockMode, Locker};

use crate::scenarios::{Settings, timed_tasks};
use crate::stats::{Row, Samples, median_run};
use crate::target::Target;

const TTL: Duration = Duration::from_secs(30);

/// The mode of a task's `cycle`-th lock.
type Pick = fn(task: usize, cycle: usize) -> LockMode;

/// One write in ten, spread over the tasks and the cycles.
fn one_write_in_ten(task: usize, cycle: usize) -> LockMode {
    if (task + cycle).is_multiple_of(10) {
        LockMode::Exclusive
    } else {
        LockMode::Shared
    }
}

/// What a run on one key measured.
struct Run {
    /// Waits (request → grant) and the wall time.
    waits: Samples,
    /// How long each lock was held (grant → release sent).
    holds: Vec<Duration>,
}

/// `tasks` tasks over `lockers` (in turn) on `key`, `rounds` locks each, of the mode `pick`
/// says, each held for `hold`.
async fn on_one_key(
    lockers: &[Locker],
    key: &str,
    (tasks, rounds): (usize, usize),
    hold: Duration,
    pick: Pick,
) -> Run {
    let waits = Arc::new(Mutex::new(Vec::with_capacity(tasks * rounds)));
    let holds = Arc::new(Mutex::new(Vec::with_capacity(tasks * rounds)));
    let started = Instant::now();
    let mut handles = Vec::with_capacity(tasks);
    for task in 0..tasks {
        let locker = lockers[task % lockers.len()].clone();
        let (key, waits, holds) = (key.to_owned(), waits.clone(), holds.clone());
        handles.push(tokio::spawn(async move {
            for cycle in 0..rounds {
                let asked = Instant::now();
                let guard = locker
                    .lock_as(&key, pick(task, cycle))
                    .await
                    .expect("acquire");
                let granted = Instant::now();
                tokio::time::sleep(hold).await;
                let releasing = Instant::now();
                guard.release().await.expect("release");
                waits.lock().unwrap().push(granted - asked);
                holds.lock().unwrap().push(releasing - granted);
            }
        }));
    }
    for handle in handles {
        handle.await.expect("task");
    }
    let elapsed = started.elapsed();
    let take = |shared: &Mutex<Vec<Duration>>| std::mem::take(&mut *shared.lock().unwrap());
    Run {
        waits: Samples {
            latencies: take(&waits),
            elapsed,
            ..Samples::default()
        },
        holds: take(&holds),
    }
}

/// The raw client's lock + unlock from `tasks` tasks, each on a key of its own (nobody ever
/// waits), holding each for `hold`: cycle latencies and the wall time.
async fn raw_without_waits(
    target: &Target,
    rep: usize,
    (tasks, rounds): (usize, usize),
    hold: Duration,
) -> Samples {
    timed_tasks!(tasks, rounds, |_t| target.raw(), |raw, t, _j| {
        let (key, owner) = (
            format!("dlock:bench:rmf:{rep}:{t}"),
            format!("bench-owner-{t}"),
        );
        assert!(raw.acquire(&key, &owner, TTL).await);
        tokio::time::sleep(hold).await;
        raw.release(&key, &owner, TTL).await;
    })
}

/// 8 tasks over 2 Lockers on one key, one write lock in ten and read locks otherwise, each
/// held `hold`. Latencies are waits (request → grant). The floor is the same load on the raw
/// client with every task on a key of its own, so that no lock ever waits: what readers that
/// never meet a writer would reach. The note gives the same load with every lock exclusive,
/// which is what a read-write lock saves.
pub(crate) async fn read_mostly(target: &Target, s: &Settings) -> Row {
    const TASKS: usize = 8;
    let lockers = [target.locker(TTL).await, target.locker(TTL).await];
    let load = (TASKS, s.contended_rounds);
    let (mut mixed, mut exclusive, mut floor) = (Vec::new(), Vec::new(), Vec::new());
    for rep in 0..=s.reps {
        let key = format!("bench:rm:{rep}");
        let run = on_one_key(&lockers, &key, load, s.hold, one_write_in_ten).await;
        let key = format!("bench:rmx:{rep}");
        let all_exclusive =
            on_one_key(&lockers, &key, load, s.hold, |_, _| LockMode::Exclusive).await;
        let raw = raw_without_waits(target, rep, load, s.hold).await;
        if rep > 0 {
            mixed.push(run.waits);
            exclusive.push(all_exclusive.waits);
            floor.push(raw);
        }
    }
    let (run, exclusive, floor) = (median_run(mixed), median_run(exclusive), median_run(floor));
    let note = format!(
        "wait percentiles; {TASKS} tasks / 2 Lockers on one key, 1 write lock in 10, hold {:?}; every lock exclusive instead: {:.0} ops/s ({:.2} of the floor); floor: the raw commands with the same holds, each task on its own key (nobody waits)",
        s.hold,
        exclusive.ops_per_sec(),
        exclusive.ops_per_sec() / floor.ops_per_sec(),
    );
    Row::new(
        target.name(),
        "read-mostly",
        &run,
        floor.ops_per_sec(),
        note,
    )
}

/// 16 tasks over 2 Lockers take permits of one semaphore of 4, holding each `hold`.
/// Latencies are waits (request → grant). The floor is `4 / (measured hold + one raw lock +
/// unlock)`: four permits busy all the time, each freed by one release and taken by one
/// acquire, as the raw client does them (two round trips; on etcd two commits).
pub(crate) async fn semaphore(target: &Target, s: &Settings) -> Row {
    const TASKS: usize = 16;
    const PERMITS: u32 = 4;
    let lockers = [target.locker(TTL).await, target.locker(TTL).await];
    let cycle = target.lock_cycle().await;
    let load = (TASKS, s.contended_rounds / 2);
    let (mut runs, mut holds) = (Vec::new(), Vec::new());
    for rep in 0..=s.reps {
        let key = format!("bench:s:{rep}");
        let run = on_one_key(&lockers, &key, load, s.hold, |_, _| LockMode::Permit {
            limit: PERMITS,
        })
        .await;
        if rep > 0 {
            runs.push(run.waits);
            holds.extend(run.holds);
        }
    }
    let run = median_run(runs);
    let count = u32::try_from(holds.len()).unwrap_or(u32::MAX).max(1);
    let mean_hold = holds.iter().sum::<Duration>() / count;
    let floor = f64::from(PERMITS) / (mean_hold + cycle).as_secs_f64();
    let note = format!(
        "wait percentiles; {TASKS} tasks / 2 Lockers, {PERMITS} permits, hold {:?} (measured {:.2} ms); floor {PERMITS}/(measured hold + raw lock+unlock {:.0} µs)",
        s.hold,
        mean_hold.as_secs_f64() * 1e3,
        cycle.as_secs_f64() * 1e6,
    );
    Row::new(target.name(), "semaphore", &run, floor, note)
}
