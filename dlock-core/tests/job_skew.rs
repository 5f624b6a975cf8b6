//! Scheduled jobs across skewed clocks, with real processes: on Redis, etcd, ZooKeeper and
//! PostgreSQL at once, five worker processes whose clocks libfaketime offsets by −30 s, −10 s, 0,
//! +10 s and +30 s fire one job every 2 s **of their own clock**, 24 fires, naming each fire
//! from their own clock ([`Locker::once`]). Every fire id must run exactly once: no duplicate,
//! no miss. The +30 s worker (the first to fire each id) is SIGSTOPped in the middle of one
//! run, past its ttl, until another worker ran that fire; its run must not overlap: the
//! resource the workers write to checks fencing tokens and counts a run only when its token
//! is the newest for the fire.
//!
//! A worker is this test binary run again with `DLOCK_TEST_SKEW_WORKER` set
//! ([`skew_worker`]); the resource is a directory of files, each written under a mutex.

mod support;

use std::fmt::Write as _;
use std::io::{Read as _, Seek as _, Write as _};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dlock_core::{DlockConfig, Locker, Once};
use dlock_harness::{EtcdServer, PostgresServer, RedisServer, ZkServer};
use tokio::io::{AsyncBufReadExt, BufReader};

/// `<url> <first fire, unix s> <resource dir> <worker name> <fire to be stopped in>`.
const WORKER: &str = "DLOCK_TEST_SKEW_WORKER";
/// The workers' clock offsets, as `faketime -f` takes them.
const OFFSETS: [&str; 5] = ["-30s", "-10s", "+0s", "+10s", "+30s"];
const FIRES: u64 = 24;
const PERIOD_S: u64 = 2;
const TTL: Duration = Duration::from_secs(2);
/// How long a run works, between its two writes to the resource.
const WORK: Duration = Duration::from_millis(300);

/// A worker process (see the module docs); without `DLOCK_TEST_SKEW_WORKER` it does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skew_worker() {
    let Ok(spec) = std::env::var(WORKER) else {
        return;
    };
    let words: Vec<&str> = spec.split(' ').collect();
    let [url, first, resource, name, stopped_fire] = words[..] else {
        panic!("{WORKER}: {spec}");
    };
    let first: u64 = first.parse().expect("first fire");
    let stopped_fire: u64 = stopped_fire.parse().expect("stopped fire");
    let resource = Resource(PathBuf::from(resource));
    let config = DlockConfig::from_toml_str(&format!(
        "backend = \"{url}\"\nttl = \"{}ms\"\noperation_timeout = \"2s\"",
        TTL.as_millis()
    ))
    .expect("config");
    let locker = Locker::connect(&config).await.expect("connect");
    let mut fires = Vec::new();
    for k in 0..FIRES {
        let fire = first + k * PERIOD_S;
        // Fire at `fire` by this process's own (shifted) clock.
        tokio::time::sleep(until_own_clock(fire)).await;
        let (locker, resource, name) = (locker.clone(), resource.clone(), name.to_owned());
        fires.push(tokio::spawn(async move {
            let outcome = locker
                .once("skew-job", fire)
                .fencing(true)
                .retention(Duration::from_secs(300))
                .run(async {
                    let token = dlock_core::current_lock()
                        .and_then(|lock| lock.fencing_token())
                        .expect("a fencing token");
                    resource.write(fire, &name, token, "begin");
                    if fire == stopped_fire {
                        println!("RUNNING {fire}");
                        // Stopped here by the test, past the ttl.
                        tokio::time::sleep(WORK * 10).await;
                    }
                    tokio::time::sleep(WORK).await;
                    resource.write(fire, &name, token, "end");
                    Ok::<_, dlock_core::Error>(())
                })
                .await;
            match outcome {
                Ok(Once::Ran(())) => println!("RAN {fire}"),
                Ok(Once::Skipped(why)) => println!("SKIPPED {fire} {why}"),
                Err(error) => println!("FAILED {fire} {error}"),
            }
        }));
    }
    for fire in fires {
        fire.await.expect("a fire panicked");
    }
    locker.shutdown().await.expect("shutdown");
    println!("DONE");
}

/// Debian's libfaketime for multi-threaded programs, checked to be there.
fn faketime_library() -> String {
    let path = format!(
        "/usr/lib/{}-linux-gnu/faketime/libfaketimeMT.so.1",
        std::env::consts::ARCH
    );
    assert!(
        std::path::Path::new(&path).exists(),
        "{path} is missing: scripts/install-test-deps.sh installs it (Debian's faketime)"
    );
    path
}

/// How long until this process's clock reads `unix_s`.
fn until_own_clock(unix_s: u64) -> Duration {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970");
    Duration::from_secs(unix_s).saturating_sub(now)
}

/// The workers' shared resource: per fire, a file of `<event> <worker> <token>` lines, written
/// under a mutex of its own (a lock directory). An `end` whose token is lower than one the fire has seen is
/// refused (`stale`): the fenced store a real job writes to.
#[derive(Debug, Clone)]
struct Resource(PathBuf);

impl Resource {
    fn file(&self, fire: u64) -> PathBuf {
        self.0.join(fire.to_string())
    }

    fn write(&self, fire: u64, worker: &str, token: u64, event: &str) {
        // A directory as the store's mutex across processes (`mkdir` is atomic).
        let mutex = self.0.join(format!("{fire}.lock"));
        while let Err(error) = std::fs::create_dir(&mutex) {
            assert_eq!(error.kind(), std::io::ErrorKind::AlreadyExists, "{error}");
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(self.file(fire))
            .expect("resource file");
        let mut seen = String::new();
        file.rewind().expect("rewind");
        file.read_to_string(&mut seen).expect("read");
        let newest = seen
            .lines()
            .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
            .max()
            .unwrap_or(0);
        let event = if token < newest { "stale" } else { event };
        writeln!(file, "{event} {worker} {token}").expect("write");
        drop(file);
        std::fs::remove_dir(&mutex).expect("unlock");
    }

    /// The fire's lines.
    fn lines(&self, fire: u64) -> Vec<String> {
        std::fs::read_to_string(self.file(fire))
            .map(|text| text.lines().map(str::to_owned).collect())
            .unwrap_or_default()
    }
}

/// Runs the five workers against `url` and checks every fire ran exactly once.
async fn every_fire_runs_once(url: &str) {
    let resource = tempfile::tempdir().expect("resource dir");
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    // The +30 s worker fires first, 30 s before us: leave it time to start and connect.
    let first = (now + 40).next_multiple_of(PERIOD_S);
    let stopped_fire = first + 10 * PERIOD_S;
    let mut workers = Vec::new();
    for offset in OFFSETS {
        let name = format!("clock{offset}");
        let stopped = if offset == "+30s" { stopped_fire } else { 0 };
        let spec = format!(
            "{url} {first} {} {name} {stopped}",
            resource.path().display()
        );
        // The library itself, not the `faketime` wrapper (which forks): the test signals
        // the worker's own process.
        let child = tokio::process::Command::new(std::env::current_exe().expect("test binary"))
            .args(["skew_worker", "--exact", "--nocapture", "--test-threads=1"])
            .env("LD_PRELOAD", faketime_library())
            .env("FAKETIME", offset)
            .env(WORKER, spec)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start a worker");
        workers.push((name, child));
    }
    let mut outputs = Vec::new();
    for (name, mut child) in workers {
        let pid = child.id().expect("running");
        let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        outputs.push(tokio::spawn(follow(
            name,
            pid,
            lines,
            stopped_fire,
            Resource(resource.path().to_owned()),
            child,
        )));
    }
    let mut said = String::new();
    for output in outputs {
        let _ = writeln!(said, "{}", output.await.expect("worker follower"));
    }
    let mut report = String::new();
    let (mut duplicates, mut misses, mut stale) = (0, 0, 0);
    for k in 0..FIRES {
        let fire = first + k * PERIOD_S;
        let lines = Resource(resource.path().to_owned()).lines(fire);
        let ends = lines.iter().filter(|l| l.starts_with("end ")).count();
        stale += lines.iter().filter(|l| l.starts_with("stale ")).count();
        match ends {
            0 => misses += 1,
            1 => {}
            _ => duplicates += 1,
        }
        if ends != 1 || fire == stopped_fire {
            let _ = writeln!(report, "fire {fire}: {lines:?}");
        }
    }
    println!(
        "{url}: {FIRES} fires, {duplicates} duplicated, {misses} missed, {stale} stale writes refused\n{report}"
    );
    assert_eq!(
        (duplicates, misses),
        (0, 0),
        "on {url}, fires must run exactly once:\n{report}\nworkers said:\n{said}"
    );
    let stopped = Resource(resource.path().to_owned()).lines(stopped_fire);
    assert!(
        stopped.iter().any(|l| l.starts_with("begin clock+30s")),
        "the stopped worker never began fire {stopped_fire}: {stopped:?}"
    );
    assert!(
        !stopped.iter().any(|l| l.starts_with("end clock+30s")),
        "the worker stopped past its ttl finished its run: {stopped:?}"
    );
}

/// Follows one worker's output to its end; for the +30 s worker, stops it in the middle of
/// fire `stopped_fire` until another worker ran that fire to its end. Returns what it said.
async fn follow(
    name: String,
    pid: u32,
    mut lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    stopped_fire: u64,
    resource: Resource,
    mut child: tokio::process::Child,
) -> String {
    let mut said = format!("{name}:");
    let give_up = tokio::time::Instant::now() + Duration::from_secs(240);
    loop {
        let line = tokio::time::timeout_at(give_up, lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("{name} never finished; it said {said}"))
            .expect("read");
        let Some(line) = line else { break };
        let _ = write!(said, " [{line}]");
        if line.ends_with(&format!("RUNNING {stopped_fire}")) {
            signal(pid, "STOP");
            let ran_by_another = || {
                resource
                    .lines(stopped_fire)
                    .iter()
                    .any(|l| l.starts_with("end ") && !l.contains(&name))
            };
            let limit = tokio::time::Instant::now() + Duration::from_secs(60);
            while !ran_by_another() {
                assert!(
                    tokio::time::Instant::now() < limit,
                    "no other worker ran fire {stopped_fire} while {name} was stopped: {:?}",
                    resource.lines(stopped_fire)
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            signal(pid, "CONT");
        }
    }
    let status = child.wait().await.expect("wait");
    assert!(status.success(), "{name} failed: {said}");
    said
}

fn signal(pid: u32, name: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill -{name} {pid}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fire_runs_once_across_skewed_clocks() {
    if std::env::var(WORKER).is_ok() {
        return;
    }
    let redis = RedisServer::start().await.expect("redis-server");
    let etcd = EtcdServer::start().await.expect("etcd");
    let zookeeper = ZkServer::start().await.expect("zookeeper");
    let postgres = PostgresServer::start().await.expect("postgres");
    let urls = [redis.url(), etcd.url(), zookeeper.url(), postgres.url()];
    futures_util::future::join_all(urls.iter().map(|url| every_fire_runs_once(url))).await;
}
