//! The `dlock` command line as users run it: the built binary as a process, against real
//! redis-server, etcd, ZooKeeper and PostgreSQL (and `etcdctl lock`), its commands writing
//! files that show what ran when.
//!
//! - Commands under one key take turns on every network backend: a counter in a file is
//!   read, slept on and written back by each (a double holder loses an increment), and the
//!   fencing tokens they get in their environment strictly increase.
//! - `-n` and `--wait` give up with the conflict status; shared holders and permits.
//! - `--once` runs a fire once (a skip exits 0); `--hold-at-least` outlives the command.
//! - A lost lease (key deleted behind its back, server killed) stops the command: SIGTERM,
//!   then SIGKILL when it ignores SIGTERM; `dlock` exits with 75.
//! - The command's status comes back; SIGTERM to `dlock` reaches the command.
//! - `dlock run` and `etcdctl lock` exclude each other; `inspect` and `release --force`.
//! - Bad input is named, with status 64 (usage) or 69 (service).
//!
//! Waiting for a condition polls it (with a limit); no assertion depends on a sleep being
//! long enough.

#[path = "support/dlock_cli.rs"]
mod dlock_cli;
#[path = "../../tests/support/processes.rs"]
mod processes;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use dlock_cli::{LIMIT, dlock, exit_code, hold, run, status, stderr};
use dlock_harness::{EtcdServer, PostgresServer, ProxyMode, RedisServer, TcpProxy, ZkServer};
use processes::{etcd_keys, etcdctl, signal, until};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;

/// Whether process `pid` exists (a zombie counts: it has not been waited for).
fn alive(pid: &str) -> bool {
    Path::new("/proc").join(pid.trim()).exists()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

// ---- Commands take turns ------------------------------------------------------------------

/// The waiters of `key` the lock service queues, as `dlock inspect --json` shows them.
async fn queued(url: &str, key: &str) -> usize {
    let output = run(url, &["inspect", "--json", key]).await;
    assert_eq!(status(&output), 0, "{}", stderr(&output));
    let info: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    info["waiters"]
        .as_array()
        .expect("a service that queues waiters")
        .len()
}

/// The dlock processes waiting for `key` on a Redis server: the subscribers of its release
/// channel (Redis queues no waiters, each client does).
async fn redis_waiting(server: &RedisServer, key: &str) -> usize {
    let channel = format!("{{dlock:{key}}}:released");
    let reply = server
        .command(&["PUBSUB", "NUMSUB", &channel])
        .await
        .expect("PUBSUB");
    reply
        .lines()
        .last()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// One key, three commands queued behind a holder, and let go at once. Each command checks
/// that it is alone (`mkdir` of a flag directory fails beside another holder: status 99),
/// increments a counter file non-atomically (read, sleep, write: two at once lose one) and
/// appends its `DLOCK_FENCING_TOKEN` to a log. All three succeed, the counter says 3, and
/// the tokens strictly increase in the order the commands ran.
async fn commands_take_turns(url: &str, waiting: impl AsyncFn() -> usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (counter, log) = (dir.path().join("counter"), dir.path().join("tokens"));
    std::fs::write(&counter, "0").expect("write");
    let script = r#"mkdir "$0.inside" || exit 99
n=$(cat "$0"); sleep 0.2; echo $((n + 1)) > "$0"; echo "$DLOCK_FENCING_TOKEN" >> "$1"
rmdir "$0.inside""#;
    let (mut first, _) = hold(url, &[], "turns").await;
    let queued: Vec<Child> = (0..3)
        .map(|_| {
            dlock(url)
                .args(["run", "--wait", "30s", "turns", "--", "sh", "-c", script])
                .arg(&counter)
                .arg(&log)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("dlock runs")
        })
        .collect();
    let give_up = Instant::now() + LIMIT;
    while waiting().await < 3 {
        assert!(Instant::now() < give_up, "the three never queued");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    signal(&first, "TERM");
    assert_eq!(exit_code(&mut first).await, 0);
    for child in queued {
        let output = tokio::time::timeout(LIMIT, child.wait_with_output())
            .await
            .expect("in time")
            .expect("dlock runs");
        assert_eq!(
            status(&output),
            0,
            "99: two inside at once; {}",
            stderr(&output)
        );
    }
    assert_eq!(read(&counter).trim(), "3", "two commands overlapped");
    let tokens: Vec<u64> = read(&log)
        .lines()
        .map(|line| {
            line.parse()
                .expect("a fencing token in DLOCK_FENCING_TOKEN")
        })
        .collect();
    assert_eq!(tokens.len(), 3, "{tokens:?}");
    assert!(
        tokens.windows(2).all(|pair| pair[0] < pair[1]),
        "tokens not strictly increasing: {tokens:?}"
    );
}

#[tokio::test]
async fn commands_take_turns_on_redis() {
    let server = RedisServer::start().await.expect("redis-server");
    commands_take_turns(&server.url(), async || {
        redis_waiting(&server, "turns").await
    })
    .await;
}

#[tokio::test]
async fn commands_take_turns_on_etcd() {
    let server = EtcdServer::start().await.expect("etcd");
    let url = server.url();
    commands_take_turns(&url, async || queued(&url, "turns").await).await;
}

#[tokio::test]
async fn commands_take_turns_on_zookeeper() {
    let server = ZkServer::start().await.expect("zookeeper");
    let url = server.url();
    commands_take_turns(&url, async || queued(&url, "turns").await).await;
}

#[tokio::test]
async fn commands_take_turns_on_postgres() {
    let server = PostgresServer::start().await.expect("postgres");
    let url = server.url();
    commands_take_turns(&url, async || queued(&url, "turns").await).await;
}

/// A command that runs for several ttls keeps its lock on every backend: the watchdog (or
/// the session) renews it, and the early stop before an unrenewed lease runs out never
/// fires while renewals succeed. Meanwhile `-n` stays busy.
#[tokio::test]
async fn a_command_outlives_its_ttl_on_every_backend() {
    let (redis, etcd, zookeeper, postgres) = tokio::join!(
        RedisServer::start(),
        EtcdServer::start(),
        ZkServer::start(),
        PostgresServer::start()
    );
    let (redis, etcd) = (redis.expect("redis-server"), etcd.expect("etcd"));
    let (zookeeper, postgres) = (zookeeper.expect("zookeeper"), postgres.expect("postgres"));
    let urls = [redis.url(), etcd.url(), zookeeper.url(), postgres.url()];
    let long_runs = urls.iter().map(|url| async move {
        let dir = tempfile::tempdir().expect("tempdir");
        let ready = dir.path().join("ready");
        let mut long = dlock(url)
            .args([
                "run",
                "--ttl",
                "2s",
                "long",
                "sh",
                "-c",
                r#"touch "$0"; sleep 6"#,
            ])
            .arg(&ready)
            .stderr(Stdio::piped())
            .spawn()
            .expect("dlock runs");
        let give_up = Instant::now() + LIMIT;
        while !ready.exists() {
            if let Some(exited) = long.try_wait().expect("try_wait") {
                let said = stderr_of(&mut long).await;
                panic!("{url}: dlock exited with {exited} before its command ran: {said}");
            }
            assert!(
                Instant::now() < give_up,
                "{url}: the long command never started"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let busy = run(url, &["run", "-n", "long", "true"]).await;
        assert_eq!(status(&busy), 1, "{url}: {}", stderr(&busy));
        let status = exit_code(&mut long).await;
        let said = stderr_of(&mut long).await;
        assert_eq!(status, 0, "{url}: {said}");
    });
    futures_util::future::join_all(long_runs).await;
}

// ---- Busy ---------------------------------------------------------------------------------

/// While a `dlock run` holds `job`: `-n` exits at once with the `-E` status without running
/// its command; `--wait 1s` gives up after at least 1 s (status 1); a shared request is busy
/// too. Once the holder is signalled it releases, and `-n` gets the lock.
#[tokio::test]
async fn no_wait_and_wait_give_up_with_the_conflict_status() {
    let server = RedisServer::start().await.expect("redis-server");
    let url = server.url();
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = dir.path().join("ran");
    let marker_arg = marker.to_str().expect("utf-8 path");
    let (mut holder, printed) = hold(&url, &[], "job").await;
    assert_eq!(printed["DLOCK_KEY"], "job");
    assert_eq!(printed["DLOCK_BACKEND"], "redis");

    let started = Instant::now();
    let busy = run(&url, &["run", "-n", "-E", "42", "job", "touch", marker_arg]).await;
    let took = started.elapsed();
    assert_eq!(status(&busy), 42, "{}", stderr(&busy));
    // Generous: -n makes one attempt; this only tells "at once" from "waited for something".
    assert!(took < Duration::from_secs(5), "-n took {took:?}");
    assert!(stderr(&busy).contains("busy"), "{}", stderr(&busy));
    assert!(!marker.exists(), "the command ran without the lock");

    let started = Instant::now();
    let waited = run(&url, &["run", "--wait", "1s", "job", "touch", marker_arg]).await;
    let took = started.elapsed();
    assert_eq!(status(&waited), 1, "{}", stderr(&waited));
    assert!(
        took >= Duration::from_secs(1),
        "gave up after {took:?}, before its 1s"
    );
    assert!(took < Duration::from_secs(6), "--wait 1s took {took:?}");
    assert!(!marker.exists(), "the command ran without the lock");
    println!("--wait 1s gave up after {took:?}");

    let shared = run(&url, &["run", "-s", "-n", "job", "true"]).await;
    assert_eq!(status(&shared), 1, "{}", stderr(&shared));

    signal(&holder, "TERM");
    assert_eq!(
        exit_code(&mut holder).await,
        0,
        "a held lock ends well on SIGTERM"
    );
    let free = run(&url, &["run", "-n", "job", "touch", marker_arg]).await;
    assert_eq!(status(&free), 0, "{}", stderr(&free));
    assert!(marker.exists());
}

/// `--and`: KEY and every KEY2 are held together (each busy for others while held, each
/// with its token in `DLOCK_FENCING_TOKENS`); runs naming the same two keys in opposite
/// orders all complete, one at a time (a read-sleep-write counter guarded by both keys).
#[tokio::test]
async fn and_takes_several_keys_together_in_any_order() {
    let server = RedisServer::start().await.expect("redis-server");
    let url = server.url();
    let (mut holder, printed) = hold(&url, &["--and", "from"], "to").await;
    assert_eq!(printed["DLOCK_KEY"], "to");
    assert_eq!(
        printed["DLOCK_KEYS"], "from to",
        "sorted, separated by a space"
    );
    let tokens: Vec<&str> = printed["DLOCK_FENCING_TOKENS"].split(' ').collect();
    assert_eq!(tokens.len(), 2, "{printed:?}");
    assert_eq!(printed["DLOCK_FENCING_TOKEN"], tokens[1], "KEY's own token");
    for key in ["from", "to"] {
        let busy = run(&url, &["run", "-n", key, "true"]).await;
        assert_eq!(status(&busy), 1, "`{key}` was free: {}", stderr(&busy));
    }
    signal(&holder, "TERM");
    assert_eq!(exit_code(&mut holder).await, 0);

    let dir = tempfile::tempdir().expect("tempdir");
    let counter = dir.path().join("counter");
    std::fs::write(&counter, "0").expect("write");
    let script = r#"mkdir "$0.inside" || exit 99
n=$(cat "$0"); sleep 0.1; echo $((n + 1)) > "$0"
rmdir "$0.inside""#;
    let runs: Vec<Child> = (0..6)
        .map(|at| {
            let (key, other) = if at % 2 == 0 { ("a", "b") } else { ("b", "a") };
            dlock(&url)
                .args([
                    "run", "--wait", "30s", "--and", other, key, "--", "sh", "-c", script,
                ])
                .arg(&counter)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("dlock runs")
        })
        .collect();
    for child in runs {
        let output = tokio::time::timeout(LIMIT, child.wait_with_output())
            .await
            .expect("no deadlock: every run ends in time")
            .expect("dlock runs");
        assert_eq!(
            status(&output),
            0,
            "99: two inside at once; {}",
            stderr(&output)
        );
    }
    assert_eq!(read(&counter).trim(), "6", "two runs overlapped");
    let conflict = run(&url, &["run", "--and", "b", "--once", "1h", "a", "true"]).await;
    assert_eq!(
        status(&conflict),
        64,
        "--and with --once: {}",
        stderr(&conflict)
    );
}

/// `--once`: two runs of one fire, the second started while the first runs, run the command
/// once — the second exits 0 saying `skipped: running` — and a third after the first
/// succeeded says `skipped: done` (`-E` still sets the status). A fire whose command failed
/// leaves no record: the next run of it runs. `--hold-at-least` keeps a lock whose command
/// ended at once taken until then, after `dlock` exited.
#[tokio::test]
async fn once_runs_a_fire_once_and_a_skip_exits_0() {
    let server = RedisServer::start().await.expect("redis-server");
    let url = server.url();
    let dir = tempfile::tempdir().expect("tempdir");
    let (started, ran) = (dir.path().join("started"), dir.path().join("ran"));
    let script = format!(
        "touch {}; sleep 2; echo ran >> {}",
        started.display(),
        ran.display()
    );
    let mut first = dlock(&url)
        .args([
            "run",
            "--once",
            "1h",
            "--shell",
            "report-2026-11-25",
            &script,
        ])
        .stderr(Stdio::piped())
        .spawn()
        .expect("dlock runs");
    until("the first run started its command", LIMIT, || {
        started.exists()
    })
    .await;
    let second = run(
        &url,
        &[
            "run",
            "--once",
            "1h",
            "--shell",
            "report-2026-11-25",
            &script,
        ],
    )
    .await;
    assert_eq!(status(&second), 0, "{}", stderr(&second));
    assert!(
        stderr(&second).contains("skipped: running"),
        "{}",
        stderr(&second)
    );
    assert_eq!(
        exit_code(&mut first).await,
        0,
        "{}",
        stderr_of(&mut first).await
    );
    let third = run(
        &url,
        &[
            "run",
            "--once",
            "1h",
            "--shell",
            "report-2026-11-25",
            &script,
        ],
    )
    .await;
    assert_eq!(status(&third), 0, "{}", stderr(&third));
    assert!(
        stderr(&third).contains("skipped: done"),
        "{}",
        stderr(&third)
    );
    let told = run(
        &url,
        &[
            "run",
            "--once",
            "1h",
            "-E",
            "3",
            "report-2026-11-25",
            "true",
        ],
    )
    .await;
    assert_eq!(status(&told), 3, "{}", stderr(&told));
    assert_eq!(read(&ran), "ran\n", "the fire ran more than once");

    let failed = run(&url, &["run", "--once", "1h", "flaky-2026-11-25", "false"]).await;
    assert_eq!(
        status(&failed),
        1,
        "the command's own status: {}",
        stderr(&failed)
    );
    let again = run(&url, &["run", "--once", "1h", "flaky-2026-11-25", "true"]).await;
    assert_eq!(status(&again), 0, "{}", stderr(&again));
    assert!(
        !stderr(&again).contains("skipped"),
        "a failed fire was skipped: {}",
        stderr(&again)
    );

    let sent = Instant::now();
    let short = run(&url, &["run", "--hold-at-least", "2s", "short", "true"]).await;
    assert_eq!(status(&short), 0, "{}", stderr(&short));
    let busy = run(&url, &["run", "-n", "short", "true"]).await;
    assert_eq!(status(&busy), 1, "the lock was not kept: {}", stderr(&busy));
    let waited = run(&url, &["run", "--wait", "10s", "short", "true"]).await;
    assert_eq!(status(&waited), 0, "{}", stderr(&waited));
    assert!(
        sent.elapsed() >= Duration::from_secs(2),
        "the lock kept for 2s was free after {:?}",
        sent.elapsed()
    );
}

/// Shared holders run side by side and keep an exclusive one out; a semaphore of 2 lets two
/// in and turns the third away; a different permit count is a usage error naming both.
#[tokio::test]
async fn shared_holders_and_permits() {
    let server = RedisServer::start().await.expect("redis-server");
    let url = server.url();

    let (mut reader, _) = hold(&url, &["--shared"], "catalog").await;
    let second_reader = run(&url, &["run", "-s", "-n", "catalog", "true"]).await;
    assert_eq!(status(&second_reader), 0, "{}", stderr(&second_reader));
    let writer = run(&url, &["run", "-n", "catalog", "true"]).await;
    assert_eq!(status(&writer), 1, "a writer got in beside a reader");
    signal(&reader, "TERM");
    assert_eq!(exit_code(&mut reader).await, 0);

    let (mut first, _) = hold(&url, &["--permits", "2"], "renderers").await;
    let (mut second, _) = hold(&url, &["--permits", "2"], "renderers").await;
    let third = run(
        &url,
        &[
            "run",
            "--permits",
            "2",
            "-n",
            "-E",
            "9",
            "renderers",
            "true",
        ],
    )
    .await;
    assert_eq!(status(&third), 9, "a third permit of 2: {}", stderr(&third));
    let other_limit = run(&url, &["run", "--permits", "3", "-n", "renderers", "true"]).await;
    assert_eq!(status(&other_limit), 64, "{}", stderr(&other_limit));
    assert!(
        stderr(&other_limit).contains('2') && stderr(&other_limit).contains('3'),
        "{}",
        stderr(&other_limit)
    );
    signal(&first, "TERM");
    signal(&second, "TERM");
    assert_eq!(exit_code(&mut first).await, 0);
    assert_eq!(exit_code(&mut second).await, 0);
}

// ---- A lost lease stops the command -------------------------------------------------------

/// Nanoseconds since the epoch, as `date +%s%N` prints them in the commands here.
fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos()
}

/// A `date +%s%N` a command wrote.
fn time_in(path: &Path) -> u128 {
    read(path)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("a time in {path:?}"))
}

async fn stderr_of(child: &mut Child) -> String {
    let mut said = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut child.stderr.take().expect("piped"), &mut said)
        .await
        .expect("stderr");
    said
}

/// The lock's Redis key is deleted behind the holder's back. At its next renewal `dlock`
/// learns it lost the lock: the command — which ignores SIGTERM, noting when it came — and
/// the process it started in the background get SIGTERM, then SIGKILL no sooner than
/// `--kill-after` later, and `dlock` exits with 75.
#[tokio::test]
async fn a_lost_lease_terminates_then_kills_the_command() {
    let server = RedisServer::start().await.expect("redis-server");
    let dir = tempfile::tempdir().expect("tempdir");
    let (pid_file, background_pid, got) = (
        dir.path().join("pid"),
        dir.path().join("background"),
        dir.path().join("got"),
    );
    let script = r#"trap 'date +%s%N > "$2"' TERM
sh -c 'echo $$ > "$0"; exec sleep 60' "$1" &
echo $$ > "$0"
while :; do sleep 0.1; done"#;
    let mut dlock_run = dlock(&server.url())
        .args([
            "run",
            "--ttl",
            "3s",
            "--kill-after",
            "1s",
            "job",
            "--",
            "sh",
            "-c",
            script,
        ])
        .args([&pid_file, &background_pid, &got])
        .stderr(Stdio::piped())
        .spawn()
        .expect("dlock runs");
    until("the command starts", LIMIT, || {
        !read(&pid_file).is_empty() && !read(&background_pid).is_empty()
    })
    .await;
    let (pid, background) = (read(&pid_file), read(&background_pid));
    let deleted = server.command(&["DEL", "{dlock:job}"]).await.expect("DEL");
    assert_eq!(deleted.trim(), "1", "the lock's key");

    assert_eq!(exit_code(&mut dlock_run).await, 75);
    // The trap's `date` runs a little after SIGTERM arrived; half the grace tells a kill
    // after the grace from one at once.
    let killed_by = now_ns();
    let terminated = time_in(&got);
    assert!(
        killed_by - terminated >= Duration::from_millis(500).as_nanos(),
        "SIGKILL came {} ms after SIGTERM, not after --kill-after",
        (killed_by - terminated) / 1_000_000
    );
    assert!(!alive(&pid), "the command survived its lost lease");
    assert!(
        !alive(&background),
        "what the command started survived its lost lease"
    );
    let said = stderr_of(&mut dlock_run).await;
    assert!(said.contains("lost the lock `job`"), "{said}");
    assert!(said.contains("did not exit within 1s of SIGTERM"), "{said}");
}

/// A command that takes a while to finish after SIGTERM, and a command queued behind it on
/// the same key: the first notes when it ended, the next when it began.
struct Handover {
    ready: PathBuf,
    ended: PathBuf,
    started: PathBuf,
    _dir: tempfile::TempDir,
}

impl Handover {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        Self {
            ready: dir.path().join("ready"),
            ended: dir.path().join("ended"),
            started: dir.path().join("started"),
            _dir: dir,
        }
    }

    /// `dlock run flags… job` on `url`, whose command spends `cleanup` seconds in its
    /// SIGTERM handler before it notes the time and exits; returned once it runs.
    async fn first(&self, url: &str, flags: &[&str], cleanup: &str) -> Child {
        let script = format!(
            r#"trap 'sleep {cleanup}; date +%s%N > "$1"; exit 0' TERM
touch "$0"; while :; do sleep 0.05; done"#
        );
        let first = dlock(url)
            .arg("run")
            .args(flags)
            .args(["job", "--", "sh", "-c", &script])
            .args([&self.ready, &self.ended])
            .stderr(Stdio::piped())
            .spawn()
            .expect("dlock runs");
        until("the first command starts", LIMIT, || self.ready.exists()).await;
        first
    }

    /// `dlock run --wait 30s job` on `url`, whose command notes when it began.
    fn next(&self, url: &str) -> Child {
        dlock(url)
            .args(["run", "--wait", "30s", "job", "--", "sh", "-c"])
            .arg(r#"date +%s%N > "$0""#)
            .arg(&self.started)
            .spawn()
            .expect("dlock runs")
    }

    /// Whether the next command began after the first had ended.
    fn in_turn(&self) -> bool {
        time_in(&self.started) > time_in(&self.ended)
    }
}

/// `--max-hold 1s`: the command is stopped after a second, and the lock is released only
/// once it is gone — its SIGTERM handler takes 0.3 s to finish, and the command queued
/// behind it starts after that, not at the cap.
#[tokio::test]
async fn max_hold_stops_the_command_before_the_lock_is_given_up() {
    let server = RedisServer::start().await.expect("redis-server");
    let url = server.url();
    let handover = Handover::new();
    let mut capped = handover.first(&url, &["--max-hold", "1s"], "0.3").await;
    let mut next = handover.next(&url);
    assert_eq!(exit_code(&mut capped).await, 75);
    assert_eq!(exit_code(&mut next).await, 0);
    assert!(
        handover.in_turn(),
        "the next command started before the capped one had finished"
    );
    let said = stderr_of(&mut capped).await;
    assert!(said.contains("--max-hold"), "{said}");
}

/// The holder's connection is cut (a TCP proxy between it and Redis): its renewals fail, so
/// `dlock` stops the command `--kill-after` before the lease would run out — not when it has
/// run out. A `dlock run` waiting on a direct connection gets the lock when Redis expires
/// the key, and its command starts only after the first one (whose SIGTERM handler takes
/// 0.5 s) has finished.
#[tokio::test]
async fn a_command_whose_lease_cannot_be_renewed_is_gone_before_it_expires() {
    let server = RedisServer::start().await.expect("redis-server");
    let proxy = TcpProxy::start(server.addr().parse().expect("address"))
        .await
        .expect("proxy");
    let handover = Handover::new();
    let proxied = format!("redis://{}", proxy.address());
    let flags = ["--ttl", "3s", "--kill-after", "1s"];
    let mut cut_off = handover.first(&proxied, &flags, "0.5").await;
    let mut next = handover.next(&server.url());
    proxy.set(ProxyMode::Cut);
    assert_eq!(exit_code(&mut cut_off).await, 75);
    let said = stderr_of(&mut cut_off).await;
    assert!(said.contains("could not be renewed"), "{said}");
    assert_eq!(exit_code(&mut next).await, 0);
    assert!(
        handover.in_turn(),
        "the next command started before the cut-off one had finished"
    );
}

/// The PostgreSQL server is killed while a command runs: the session that held the lock is
/// gone, the command (which obeys SIGTERM) is stopped, and `dlock` exits with 75.
#[tokio::test]
async fn a_stopped_server_stops_the_command() {
    let server = PostgresServer::start().await.expect("postgres");
    let dir = tempfile::tempdir().expect("tempdir");
    let pid_file = dir.path().join("pid");
    let mut dlock_run = dlock(&server.url())
        .args([
            "run",
            "--ttl",
            "5s",
            "job",
            "--",
            "sh",
            "-c",
            r#"echo $$ > "$0"; exec sleep 60"#,
        ])
        .arg(&pid_file)
        .spawn()
        .expect("dlock runs");
    until("the command starts", LIMIT, || !read(&pid_file).is_empty()).await;
    let pid = read(&pid_file);
    server.kill().await.expect("kill postgres");
    assert_eq!(exit_code(&mut dlock_run).await, 75);
    assert!(!alive(&pid), "the command survived its lost lease");
}

// ---- The command's status and signals -----------------------------------------------------

/// Sends `signal` to a `dlock run` whose command traps it (noting its name, exiting with
/// `status`): the command got it, and its status is dlock's.
async fn passes_on(url: &str, signal_name: &str, status: i32) {
    let dir = tempfile::tempdir().expect("tempdir");
    let got = dir.path().join("got");
    let script = format!(
        r#"trap 'echo {signal_name} > "$0"; exit {status}' {signal_name}; echo ready; while :; do sleep 0.1; done"#
    );
    let mut dlock_run = dlock(url)
        .args(["run", "job", "sh", "-c", &script])
        .arg(&got)
        .stdout(Stdio::piped())
        .spawn()
        .expect("dlock runs");
    let mut lines = BufReader::new(dlock_run.stdout.take().expect("piped")).lines();
    let ready = tokio::time::timeout(LIMIT, lines.next_line())
        .await
        .expect("in time");
    assert_eq!(ready.expect("read").as_deref(), Some("ready"));
    signal(&dlock_run, signal_name);
    assert_eq!(
        exit_code(&mut dlock_run).await,
        status,
        "the command's status from its trap"
    );
    assert_eq!(
        read(&got).trim(),
        signal_name,
        "the command got SIG{signal_name}"
    );
}

/// The command's exit status is `dlock`'s, `--shell` runs a script, a missing command is
/// 127, a command killed by a signal gives 128 + its number, SIGTERM and SIGINT sent to
/// `dlock` reach the command, whose status (from its trap) comes back, and `--url` wins
/// over `DLOCK_URL`.
#[tokio::test]
async fn the_status_comes_back_and_sigterm_reaches_the_command() {
    let server = RedisServer::start().await.expect("redis-server");
    let url = server.url();
    assert_eq!(
        status(&run(&url, &["run", "job", "sh", "-c", "exit 7"]).await),
        7
    );
    assert_eq!(
        status(&run(&url, &["run", "--shell", "job", "--", "exit", "5"]).await),
        5
    );
    let missing = run(&url, &["run", "job", "no-such-command-here"]).await;
    assert_eq!(status(&missing), 127);
    assert!(
        stderr(&missing).contains("no-such-command-here"),
        "{}",
        stderr(&missing)
    );
    assert_eq!(
        status(&run(&url, &["run", "job", "sh", "-c", "kill -KILL $$"]).await),
        137
    );

    passes_on(&url, "TERM", 3).await;
    // SIGINT too: stdin is no terminal here, so the command has a process group of its own
    // and gets only what dlock passes on.
    passes_on(&url, "INT", 4).await;

    // --url wins over a DLOCK_URL that would not even parse.
    let overridden = dlock("bogus://x")
        .args(["run", "--url", &url, "job", "true"])
        .output()
        .await
        .expect("dlock runs");
    assert_eq!(status(&overridden), 0, "{}", stderr(&overridden));
    // The lock was released: the next run gets it at once.
    assert_eq!(status(&run(&url, &["run", "-n", "job", "true"]).await), 0);
}

// ---- etcdctl lock, inspect, release --force -----------------------------------------------

/// `etcdctl lock nightly` holds: `dlock run --key-prefix '' -n nightly` is busy, and a
/// waiting `dlock run` queues (its key appears beside etcdctl's) and runs its command only
/// after etcdctl unlocks. Then the reverse: a `dlock run` hold keeps `etcdctl lock nightly
/// echo ran` queued until it is signalled.
#[tokio::test]
async fn dlock_run_and_etcdctl_lock_exclude_each_other() {
    let server = EtcdServer::start().await.expect("etcd");
    let (url, endpoint) = (server.url(), server.endpoint());
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = dir.path().join("ran");

    let mut etcdctl_holder = etcdctl(&endpoint)
        .args(["lock", "--ttl", "10", "nightly"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("etcdctl (Debian package etcd-client) not found: run scripts/install-test-deps.sh");
    let mut etcdctl_out = BufReader::new(etcdctl_holder.stdout.take().expect("piped")).lines();
    let key = tokio::time::timeout(LIMIT, etcdctl_out.next_line())
        .await
        .expect("in time");
    assert!(key.expect("read").expect("a key").starts_with("nightly/"));

    let busy = run(&url, &["run", "--key-prefix", "", "-n", "nightly", "true"]).await;
    assert_eq!(
        status(&busy),
        1,
        "dlock got a lock etcdctl holds: {}",
        stderr(&busy)
    );

    let mut waiter = dlock(&url)
        .args([
            "run",
            "--key-prefix",
            "",
            "nightly",
            "sh",
            "-c",
            r#"date +%s%N > "$0""#,
        ])
        .arg(&marker)
        .spawn()
        .expect("dlock runs");
    let give_up = Instant::now() + LIMIT;
    while etcd_keys(&endpoint, "nightly/").await.len() < 2 {
        assert!(Instant::now() < give_up, "dlock never queued its key");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !marker.exists(),
        "dlock ran its command while etcdctl held the lock"
    );
    let unlocked = now_ns();
    signal(&etcdctl_holder, "TERM");
    assert_eq!(exit_code(&mut waiter).await, 0);
    assert!(
        time_in(&marker) > unlocked,
        "dlock ran its command before etcdctl was told to unlock"
    );
    let _ = etcdctl_holder.wait().await;

    let (mut holder, _) = hold(&url, &["--key-prefix", ""], "nightly").await;
    let mut etcdctl_waiter = etcdctl(&endpoint)
        .args(["lock", "nightly", "date", "+%s%N"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("etcdctl");
    let give_up = Instant::now() + LIMIT;
    while etcd_keys(&endpoint, "nightly/").await.len() < 2 {
        assert!(Instant::now() < give_up, "etcdctl never queued its key");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        etcdctl_waiter.try_wait().expect("try_wait").is_none(),
        "etcdctl ran its command while dlock held the lock"
    );
    let released = now_ns();
    signal(&holder, "TERM");
    assert_eq!(exit_code(&mut holder).await, 0);
    let output = tokio::time::timeout(LIMIT, etcdctl_waiter.wait_with_output())
        .await
        .expect("etcdctl gets the lock after dlock's release")
        .expect("etcdctl");
    assert!(output.status.success(), "{output:?}");
    let ran: u128 = String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .expect("etcdctl's command printed the time");
    assert!(
        ran > released,
        "etcdctl ran its command before dlock was told to release"
    );
}

/// `dlock inspect --json` shows a hold's fencing token, mode and expiry; `release --force`
/// breaks it (status 0), the holder learns at its next renewal and exits with 75; the lock
/// is then free, and a second `release --force` finds nothing (status 1).
#[tokio::test]
async fn inspect_shows_the_holder_and_release_force_breaks_it() {
    let server = EtcdServer::start().await.expect("etcd");
    let url = server.url();
    let (mut holder, printed) = hold(&url, &["--ttl", "6s"], "report").await;
    let token: u64 = printed["DLOCK_FENCING_TOKEN"].parse().expect("a token");
    assert_eq!(printed["DLOCK_BACKEND"], "etcd");

    let inspected = run(&url, &["inspect", "--json", "report"]).await;
    assert_eq!(status(&inspected), 0, "{}", stderr(&inspected));
    let info: serde_json::Value = serde_json::from_slice(&inspected.stdout).expect("JSON");
    assert_eq!(info["key"], "report");
    assert_eq!(info["name"], "dlock:report");
    assert_eq!(info["backend"], "etcd");
    let holders = info["holders"].as_array().expect("holders");
    assert_eq!(holders.len(), 1, "{info}");
    assert_eq!(holders[0]["mode"], "exclusive");
    assert_eq!(holders[0]["fencing_token"], token, "{info}");
    assert!(holders[0]["expires_in_ms"].as_u64().is_some(), "{info}");
    assert_eq!(info["waiters"], serde_json::json!([]), "{info}");
    let text = run(&url, &["inspect", "report"]).await;
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("held by 1") && text.contains(&format!("fencing token {token}")),
        "{text}"
    );

    let broken = run(&url, &["release", "--force", "report"]).await;
    assert_eq!(status(&broken), 0, "{}", stderr(&broken));
    assert_eq!(
        exit_code(&mut holder).await,
        75,
        "the holder learns it lost the lock"
    );
    let after = run(&url, &["inspect", "--json", "report"]).await;
    let info: serde_json::Value = serde_json::from_slice(&after.stdout).expect("JSON");
    assert_eq!(info["holders"], serde_json::json!([]), "{info}");
    assert_eq!(
        status(&run(&url, &["release", "--force", "report"]).await),
        1
    );
}

// ---- Bad input ----------------------------------------------------------------------------

/// Each mistake gets a message naming it, and status 64 (usage) or 69 (service), in time.
#[tokio::test]
async fn bad_input_is_named() {
    let usage = [
        (vec!["run", "--ttl", "10x", "job", "true"], "10x"),
        (vec!["run", "--url", "bogus://h", "job", "true"], "bogus"),
        (vec!["run", "--url", "memory://", "job", "true"], "memory"),
        (
            vec!["run", "--ttl", "2s", "--kill-after", "2s", "job", "true"],
            "--kill-after",
        ),
        (vec!["run", "--wait", "1s", "-n", "job", "true"], "--wait"),
        (vec!["release", "job"], "--force"),
        (
            vec!["run", "--config", "/no/such/dlock.toml", "job", "true"],
            "/no/such/dlock.toml",
        ),
    ];
    for (args, named) in usage {
        let output = run("redis://127.0.0.1:1", &args).await;
        assert_eq!(status(&output), 64, "{args:?}: {}", stderr(&output));
        assert!(
            stderr(&output).contains(named),
            "{args:?} should name {named}: {}",
            stderr(&output)
        );
    }

    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("dlock.toml");
    std::fs::write(&file, "ttl = \"ten\"\n").expect("write");
    let output = run(
        "",
        &[
            "run",
            "--config",
            file.to_str().expect("utf-8"),
            "job",
            "true",
        ],
    )
    .await;
    assert_eq!(status(&output), 64, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("ten") && stderr(&output).contains("ttl"),
        "{}",
        stderr(&output)
    );

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    for url in [
        format!("redis://127.0.0.1:{port}"),
        format!("etcd://127.0.0.1:{port}"),
    ] {
        let started = Instant::now();
        let output = run(&url, &["run", "job", "true"]).await;
        println!(
            "{url}: status {} after {:?}",
            status(&output),
            started.elapsed()
        );
        assert_eq!(status(&output), 69, "{url}: {}", stderr(&output));
        assert!(
            stderr(&output).contains("unavailable") || stderr(&output).contains("timed out"),
            "{}",
            stderr(&output)
        );
    }
}
