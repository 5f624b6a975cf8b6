//! The scenarios of locks with many holders: a read-mostly read-write lock and a semaphore.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dlock_core::{LockMode, Locker};
use dlock_harness::Curator;

use crate::scenarios::{Settings, per_grant, timed_tasks};
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
    let mut curator = Peer::start(target).await;
    let (mut mixed, mut exclusive, mut floor) = (Vec::new(), Vec::new(), Vec::new());
    let mut peer_runs = Vec::new();
    let mut last_holds = Vec::new();
    let mut server_work = ServerWork::default();
    let mut reps = Reps::new(s, &curator);
    while let Some((rep, measured)) = reps.next() {
        let key = format!("bench:rm:{rep}");
        let path = format!("/dlock-bench/curator-rm-{rep}");
        let peer_first = reps.peer_first();
        let beside = curator.beside(
            peer_first,
            &mut last_holds,
            "rw",
            &path,
            load,
            0,
            async || on_one_key(&lockers, &key, load, s.hold, one_write_in_ten).await,
        );
        let (run, peer) = server_work.count(target, measured, beside).await;
        let key = format!("bench:rmx:{rep}");
        let all_exclusive =
            on_one_key(&lockers, &key, load, s.hold, |_, _| LockMode::Exclusive).await;
        let raw = raw_without_waits(target, rep, load, s.hold).await;
        if measured {
            mixed.push(run.waits);
            exclusive.push(all_exclusive.waits);
            floor.push(raw);
            peer_runs.extend(peer);
        }
    }
    let (run, exclusive, floor) = (median_run(mixed), median_run(exclusive), median_run(floor));
    let note = format!(
        "wait percentiles; {TASKS} tasks / 2 Lockers on one key, 1 write lock in 10, hold {:?}; every lock exclusive instead: {:.0} ops/s ({:.2} of the floor); floor: the raw commands with the same holds, each task on its own key (nobody waits){}{}",
        s.hold,
        exclusive.ops_per_sec(),
        exclusive.ops_per_sec() / floor.ops_per_sec(),
        curator.note(
            "InterProcessReadWriteLock",
            peer_runs,
            &run,
            floor.ops_per_sec()
        ),
        server_work.note(),
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
    let mut curator = Peer::start(target).await;
    let (mut runs, mut holds, mut peer_runs) = (Vec::new(), Vec::new(), Vec::new());
    let mut last_holds = Vec::new();
    let mut server_work = ServerWork::default();
    let mut reps = Reps::new(s, &curator);
    while let Some((rep, measured)) = reps.next() {
        let key = format!("bench:s:{rep}");
        let path = format!("/dlock-bench/curator-s-{rep}");
        let permit = |_, _| LockMode::Permit { limit: PERMITS };
        let peer_first = reps.peer_first();
        let beside = curator.beside(
            peer_first,
            &mut last_holds,
            "sem",
            &path,
            load,
            PERMITS,
            async || on_one_key(&lockers, &key, load, s.hold, permit).await,
        );
        let (run, peer) = server_work.count(target, measured, beside).await;
        if measured {
            runs.push(run.waits);
            holds.extend(run.holds);
            peer_runs.extend(peer);
        }
    }
    let run = median_run(runs);
    let count = u32::try_from(holds.len()).unwrap_or(u32::MAX).max(1);
    let mean_hold = holds.iter().sum::<Duration>() / count;
    let floor = f64::from(PERMITS) / (mean_hold + cycle).as_secs_f64();
    let note = format!(
        "wait percentiles; {TASKS} tasks / 2 Lockers, {PERMITS} permits, hold {:?} (measured {:.2} ms); floor {PERMITS}/(measured hold + raw lock+unlock {:.0} µs){}{}",
        s.hold,
        mean_hold.as_secs_f64() * 1e3,
        cycle.as_secs_f64() * 1e6,
        curator.note("InterProcessSemaphoreV2", peer_runs, &run, floor),
        server_work.note(),
    );
    Row::new(target.name(), "semaphore", &run, floor, note)
}

/// What the server ran for dlock's measured runs of a scenario, where it counts (Redis: every
/// command, those inside scripts included; PostgreSQL: statements), per lock taken and
/// released.
#[derive(Default)]
struct ServerWork {
    ran: BTreeMap<String, u64>,
    locks: usize,
}

impl ServerWork {
    /// Runs `run` (dlock's run of a repetition, and a peer's beside it where there is one,
    /// which the server does not count) and adds what the server ran meanwhile when
    /// `measured`.
    async fn count<T>(
        &mut self,
        target: &Target,
        measured: bool,
        run: impl Future<Output = (Run, T)>,
    ) -> (Run, T) {
        let before = if measured {
            target.server_commands().await
        } else {
            None
        };
        let (run, other) = run.await;
        if let Some(before) = before
            && let Some(after) = target.server_commands().await
        {
            for (name, calls) in after {
                let more = calls - before.get(&name).copied().unwrap_or(0);
                *self.ran.entry(name).or_default() += more;
            }
            self.locks += run.holds.len();
        }
        (run, other)
    }

    /// The note's part on the server's work (empty where it does not count).
    fn note(&self) -> String {
        per_grant(
            &BTreeMap::new(),
            &self.ran,
            u32::try_from(self.locks).unwrap_or(u32::MAX),
        )
    }
}

/// The repetitions of a scenario: warm-up ones, then `--reps` measured ones. With Curator
/// beside dlock the warm-up lasts at least the settings' `warm_up`: the peer's JVM, started for the
/// scenario, compiles its hot paths under the load, and on 2026-12-07 its semaphore made 242,
/// 284, 425 and 448 permits a second in its first four runs. In the measured repetitions the
/// two sides take turns to go first, so that neither always meets the server as the other
/// left it.
struct Reps {
    next: usize,
    measured: usize,
    wanted: usize,
    warm_until: Option<Instant>,
}

impl Reps {
    fn new(s: &Settings, peer: &Peer) -> Self {
        Self {
            next: 0,
            measured: 0,
            wanted: s.reps,
            warm_until: peer.curator.is_some().then(|| Instant::now() + s.warm_up),
        }
    }

    /// The next repetition's number and whether it is measured; `None` when done.
    fn next(&mut self) -> Option<(usize, bool)> {
        if self.measured == self.wanted {
            return None;
        }
        let rep = self.next;
        self.next += 1;
        let warming = rep == 0 || self.warm_until.is_some_and(|until| Instant::now() < until);
        if !warming {
            self.measured += 1;
        }
        Some((rep, !warming))
    }

    /// Whether the peer goes first in the repetition [`next`](Self::next) gave last: in every
    /// other measured one.
    fn peer_first(&self) -> bool {
        self.measured > 0 && self.measured.is_multiple_of(2)
    }
}

/// Apache Curator running the same load on the same ZooKeeper (the peer a ZooKeeper user
/// would pick), in a JVM the harness starts; absent on other backends, or when it cannot
/// start (the note says why).
struct Peer {
    curator: Option<Curator>,
    /// Why there is no Curator on ZooKeeper.
    missing: Option<String>,
}

impl Peer {
    async fn start(target: &Target) -> Self {
        let Some(hosts) = target.zookeeper_hosts() else {
            return Self {
                curator: None,
                missing: None,
            };
        };
        match Curator::start(&hosts).await {
            Ok(curator) => Self {
                curator: Some(curator),
                missing: None,
            },
            Err(error) => Self {
                curator: None,
                missing: Some(error.to_string()),
            },
        }
    }

    /// dlock's run of a repetition (`dlock`) and Curator's run of the same load beside it,
    /// Curator first when `peer_first` ([`Reps::peer_first`]). Curator replays the holds of
    /// dlock's run of the same repetition, or, going first, of the one before (kept in
    /// `last_holds`).
    #[allow(clippy::too_many_arguments)]
    async fn beside(
        &mut self,
        peer_first: bool,
        last_holds: &mut Vec<Duration>,
        kind: &str,
        path: &str,
        load: (usize, usize),
        permits: u32,
        dlock: impl AsyncFnOnce() -> Run,
    ) -> (Run, Option<Samples>) {
        let (run, peer) = if peer_first && !last_holds.is_empty() {
            let peer = self.load(kind, path, load, last_holds, permits).await;
            (dlock().await, peer)
        } else {
            let run = dlock().await;
            let peer = self.load(kind, path, load, &run.holds, permits).await;
            (run, peer)
        };
        last_holds.clone_from(&run.holds);
        (run, peer)
    }

    /// Curator's recipe `kind` (`rw` or `sem` with `permits`) at `path` under `load`, its
    /// locks held as long as dlock's were (`holds`, see [`Self::beside`]), one by one: a tokio sleep of
    /// `hold` lasts up to a millisecond longer, and the spread of the holds is part of what
    /// the waits measure.
    async fn load(
        &mut self,
        kind: &str,
        path: &str,
        (tasks, rounds): (usize, usize),
        holds: &[Duration],
        permits: u32,
    ) -> Option<Samples> {
        let curator = self.curator.as_mut()?;
        let holds: Vec<String> = holds.iter().map(|h| h.as_micros().to_string()).collect();
        let command = format!(
            "load {kind} {path} 2 {tasks} {rounds} {} {permits}",
            holds.join(",")
        );
        let answer = match curator.send(&command).await {
            Ok(()) => curator.next_line(Duration::from_secs(600)).await,
            Err(_) => None,
        };
        let parsed = answer.as_deref().and_then(|line| {
            let (elapsed, waits) = line.strip_prefix("load ")?.split_once(' ')?;
            let waits: Option<Vec<Duration>> = waits
                .split(',')
                .map(|ns| ns.parse().ok().map(Duration::from_nanos))
                .collect();
            Some(Samples {
                latencies: waits?,
                elapsed: Duration::from_nanos(elapsed.parse().ok()?),
                ..Samples::default()
            })
        });
        if parsed.is_none() {
            self.missing = Some(format!("Curator answered {answer:?}"));
            self.curator = None;
        }
        parsed
    }

    /// The note's part on the peer: its throughput against dlock's and the floor's, and its
    /// waits.
    fn note(&self, recipe: &str, runs: Vec<Samples>, dlock: &Samples, floor_ops: f64) -> String {
        if let Some(why) = &self.missing {
            return format!("; Curator not measured: {why}");
        }
        if runs.is_empty() {
            return String::new();
        }
        let peer = median_run(runs);
        format!(
            "; Apache Curator's {recipe} (the peer), same server, load and holds: {:.0} ops/s ({:.2} of the floor; dlock {:.2}× Curator), wait p50 {:.1} ms p99 {:.1} ms max {:.1} ms",
            peer.ops_per_sec(),
            peer.ops_per_sec() / floor_ops,
            dlock.ops_per_sec() / peer.ops_per_sec(),
            peer.percentile(50.0).as_secs_f64() * 1e3,
            peer.percentile(99.0).as_secs_f64() * 1e3,
            peer.percentile(100.0).as_secs_f64() * 1e3,
        )
    }
}
