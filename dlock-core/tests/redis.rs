//! The Redis backend against real servers: failures (server down, restart, wrong key type,
//! eviction policy), contention without double holders, notification-driven wake-ups, no
//! starvation by a releaser that re-requests at once, and the line of writers: a hand-off
//! wakes only the first, and a vanished first writer holds it up one claim window.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dlock_core::backend::{BackendUrl, RedisBackend};
use dlock_core::{DlockConfig, Error, Locker, LostReason};
use dlock_harness::{ProxyMode, RedisServer, TcpProxy};
use support::processes::eventually;

const OPERATION_TIMEOUT: Duration = Duration::from_millis(500);

async fn locker(url: &str, ttl: Duration) -> Locker {
    support::connect::locker_at(url, ttl, OPERATION_TIMEOUT).await
}

fn assert_backend_failure(outcome: &Result<impl std::fmt::Debug, Error>) {
    assert!(
        matches!(
            outcome,
            Err(Error::Unavailable { .. } | Error::Timeout { .. })
        ),
        "expected a backend error or timeout, got {outcome:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_errors_within_the_operation_timeout() {
    let server = RedisServer::start().await.unwrap();
    let url = server.url();
    let locker = locker(&url, Duration::from_secs(5)).await;
    server.kill().await.unwrap();

    let started = Instant::now();
    let outcome = locker.lock("k").wait(Duration::from_secs(10)).await;
    assert_backend_failure(&outcome);
    assert!(
        started.elapsed() < OPERATION_TIMEOUT * 3,
        "took {:?}",
        started.elapsed()
    );

    let started = Instant::now();
    let config = DlockConfig::from_toml_str(&format!(
        "backend = \"{url}\"\noperation_timeout = \"500ms\""
    ))
    .unwrap();
    assert_backend_failure(&Locker::connect(&config).await);
    assert!(
        started.elapsed() < OPERATION_TIMEOUT * 3,
        "connect took {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_without_persistence_loses_the_lease_at_the_next_renewal() {
    let server = RedisServer::start().await.unwrap();
    let ttl = Duration::from_secs(1);
    let locker = locker(&server.url(), ttl).await;
    let guard = locker.lock("job").await.unwrap();
    server.restart().await.unwrap(); // same port, empty data set
    let restarted = Instant::now();
    let reason = tokio::time::timeout(ttl * 2, guard.lost())
        .await
        .expect("loss not detected");
    assert_eq!(
        reason,
        LostReason::NotOwner,
        "the renewal should find the key gone"
    );
    assert!(
        restarted.elapsed() <= ttl,
        "detected after {:?}",
        restarted.elapsed()
    );
    assert!(!guard.is_held());
    // The lock can be taken again on the restarted server.
    let other = locker.clone();
    tokio::spawn(async move { other.try_lock("job").await.map(drop) })
        .await
        .unwrap()
        .expect("free after the restart");
}

/// Asserts that locking `key` (asking for a fencing token or not) fails with a backend error
/// naming the Redis key `name` and the foreign `kind` found there.
async fn assert_names_foreign_key(
    locker: &Locker,
    (key, fencing): (&str, bool),
    name: &str,
    kind: &str,
) {
    match locker.lock(key).fencing(fencing).wait(Duration::ZERO).await {
        Err(Error::Refused { source, .. }) => {
            let message = source.to_string();
            assert!(
                message.contains(name) && message.contains(kind),
                "{message}"
            );
        }
        other => panic!("expected a backend error naming {name}, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_another_type_is_a_clear_error_naming_it() {
    let server = RedisServer::start().await.unwrap();
    server
        .command(&["HSET", "{dlock:cart}", "item", "1"])
        .await
        .unwrap();
    let locker = locker(&server.url(), Duration::from_secs(5)).await;
    for fencing in [false, true] {
        assert_names_foreign_key(&locker, ("cart", fencing), "`{dlock:cart}`", "hash").await;
    }
    assert_eq!(
        server
            .command(&["HGET", "{dlock:cart}", "item"])
            .await
            .unwrap(),
        "1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_key_of_another_type_is_named_and_the_lock_is_not_left_taken() {
    let server = RedisServer::start().await.unwrap();
    server
        .command(&["SADD", "{dlock:cart}:fence", "x"])
        .await
        .unwrap();
    let locker = locker(&server.url(), Duration::from_secs(5)).await;
    assert_names_foreign_key(&locker, ("cart", true), "`{dlock:cart}:fence`", "set").await;
    // In a set taken in one step, the error names that member's fence, not the set's first.
    match locker
        .lock_all(["basket", "cart", "shelf"])
        .fencing(true)
        .wait(Duration::ZERO)
        .await
    {
        Err(Error::Refused { source, .. }) => {
            let message = source.to_string();
            assert!(
                message.contains("`{dlock:cart}:fence`") && message.contains("set"),
                "{message}"
            );
        }
        other => panic!("expected a backend error naming cart's fence, got {other:?}"),
    }
    for undone in ["{dlock:basket}", "{dlock:cart}", "{dlock:shelf}"] {
        assert_eq!(
            server.command(&["EXISTS", undone]).await.unwrap(),
            "0",
            "{undone}"
        );
    }
    // The SET that went through before the INCR failed was undone.
    assert_eq!(
        server.command(&["EXISTS", "{dlock:cart}"]).await.unwrap(),
        "0"
    );
    // A lock that does not ask for a token never touches the fence.
    let guard = locker.lock("cart").wait(Duration::ZERO).await.unwrap();
    assert_eq!(guard.fencing_token(), None);
    guard.release().await.unwrap();
    assert_eq!(
        server
            .command(&["SISMEMBER", "{dlock:cart}:fence", "x"])
            .await
            .unwrap(),
        "1"
    );
}

/// A grant carries a token only when asked (per lock, or `fencing = true` for the Locker); a
/// lock that never asks leaves no counter key behind, and one that does sends one `INCR` per
/// grant, pipelined with the `SET`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_and_their_counter_only_when_asked() {
    let server = RedisServer::start().await.unwrap();
    let plain = locker(&server.url(), Duration::from_secs(5)).await;
    server.command(&["CONFIG", "RESETSTAT"]).await.unwrap();
    for _ in 0..3 {
        let guard = plain.lock("invoice").await.unwrap();
        assert_eq!(guard.fencing_token(), None, "not asked for");
        guard.release().await.unwrap();
    }
    assert_eq!(calls(&server, &["incr"]).await, 0);
    assert_eq!(
        server
            .command(&["EXISTS", "{dlock:invoice}:fence"])
            .await
            .unwrap(),
        "0",
        "no counter for a lock that never asked for a token"
    );

    let mut tokens = Vec::new();
    for _ in 0..3 {
        let guard = plain.lock("invoice").fencing(true).await.unwrap();
        tokens.push(guard.fencing_token().expect("asked for"));
        guard.release().await.unwrap();
    }
    let fenced = DlockConfig::from_toml_str(&format!("backend = \"{}\"", server.url()))
        .unwrap()
        .with_fencing(true);
    let fenced = Locker::connect(&fenced).await.unwrap();
    let guard = fenced.lock("invoice").await.unwrap();
    tokens.push(
        guard
            .fencing_token()
            .expect("the Locker asks for every lock"),
    );
    // Asking is per lock: `fencing(false)` overrides the Locker's setting.
    let other = fenced.lock("receipt").fencing(false).await.unwrap();
    assert_eq!(other.fencing_token(), None);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens not strictly increasing: {tokens:?}"
    );
    assert_eq!(
        calls(&server, &["incr"]).await,
        4,
        "one INCR per fenced grant"
    );
    assert_eq!(
        server
            .command(&["GET", "{dlock:invoice}:fence"])
            .await
            .unwrap(),
        tokens[3].to_string()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicting_memory_policy_is_detected() {
    let risky = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"])
        .await
        .unwrap();
    let safe = RedisServer::start().await.unwrap();
    let connect = |url: String| async move {
        RedisBackend::connect(&BackendUrl::parse(&url).unwrap(), OPERATION_TIMEOUT)
            .await
            .unwrap()
    };
    assert_eq!(
        connect(risky.url()).await.eviction_risk().await.as_deref(),
        Some("allkeys-lru")
    );
    assert_eq!(connect(safe.url()).await.eviction_risk().await, None);
}

/// How many times Redis ran `commands` since the last `CONFIG RESETSTAT` (its own count;
/// commands run inside scripts included).
async fn calls(server: &RedisServer, commands: &[&str]) -> u64 {
    let stats = server.command(&["INFO", "commandstats"]).await.unwrap();
    commands
        .iter()
        .map(|command| {
            stats
                .lines()
                .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:calls=")))
                .and_then(|rest| rest.split(',').next())
                .map_or(0, |calls| calls.parse::<u64>().unwrap())
        })
        .sum()
}

/// Redis' own count of lock round trips (`EVALSHA` scripts and `EXEC` transactions) since
/// the last `CONFIG RESETSTAT`.
async fn lock_round_trips(server: &RedisServer) -> u64 {
    calls(server, &["evalsha", "exec"]).await
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

/// 8 tasks on 2 Lockers take one key 200 times each with a 1 ms non-atomic read-sleep-write:
/// no update is lost, no two are inside at once, and the waiting is driven by notifications
/// (a handful of scripts per acquisition, not a poll loop).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contended_lock_has_no_double_holders_and_does_not_poll() {
    const TASKS: usize = 8;
    const ROUNDS: usize = 200;
    let server = RedisServer::start().await.unwrap();
    let lockers = [
        locker(&server.url(), Duration::from_secs(10)).await,
        locker(&server.url(), Duration::from_secs(10)).await,
    ];
    server.command(&["CONFIG", "RESETSTAT"]).await.unwrap();
    let value = Arc::new(Mutex::new(0_u64));
    let inside = Arc::new(Mutex::new(None::<usize>));
    let waits = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..TASKS {
        let locker = lockers[worker % 2].clone();
        let (value, inside, waits) = (value.clone(), inside.clone(), waits.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let asked = Instant::now();
                let guard = locker.lock("hot").await.unwrap();
                waits.lock().unwrap().push(asked.elapsed());
                let other = inside.lock().unwrap().replace(worker);
                assert_eq!(other, None, "two holders at once");
                let read = *value.lock().unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
                *value.lock().unwrap() = read + 1;
                inside.lock().unwrap().take();
                guard.release().await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let elapsed = started.elapsed();
    let acquisitions = (TASKS * ROUNDS) as u64;
    assert_eq!(*value.lock().unwrap(), acquisitions, "updates were lost");
    let scripts = lock_round_trips(&server).await;
    let mut waits = waits.lock().unwrap().clone();
    waits.sort();
    println!(
        "{acquisitions} acquisitions in {elapsed:?}: wait p50 {:?} p99 {:?} max {:?}; {scripts} round trips ({:.2} per acquisition)",
        percentile(&waits, 50),
        percentile(&waits, 99),
        waits.last().unwrap(),
        scripts as f64 / acquisitions as f64,
    );
    // acquire + release is 2; losing a race after a wake-up adds one. A poll loop with a 1 ms
    // hold would send many more.
    assert!(
        scripts <= acquisitions * 4,
        "{scripts} round trips for {acquisitions} acquisitions: polling?"
    );
}

/// Ten writers in five Lockers (processes) take one key in turn, 40 times each: a release
/// hands the lock to the first writer in line and wakes it alone. Redis's own counts: at most
/// one `PUBLISH` per grant, and about three scripts (join the line, claim the lock, release
/// it) — not one attempt per Locker after each release, as when every Locker's first waiter
/// raced for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_wakes_only_the_first_writer_in_line() {
    const LOCKERS: usize = 5;
    const TASKS: usize = 10;
    const ROUNDS: usize = 40;
    let server = RedisServer::start().await.unwrap();
    let mut lockers = Vec::new();
    for _ in 0..LOCKERS {
        lockers.push(locker(&server.url(), Duration::from_secs(30)).await);
    }
    server.command(&["CONFIG", "RESETSTAT"]).await.unwrap();
    let mut tasks = Vec::new();
    for worker in 0..TASKS {
        let locker = lockers[worker % LOCKERS].clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = locker.lock("hot").await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
                guard.release().await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let grants = (TASKS * ROUNDS) as f64;
    let publishes = calls(&server, &["publish"]).await as f64;
    let scripts = calls(&server, &["evalsha", "eval"]).await as f64;
    println!(
        "{grants} grants over {LOCKERS} Lockers: {:.2} PUBLISH and {:.2} scripts per grant",
        publishes / grants,
        scripts / grants
    );
    assert!(
        publishes <= grants * 1.05,
        "{publishes} PUBLISH for {grants} grants"
    );
    assert!(
        scripts <= grants * 3.3,
        "{scripts} scripts for {grants} grants: more than the first writer in line tried"
    );
}

/// A lock held by `holder`, and a first writer in line whose connections go through `proxy`
/// (cut them, and it can neither claim the lock nor leave the line); `next` is a third Locker.
struct LineWithAVanishingWriter {
    server: RedisServer,
    proxy: TcpProxy,
    holder: Locker,
    guard: dlock_core::LockGuard,
    next: Locker,
    first: tokio::task::JoinHandle<Result<(), Error>>,
}

impl LineWithAVanishingWriter {
    async fn start() -> Self {
        let server = RedisServer::start().await.unwrap();
        let proxy = TcpProxy::start(server.addr().parse().unwrap())
            .await
            .unwrap();
        let holder = locker(&server.url(), Duration::from_secs(30)).await;
        let vanishing = locker(
            &format!("redis://{}", proxy.address()),
            Duration::from_secs(30),
        )
        .await;
        let next = locker(&server.url(), Duration::from_secs(30)).await;
        let guard = holder.lock("line").await.unwrap();
        let first = tokio::spawn(async move { vanishing.lock("line").await.map(drop) });
        let line = Self {
            server,
            proxy,
            holder,
            guard,
            next,
            first,
        };
        line.until_in_line(1).await;
        line
    }

    async fn until_in_line(&self, count: usize) {
        eventually("writers in line", Duration::from_secs(5), async || {
            let info = self.holder.inspect("line").await.unwrap();
            info.waiters.is_some_and(|waiters| waiters.len() == count)
        })
        .await;
    }

    /// Cuts the first writer off and releases: when the release happened, the first writer's
    /// task, and the server (to keep it running).
    async fn vanish_and_release(
        self,
    ) -> (
        Instant,
        tokio::task::JoinHandle<Result<(), Error>>,
        RedisServer,
    ) {
        self.proxy.set(ProxyMode::Cut);
        let released = Instant::now();
        self.guard.release().await.unwrap();
        (released, self.first, self.server)
    }
}

/// The next writer got the lock `after` the release: not within the reserved writer's claim
/// window, and not much after it; the cut-off writer never got it.
async fn assert_one_claim_window(
    after: Duration,
    first: tokio::task::JoinHandle<Result<(), Error>>,
) {
    println!("the next writer got the lock {after:?} after the release");
    assert!(
        after >= Duration::from_millis(900),
        "the lock reserved for the first writer went to the next after {after:?}"
    );
    assert!(
        after < Duration::from_millis(2500),
        "the next writer waited {after:?}: more than one claim window"
    );
    assert!(
        first.await.unwrap().is_err(),
        "the cut-off writer got the lock"
    );
}

/// The first writer in line vanishes: the release reserves the lock for it, nobody else takes
/// it during its one-second claim window, and right after the window the next writer gets it
/// — not at its own re-check half a ttl (15 s) later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_first_writer_holds_the_line_up_one_claim_window() {
    let line = LineWithAVanishingWriter::start().await;
    let next = line.next.clone();
    let second = tokio::spawn(async move {
        let guard = next.lock("line").await.unwrap();
        (Instant::now(), guard.release().await)
    });
    line.until_in_line(2).await;
    let (released, first, _server) = line.vanish_and_release().await;
    let (granted, release) = tokio::time::timeout(Duration::from_secs(5), second)
        .await
        .expect("the next writer still waits 5 s after the release")
        .unwrap();
    release.unwrap();
    assert_one_claim_window(granted - released, first).await;
}

/// As above, but the next writer comes only after the lock was handed to the vanished one (so
/// the hand-off could not name it): it finds the reservation, sees it is second in line, and
/// asks again when the window ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_joining_behind_a_vanished_first_writer_waits_one_claim_window() {
    let line = LineWithAVanishingWriter::start().await;
    let next = line.next.clone();
    let (released, first, _server) = line.vanish_and_release().await;
    let granted = tokio::time::timeout(Duration::from_secs(5), async {
        let guard = next.lock("line").await.unwrap();
        let granted = Instant::now();
        guard.release().await.unwrap();
        granted
    })
    .await
    .expect("the next writer still waits 5 s after the release");
    assert_one_claim_window(granted - released, first).await;
}

/// The holder's lease has ~30 s left, yet the waiter (another Locker, i.e. another process)
/// acquires a few milliseconds after the release: it was woken by the release notification.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_by_the_release_not_by_the_ttl() {
    let server = RedisServer::start().await.unwrap();
    let holder = locker(&server.url(), Duration::from_secs(30)).await;
    let waiter = locker(&server.url(), Duration::from_secs(30)).await;
    for round in 0..5 {
        let guard = holder.lock("order:42").await.unwrap();
        let waiting = tokio::spawn({
            let waiter = waiter.clone();
            async move {
                let guard = waiter
                    .lock("order:42")
                    .wait(Duration::from_secs(20))
                    .await
                    .unwrap();
                (Instant::now(), guard.release().await)
            }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        let released = Instant::now();
        guard.release().await.unwrap();
        let (acquired, release_outcome) = waiting.await.unwrap();
        release_outcome.unwrap();
        let latency = acquired - released;
        println!("round {round}: acquired {latency:?} after the release (holder's ttl 30 s)");
        assert!(
            latency < Duration::from_millis(100),
            "woken {latency:?} after the release"
        );
    }
}

/// A Locker that releases and at once re-requests, in a loop, does not starve a waiter of
/// another Locker: the waiter gets the lock at one of the next releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_releaser_that_re_requests_at_once_does_not_starve_others() {
    let server = RedisServer::start().await.unwrap();
    let greedy = locker(&server.url(), Duration::from_secs(30)).await;
    let patient = locker(&server.url(), Duration::from_secs(30)).await;
    let rounds_before_waiter_got_it = Arc::new(Mutex::new(None));
    let first = greedy.lock("printer").await.unwrap();
    let waiter = tokio::spawn({
        let patient = patient.clone();
        async move {
            patient
                .lock("printer")
                .wait(Duration::from_secs(10))
                .await
                .map(drop)
        }
    });
    tokio::time::sleep(Duration::from_millis(50)).await; // the waiter is queued and subscribed
    first.release().await.unwrap();
    let mut rounds = 0;
    while !waiter.is_finished() && rounds < 100 {
        let guard = greedy
            .lock("printer")
            .wait(Duration::from_secs(10))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(1)).await;
        guard.release().await.unwrap();
        rounds += 1;
    }
    *rounds_before_waiter_got_it.lock().unwrap() = Some(rounds);
    waiter
        .await
        .unwrap()
        .expect("the patient Locker got the lock");
    assert!(rounds <= 2, "the waiter had to wait {rounds} greedy rounds");
}

/// An uncontended release publishes nothing: it is the raw compare-and-delete. A waiter of
/// another Locker marks the lock once subscribed, and then the release publishes, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_release_of_a_lock_someone_waits_for_publishes() {
    let server = RedisServer::start().await.unwrap();
    let holder = locker(&server.url(), Duration::from_secs(30)).await;
    let waiter = locker(&server.url(), Duration::from_secs(30)).await;
    server.command(&["CONFIG", "RESETSTAT"]).await.unwrap();
    for _ in 0..10 {
        holder
            .lock("report")
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    assert_eq!(calls(&server, &["publish"]).await, 0, "nobody waited");

    let guard = holder.lock("report").await.unwrap();
    let owner_value = server.command(&["GET", "{dlock:report}"]).await.unwrap();
    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        async move {
            let guard = waiter.lock("report").wait(Duration::from_secs(20)).await;
            guard.unwrap().release().await
        }
    });
    // The waiter subscribes, then finds the lock held and marks it.
    let marked = format!("{owner_value}|waited");
    let give_up = Instant::now() + Duration::from_secs(10);
    while server.command(&["GET", "{dlock:report}"]).await.unwrap() != marked {
        assert!(Instant::now() < give_up, "the waiter never marked the lock");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        calls(&server, &["publish"]).await,
        0,
        "nothing released yet"
    );
    guard.release().await.unwrap();
    waiting.await.unwrap().unwrap();
    assert_eq!(
        calls(&server, &["publish"]).await,
        1,
        "the marked release published; the waiter's own (unmarked) did not"
    );
}

/// redis-server stops answering (SIGSTOP) while an acquire with `wait(1s)` is in flight: the
/// caller has its answer within the wait plus `WAIT_SLACK`, and the `SET` the frozen server
/// applies when it thaws is released at once — the lock does not stay held for its 30 s ttl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_server_answers_a_wait_within_its_bound_and_leaks_nothing() {
    let server = RedisServer::start().await.unwrap();
    // An operation timeout longer than the wait: the bound must come from the wait.
    let config = DlockConfig::from_toml_str(&format!(
        "backend = \"{}\"\nttl = \"30s\"\noperation_timeout = \"3s\"",
        server.url()
    ))
    .expect("config");
    let frozen = Locker::connect(&config).await.expect("connect");
    let other = Locker::connect(&config).await.expect("connect");
    server.pause().expect("SIGSTOP");
    let started = Instant::now();
    let outcome = frozen.lock("k").wait(Duration::from_secs(1)).await;
    let took = started.elapsed();
    assert!(
        matches!(
            outcome,
            Err(Error::Timeout { .. } | Error::Unavailable { .. })
        ),
        "{outcome:?}"
    );
    let bound = Duration::from_secs(1) + dlock_core::WAIT_SLACK + Duration::from_millis(150);
    assert!(took <= bound, "answered after {took:?}, bound {bound:?}");
    server.resume().expect("SIGCONT");
    let taken = other
        .lock("k")
        .wait(Duration::from_secs(10))
        .await
        .expect("no lock left held by the abandoned acquire");
    taken.release().await.expect("release");
}

/// Whether the server holds dlock's lock key for user key `key` (default prefix).
async fn holds_lock_key(server: &RedisServer, key: &str) -> bool {
    let exists = server
        .command(&["EXISTS", &format!("{{dlock:{key}}}")])
        .await
        .unwrap();
    exists.trim() == "1"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unix_socket_url_reaches_the_server() {
    let socket = std::env::temp_dir().join(format!("dlock-test-{}.sock", std::process::id()));
    let socket_arg = socket.display().to_string();
    let server = RedisServer::start_with(&["--unixsocket", &socket_arg, "--unixsocketperm", "700"])
        .await
        .unwrap();
    for url in [
        format!("redis+unix://{socket_arg}"),
        format!("unix://{socket_arg}"),
    ] {
        let config = DlockConfig::default().with_backend(url.parse().unwrap());
        let locker = Locker::connect(&config)
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        let guard = locker.lock("over-unix").await.unwrap();
        assert!(holds_lock_key(&server, "over-unix").await, "{url}");
        guard.release().await.unwrap();
        assert!(!holds_lock_key(&server, "over-unix").await, "{url}");
    }
    let _ = std::fs::remove_file(&socket);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locker_on_a_client_the_application_built() {
    let server = RedisServer::start().await.unwrap();
    // The application's own client, in RESP2 (redis-rs's default): dlock's connections
    // still get the pushes that wake waiters.
    let client = redis::Client::open(server.url()).unwrap();
    let backend = RedisBackend::from_client(&client, OPERATION_TIMEOUT)
        .await
        .unwrap();
    let locker = Locker::with_config(Arc::new(backend), &DlockConfig::default()).unwrap();
    let guard = locker
        .lock("from-client")
        .ttl(Duration::from_secs(30))
        .await
        .unwrap();
    assert!(holds_lock_key(&server, "from-client").await);

    // A waiter of this Locker is woken by another Locker's release, long before the ttl.
    let other = locker_with_url(&server.url()).await;
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let second = locker.lock("shared").wait(Duration::from_secs(20)).await;
            (second.map(drop), started.elapsed())
        })
    };
    let held = other
        .lock("shared")
        .ttl(Duration::from_secs(30))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    held.release().await.unwrap();
    let (second, waited) = waiter.await.unwrap();
    second.unwrap();
    assert!(waited < Duration::from_secs(10), "woken after {waited:?}");
    guard.release().await.unwrap();
}

async fn locker_with_url(url: &str) -> Locker {
    locker(url, Duration::from_secs(30)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_errors_name_the_address_and_a_tls_url_on_a_plain_server_says_so() {
    // A port nobody listens on: bound, then let go.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = DlockConfig::default()
        .with_backend(format!("redis://127.0.0.1:{closed}").parse().unwrap())
        .with_operation_timeout(OPERATION_TIMEOUT);
    let refused = Locker::connect(&config).await.unwrap_err().to_string();
    assert!(
        refused.contains(&format!("127.0.0.1:{closed}")),
        "{refused}"
    );

    let server = RedisServer::start().await.unwrap();
    let tls_url = server.url().replacen("redis://", "rediss://", 1);
    let config = DlockConfig::default()
        .with_backend(tls_url.parse().unwrap())
        .with_operation_timeout(OPERATION_TIMEOUT);
    let started = Instant::now();
    let mismatch = Locker::connect(&config).await.unwrap_err();
    assert!(
        started.elapsed() < OPERATION_TIMEOUT * 3,
        "{:?}",
        started.elapsed()
    );
    let message = mismatch.to_string();
    assert!(
        message.contains("plain text, use `redis://`") && message.contains(&server.addr()),
        "{message}"
    );
}

/// An observer whose subscription connection dropped while the server was down (its one
/// reconnect attempt failed) subscribes again once the server is back, and sees the next
/// leader — with nobody leading before, no lease's end would have made it look again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_sees_the_next_leader_after_the_server_was_down() {
    use futures_util::StreamExt;
    let server = RedisServer::start().await.unwrap();
    let observer = locker(&server.url(), Duration::from_secs(3)).await;
    let mut leaders = Box::pin(observer.observe("scheduler"));
    assert_eq!(leaders.next().await.unwrap().unwrap(), None);
    let watching = tokio::spawn(async move {
        loop {
            match leaders.next().await {
                Some(Ok(Some(leader))) => return leader,
                Some(_) => {} // nobody, or the server down: an error item, then it goes on
                None => panic!("the observer ended"),
            }
        }
    });
    server.kill().await.unwrap();
    // Down long enough for the subscription's reconnect attempt to fail.
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.restart().await.unwrap();
    // The observer is subscribed again (a restarted server knows no subscription)...
    let subscribed_again = async {
        loop {
            let numsub = server
                .command(&["PUBSUB", "NUMSUB", "{dlock:scheduler}:released"])
                .await
                .unwrap();
            if numsub.lines().nth(1) == Some("1") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), subscribed_again)
        .await
        .expect("the observer did not subscribe again once the server was back");
    // ... before the leader is elected: only the grant's notification can tell it.
    let candidate = locker(&server.url(), Duration::from_secs(30)).await;
    let leading = candidate.campaign("scheduler", "a").await.unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(5), watching)
        .await
        .expect("the observer did not see the leader after the server came back")
        .unwrap();
    assert_eq!((seen.value.as_str(), seen.term), ("a", leading.term()));
    leading.resign().await.unwrap();
}
