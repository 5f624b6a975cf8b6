//! Lock sets under load, with real processes: on Redis, etcd, ZooKeeper and PostgreSQL at
//! once, four worker processes of four tasks each lock random subsets (one to five keys) of 20
//! keys, named in random order, for 60 s (`DLOCK_SOAK_SECS`), some acquires cancelled at a
//! random moment and some sets dropped instead of released. Under each set, every key's
//! resource gets a non-atomic read-sleep-write. Then: no lost update (each key's file counts
//! every increment the workers made), no overlap (a marker file per key), no acquire that
//! waited past its bound, every task made progress, and every key is free at the end.
//!
//! A worker is this test binary run again with `DLOCK_TEST_SET_WORKER` set ([`set_worker`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use dlock_core::{DlockConfig, Error, Locker};
use dlock_harness::{EtcdServer, PostgresServer, RedisServer, ZkServer};
use rand::Rng as _;
use rand::seq::SliceRandom as _;

/// `<url> <resource dir> <worker> <seconds>`.
const WORKER: &str = "DLOCK_TEST_SET_WORKER";
const PROCESSES: usize = 4;
const TASKS: usize = 4;
const KEYS: usize = 20;
/// The wait bound of every acquire: none may run out.
const BOUND: Duration = Duration::from_secs(15);
const TTL: Duration = Duration::from_secs(3);

fn key_name(at: usize) -> String {
    format!("soak:{at:02}")
}

/// A worker process (see the module docs); without `DLOCK_TEST_SET_WORKER` it does nothing.
/// It prints `TASK <n> <rounds>` per task, `COUNT <key> <increments>` per key, and `ISSUES
/// <overlaps> <timeouts> <errors>`, then `DONE`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_worker() {
    let Ok(spec) = std::env::var(WORKER) else {
        return;
    };
    let words: Vec<&str> = spec.split(' ').collect();
    let [url, resource, worker, seconds] = words[..] else {
        panic!("{WORKER}: {spec}");
    };
    let resource = PathBuf::from(resource);
    let until = Instant::now() + Duration::from_secs(seconds.parse().expect("seconds"));
    let config = DlockConfig::from_toml_str(&format!(
        "backend = \"{url}\"\nttl = \"{}ms\"\noperation_timeout = \"3s\"",
        TTL.as_millis()
    ))
    .expect("config");
    let locker = Locker::connect(&config).await.expect("connect");
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let (locker, resource) = (locker.clone(), resource.clone());
        let who = format!("{worker}.{task}");
        tasks.push(tokio::spawn(async move {
            run_task(&locker, &resource, &who, until).await
        }));
    }
    let mut counts = [0_u64; KEYS];
    let (mut overlaps, mut timeouts, mut errors) = (0, 0, 0);
    for (task, outcome) in tasks.into_iter().enumerate() {
        let outcome = outcome.await.expect("a task panicked");
        println!("TASK {task} {}", outcome.rounds);
        for (count, more) in counts.iter_mut().zip(outcome.counts) {
            *count += more;
        }
        overlaps += outcome.overlaps;
        timeouts += outcome.timeouts;
        errors += outcome.errors;
    }
    for (at, count) in counts.iter().enumerate() {
        println!("COUNT {} {count}", key_name(at));
    }
    println!("ISSUES {overlaps} {timeouts} {errors}");
    locker.shutdown().await.expect("shutdown");
    println!("DONE");
}

#[derive(Default)]
struct TaskOutcome {
    rounds: u64,
    counts: Vec<u64>,
    overlaps: u64,
    timeouts: u64,
    errors: u64,
}

async fn run_task(locker: &Locker, resource: &Path, who: &str, until: Instant) -> TaskOutcome {
    let mut outcome = TaskOutcome {
        counts: vec![0; KEYS],
        ..TaskOutcome::default()
    };
    while Instant::now() < until {
        let (subset, cancel_after, drop_it) = {
            let mut rng = rand::rng();
            let mut all: Vec<usize> = (0..KEYS).collect();
            all.shuffle(&mut rng);
            all.truncate(rng.random_range(1..=5));
            let cancel = rng
                .random_bool(0.15)
                .then(|| Duration::from_millis(rng.random_range(0..30)));
            (all, cancel, rng.random_bool(0.2))
        };
        let names: Vec<String> = subset.iter().map(|&at| key_name(at)).collect();
        let request = locker.lock_all(&names).wait(BOUND);
        let set = match cancel_after {
            Some(after) => match tokio::time::timeout(after, request.into_future()).await {
                Ok(set) => set,
                Err(_) => continue, // cancelled mid-acquire
            },
            None => request.await,
        };
        let set = match set {
            Ok(set) => set,
            Err(Error::Busy { key, waited, .. }) => {
                println!("TIMEOUT {who} {key} after {waited:?}");
                outcome.timeouts += 1;
                continue;
            }
            Err(error) => {
                println!("ERROR {who} {error}");
                outcome.errors += 1;
                continue;
            }
        };
        for &at in &subset {
            if !increment(resource, &key_name(at), who).await {
                outcome.overlaps += 1;
            }
            outcome.counts[at] += 1;
        }
        if drop_it {
            drop(set); // released in the background
        } else if let Err(error) = set.release().await {
            println!("ERROR {who} release: {error}");
            outcome.errors += 1;
        }
        outcome.rounds += 1;
    }
    outcome
}

/// A non-atomic read-sleep-write of `key`'s counter file, marked with an `.inside` file
/// created exclusively: `false` if another holder was inside.
async fn increment(resource: &Path, key: &str, who: &str) -> bool {
    let marker = resource.join(format!("{key}.inside"));
    let alone = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&marker)
        .is_ok();
    if !alone {
        println!("OVERLAP {who} {key}");
    }
    let file = resource.join(key);
    let before: u64 = std::fs::read_to_string(&file)
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(2)).await;
    std::fs::write(&file, (before + 1).to_string()).expect("write the counter");
    if alone {
        std::fs::remove_file(&marker).expect("remove the marker");
    }
    alone
}

/// Runs the workers against `url`; returns a report, or panics naming what went wrong.
async fn soak(url: String, seconds: u64) -> String {
    let resource = tempfile::tempdir().expect("resource dir");
    let mut workers = Vec::new();
    for worker in 0..PROCESSES {
        let spec = format!("{url} {} {worker} {seconds}", resource.path().display());
        let child = tokio::process::Command::new(std::env::current_exe().expect("test binary"))
            .args(["set_worker", "--exact", "--nocapture", "--test-threads=1"])
            .env(WORKER, spec)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start a worker");
        workers.push(child);
    }
    let mut counted: BTreeMap<String, u64> = BTreeMap::new();
    let mut said = String::new();
    let (mut overlaps, mut timeouts, mut errors, mut idle_tasks) = (0, 0, 0, 0);
    for (worker, child) in workers.into_iter().enumerate() {
        let output =
            tokio::time::timeout(Duration::from_secs(seconds + 120), child.wait_with_output())
                .await
                .unwrap_or_else(|_| panic!("{url}: worker {worker} never finished"))
                .expect("wait");
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success() && text.contains("DONE"),
            "{url}: worker {worker} failed: {text}"
        );
        for line in text.lines() {
            let words: Vec<&str> = line.split(' ').collect();
            match words[..] {
                ["TASK", _, "0"] => idle_tasks += 1,
                ["COUNT", key, count] => {
                    *counted.entry(key.to_owned()).or_default() +=
                        count.parse::<u64>().expect("count");
                }
                ["ISSUES", o, t, e] => {
                    overlaps += o.parse::<u64>().expect("overlaps");
                    timeouts += t.parse::<u64>().expect("timeouts");
                    errors += e.parse::<u64>().expect("errors");
                }
                ["TIMEOUT" | "ERROR" | "OVERLAP", ..] => {
                    let _ = writeln!(said, "worker {worker}: {line}");
                }
                _ => {}
            }
        }
    }
    let mut lost = 0;
    let mut total = 0;
    for (key, count) in &counted {
        let stored: u64 = std::fs::read_to_string(resource.path().join(key))
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(0);
        lost += count.saturating_sub(stored) + stored.saturating_sub(*count);
        total += count;
    }
    // Nothing left: every key free for one attempt of a new client.
    let config = DlockConfig::from_toml_str(&format!("backend = \"{url}\"")).expect("config");
    let checker = Locker::connect(&config).await.expect("connect");
    let names: Vec<String> = (0..KEYS).map(key_name).collect();
    let left = checker.lock_all(&names).wait(Duration::ZERO).await;
    assert!(
        left.is_ok(),
        "{url}: keys left held after the workers ended: {left:?}"
    );
    drop(left);
    checker.shutdown().await.expect("shutdown");
    let report = format!(
        "{url}: {total} increments over {KEYS} keys; {lost} lost, {overlaps} overlaps, \
         {timeouts} waits past {BOUND:?}, {errors} errors, {idle_tasks} tasks without progress"
    );
    println!("{report}\n{said}");
    assert_eq!(
        (lost, overlaps, timeouts, errors, idle_tasks),
        (0, 0, 0, 0, 0),
        "{report}\n{said}"
    );
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_sets_in_random_orders_lose_nothing_and_never_stall() {
    if std::env::var(WORKER).is_ok() {
        return;
    }
    let seconds: u64 = std::env::var("DLOCK_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let redis = RedisServer::start().await.expect("redis-server");
    let etcd = EtcdServer::start().await.expect("etcd");
    let zookeeper = ZkServer::start().await.expect("zookeeper");
    let postgres = PostgresServer::start().await.expect("postgres");
    let urls = [redis.url(), etcd.url(), zookeeper.url(), postgres.url()];
    let reports =
        futures_util::future::join_all(urls.into_iter().map(|url| soak(url, seconds))).await;
    for report in reports {
        println!("{report}");
    }
}
