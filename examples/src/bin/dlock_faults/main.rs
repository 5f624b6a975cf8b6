//! dlock-faults: several worker processes contend for one lock on a real backend while
//! faults are injected at random times, and a fenced resource of the runner's own records
//! and checks every read and write. See `README.md` beside this file.
//!
//! `cargo run --release -p dlock-examples --features faults --bin dlock-faults` runs every
//! backend under every fault for a minute each and prints the table; `-- --short` is the
//! quick mix the test suite runs.

mod cell;
mod checks;
mod faults;
mod report;
mod resource;
mod shapes;
mod worker;

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cell::CellPlan;
use faults::Fault;
use report::Row;
use shapes::{Shape, ShapeKind};
use worker::WorkerArgs;

/// Every lock's lease: short, so that faults resolve within seconds.
pub(crate) const TTL: Duration = Duration::from_secs(3);

/// Each round trip's bound.
pub(crate) const OPERATION_TIMEOUT: Duration = Duration::from_secs(1);

/// The longest the lock may stay idle while workers wait, after the previous holder was
/// last heard of and the last fault healed: a lease, and time to reconnect or elect.
pub(crate) const LIVENESS_BOUND: Duration = Duration::from_secs(13);

const USAGE: &str = "usage: dlock-faults [--short] [--election] [--seconds N] [--seed N] [--workers N] \
                     [--shapes redis,redis-cluster,redis-sentinel,redlock,etcd,etcd-3,zk,zk-3,postgres] \
                     [--faults pause-holder,kill-holder,kill-server,pause-server,cut-connection,delay-replies]";

struct Args {
    short: bool,
    /// The election workload: workers campaign (`Locker::campaign`) rather than lock.
    election: bool,
    seconds: Option<u64>,
    seed: u64,
    workers: usize,
    shapes: Vec<ShapeKind>,
    faults: Vec<Fault>,
}

/// The runner's arguments (everything after the program name).
fn parse_args(args: &[String]) -> Result<Args, String> {
    let mut parsed = Args {
        short: false,
        election: false,
        seconds: None,
        seed: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |t| t.as_nanos() as u64),
        workers: 4,
        shapes: ShapeKind::ALL.to_vec(),
        faults: Fault::ALL.to_vec(),
    };
    let mut remaining = args.iter();
    while let Some(flag) = remaining.next() {
        let mut value = || {
            remaining
                .next()
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        let number = |v: &String| {
            v.parse::<u64>()
                .map_err(|_| format!("{flag} {v}: not a number"))
        };
        match flag.as_str() {
            "--short" => parsed.short = true,
            "--election" => parsed.election = true,
            "--seconds" => parsed.seconds = Some(number(value()?)?),
            "--seed" => parsed.seed = number(value()?)?,
            "--workers" => {
                parsed.workers = usize::try_from(number(value()?)?).map_err(|e| e.to_string())?;
                if parsed.workers < 2 {
                    return Err("--workers: at least 2 are needed to contend".to_owned());
                }
            }
            "--shapes" => parsed.shapes = names(value()?, ShapeKind::parse, "--shapes")?,
            "--faults" => parsed.faults = names(value()?, Fault::parse, "--faults")?,
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    Ok(parsed)
}

/// A comma-separated `list` of names, each parsed with `parse`.
fn names<T>(list: &str, parse: fn(&str) -> Option<T>, flag: &str) -> Result<Vec<T>, String> {
    list.split(',')
        .map(|name| parse(name).ok_or_else(|| format!("{flag}: unknown name `{name}`")))
        .collect()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("worker") {
        let Some(worker) = WorkerArgs::parse(&args[1..]) else {
            eprintln!("dlock-faults worker: bad arguments {args:?}");
            return ExitCode::from(2);
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build();
        return runtime.map_or(ExitCode::FAILURE, |rt| rt.block_on(worker::run(worker)));
    }
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let parsed = match parse_args(&args) {
        Ok(parsed) => parsed,
        Err(message) => {
            eprintln!("dlock-faults: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build();
    match runtime.map(|rt| rt.block_on(run(&parsed, &args))) {
        Ok(Ok(true)) => ExitCode::SUCCESS,
        Ok(Ok(false)) => ExitCode::FAILURE,
        Ok(Err(message)) => {
            eprintln!("dlock-faults: {message}");
            ExitCode::from(2)
        }
        Err(error) => {
            eprintln!("dlock-faults: {error}");
            ExitCode::from(2)
        }
    }
}

/// Runs every cell and prints the report; whether nothing unexpected was found.
async fn run(args: &Args, command_line: &[String]) -> Result<bool, String> {
    let seconds = args.seconds.unwrap_or(if args.short { 15 } else { 60 });
    let replay: Vec<&str> = command_line
        .iter()
        .map(String::as_str)
        .filter(|a| !a.is_empty())
        .collect();
    let mut replay = without_seed(&replay);
    let seed = args.seed.to_string();
    replay.extend(["--seed", &seed]);
    println!(
        "dlock-faults: {} workload, seed {seed}, {} workers, ttl {:?}, {seconds} s per run; \
         replay with `dlock-faults {}`\n",
        if args.election { "election" } else { "lock" },
        args.workers,
        TTL,
        replay.join(" "),
    );
    let mut rows = Vec::new();
    let mut skipped = Vec::new();
    let mut no_election = Vec::new();
    for &kind in &args.shapes {
        if args.election && !kind.elects() {
            no_election.push(kind);
            continue;
        }
        eprintln!("dlock-faults: starting {}", kind.title());
        let shape = Shape::start(kind).await.map_err(|e| e.to_string())?;
        let (runnable, unrunnable): (Vec<Fault>, Vec<Fault>) = args
            .faults
            .iter()
            .partition(|fault| kind.proxied() || !fault.needs_proxies());
        skipped.extend(unrunnable.iter().map(|fault| (kind, *fault)));
        let cells: Vec<(String, Vec<Fault>)> = if args.short {
            vec![("mixed".to_owned(), runnable)]
        } else {
            runnable
                .iter()
                .map(|f| (f.name().to_owned(), vec![*f]))
                .collect()
        };
        for (label, faults) in cells {
            if faults.is_empty() {
                continue;
            }
            let plan = CellPlan {
                shape: &shape,
                faults,
                workers: args.workers,
                duration: Duration::from_secs(seconds),
                key: format!(
                    "faults:{}:{}{label}",
                    kind.name(),
                    if args.election { "election:" } else { "" }
                ),
                seed: cell_seed(args.seed, kind, &label),
                election: args.election,
            };
            let findings = cell::run(&plan).await?;
            let row = Row {
                shape: kind,
                label,
                findings,
            };
            eprint!(
                "{}",
                report::table(std::slice::from_ref(&row))
                    .lines()
                    .nth(2)
                    .unwrap_or("")
            );
            eprintln!();
            rows.push(row);
        }
    }
    println!("{}", report::table(&rows));
    let notes = report::footnotes(&rows);
    if !notes.is_empty() {
        println!("{notes}\n");
    }
    for (kind, fault) in skipped {
        println!(
            "- {} under {}: not run (its client follows the addresses the servers or \
             sentinels give, which a per-worker proxy cannot stand in for).",
            kind.title(),
            fault.name()
        );
    }
    for kind in no_election {
        println!(
            "- {}: no election workload (RedLock has no term to give a leader: \
             `Error::Unsupported`).",
            kind.title()
        );
    }
    let failed: Vec<&Row> = rows.iter().filter(|r| !r.unexpected().is_empty()).collect();
    for row in &failed {
        println!(
            "FAILED: {} under {}: {:?}",
            row.shape.title(),
            row.label,
            row.unexpected()
        );
    }
    Ok(failed.is_empty())
}

/// The seed of one run: the run's seed mixed with the shape's and the cell's names (FNV-1a),
/// so that `--shapes` and `--faults` picking one cell out replay that cell's schedule.
fn cell_seed(seed: u64, shape: ShapeKind, label: &str) -> u64 {
    let text = format!("{}/{label}", shape.name());
    text.bytes()
        .fold(seed ^ 0xcbf2_9ce4_8422_2325, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        })
}

/// The command line without its `--seed N`, to which the printed seed is then added.
fn without_seed<'a>(args: &[&'a str]) -> Vec<&'a str> {
    let mut kept = Vec::new();
    let mut remaining = args.iter();
    while let Some(&arg) = remaining.next() {
        if arg == "--seed" {
            remaining.next();
        } else {
            kept.push(arg);
        }
    }
    kept
}
