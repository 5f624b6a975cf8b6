//! dlock-bench: every scenario next to its raw-client floor, in one process and run.
//!
//! Run with: `cargo run --release -p dlock-examples --features bench --bin dlock-bench --
//! --servers auto` (starts redis-server and etcd itself; memory needs no server), or
//! `--url redis://127.0.0.1:6379` / `--url etcd://127.0.0.1:2379`. The scenarios, their
//! floors and the measurement method are in `README.md` beside this file.

mod held;
mod hot_key;
mod jobs;
mod modes;
mod redis_raw;
mod redlock;
mod scenarios;
mod sets;
mod stats;
mod target;
mod warm;

use std::process::ExitCode;
use std::time::Duration;

use scenarios::Settings;
use stats::Row;
use target::Target;

#[derive(Clone)]
struct Args {
    urls: Vec<String>,
    auto_servers: bool,
    /// With `--servers auto`: the backends to start and measure (all of [`target::STARTED`]
    /// when empty).
    backends: Vec<String>,
    /// With `--servers auto`: each scenario on servers started for it (not with `--quick`).
    server_per_scenario: bool,
    scenario: String,
    json: bool,
    settings: Settings,
}

/// The arguments, or `None` when `--help` asked for the usage text.
fn parse_args() -> Result<Option<Args>, String> {
    let mut args = Args {
        urls: Vec::new(),
        auto_servers: false,
        backends: Vec::new(),
        server_per_scenario: true,
        scenario: "all".to_owned(),
        json: false,
        settings: Settings {
            reps: 3,
            min_measured: Duration::from_secs(5),
            settle_within: Some(scenarios::SETTLED_WITHIN),
            warm_up: warm::WARM_UP,
            uncontended_ops: 2_000,
            many_keys_ops: 20_000,
            contended_rounds: 200,
            hold: Duration::from_millis(1),
            watchdog_locks: 10_000,
            watchdog_for: Duration::from_secs(10),
            held: vec![1_000, 10_000, 100_000],
            hot: vec![(10, 2), (100, 10), (1000, 50), (1000, 2)],
            only_dlock: None,
        },
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match flag.as_str() {
            "--url" => args.urls.push(value("--url")?),
            "--servers" => {
                let v = value("--servers")?;
                if v != "auto" {
                    return Err(format!("--servers {v}: only `auto` is known"));
                }
                args.auto_servers = true;
            }
            "--backend" => {
                for name in value("--backend")?.split(',') {
                    let name = name.trim();
                    if name.is_empty() {
                        continue;
                    }
                    if !target::STARTED.contains(&name) {
                        return Err(format!(
                            "--backend {name}: expected one of {}",
                            target::STARTED.join(", ")
                        ));
                    }
                    args.backends.push(name.to_owned());
                }
            }
            "--scenario" => args.scenario = value("--scenario")?,
            "--json" => args.json = true,
            "--reps" => {
                args.settings.reps = value("--reps")?
                    .parse()
                    .map_err(|e| format!("--reps: {e}"))?
            }
            "--hold" => {
                args.settings.hold = humantime::parse_duration(&value("--hold")?)
                    .map_err(|e| format!("--hold: {e}"))?;
            }
            "--watchdog-for" => {
                args.settings.watchdog_for = humantime::parse_duration(&value("--watchdog-for")?)
                    .map_err(|e| format!("--watchdog-for: {e}"))?;
            }
            "--held" => {
                args.settings.held = value("--held")?
                    .split(',')
                    .map(|n| n.trim().parse().map_err(|e| format!("--held {n}: {e}")))
                    .collect::<Result<_, _>>()?;
            }
            "--hot" => {
                args.settings.hot = value("--hot")?
                    .split(',')
                    .map(|pair| {
                        let parse = |n: &str| n.trim().parse::<usize>().ok().filter(|n| *n > 0);
                        pair.split_once(':')
                            .and_then(|(w, l)| Some((parse(w)?, parse(l)?)))
                            .ok_or_else(|| format!("--hot {pair}: expected WAITERS:LOCKERS"))
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--quick" => {
                let s = &mut args.settings;
                (
                    s.reps,
                    s.uncontended_ops,
                    s.many_keys_ops,
                    s.contended_rounds,
                    s.watchdog_locks,
                    s.watchdog_for,
                ) = (1, 100, 500, 10, 200, Duration::from_secs(1));
                s.held = vec![1_000, 10_000];
                s.min_measured = Duration::ZERO;
                s.settle_within = None;
                s.warm_up = Duration::ZERO;
                args.server_per_scenario = false;
            }
            "--only" => {
                args.settings.only_dlock = match value("--only")?.as_str() {
                    "dlock" => Some(true),
                    "floor" => Some(false),
                    other => return Err(format!("--only {other}: expected dlock or floor")),
                };
            }
            "--help" | "-h" => return Ok(None),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    if !args.backends.is_empty() && !args.auto_servers {
        return Err("--backend picks among the servers of --servers auto: add it".to_owned());
    }
    if args.settings.reps == 0 {
        return Err("--reps 0: at least one repetition is measured".to_owned());
    }
    if args.urls.is_empty() && !args.auto_servers {
        args.urls.push("memory://".to_owned());
    }
    Ok(Some(args))
}

const USAGE: &str = "\
usage: dlock-bench [--url URL]... [--servers auto [--backend NAME,...]] [--scenario NAME|all] [--json] [--reps N]
                   [--hold DURATION] [--watchdog-for DURATION] [--held N,N,...]
                   [--hot W:L,W:L,...] [--quick] [--only dlock|floor]

Runs each scenario (uncontended, many-keys, contended, read-mostly, semaphore, reentrant,
macro, watchdog, once, sets) against each backend next to its raw-client floor, in the same run, and
prints ops/s, p50/p99/max and the ratio to the floor. `--scenario held` (not part of `all`: it
takes minutes per backend) holds 1,000, 10,000 and 100,000 locks (--held) for three ttls each.
`--scenario hot-key` (not part of `all` either) puts W waiters over L Lockers on one key, three
grants each with the --hold (--hot; 10:2, 100:10, 1000:50 and 1000:2 by default): commands per
grant, grants per Locker, the longest wait. Without --url or --servers: memory only. --servers auto starts a
redis-server, an etcd, a ZooKeeper, a PostgreSQL and five redis-servers for RedLock (scripts/install-test-deps.sh
installs them); --backend names the ones to start and measure (memory, redis, etcd, zookeeper,
postgres, redlock; all by default).

uncontended, many-keys, once and sets run dlock and the floor in pairs of alternating order,
adding pairs until 5 s were measured and the median ratio's 95 % interval is within 10 % of it
(at most 40 pairs), and report the median paired ratio; the others report the median of --reps
repetitions after one warm-up (beside Curator, warm-ups for at least 10 s). With --servers auto
each scenario runs on servers started for it (one set for a --quick run), a ZooKeeper after
10 s of load that warms its JVM. The method and how to read the figures:
examples/src/bin/dlock_bench/README.md.";

/// Keeps `row`, and shows it on stderr at once: a long run that fails later keeps what it
/// measured.
fn measured(rows: &mut Vec<Row>, row: Row) {
    eprintln!("dlock-bench: {}", row.markdown());
    rows.push(row);
}

async fn run_target(target: &Target, args: &Args) -> Vec<Row> {
    let s = &args.settings;
    let wanted = |name: &str| args.scenario == "all" || args.scenario == name;
    let mut rows = Vec::new();
    // Where a fencing token costs the backend extra work, locks that ask for one get rows
    // of their own, against the same floor.
    let fencing_rows: &[bool] = if target.tokens_cost_extra() {
        &[false, true]
    } else {
        &[false]
    };
    for &fencing in fencing_rows {
        if wanted("uncontended") {
            measured(&mut rows, scenarios::uncontended(target, s, fencing).await);
        }
        if wanted("many-keys") {
            measured(&mut rows, scenarios::many_keys(target, s, fencing).await);
        }
    }
    if wanted("contended") {
        measured(&mut rows, scenarios::contended(target, s).await);
    }
    // The modes a backend has (RedLock has only the exclusive lock).
    let capabilities = target.locker(Duration::from_secs(30)).await.capabilities();
    if wanted("read-mostly") && capabilities.read_write {
        measured(&mut rows, modes::read_mostly(target, s).await);
    }
    if wanted("semaphore") && capabilities.semaphore {
        measured(&mut rows, modes::semaphore(target, s).await);
    }
    if wanted("reentrant") {
        measured(&mut rows, scenarios::reentrant(target, s).await);
    }
    if wanted("macro") {
        measured(&mut rows, scenarios::macro_overhead(target, s).await);
    }
    if wanted("watchdog") {
        measured(&mut rows, scenarios::watchdog(target, s).await);
    }
    if wanted("sets") {
        measured(&mut rows, sets::lock_all(target, s).await);
        measured(&mut rows, sets::lock_all_acquire(target, s).await);
    }
    if args.scenario == "hot-key" {
        for &(waiters, lockers) in &s.hot {
            measured(
                &mut rows,
                Box::pin(hot_key::hot_key(target, waiters, lockers, s.hold)).await,
            );
        }
    }
    if args.scenario == "held" {
        for &locks in &s.held {
            measured(&mut rows, held::held(target, locks).await);
        }
    }
    if wanted("once") && capabilities.keeps {
        measured(&mut rows, jobs::once_run(target, s).await);
        measured(&mut rows, jobs::once_skip(target, s).await);
    }
    rows
}

/// The scenarios of `--scenario`, one by one: every scenario of `all`, or the one named.
fn scenario_names(scenario: &str) -> Vec<&str> {
    if scenario == "all" {
        SCENARIOS.to_vec()
    } else {
        vec![scenario]
    }
}

/// The scenarios of `--scenario all`, in the order they run.
const SCENARIOS: [&str; 10] = [
    "uncontended",
    "many-keys",
    "contended",
    "read-mostly",
    "semaphore",
    "reentrant",
    "macro",
    "watchdog",
    "sets",
    "once",
];

/// Runs the scenarios of `args` on `target`, inside a task, as a service would run: code
/// polled by `block_on` on the main thread pays a thread hop on every wake-up.
async fn measure(target: Target, args: Args) -> Vec<Row> {
    tokio::spawn(async move { run_target(&target, &args).await })
        .await
        .expect("a scenario panicked")
}

/// The stack of the runtime's threads: a debug build (CI's smoke run) of the scenarios'
/// deeply nested futures overflowed the default 2 MiB while measuring ZooKeeper.
const THREAD_STACK: usize = 8 << 20;

fn main() -> ExitCode {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(THREAD_STACK)
        .build()
        .expect("a tokio runtime")
        .block_on(run())
}

async fn run() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("dlock-bench: {message}\n\n{USAGE}");
            return ExitCode::FAILURE;
        }
    };
    let mut rows = Vec::new();
    if args.auto_servers {
        let wanted =
            |kind: &str| args.backends.is_empty() || args.backends.iter().any(|b| b == kind);
        for kind in target::STARTED.into_iter().filter(|kind| wanted(kind)) {
            eprintln!("dlock-bench: measuring {kind} ...");
            // Each scenario on servers of its own, started for it: a row does not depend on
            // what the scenarios before it left on the server (etcd's history and its
            // compactions, PostgreSQL's tables, ZooKeeper's per-node statistics). A
            // `--quick` run, which measures nothing, shares one set.
            let runs: Vec<Args> = if args.server_per_scenario {
                scenario_names(&args.scenario)
                    .into_iter()
                    .map(|scenario| Args {
                        scenario: scenario.to_owned(),
                        ..args.clone()
                    })
                    .collect()
            } else {
                vec![args.clone()]
            };
            for run in runs {
                let target = match Target::started(kind).await {
                    Ok(target) => target,
                    Err(error) => {
                        eprintln!("dlock-bench: {error}");
                        return ExitCode::FAILURE;
                    }
                };
                if warm::needs_warm_up(&target) {
                    warm::warm_up(&target, args.settings.warm_up).await;
                }
                rows.extend(measure(target, run).await);
            }
        }
    }
    for url in &args.urls {
        match Target::from_url(url).await {
            Ok(target) => {
                eprintln!("dlock-bench: measuring {} ...", target.name());
                rows.extend(measure(target, args.clone()).await);
            }
            Err(error) => {
                eprintln!("dlock-bench: {error}");
                return ExitCode::FAILURE;
            }
        }
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).expect("rows serialize")
        );
    } else {
        stats::print_table(&rows);
    }
    ExitCode::SUCCESS
}
