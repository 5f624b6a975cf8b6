//! The scenarios, each next to its floor.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dlock_core::Locker;
use futures_util::StreamExt;

use crate::stats::{Row, Samples, median_run};
use crate::target::Target;

/// Knobs from the command line.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// The fewest measured repetitions (pairs, where dlock and its floor run in pairs).
    pub(crate) reps: usize,
    /// Paired scenarios add pairs (up to [`MAX_PAIRS`]) until this much time was measured:
    /// on fast backends one run lasts a fraction of a second, and a median of a few such
    /// runs swings with the machine's moods.
    pub(crate) min_measured: Duration,
    /// Paired scenarios also add pairs until their median ratio is known to within this
    /// share of itself ([`SETTLED_WITHIN`]; `None` in a smoke run).
    pub(crate) settle_within: Option<f64>,
    /// The least load a server that gets faster as it runs (ZooKeeper's JVM) takes before a
    /// scenario measures it, and the least warm-up of a scenario with a peer in a JVM beside
    /// dlock (zero in a smoke run): see `warm.rs`.
    pub(crate) warm_up: Duration,
    pub(crate) uncontended_ops: usize,
    pub(crate) many_keys_ops: usize,
    pub(crate) contended_rounds: usize,
    pub(crate) hold: Duration,
    pub(crate) watchdog_locks: usize,
    pub(crate) watchdog_for: Duration,
    /// The sizes of the `held` scenario.
    pub(crate) held: Vec<usize>,
    /// The (waiters, Lockers) of the `hot-key` scenario.
    pub(crate) hot: Vec<(usize, usize)>,
    /// Profiling aid: run only dlock's side (`Some(true)`) or only the floor (`Some(false)`).
    pub(crate) only_dlock: Option<bool>,
}

const TTL: Duration = Duration::from_secs(30);

/// The most pairs a paired scenario runs, however short its runs.
pub(crate) const MAX_PAIRS: usize = 40;

fn owner(i: usize) -> String {
    format!("bench-owner-{i}")
}

/// Runs `$tasks` tasks at once, each with its own client (`$client` of the task's index),
/// each timing `$per_task` cycles of `$cycle` (given the client, the task index and the cycle
/// index), and returns all latencies and the wall time.
macro_rules! timed_tasks {
    ($tasks:expr, $per_task:expr, |$t0:ident| $client:expr, |$c:ident, $t:ident, $j:ident| $cycle:block) => {{
        let (tasks, per_task) = ($tasks, $per_task);
        let started = Instant::now();
        let mut handles = Vec::with_capacity(tasks);
        for task in 0..tasks {
            let $t0 = task;
            let mut client = $client;
            handles.push(tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(per_task);
                for $j in 0..per_task {
                    let $t = task;
                    let $c = &mut client;
                    let at = Instant::now();
                    $cycle
                    latencies.push(at.elapsed());
                }
                latencies
            }));
        }
        let mut latencies = Vec::with_capacity(tasks * per_task);
        for handle in handles {
            latencies.extend(handle.await.expect("task"));
        }
        Samples {
            latencies,
            elapsed: started.elapsed(),
            ..Samples::default()
        }
    }};
}

pub(crate) use timed_tasks;

/// dlock's runs and the floor's, taken in pairs.
pub(crate) struct Paired {
    pub(crate) dlock: Samples,
    pub(crate) floor: Samples,
    /// Each pair's dlock throughput over the floor's.
    pub(crate) ratios: Vec<f64>,
    /// The median throughput of the third load (dlock's protocol sent raw, or the peer), when
    /// measured.
    pub(crate) protocol_ops: Option<f64>,
    /// Each repetition's third load over its floor run.
    pub(crate) protocol_ratios: Vec<f64>,
}

/// How close to itself a paired scenario's median ratio must be known (the width of its
/// 95 % interval over the median) before it stops adding pairs, within [`MAX_PAIRS`].
pub(crate) const SETTLED_WITHIN: f64 = 0.10;

/// Runs dlock (`$dlock`) and its floor (`$floor`) at least `$s.reps` times each after a
/// warm-up — more, up to [`MAX_PAIRS`], until `$s.min_measured` has been measured and the
/// median ratio is known to within [`SETTLED_WITHIN`] — in pairs whose order alternates, and
/// compares each run with its pair: this machine's speed drifts by tens of percent over
/// seconds, and a ratio of neighbours is far steadier than one of medians taken seconds
/// apart. `$protocol` measures a third load (`Option<f64>` ops/s: dlock's protocol sent raw,
/// or the peer), on the side of the pair away from dlock's run (dlock, floor, third; then
/// third, floor, dlock), so that a drift favours neither. Each block sees the repetition
/// number as `$rep`. (A macro: async closures borrowing the target would make the scenario
/// future not `Send`.)
macro_rules! paired {
    ($s:expr, |$rep:ident| $dlock:block, $floor:block, $protocol:block) => {{
        let s: &Settings = $s;
        let mut dlock_runs = Vec::new();
        let mut floor_runs = Vec::new();
        let mut ratios = Vec::new();
        let mut protocol_runs = Vec::new();
        let mut protocol_ratios = Vec::new();
        let mut measured = Duration::ZERO;
        for $rep in 0..=MAX_PAIRS {
            if $rep > s.reps
                && (s.only_dlock.is_some()
                    || (measured >= s.min_measured
                        && s.settle_within
                            .is_none_or(|within| $crate::stats::settled(&ratios, within))))
            {
                break;
            }
            let dlock_first = $rep % 2 == 0;
            let mut d = Samples::default();
            let mut f = Samples::default();
            let mut p: Option<f64> = None;
            if !dlock_first {
                p = $protocol;
            }
            for first in [dlock_first, !dlock_first] {
                if first && s.only_dlock != Some(false) {
                    d = $dlock;
                } else if !first && s.only_dlock != Some(true) {
                    f = $floor;
                }
            }
            if dlock_first {
                p = $protocol;
            }
            if $rep == 0 {
                continue; // the warm-up
            }
            measured += d.elapsed + f.elapsed;
            ratios.push(d.ops_per_sec() / f.ops_per_sec());
            protocol_ratios.extend(p.map(|ops| ops / f.ops_per_sec()));
            dlock_runs.push(d);
            floor_runs.push(f);
            protocol_runs.extend(p);
        }
        Paired {
            dlock: median_run(dlock_runs),
            floor: median_run(floor_runs),
            ratios,
            protocol_ops: median(protocol_runs),
            protocol_ratios,
        }
    }};
}

pub(crate) use paired;

/// The scenario's name, marked when its locks ask for fencing tokens.
const fn named(scenario: &'static str, fenced: &'static str, fencing: bool) -> &'static str {
    if fencing { fenced } else { scenario }
}

/// One task, N acquire+release cycles on fresh keys (each asking for a fencing token when
/// `fencing`). Fresh in every run of the bench too (the process id is in the name): against a
/// long-lived ZooKeeper a name of an earlier run may still have its lock path or may have lost
/// it to the container reaper, two and three requests apart, differently for dlock, the floor
/// and the peer.
pub(crate) async fn uncontended(target: &Target, s: &Settings, fencing: bool) -> Row {
    let locker = target.locker_with(TTL, fencing).await;
    let ops = s.uncontended_ops;
    let runs = paired!(
        s,
        |rep| {
            timed_tasks!(1, ops, |_t| locker.clone(), |locker, _t, i| {
                let key = format!("bench:u:{}:{rep}:{i}", std::process::id());
                let guard = locker.lock(&key).await.expect("acquire");
                guard.release().await.expect("release");
            })
        },
        {
            timed_tasks!(1, ops, |_t| target.raw(), |raw, _t, i| {
                let key = format!("dlock:bench:uf:{}:{rep}:{i}", std::process::id());
                assert!(raw.acquire(&key, &owner(i), TTL).await);
                raw.release(&key, &owner(i), TTL).await;
            })
        },
        {
            match featured_floor(target, s, fencing, (ops, 1, ops)).await {
                Some(ops_per_sec) => Some(ops_per_sec),
                None => peer(target, s, ops, rep).await,
            }
        }
    );
    let note = format!(
        "floor p50 {:.0} µs",
        runs.floor.percentile(50.0).as_secs_f64() * 1e6
    );
    let scenario = named("uncontended", "uncontended, fencing", fencing);
    runs.row(target.name(), scenario, note)
}

/// 64 concurrent tasks over 10 000 keys (shared out so tasks never meet), one Locker / one
/// raw connection, like-for-like (each lock asking for a fencing token when `fencing`).
pub(crate) async fn many_keys(target: &Target, s: &Settings, fencing: bool) -> Row {
    const TASKS: usize = 64;
    const KEYS: usize = 10_000;
    let locker = target.locker_with(TTL, fencing).await;
    let per_task = s.many_keys_ops / TASKS;
    let runs = paired!(
        s,
        |rep| {
            timed_tasks!(TASKS, per_task, |_t| locker.clone(), |locker, t, j| {
                let key = format!("bench:m:{rep}:{}", key_of(t, j, TASKS, KEYS));
                let guard = locker.lock(&key).await.expect("acquire");
                guard.release().await.expect("release");
            })
        },
        {
            timed_tasks!(TASKS, per_task, |_t| target.raw(), |raw, t, j| {
                let key = format!("dlock:bench:mf:{rep}:{}", key_of(t, j, TASKS, KEYS));
                assert!(raw.acquire(&key, &owner(t), TTL).await);
                raw.release(&key, &owner(t), TTL).await;
            })
        },
        { featured_floor(target, s, fencing, (per_task, TASKS, KEYS)).await }
    );
    runs.row(
        target.name(),
        named("many-keys", "many-keys, fencing", fencing),
        format!("{TASKS} tasks, {KEYS} keys"),
    )
}

/// The key of task `task`'s cycle `cycle` among `keys` keys shared out among `tasks` tasks:
/// each task cycles through its own share, so two tasks never meet on a key however far
/// one runs ahead of another.
const fn key_of(task: usize, cycle: usize, tasks: usize, keys: usize) -> usize {
    task + tasks * (cycle % (keys / tasks))
}

impl Paired {
    pub(crate) fn row(&self, backend: &str, scenario: &'static str, note: String) -> Row {
        let label = match backend {
            "zookeeper" => "zookeeper-client's own lock (the peer)",
            "redlock" => "rslock 0.10 (the peer)",
            "postgres" => "dlock's protocol sent raw (fenced grant statement, unlock)",
            _ => "dlock's protocol sent raw (fencing INCR, release script)",
        };
        let note = with_protocol_cost(note, label, self);
        Row::new(
            backend,
            scenario,
            &self.dlock,
            self.floor.ops_per_sec(),
            note,
        )
        .with_ratios(&self.ratios)
    }
}

/// `note`, plus the third measurement of the same load (when taken): dlock's own protocol
/// sent raw, or the peer a user would pick instead, as `label` says — as a share of the
/// floor and dlock's throughput over it, each the median over the repetitions of the ratio
/// within one repetition.
fn with_protocol_cost(note: String, label: &str, runs: &Paired) -> String {
    let (Some(ops), Some(share)) = (runs.protocol_ops, median(runs.protocol_ratios.clone())) else {
        return note;
    };
    let mut text = format!("{note}; {label}: {ops:.0} ops/s ({share:.2} of the floor");
    if runs.protocol_ratios.len() == runs.ratios.len() {
        let versus = runs.ratios.iter().zip(&runs.protocol_ratios);
        if let Some(dlock) = median(versus.map(|(d, p)| d / p).collect()) {
            text.push_str(&format!("; dlock {dlock:.2}× it"));
        }
    }
    text.push(')');
    text
}

/// The uncontended load (`ops` cycles, one task, fresh keys) with the peer a user of this
/// backend would pick instead, where the bench has one (ZooKeeper: `zookeeper-client`'s own
/// lock; RedLock: `rslock`); `None` elsewhere.
async fn peer(target: &Target, s: &Settings, ops: usize, rep: usize) -> Option<f64> {
    if s.only_dlock.is_some() || !matches!(target.name(), "zookeeper" | "redlock") {
        return None;
    }
    let run = timed_tasks!(1, ops, |_t| target.raw(), |raw, _t, i| {
        raw.peer_cycle(&format!("dlock:bench:up:{}:{rep}:{i}", std::process::id()))
            .await
            .expect("a peer");
    });
    Some(run.ops_per_sec())
}

pub(crate) fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied()
}

/// The load of `(per task, tasks, keys)` with the raw commands of dlock's own fenced
/// protocol (the `INCR` and the release script), for the rows whose locks ask for tokens.
async fn featured_floor(
    target: &Target,
    s: &Settings,
    fencing: bool,
    (per_task, tasks, keys): (usize, usize, usize),
) -> Option<f64> {
    if !fencing || !target.tokens_cost_extra() || s.only_dlock.is_some() {
        return None;
    }
    let run = timed_tasks!(tasks, per_task, |_t| target.raw(), |raw, t, j| {
        let key = format!("{{dlock:bench:mx:{}}}", key_of(t, j, tasks, keys));
        raw.cycle_with_fencing_and_notify(&key, &owner(t), TTL)
            .await;
    });
    Some(run.ops_per_sec())
}

/// 8 tasks over 2 Lockers on one key, holding it `hold` each time. Latencies are waits
/// (request → grant); the floor is `1 / (hold + 2 round trips)`.
pub(crate) async fn contended(target: &Target, s: &Settings) -> Row {
    const TASKS: usize = 8;
    let lockers = [target.locker(TTL).await, target.locker(TTL).await];
    let rtt = target.round_trip().await;
    let mut runs = Vec::new();
    let mut handoffs = Vec::new();
    let (mut held_total, mut held_count) = (Duration::ZERO, 0_u32);
    let mut commands_before = None;
    for rep in 0..=s.reps {
        if rep == 1 {
            commands_before = target.server_commands().await;
        }
        let key = format!("bench:c:{rep}");
        let waits = Arc::new(Mutex::new(Vec::new()));
        let handoff = Arc::new(Mutex::new((None::<Instant>, Vec::new())));
        let holds = Arc::new(Mutex::new(Vec::<Duration>::new()));
        let started = Instant::now();
        let mut tasks = Vec::new();
        for t in 0..TASKS {
            let locker = lockers[t % 2].clone();
            let (key, waits, handoff, holds, hold, rounds) = (
                key.clone(),
                waits.clone(),
                handoff.clone(),
                holds.clone(),
                s.hold,
                s.contended_rounds,
            );
            tasks.push(tokio::spawn(async move {
                for _ in 0..rounds {
                    let asked = Instant::now();
                    let guard = locker.lock(&key).await.expect("acquire");
                    let granted = Instant::now();
                    waits.lock().unwrap().push(granted - asked);
                    {
                        let mut h = handoff.lock().unwrap();
                        if let Some(released) = h.0.take() {
                            h.1.push(granted.saturating_duration_since(released));
                        }
                    }
                    tokio::time::sleep(hold).await;
                    let releasing = Instant::now();
                    holds.lock().unwrap().push(releasing - granted);
                    handoff.lock().unwrap().0 = Some(releasing);
                    guard.release().await.expect("release");
                }
            }));
        }
        for task in tasks {
            task.await.expect("task");
        }
        let run = Samples {
            latencies: std::mem::take(&mut *waits.lock().unwrap()),
            elapsed: started.elapsed(),
            ..Samples::default()
        };
        if rep > 0 {
            let held = std::mem::take(&mut *holds.lock().unwrap());
            held_total += held.iter().sum::<Duration>();
            held_count += u32::try_from(held.len()).unwrap_or(u32::MAX);
            runs.push(run);
            handoffs.push(Samples {
                latencies: std::mem::take(&mut handoff.lock().unwrap().1),
                elapsed: Duration::from_secs(1),
                ..Samples::default()
            });
        }
    }
    let commands = match (commands_before, target.server_commands().await) {
        (Some(before), Some(after)) => per_grant(&before, &after, held_count),
        _ => String::new(),
    };
    let run = median_run(runs);
    let mut all_handoffs = Samples::default();
    for h in handoffs {
        all_handoffs.latencies.extend(h.latencies);
    }
    // The timer overshoots the asked-for hold (a 1 ms sleep takes 1.1-2 ms): the floor uses
    // the hold as measured, so the ratio shows what the lock costs, not the timer.
    let mean_hold = held_total / held_count.max(1);
    let floor = 1.0 / (mean_hold + rtt * 2).as_secs_f64();
    let mut note = format!(
        "wait percentiles; {TASKS} tasks / 2 Lockers, hold {:?} (measured {:.2} ms); handoff p50 {:.0} µs p99 {:.0} µs",
        s.hold,
        mean_hold.as_secs_f64() * 1e3,
        all_handoffs.percentile(50.0).as_secs_f64() * 1e6,
        all_handoffs.percentile(99.0).as_secs_f64() * 1e6,
    );
    note.push_str(&commands);
    if let Some(raw) = target
        .raw_contended_handoffs(TASKS, s.contended_rounds, s.hold)
        .await
    {
        let raw = Samples {
            latencies: raw,
            elapsed: Duration::from_secs(1),
            ..Samples::default()
        };
        note.push_str(&format!(
            " (raw, {TASKS} sessions: p50 {:.0} µs p99 {:.0} µs; RTT {:.0} µs)",
            raw.percentile(50.0).as_secs_f64() * 1e6,
            raw.percentile(99.0).as_secs_f64() * 1e6,
            rtt.as_secs_f64() * 1e6,
        ));
    }
    if let Some(peer) = target
        .peer_contended(TASKS, s.contended_rounds / 4, s.hold)
        .await
    {
        note.push_str(&format!(
            "; rslock (the peer), {} rounds per task: {:.0} ops/s ({:.2} of the floor), wait p50 {:.1} ms p99 {:.1} ms max {:.1} ms",
            s.contended_rounds / 4,
            peer.ops_per_sec(),
            peer.ops_per_sec() * (mean_hold + rtt * 2).as_secs_f64(),
            peer.percentile(50.0).as_secs_f64() * 1e3,
            peer.percentile(99.0).as_secs_f64() * 1e3,
            peer.percentile(100.0).as_secs_f64() * 1e3,
        ));
    }
    note.push_str("; floor 1/(measured hold + 2 RTT)");
    Row::new(target.name(), "contended", &run, floor, note)
}

/// What the server ran per grant between two samples of its command counts, e.g.
/// `; per grant the server ran evalsha ×2.00, publish ×1.00` (Redis counts a script and the
/// commands it calls: the scripts and the commands sent alone are the requests, each one round
/// trip unless pipelined).
pub(crate) fn per_grant(
    before: &std::collections::BTreeMap<String, u64>,
    after: &std::collections::BTreeMap<String, u64>,
    grants: u32,
) -> String {
    let grants = f64::from(grants.max(1));
    let ran: Vec<String> = after
        .iter()
        .filter_map(|(name, calls)| {
            let more = calls - before.get(name).copied().unwrap_or(0);
            #[allow(clippy::cast_precision_loss)] // counts far below 2^52
            let rate = more as f64 / grants;
            (rate >= 0.005).then(|| format!("{name} ×{rate:.2}"))
        })
        .collect();
    if ran.is_empty() {
        return String::new();
    }
    format!("; per grant the server ran {}", ran.join(", "))
}

/// Nested acquire + release of a key the task already holds: no round trip.
pub(crate) async fn reentrant(target: &Target, s: &Settings) -> Row {
    let locker = target.locker(TTL).await;
    let outer = locker.lock("bench:r").await.expect("acquire");
    let mut runs = Vec::new();
    for _ in 0..=s.reps {
        let mut run = Samples::default();
        let started = Instant::now();
        for _ in 0..s.uncontended_ops * 10 {
            let t = Instant::now();
            let inner = locker.lock("bench:r").await.expect("re-enter");
            inner.release().await.expect("release");
            run.latencies.push(t.elapsed());
        }
        run.elapsed = started.elapsed();
        runs.push(run);
    }
    runs.remove(0);
    outer.release().await.expect("release");
    let run = median_run(runs);
    let rtt = target.round_trip().await;
    // The floor is one round trip per acquire (what a non-reentrant lock would pay at best).
    let floor = if rtt.is_zero() {
        f64::NAN
    } else {
        1.0 / rtt.as_secs_f64()
    };
    Row::new(
        target.name(),
        "reentrant",
        &run,
        floor,
        format!("vs 1 RTT ({:.0} µs)", rtt.as_secs_f64() * 1e6),
    )
}

/// Many held locks for a while: how many renewal round trips per held lock and second.
pub(crate) async fn watchdog(target: &Target, s: &Settings) -> Row {
    let ttl = Duration::from_secs(3);
    let locker = target.locker(ttl).await;
    let mut guards = Vec::with_capacity(s.watchdog_locks);
    let started = Instant::now();
    let mut run = Samples::default();
    for i in 0..s.watchdog_locks {
        let t = Instant::now();
        guards.push(locker.lock(&format!("bench:w:{i}")).await.expect("acquire"));
        run.latencies.push(t.elapsed());
    }
    run.elapsed = started.elapsed();
    let before = target.server_scripts().await;
    tokio::time::sleep(s.watchdog_for).await;
    let after = target.server_scripts().await;
    let held = guards.iter().filter(|g| g.is_held()).count();
    // Released here, not dropped: a dropped guard's release runs in the background, into the
    // next scenario's run and its server command counts.
    futures_util::stream::iter(guards)
        .for_each_concurrent(256, |guard| async move {
            let _ = guard.release().await;
        })
        .await;
    let note = match (before, after) {
        (Some(b), Some(a)) => {
            let trips = a.saturating_sub(b).saturating_sub(2); // the two INFO-adjacent reads are not scripts; keep conservative
            let periods = s.watchdog_for.as_secs_f64() / (ttl.as_secs_f64() / 3.0);
            format!(
                "{held}/{} held after {:?}; {trips} renewal round trips = {:.4} per lock per renewal period (1/{:.0})",
                s.watchdog_locks,
                s.watchdog_for,
                trips as f64 / periods / s.watchdog_locks as f64,
                periods * s.watchdog_locks as f64 / trips.max(1) as f64
            )
        }
        _ => format!(
            "{held}/{} held after {:?} (renewal round trips are counted on Redis only; memory makes none)",
            s.watchdog_locks, s.watchdog_for
        ),
    };
    Row::new(
        target.name(),
        "watchdog",
        &run,
        f64::NAN,
        format!("latencies: acquiring the locks; {note}"),
    )
}

#[dlock_core::distributed_lock(key = "bench:macro:{i}", locker = locker)]
async fn annotated(locker: &Locker, i: usize) -> Result<usize, dlock_core::Error> {
    Ok(i)
}

/// What `annotated` does, written with the core API: acquire, run the body under the guard
/// (cancelled if the lease is lost), release.
async fn by_hand(locker: &Locker, i: usize) -> Result<usize, dlock_core::Error> {
    // Keys of its own, as fresh as the annotated fn's (on ZooKeeper a fresh name costs its
    // parent node: timing the same names again would time the second run on parents the
    // first one made).
    let key = format!("bench:hand_:{i}");
    let guard = locker.lock(&key).await?;
    let output = guard.run(async { Ok::<_, dlock_core::Error>(i) }).await??;
    guard.release().await?;
    Ok(output)
}

/// An annotated fn against the same code written by hand (the floor): the attribute should
/// cost nothing measurable.
pub(crate) async fn macro_overhead(target: &Target, s: &Settings) -> Row {
    let locker = target.locker(TTL).await;
    let mut annotated_runs = Vec::new();
    let mut hand_runs = Vec::new();
    for rep in 0..=s.reps {
        for by_macro in [true, false] {
            let mut run = Samples::default();
            let started = Instant::now();
            for i in 0..s.uncontended_ops {
                let id = rep * s.uncontended_ops + i;
                let t = Instant::now();
                let output = if by_macro {
                    annotated(&locker, id).await
                } else {
                    by_hand(&locker, id).await
                };
                assert_eq!(output.expect("locked call"), id);
                run.latencies.push(t.elapsed());
            }
            run.elapsed = started.elapsed();
            if rep > 0 {
                if by_macro {
                    annotated_runs.push(run);
                } else {
                    hand_runs.push(run);
                }
            }
        }
    }
    let (run, floor) = (median_run(annotated_runs), median_run(hand_runs));
    let note = format!(
        "floor: the same code by hand (p50 {:.0} µs)",
        floor.percentile(50.0).as_secs_f64() * 1e6
    );
    Row::new(target.name(), "macro", &run, floor.ops_per_sec(), note)
}
