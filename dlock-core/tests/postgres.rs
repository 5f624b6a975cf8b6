//! The PostgreSQL backend against a real server (started by the harness for each test): a
//! holder's session terminated by an admin, the server restarted under held locks, `psql`
//! taking the documented key, the documented hash computed by SQL, and how many connections
//! a Locker opens. Waiting for a condition polls it with a limit; no assertion depends on a
//! sleep being long enough.

mod support;

use std::time::{Duration, Instant};

use dlock_core::backend::PostgresBackend;
use dlock_core::{DlockConfig, Error, LockGuard, Locker};
use dlock_harness::{PostgresServer, ProxyMode, PsqlSession, TcpProxy};
use support::processes::eventually;
use tokio_postgres::{Client, NoTls};

const TTL: Duration = Duration::from_secs(2);

async fn locker(server: &PostgresServer) -> Locker {
    let config = support::connect::config_at(&server.url(), TTL, Duration::from_secs(2));
    support::connect::locker_with(&config.with_fencing(true)).await
}

async fn admin(server: &PostgresServer) -> Client {
    let (client, connection) = tokio_postgres::connect(&server.url(), NoTls)
        .await
        .expect("admin connection");
    tokio::spawn(connection);
    client
}

/// How many connections dlock has open on the server (its `application_name`).
async fn dlock_connections(admin: &Client) -> i64 {
    admin
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'dlock'",
            &[],
        )
        .await
        .expect("pg_stat_activity")
        .get(0)
}

/// The documented SQL for the advisory key of `full_key`.
fn sql_key(full_key: &str) -> String {
    format!(
        "('x' || encode(substr(sha256(convert_to('{}', 'UTF8')), 1, 8), 'hex'))::bit(64)::bigint",
        full_key.replace('\'', "''")
    )
}

/// The pid of the session holding `full_key`'s advisory lock.
async fn holder_pid(admin: &Client, full_key: &str) -> i32 {
    admin
        .query_one(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 \
             AND (classid::int8 << 32 | objid::int8) = $1",
            &[&PostgresBackend::advisory_key(full_key)],
        )
        .await
        .expect("one holder in pg_locks")
        .get(0)
}

/// An admin ends the holder's session (`pg_terminate_backend`): the guard reports the loss
/// within a second — pushed by the connection's end, not found at a renewal — and the waiter
/// gets the lock with a higher token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_holder_is_lost_at_once_and_the_waiter_gets_in() {
    let server = PostgresServer::start().await.expect("postgres");
    let admin = admin(&server).await;
    let (holder, waiter) = (locker(&server).await, locker(&server).await);
    let guard = holder.lock("invoice:7").await.expect("acquire");
    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        async move { waiter.lock("invoice:7").wait(Duration::from_secs(10)).await }
    });
    let pid = holder_pid(&admin, &holder.backend_key("invoice:7").unwrap()).await;
    let terminated = Instant::now();
    let ended: bool = admin
        .query_one("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .expect("terminate")
        .get(0);
    assert!(ended);
    tokio::time::timeout(Duration::from_secs(1), guard.lost())
        .await
        .expect("the loss is reported within a second");
    println!(
        "loss reported {:?} after the termination",
        terminated.elapsed()
    );
    assert!(!guard.is_held());
    let next = waiting
        .await
        .expect("waiter")
        .expect("the waiter gets the lock");
    assert!(next.fencing_token() > guard.fencing_token());
    next.release().await.expect("release");
}

/// The server restarts while exclusive, shared and permit locks are held: every guard is
/// lost, and once the server is back the same Locker takes locks again, with tokens above the
/// old ones (the fence table survived).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_loses_every_guard_and_the_locker_works_again() {
    let server = PostgresServer::start().await.expect("postgres");
    let locker = locker(&server).await;
    let guards: Vec<LockGuard> = vec![
        locker.lock("a").await.expect("exclusive"),
        locker.read_lock("b").await.expect("shared"),
        locker.semaphore("c", 2).await.expect("permit"),
        locker
            .lock("d")
            .wait(Duration::ZERO)
            .await
            .expect("exclusive"),
    ];
    let old_token = guards[0].fencing_token().expect("a token");
    server.restart().await.expect("restart");
    for guard in &guards {
        let reason = tokio::time::timeout(TTL * 2, guard.lost())
            .await
            .expect("every guard is lost with the server");
        println!("{}: {reason}", guard.key());
    }
    drop(guards); // a lost guard still held would make the next lock of its key re-enter it
    let again = locker
        .lock("a")
        .wait(Duration::from_secs(10))
        .await
        .expect("the Locker works after the restart");
    assert!(again.fencing_token().expect("a token") > old_token);
    let permit = locker
        .semaphore("c", 2)
        .await
        .expect("permit after restart");
    permit.release().await.expect("release");
    again.release().await.expect("release");
}

/// A `psql` session holding `pg_advisory_lock(<documented hash>)` blocks dlock (and
/// `inspect` names its session as the holder, dlock's as the waiter); dlock gets the lock
/// promptly when psql unlocks; and while dlock holds, psql's try fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_and_dlock_exclude_each_other_on_the_documented_key() {
    let server = PostgresServer::start().await.expect("postgres");
    let locker = locker(&server).await;
    let full_key = locker.backend_key("report:daily").unwrap();
    let mut psql = server.psql().await.expect("psql");
    psql.run(&format!("SELECT pg_advisory_lock({});", sql_key(&full_key)))
        .await
        .expect("psql locks");

    let refused = locker.lock("report:daily").wait(Duration::ZERO).await;
    assert!(
        matches!(refused, Err(Error::Busy { .. })),
        "granted while psql holds: {refused:?}"
    );
    let waiting = tokio::spawn({
        let locker = locker.clone();
        async move {
            let guard = locker
                .lock("report:daily")
                .wait(Duration::from_secs(10))
                .await;
            (guard, Instant::now())
        }
    });
    let admin = admin(&server).await;
    eventually(
        "dlock queues behind psql",
        Duration::from_secs(5),
        async || {
            let waiting: i64 = admin
                .query_one(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
                    &[],
                )
                .await
                .expect("pg_locks")
                .get(0);
            waiting == 1
        },
    )
    .await;
    let info = locker.inspect("report:daily").await.expect("inspect");
    let psql_pid = holder_pid(&admin, &full_key).await;
    assert_eq!(info.holders.len(), 1, "{info:?}");
    assert!(
        info.holders[0].owner.ends_with(&format!("pid {psql_pid}")),
        "inspect names psql's session: {info:?}"
    );
    let waiters = info.waiters.expect("PostgreSQL shows its queue");
    assert!(
        matches!(waiters.as_slice(), [w] if w.owner.as_deref().is_some_and(|o| o.starts_with("dlock pid "))),
        "the dlock waiter: {waiters:?}"
    );
    let unlocked = Instant::now();
    let rows = psql
        .run(&format!(
            "SELECT pg_advisory_unlock({});",
            sql_key(&full_key)
        ))
        .await
        .expect("psql unlocks");
    assert_eq!(rows, ["t"]);
    let (guard, acquired) = waiting.await.expect("waiter");
    let guard = guard.expect("dlock gets the lock psql released");
    println!(
        "dlock acquired {:?} after psql's unlock",
        acquired - unlocked
    );
    assert!(acquired - unlocked < Duration::from_secs(1));

    let psql_tries = async |psql: &mut PsqlSession| {
        let sql = format!("SELECT pg_try_advisory_lock({});", sql_key(&full_key));
        psql.run(&sql).await.expect("psql tries")
    };
    assert_eq!(
        psql_tries(&mut psql).await,
        ["f"],
        "psql got the lock dlock holds"
    );
    guard.release().await.expect("release");
    assert_eq!(
        psql_tries(&mut psql).await,
        ["t"],
        "psql cannot get the lock dlock released"
    );
}

/// The documented SQL computes [`PostgresBackend::advisory_key`], for ASCII, non-ASCII, quoted
/// and long keys, including ones whose key is negative.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_sql_computes_the_advisory_key() {
    let server = PostgresServer::start().await.expect("postgres");
    let mut psql = server.psql().await.expect("psql");
    let long = "k".repeat(512);
    let keys = [
        "abc",
        "dlock:order:42",
        "dlock:bestellung:größe",
        "it's",
        "a/b{c}",
        &long,
    ];
    let mut negatives = 0;
    for key in keys {
        let rows = psql
            .run(&format!("SELECT {};", sql_key(key)))
            .await
            .expect("psql");
        let from_sql: i64 = rows[0].parse().expect("a bigint");
        assert_eq!(from_sql, PostgresBackend::advisory_key(key), "key {key:?}");
        negatives += usize::from(from_sql < 0);
    }
    assert!(negatives > 0, "no negative key among the samples");
}

/// A lock connection left with nothing on it serves the next lock while it lingers, and dlock
/// closes it at half its ttl: before the server's `idle_session_timeout` (one ttl) could end
/// it under a lock being taken. (Without the linger's close, the server's timeout is what
/// ends it, after the limit below.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_serves_the_next_lock_then_closes_at_half_its_ttl() {
    let server = PostgresServer::start().await.expect("postgres");
    let admin = admin(&server).await;
    let pids = async || -> Vec<i32> {
        admin
            .query(
                "SELECT pid FROM pg_stat_activity WHERE application_name = 'dlock'",
                &[],
            )
            .await
            .expect("pg_stat_activity")
            .iter()
            .map(|row| row.get(0))
            .collect()
    };
    let ttl = Duration::from_secs(8);
    let locker = support::connect::locker_with(&support::connect::config_at(
        &server.url(),
        ttl,
        Duration::from_secs(2),
    ))
    .await;
    let first = locker.lock("idle:a").await.expect("acquire");
    let session = pids().await;
    assert_eq!(session.len(), 1);
    first.release().await.expect("release");
    let second = locker.lock("idle:b").await.expect("acquire");
    assert_eq!(
        pids().await,
        session,
        "the idle connection served the next lock"
    );
    second.release().await.expect("release");
    eventually(
        "dlock closes its idle connection",
        ttl - Duration::from_secs(1),
        async || pids().await.is_empty(),
    )
    .await;
}

/// 100 locks taken without waiting share one connection; locks that wait on the server take
/// one connection each while they wait (and hold).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_locks_share_one_connection() {
    let server = PostgresServer::start().await.expect("postgres");
    let admin = admin(&server).await;
    let connections = async || dlock_connections(&admin).await;
    let many = locker(&server).await;
    let mut guards = Vec::new();
    for n in 0..100 {
        guards.push(many.lock(&format!("row:{n}")).await.expect("acquire"));
    }
    assert_eq!(connections().await, 1, "100 held locks, one connection");

    // Another Locker holds 3 keys; this one waits for them: one more connection per wait.
    let other = locker(&server).await;
    let mut held = Vec::new();
    for n in 0..3 {
        held.push(other.lock(&format!("busy:{n}")).await.expect("acquire"));
    }
    let waits: Vec<_> = (0..3)
        .map(|n| {
            let many = many.clone();
            tokio::spawn(async move {
                many.lock(&format!("busy:{n}"))
                    .wait(Duration::from_secs(10))
                    .await
            })
        })
        .collect();
    eventually("the waits are queued", Duration::from_secs(5), async || {
        connections().await == 1 + 1 + 3
    })
    .await;
    drop(held);
    for wait in waits {
        guards.push(wait.await.expect("waiter").expect("granted after release"));
    }
    println!("{} locks held", guards.len());
    assert!(connections().await <= 1 + 1 + 3);
    for guard in guards {
        guard.release().await.expect("release");
    }
}

/// `<url>` for [`paused_holder_process`].
const PAUSED_HOLDER: &str = "DLOCK_TEST_PAUSED_HOLDER";

/// Run by [`a_holder_paused_past_its_ttl_acquires_again_at_once`] as a process of its own:
/// takes `paused:first`, prints `HELD`, then reads a line from stdin; the parent writes it
/// once the process was stopped and resumed and the server ended its idle connection
/// meanwhile. Then it acquires `paused:second` with `wait(5s)` at once and prints `AGAIN ok`
/// or `AGAIN <error>`. The read blocks its only runtime thread, so nothing of the Locker's
/// runs between the wake-up and the acquire: the acquire is the first to meet the closed
/// connection, as in a process whose first act after a pause is to lock (with background
/// tasks of its own the order would be left to chance). Without `DLOCK_TEST_PAUSED_HOLDER`
/// it does nothing.
#[tokio::test(flavor = "current_thread")]
async fn paused_holder_process() {
    let Ok(url) = std::env::var(PAUSED_HOLDER) else {
        return;
    };
    let config = DlockConfig::from_toml_str(&format!(
        "backend = \"{url}\"\nttl = \"2s\"\noperation_timeout = \"2s\""
    ))
    .expect("config");
    let locker = Locker::connect(&config).await.expect("connect");
    let held = locker.lock("paused:first").await.expect("acquire");
    println!("HELD");
    // Blocking on purpose: see above. (Timing the pause from inside instead raced: the
    // server ends the connection one ttl after its last renewal, which may be less than a
    // ttl after the stop.)
    let mut go = String::new();
    std::io::stdin()
        .read_line(&mut go)
        .expect("the parent's go-ahead");
    let again = locker
        .lock("paused:second")
        .wait(Duration::from_secs(5))
        .await;
    match again {
        Ok(_) => println!("AGAIN ok"),
        Err(error) => println!("AGAIN {error}"),
    }
    drop(held);
}

/// A holder process stopped (SIGSTOP) past its ttl — long enough for the server to end its
/// idle connection (`idle_session_timeout`) — and then resumed acquires again on its first
/// try: the acquire that finds its connection closed starts over on a fresh one within its
/// wait, rather than answering `connection closed`.
#[tokio::test]
async fn a_holder_paused_past_its_ttl_acquires_again_at_once() {
    use std::process::Stdio;

    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    let server = PostgresServer::start().await.expect("postgres");
    let mut child = tokio::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "paused_holder_process",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(PAUSED_HOLDER, server.url())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the holder process");
    let pid = child.id().expect("running").to_string();
    let mut go_ahead = child.stdin.take().expect("stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    said(&mut lines, "HELD").await;
    let kill = |signal: &str| {
        let status = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{signal} {pid}");
    };
    kill("STOP");
    // Past the ttl, the server's idle timeout for the holder's connection: it ends it.
    let admin = admin(&server).await;
    let give_up = Instant::now() + Duration::from_secs(30);
    loop {
        let left = admin
            .query_one(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'",
                &[],
            )
            .await
            .expect("pg_locks")
            .get::<_, i64>(0);
        if left == 0 {
            break;
        }
        assert!(
            Instant::now() < give_up,
            "the server never ended the paused holder's connection"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    kill("CONT");
    go_ahead
        .write_all(b"go\n")
        .await
        .expect("tell the holder to go on");
    let again = said(&mut lines, "AGAIN ").await;
    assert_eq!(
        again, "ok",
        "the first acquire after the pause failed; it should have opened a fresh connection"
    );
}

/// What a child process says after `prefix` on the first line that has it.
async fn said(
    lines: &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    prefix: &str,
) -> String {
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let line = lines
                .next_line()
                .await
                .expect("read")
                .expect("the child process exited early");
            // libtest may print `test <name> ... ` on the same line.
            if let Some((_, rest)) = line.split_once(prefix) {
                break rest.trim().to_owned();
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the child process never said {prefix}"))
}

/// `Locker::shutdown` closes every connection it opened — the one holding a lock and the one
/// waiting on the server — before it returns, so the server frees the lock at once; the
/// waiting acquire ends with `ShutDown` rather than connecting again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_every_connection() {
    let server = PostgresServer::start().await.expect("postgres");
    let admin = admin(&server).await;
    let connections = async || dlock_connections(&admin).await;
    let (other, leaving) = (locker(&server).await, locker(&server).await);
    let _busy = other.lock("busy").await.expect("acquire");
    let _held = leaving.lock("held").await.expect("acquire");
    let waiter = tokio::spawn({
        let leaving = leaving.clone();
        async move { leaving.lock("busy").wait(Duration::from_secs(30)).await }
    });
    let give_up = Instant::now() + Duration::from_secs(10);
    while connections().await < 3 {
        assert!(
            Instant::now() < give_up,
            "the waiter never waited on the server"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    leaving.shutdown().await.expect("shutdown");
    let waited = waiter.await.expect("the waiter's task");
    assert!(
        matches!(waited, Err(Error::ShutDown)),
        "the waiting acquire after shutdown: {waited:?}"
    );
    // The sockets are closed; the server notices at once, within a few scheduling rounds.
    let give_up = Instant::now() + Duration::from_secs(5);
    while connections().await > 1 {
        assert!(
            Instant::now() < give_up,
            "the shut-down Locker's connections are still open"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let taken = other.try_lock("held").await;
    assert!(
        taken.is_ok(),
        "the shut-down Locker's lock is free: {taken:?}"
    );
}

/// A release cancelled while its unlock is on the wire (its caller's timeout ended first)
/// leaves neither the lock nor the connection's use behind: the connection's state is in
/// doubt, so it is closed at once — which frees the lock — instead of staying open with the
/// grant counted on it forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_cancelled_mid_unlock_closes_its_connection() {
    let server = PostgresServer::start().await.expect("postgres");
    let admin = admin(&server).await;
    let proxy = TcpProxy::start(format!("127.0.0.1:{}", server.port()).parse().unwrap())
        .await
        .expect("proxy");
    let via_proxy = server.url().replace(
        &format!(":{}/", server.port()),
        &format!(":{}/", proxy.address().port()),
    );
    // A long ttl: an idle connection would close only at half of it (15 s).
    let proxied =
        support::connect::locker_at(&via_proxy, Duration::from_secs(30), Duration::from_secs(5))
            .await;
    let guard = proxied.lock("cancelled:release").await.expect("acquire");
    assert_eq!(dlock_connections(&admin).await, 1);

    proxy.set(ProxyMode::DelayReplies(Duration::from_secs(2)));
    let cancelled = tokio::time::timeout(Duration::from_millis(300), guard.release()).await;
    assert!(
        cancelled.is_err(),
        "the release answered through a 2 s delay: {cancelled:?}"
    );
    proxy.set(ProxyMode::Pass);

    eventually(
        "the connection of the cancelled release is closed",
        Duration::from_secs(5),
        async || dlock_connections(&admin).await == 0,
    )
    .await;
    let other = locker(&server).await;
    let taken = other.try_lock("cancelled:release").await;
    assert!(taken.is_ok(), "the lock is free: {taken:?}");
}

/// The kept record of `full_key` in `table`: `(kept, kept_by, live)`, if the row has one.
async fn kept_record(
    admin: &Client,
    table: &str,
    full_key: &str,
) -> Option<(String, String, bool)> {
    admin
        .query_opt(
            &format!(
                "SELECT kept, kept_by, kept_until > clock_timestamp() FROM {table} \
                 WHERE lock_key = $1 AND kept_until IS NOT NULL"
            ),
            &[&PostgresBackend::advisory_key(full_key)],
        )
        .await
        .expect("the fence table")
        .map(|row| (row.get(0), row.get(1), row.get(2)))
}

/// A fence table made by an earlier dlock (no kept-record columns) gets them at connect. A
/// once-per-fire job leaves its done record in the table, and `psql`'s own advisory lock does
/// not see it (the record is dlock's). Expired records of keys that never had a token are
/// swept by a later keep, so one row per fire does not pile up; a fenced key's row stays (its
/// token must never go back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_records_live_in_the_fence_table_and_expired_ones_are_swept() {
    let server = PostgresServer::start().await.expect("postgres");
    let admin = admin(&server).await;
    admin
        .batch_execute(
            "CREATE TABLE old_fence (lock_key bigint PRIMARY KEY, token bigint NOT NULL, permits integer)",
        )
        .await
        .expect("an old fence table");
    let url = format!("{}?dlock_fence_table=old_fence", server.url());
    let plain = support::connect::locker_at(&url, TTL, Duration::from_secs(2)).await;
    let fenced = support::connect::locker_with(
        &support::connect::config_at(&url, TTL, TTL).with_fencing(true),
    )
    .await;
    let columns: i64 = admin
        .query_one(
            "SELECT count(*) FROM information_schema.columns WHERE table_name = 'old_fence' \
             AND column_name IN ('kept_until', 'kept', 'kept_by')",
            &[],
        )
        .await
        .expect("columns")
        .get(0);
    assert_eq!(columns, 3, "the kept-record columns were not added");

    let retention = Duration::from_secs(1);
    let fire = async |fire: &str| {
        let ran = plain
            .once("nightly", fire)
            .retention(retention)
            .run(async { Ok::<_, Error>(()) })
            .await
            .expect("once");
        assert!(ran.ran().is_some(), "fire {fire}: {ran:?}");
        plain.backend_key(&format!("nightly@{fire}")).expect("key")
    };
    let first = fire("1").await;
    let (why, by, live) = kept_record(&admin, "old_fence", &first)
        .await
        .expect("the done record");
    assert_eq!((why.as_str(), live), ("done", true));
    assert!(!by.is_empty(), "the record names no owner");
    let mut psql = server.psql().await.expect("psql");
    let took = psql
        .run(&format!(
            "SELECT pg_try_advisory_lock({});",
            sql_key(&first)
        ))
        .await
        .expect("psql tries");
    assert_eq!(took, ["t"], "psql's own lock saw dlock's record");

    let fenced_key = fenced.backend_key("report").expect("key");
    fenced
        .lock("report")
        .hold_at_least(retention)
        .await
        .expect("fenced lock")
        .release()
        .await
        .expect("release, keeping");
    eventually("both records expire", Duration::from_secs(10), async || {
        let first = kept_record(&admin, "old_fence", &first).await;
        let fenced = kept_record(&admin, "old_fence", &fenced_key).await;
        matches!((first, fenced), (Some((_, _, false)), Some((_, _, false))))
    })
    .await;
    let second = fire("2").await;
    let rows = |key: String| {
        let admin = &admin;
        async move {
            admin
                .query_opt(
                    "SELECT token FROM old_fence WHERE lock_key = $1",
                    &[&PostgresBackend::advisory_key(&key)],
                )
                .await
                .expect("the fence table")
                .map(|row| row.get::<_, i64>(0))
        }
    };
    assert_eq!(
        rows(first).await,
        None,
        "the expired done record was not swept"
    );
    assert!(
        rows(second).await.is_some(),
        "the new done record is missing"
    );
    assert!(
        rows(fenced_key).await.is_some_and(|token| token >= 1),
        "a fenced key's row was swept"
    );
}

/// A fence table made by an earlier dlock that another session is using (an older Locker's
/// fenced wait holds it for as long as it waits): adding the kept-record columns gives up
/// within the operation timeout with an error that says what to run, instead of queueing
/// every later statement on the table behind the `ALTER TABLE`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_fence_table_in_use_fails_the_connect_in_time_saying_what_to_run() {
    let server = PostgresServer::start().await.expect("postgres");
    let admin = admin(&server).await;
    admin
        .batch_execute(
            "CREATE TABLE busy_fence (lock_key bigint PRIMARY KEY, token bigint NOT NULL, permits integer)",
        )
        .await
        .expect("an old fence table");
    admin
        .batch_execute("BEGIN; INSERT INTO busy_fence VALUES (1, 1, NULL);")
        .await
        .expect("the table in use");
    let url = format!("{}?dlock_fence_table=busy_fence", server.url());
    let timeout = Duration::from_secs(2);
    let started = Instant::now();
    let connected = Locker::connect(&support::connect::config_at(&url, TTL, timeout)).await;
    let took = started.elapsed();
    let Err(Error::Refused { source, .. }) = &connected else {
        panic!("connected to a table in use: {connected:?}");
    };
    let said = source.to_string();
    assert!(
        said.contains("ALTER TABLE \"busy_fence\" ADD COLUMN kept_until"),
        "{said}"
    );
    assert!(took < timeout, "took {took:?}");
    admin.batch_execute("COMMIT").await.expect("commit");
    let locker = Locker::connect(&support::connect::config_at(&url, TTL, timeout))
        .await
        .expect("connect once the table is free");
    let guard = locker
        .lock("x")
        .hold_at_least(Duration::from_millis(1))
        .await
        .expect("lock");
    guard.release().await.expect("release");
}

/// Renewing held locks costs one round trip per connection and reads no lock table: over a
/// ttl and a half of holding 100 locks (which needs renewals: they are all still held), the
/// server ran no statement that reads `pg_locks` — a view that copies the server's whole lock
/// table, which a read per renewal batch made O(N²) per cadence for N held locks — and ran
/// dlock's `SELECT 1`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_read_no_lock_table() {
    let server = PostgresServer::start_with(&["shared_preload_libraries=pg_stat_statements"])
        .await
        .expect("postgres");
    let admin = admin(&server).await;
    admin
        .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .await
        .expect("pg_stat_statements");
    let calls = async |pattern: &str| -> i64 {
        admin
            .query_one(
                "SELECT coalesce(sum(calls), 0)::int8 FROM pg_stat_statements \
                 WHERE query LIKE $1 AND query NOT LIKE '%pg_stat_statements%'",
                &[&pattern],
            )
            .await
            .expect("pg_stat_statements")
            .get(0)
    };
    let locker = locker(&server).await;
    let mut guards = Vec::new();
    for n in 0..100 {
        guards.push(locker.lock(&format!("row:{n}")).await.expect("acquire"));
    }
    let (lock_reads, pings) = (calls("%pg_locks%").await, calls("SELECT $1").await);
    tokio::time::sleep(TTL + TTL / 2).await;
    assert!(guards.iter().all(dlock_core::LockGuard::is_held), "renewed");
    assert_eq!(calls("%pg_locks%").await - lock_reads, 0, "pg_locks read");
    assert!(calls("SELECT $1").await > pings, "no renewal round trip");
    for guard in guards {
        guard.release().await.expect("release");
    }
}

/// A resign clears the leader's record: a lock of the same name taken afterwards without a
/// fencing token (which leaves the row's token as it was) on the same connection (the same
/// backend pid) shows as no leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_after_a_resign_is_no_leader() {
    let server = PostgresServer::start().await.unwrap();
    let config = support::connect::config_at(&server.url(), TTL, Duration::from_secs(2));
    let locker = support::connect::locker_with(&config).await;
    let holder = async || {
        locker.inspect("scheduler").await.unwrap().holders[0]
            .owner
            .clone()
    };
    let leading = locker.campaign("scheduler", "node-a").await.unwrap();
    assert_eq!(
        locker.leader("scheduler").await.unwrap().map(|l| l.value),
        Some("node-a".to_owned())
    );
    let leader_session = holder().await;
    leading.resign().await.unwrap();
    let plain = locker.lock("scheduler").fencing(false).await.unwrap();
    assert_eq!(
        holder().await,
        leader_session,
        "not the same session: nothing tested"
    );
    assert_eq!(
        locker.leader("scheduler").await.unwrap(),
        None,
        "a plain lock shown as the resigned leader"
    );
    plain.release().await.unwrap();
}
