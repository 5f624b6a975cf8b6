//! The etcd backend against real etcd: interop with `etcdctl lock` both ways, every member
//! of a 3-member cluster stopped (a killed leader and a killed holder process are in
//! `killed_holders.rs`), an unreachable cluster, and contention (FIFO grants, no double
//! holders).
//!
//! Waiting for a condition polls the condition (with a limit); no assertion depends on a sleep
//! being long enough.

mod support;

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dlock_core::backend::{BackendUrl, EtcdBackend, LockBackend};
use dlock_core::{BackendSpec, DlockConfig, Error, Locker, LostReason};
use dlock_harness::{EtcdCluster, EtcdServer, ProxyMode, TcpProxy};
use support::processes::{etcd_keys, etcdctl, eventually, signal};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;

const OPERATION_TIMEOUT: Duration = Duration::from_secs(2);

/// A Locker on a new backend (a client of its own), with `prefix` and `ttl`; the backend too,
/// to look at its queue.
async fn locker(url: &str, prefix: &str, ttl: Duration) -> (Locker, Arc<EtcdBackend>) {
    let url = BackendUrl::parse(url).expect("url");
    let backend = Arc::new(
        EtcdBackend::connect(&url, OPERATION_TIMEOUT)
            .await
            .expect("connect"),
    );
    let config = DlockConfig::default()
        .with_key_prefix(prefix.to_owned())
        .with_ttl(ttl)
        .with_operation_timeout(OPERATION_TIMEOUT);
    let locker =
        Locker::with_config(Arc::clone(&backend) as Arc<dyn LockBackend>, &config).expect("config");
    (locker, backend)
}

/// A task that waits up to 30 s for `name` and reports the guard and when it got it.
fn spawn_waiter(
    locker: &Locker,
    name: &str,
) -> tokio::task::JoinHandle<(dlock_core::Result<dlock_core::LockGuard>, Instant)> {
    let (locker, name) = (locker.clone(), name.to_owned());
    tokio::spawn(async move {
        let guard = locker.lock(&name).wait(Duration::from_secs(30)).await;
        (guard, Instant::now())
    })
}

/// Six read locks of `name`, each its own key on the server (not reentrant).
async fn six_read_locks(locker: &Locker, name: &str) -> Vec<dlock_core::LockGuard> {
    let mut guards = Vec::new();
    for _ in 0..6 {
        let guard = locker
            .read_lock(name)
            .reentrant(false)
            .await
            .expect("read lock");
        guards.push(guard);
    }
    guards
}

/// A task that waits up to 30 s for the write lock of `name`.
fn spawn_writer(
    locker: &Locker,
    name: &str,
) -> tokio::task::JoinHandle<dlock_core::Result<dlock_core::LockGuard>> {
    let (locker, name) = (locker.clone(), name.to_owned());
    tokio::spawn(async move { locker.write_lock(&name).wait(Duration::from_secs(30)).await })
}

/// `etcdctl lock --ttl <ttl> <name>`, holding (or waiting for) the lock until signalled; its
/// stdout (the lock key, once held) piped.
fn etcdctl_lock(endpoint: &str, name: &str, ttl_secs: u64) -> Child {
    etcdctl(endpoint)
        .args(["lock", "--ttl", &ttl_secs.to_string(), name])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("etcdctl (Debian package etcd-client) not found: run scripts/install-test-deps.sh")
}

/// The first line `child` prints, and when it came. The rest of its output is drained, not
/// dropped: a Go program writing to a closed pipe dies of SIGPIPE (without unlocking).
fn first_line(child: &mut Child) -> tokio::task::JoinHandle<(String, Instant)> {
    let stdout = child.stdout.take().expect("piped stdout");
    let (first_tx, first_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        let mut first_tx = Some(first_tx);
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(tx) = first_tx.take() {
                let _ = tx.send((line, Instant::now()));
            }
        }
    });
    tokio::spawn(async move {
        first_rx
            .await
            .expect("etcdctl exited without printing the lock key")
    })
}

/// `etcdctl lock` holds a name (`inspect` shows its key as the holder, with the dlock waiter
/// queued): a dlock acquire of the same name (a Locker without key
/// prefix) is refused by `try_lock`, queues, and gets the lock as soon as `etcdctl` releases
/// (SIGTERM: it unlocks), long before etcdctl's 10 s lease could run out. Then the reverse:
/// dlock holds, `etcdctl lock` queues behind it and prints its key only after dlock's release.
/// Returns once `count` acquires wait for `full_key` in etcd's queue, as `inspect` (read by
/// `backend`, whichever client queued them) lists them.
async fn until_queued(backend: &EtcdBackend, full_key: &str, count: usize) {
    let give_up = Instant::now() + Duration::from_secs(5);
    loop {
        let info = backend.inspect(full_key).await.expect("inspect");
        let waiting = info.waiters.map_or(0, |waiters| waiters.len());
        if waiting >= count {
            return;
        }
        assert!(
            Instant::now() < give_up,
            "{count} waiters never queued on `{full_key}` ({waiting} did)"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlock_and_etcdctl_lock_exclude_each_other() {
    let server = EtcdServer::start().await.expect("etcd");
    let (locker, backend) = locker(&server.url(), "", Duration::from_secs(10)).await;
    let name = "nightly-report";

    let mut etcdctl_holder = etcdctl_lock(&server.endpoint(), name, 10);
    let (key, _) = first_line(&mut etcdctl_holder).await.expect("reader");
    assert!(
        key.starts_with("nightly-report/"),
        "etcdctl printed {key:?}"
    );
    assert!(
        matches!(locker.try_lock(name).await, Err(Error::Busy { .. })),
        "dlock got a lock etcdctl holds"
    );
    let waiting = spawn_waiter(&locker, name);
    until_queued(&backend, name, 1).await;
    assert!(!waiting.is_finished(), "granted while etcdctl holds");
    let info = locker.inspect(name).await.expect("inspect");
    assert_eq!(info.holders.len(), 1, "{info:?}");
    assert_eq!(
        format!("{name}/{}", info.holders[0].owner),
        key,
        "inspect names etcdctl's key as the holder"
    );
    assert!(info.holders[0].fencing_token.is_some(), "{info:?}");
    assert_eq!(info.waiters.map(|w| w.len()), Some(1), "the dlock waiter");
    let released = Instant::now();
    signal(&etcdctl_holder, "TERM");
    let (guard, acquired) = waiting.await.expect("waiter");
    let guard = guard.expect("dlock acquires after etcdctl unlocked");
    let latency = acquired - released;
    println!("dlock acquired {latency:?} after etcdctl was told to unlock");
    assert!(
        latency < Duration::from_secs(5),
        "woken by the lease expiry, not by the unlock: {latency:?}"
    );
    assert!(
        etcdctl_holder
            .wait()
            .await
            .expect("etcdctl exits")
            .success()
    );

    // The reverse: dlock holds, etcdctl waits.
    let mut etcdctl_waiter = etcdctl_lock(&server.endpoint(), name, 10);
    let printed = first_line(&mut etcdctl_waiter);
    let endpoint = server.endpoint();
    let give_up = Instant::now() + Duration::from_secs(5);
    while etcd_keys(&endpoint, "nightly-report/").await.len() < 2 {
        assert!(Instant::now() < give_up, "etcdctl never queued its key");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!printed.is_finished(), "etcdctl got a lock dlock holds");
    let released = Instant::now();
    guard.release().await.expect("release");
    let (key, acquired) = tokio::time::timeout(Duration::from_secs(5), printed)
        .await
        .expect("etcdctl acquires after dlock's release")
        .expect("reader");
    assert!(
        key.starts_with("nightly-report/"),
        "etcdctl printed {key:?}"
    );
    println!(
        "etcdctl acquired {:?} after dlock's release",
        acquired - released
    );
    assert!(acquired >= released);
    assert!(
        matches!(locker.try_lock(name).await, Err(Error::Busy { .. })),
        "dlock got the lock etcdctl now holds"
    );
    signal(&etcdctl_waiter, "TERM");
    assert!(
        etcdctl_waiter
            .wait()
            .await
            .expect("etcdctl exits")
            .success()
    );
}

/// Read locks and `etcdctl lock` on one name: `etcdctl lock` (a writer, by etcd's mutex rule)
/// queues behind two dlock readers and gets the lock only once both have released; while it
/// holds, a dlock reader is refused and a waiting reader gets in as soon as etcdctl unlocks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_lock_waits_for_dlock_readers_and_readers_wait_for_it() {
    let server = EtcdServer::start().await.expect("etcd");
    let endpoint = server.endpoint();
    let (first, _) = locker(&server.url(), "", Duration::from_secs(10)).await;
    let (second, backend) = locker(&server.url(), "", Duration::from_secs(10)).await;
    let name = "catalog";
    let r1 = first.read_lock(name).await.expect("first reader");
    let r2 = second
        .read_lock(name)
        .await
        .expect("second reader: readers overlap");

    let mut writer = etcdctl_lock(&endpoint, name, 10);
    let printed = first_line(&mut writer);
    let give_up = Instant::now() + Duration::from_secs(5);
    while etcd_keys(&endpoint, "catalog/").await.len() < 3 {
        assert!(Instant::now() < give_up, "etcdctl never queued its key");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    r1.release().await.expect("release");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !printed.is_finished(),
        "etcdctl got the lock while a reader held it"
    );
    let released = Instant::now();
    r2.release().await.expect("release");
    let (key, acquired) = tokio::time::timeout(Duration::from_secs(5), printed)
        .await
        .expect("etcdctl acquires once the last reader released")
        .expect("reader");
    assert!(key.starts_with("catalog/"), "etcdctl printed {key:?}");
    assert!(acquired >= released);

    assert!(
        matches!(
            first.read_lock(name).wait(Duration::ZERO).await,
            Err(Error::Busy { .. })
        ),
        "a dlock reader got in while etcdctl holds the lock"
    );
    let waiting = tokio::spawn({
        let second = second.clone();
        async move {
            let guard = second.read_lock(name).wait(Duration::from_secs(30)).await;
            (guard, Instant::now())
        }
    });
    until_queued(&backend, name, 1).await;
    let unlocked = Instant::now();
    signal(&writer, "TERM");
    let (guard, acquired) = waiting.await.expect("reader task");
    let guard = guard.expect("the reader gets in after etcdctl unlocked");
    assert!(acquired >= unlocked);
    assert!(
        acquired - unlocked < Duration::from_secs(5),
        "woken by the lease expiry, not by the unlock"
    );
    guard.release().await.expect("release");
    assert!(writer.wait().await.expect("etcdctl exits").success());
}

/// Semaphore permits are keys `<name>/p<limit>-<lease hex>`: two permits of two are two such
/// keys; a third caller's one attempt (wait zero) is busy and leaves no key behind; a caller
/// naming another limit is refused with both limits; and `etcdctl lock` on the name (a writer)
/// waits until both permits are released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_permits_are_keys_named_with_their_limit() {
    let server = EtcdServer::start().await.expect("etcd");
    let endpoint = server.endpoint();
    let (first, _) = locker(&server.url(), "", Duration::from_secs(10)).await;
    let (second, _) = locker(&server.url(), "", Duration::from_secs(10)).await;
    let p1 = first.semaphore("pool", 2).await.expect("first permit");
    let p2 = second.semaphore("pool", 2).await.expect("second permit");
    let keys = etcd_keys(&endpoint, "pool/").await;
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert!(
        keys.iter().all(|key| key.starts_with("pool/p2-")),
        "{keys:?}"
    );

    let third = first.semaphore("pool", 2).wait(Duration::ZERO).await;
    assert!(matches!(third, Err(Error::Busy { .. })), "{third:?}");
    let mismatch = second.semaphore("pool", 3).wait(Duration::ZERO).await;
    assert!(
        matches!(
            mismatch,
            Err(Error::PermitLimitMismatch {
                stored: 2,
                requested: 3,
                ..
            })
        ),
        "{mismatch:?}"
    );
    let give_up = Instant::now() + Duration::from_secs(5);
    while etcd_keys(&endpoint, "pool/").await != keys {
        assert!(Instant::now() < give_up, "a refused caller left its key");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let mut writer = etcdctl_lock(&endpoint, "pool", 10);
    let printed = first_line(&mut writer);
    while etcd_keys(&endpoint, "pool/").await.len() < 3 {
        assert!(Instant::now() < give_up, "etcdctl never queued its key");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    p1.release().await.expect("release");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !printed.is_finished(),
        "etcdctl got the lock while a permit was held"
    );
    let released = Instant::now();
    p2.release().await.expect("release");
    let (key, acquired) = tokio::time::timeout(Duration::from_secs(5), printed)
        .await
        .expect("etcdctl acquires once the last permit was released")
        .expect("reader");
    assert!(key.starts_with("pool/"), "etcdctl printed {key:?}");
    assert!(acquired >= released);
    signal(&writer, "TERM");
    assert!(writer.wait().await.expect("etcdctl exits").success());
}

/// Every member is stopped (SIGSTOP): keepalives go unanswered, and the holder's guard
/// reports the lease lost within its ttl, cancelling the work. Once the members resume, the
/// lock is free again for another client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_every_member_reports_the_holder_lost_within_its_ttl() {
    let ttl = Duration::from_secs(3);
    let cluster = EtcdCluster::start(3).await.expect("etcd cluster");
    let (holder, _) = locker(&cluster.url(), "dlock:", ttl).await;
    let (other, _) = locker(&cluster.url(), "dlock:", ttl).await;
    let guard = holder.lock("invoices").await.expect("acquire");
    let first_token = guard.fencing_token().expect("token");
    for member in cluster.members() {
        member.pause().expect("SIGSTOP");
    }
    let stopped = Instant::now();
    let work = guard.run(std::future::pending::<()>());
    let outcome = tokio::time::timeout(ttl * 2, work).await;
    let lost_after = stopped.elapsed();
    println!("guard lost {lost_after:?} after every member stopped (ttl {ttl:?})");
    match outcome {
        Ok(Err(Error::LeaseLost { reason, .. })) => assert!(
            matches!(reason, LostReason::Expired | LostReason::SessionLost(_)),
            "{reason:?}"
        ),
        other => panic!("the work was not cancelled by the loss: {other:?}"),
    }
    assert!(lost_after <= ttl, "lost only after {lost_after:?}");
    assert!(!guard.is_held());

    for member in cluster.members() {
        member.resume().expect("SIGCONT");
    }
    let resumed = Instant::now();
    let next = other
        .lock("invoices")
        .wait(Duration::from_secs(30))
        .await
        .expect("the lock frees once the cluster is back");
    println!(
        "another client got the lock {:?} after the members resumed",
        resumed.elapsed()
    );
    assert!(next.fencing_token().expect("token") > first_token);
    drop(guard);
    next.release().await.expect("release");
}

/// A cluster that cannot be reached gives an error within about the operation timeout, on
/// connect and on acquire — never a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_cluster_errors_within_the_operation_timeout() {
    let server = EtcdServer::start().await.expect("etcd");
    let url = server.url();
    let (cut_off, _) = locker(&url, "dlock:", Duration::from_secs(5)).await;
    server.kill().await.expect("kill");
    let started = Instant::now();
    let outcome = cut_off.lock("k").wait(Duration::from_secs(30)).await;
    assert!(
        matches!(
            outcome,
            Err(Error::Unavailable { .. } | Error::Timeout { .. })
        ),
        "{outcome:?}"
    );
    assert!(
        started.elapsed() < OPERATION_TIMEOUT * 3,
        "acquire took {:?}",
        started.elapsed()
    );

    let started = Instant::now();
    let connected =
        EtcdBackend::connect(&BackendUrl::parse(&url).unwrap(), OPERATION_TIMEOUT).await;
    assert!(
        matches!(
            connected,
            Err(Error::Unavailable { .. } | Error::Timeout { .. })
        ),
        "{connected:?}"
    );
    assert!(
        started.elapsed() < OPERATION_TIMEOUT * 2,
        "connect took {:?}",
        started.elapsed()
    );

    // Paused (SIGSTOP), the server accepts connections but never answers.
    let paused = EtcdServer::start().await.expect("etcd");
    let (frozen, _) = locker(&paused.url(), "dlock:", Duration::from_secs(5)).await;
    paused.pause().expect("SIGSTOP");
    let started = Instant::now();
    let outcome = frozen.try_lock("k").await;
    assert!(
        matches!(
            outcome,
            Err(Error::Unavailable { .. } | Error::Timeout { .. })
        ),
        "{outcome:?}"
    );
    assert!(
        started.elapsed() < OPERATION_TIMEOUT * 3,
        "try_lock took {:?}",
        started.elapsed()
    );
    paused.resume().expect("SIGCONT");
}

/// With etcd's auth enabled, credentials in the URL (percent-encoded) authenticate every
/// request, streams included; missing or wrong ones fail at connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_in_the_url_authenticate() {
    let server = EtcdServer::start().await.expect("etcd");
    let endpoint = server.endpoint();
    for args in [
        &["user", "add", "root:s3cr%t", "--interactive=false"][..],
        &["auth", "enable"][..],
    ] {
        let output = etcdctl(&endpoint)
            .args(args)
            .output()
            .await
            .expect("etcdctl");
        assert!(output.status.success(), "etcdctl {args:?}: {output:?}");
    }
    let port = server.port();
    let ttl = Duration::from_secs(2);
    // Through the config, as an application would.
    let config = DlockConfig::from_toml_str(&format!(
        "backend = \"etcd://root:s3cr%25t@127.0.0.1:{port}\"\nttl = \"2s\"\noperation_timeout = \"2s\""
    ))
    .expect("config");
    let locker = Locker::connect(&config)
        .await
        .expect("connect with credentials");
    assert_eq!(locker.capabilities().name, "etcd");
    let guard = locker
        .lock("audited")
        .await
        .expect("acquire with credentials");
    assert!(guard.fencing_token().is_some());
    // Authenticated keepalives and renewals keep the lock past twice its ttl.
    tokio::time::sleep(ttl * 2 + ttl / 4).await;
    assert!(guard.is_held(), "lost: {:?}", guard.lost_reason());
    guard.release().await.expect("release");

    for url in [
        format!("etcd://root:wrong@127.0.0.1:{port}"),
        format!("etcd://127.0.0.1:{port}"),
    ] {
        let connected =
            EtcdBackend::connect(&BackendUrl::parse(&url).unwrap(), OPERATION_TIMEOUT).await;
        assert!(
            matches!(connected, Err(Error::Refused { .. })),
            "{url}: {connected:?}"
        );
    }
}

/// The etcd leases that exist, read with etcdctl.
async fn etcd_leases(endpoint: &str) -> Vec<String> {
    let output = etcdctl(endpoint)
        .args(["lease", "list"])
        .output()
        .await
        .expect("etcdctl lease list");
    assert!(
        output.status.success(),
        "etcdctl lease list failed: {output:?}"
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .skip(1) // "found N leases"
        .filter(|line| !line.is_empty())
        // etcdctl zero-pads the id (`0e45…`); lock keys use Go's `%x` like etcd's own mutex
        // (`e45…`): normalise to the latter.
        .map(|id| {
            u64::from_str_radix(id.trim(), 16)
                .map_or_else(|_| id.to_owned(), |id| format!("{id:x}"))
        })
        .collect()
}

/// One Locker's locks with one ttl share one etcd lease (etcd's `Session`), yet two tasks of
/// that Locker locking the same name exclude each other (etcd issue #11360: a shared lease
/// would give both the key `<name>/<lease>`): the second task queues under a suffixed key.
/// After the last lock on it is released the lease stays, idle, for one ttl — the next lock
/// reuses it instead of granting another — and is then revoked; dropping the backend revokes
/// it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_lease_per_ttl_two_tasks_still_exclude_each_other() {
    let server = EtcdServer::start().await.expect("etcd");
    let endpoint = server.endpoint();
    let (locker, backend) = locker(&server.url(), "", Duration::from_secs(10)).await;
    let first = locker.lock("shared").await.expect("acquire");
    let other = locker.lock("other").await.expect("acquire");
    let second_task = spawn_waiter(&locker, "shared");
    until_queued(&backend, "shared", 1).await;
    let leases = etcd_leases(&endpoint).await;
    assert_eq!(leases.len(), 1, "one lease per Locker and ttl: {leases:?}");
    let keys = etcd_keys(&endpoint, "shared/").await;
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert_eq!(
        keys.iter()
            .filter(|k| k.starts_with(&format!("shared/{}", leases[0])))
            .count(),
        2,
        "both keys on the one lease: {keys:?}, lease {leases:?}"
    );
    assert!(
        !second_task.is_finished(),
        "the second task got a held lock"
    );
    let released = Instant::now();
    first.release().await.expect("release");
    let (second, at) = second_task.await.expect("task");
    let second = second.expect("the second task gets the lock");
    assert!(at >= released);
    second.release().await.expect("release");
    other.release().await.expect("release");
    assert_eq!(
        etcd_leases(&endpoint).await,
        leases,
        "the idle lease was revoked at once"
    );
    let again = locker.lock("again").await.expect("acquire");
    assert_eq!(
        etcd_leases(&endpoint).await,
        leases,
        "a lock taken while the lease idles granted another"
    );
    again.release().await.expect("release");
    let give_up = Instant::now() + Duration::from_secs(10 + 5);
    while !etcd_leases(&endpoint).await.is_empty() {
        assert!(
            Instant::now() < give_up,
            "the idle lease outlived its ttl by more than 5 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Dropping the backend revokes its leases, and with them the keys of its locks.
    let raw = EtcdBackend::connect(
        &BackendUrl::parse(&server.url()).unwrap(),
        OPERATION_TIMEOUT,
    )
    .await
    .expect("connect");
    let request = dlock_core::backend::AcquireRequest::new(
        "abandoned",
        dlock_core::backend::OwnerId::random("raw"),
        Duration::from_secs(30),
    );
    let granted = raw.acquire(&request, None).await.expect("acquire");
    assert!(matches!(
        granted,
        dlock_core::backend::AcquireOutcome::Acquired(_)
    ));
    assert_eq!(etcd_keys(&endpoint, "abandoned/").await.len(), 1);
    drop(raw);
    let give_up = Instant::now() + Duration::from_secs(5);
    while !etcd_keys(&endpoint, "abandoned/").await.is_empty() {
        assert!(
            Instant::now() < give_up,
            "a dropped backend's lock outlived it"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(etcd_leases(&endpoint).await.is_empty());
}

/// 8 tasks on 2 Lockers contend for one key.
///
/// First, with the lock held, they queue one after another (each seen in etcd's queue before
/// the next starts): they are granted in exactly that order. Then all 8 loop 25 times over a
/// non-atomic read-sleep-write: no two are ever inside at once, no update is lost, and every
/// grant's fencing token — the create revision of the key it *queued* with — is above the
/// previous grant's, i.e. every grant went to the oldest waiter (FIFO).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contended_lock_is_fifo_without_double_holders() {
    const TASKS: usize = 8;
    const ROUNDS: usize = 25;
    let server = EtcdServer::start().await.expect("etcd");
    let ttl = Duration::from_secs(10);
    let (a, backend_a) = locker(&server.url(), "dlock:", ttl).await;
    let (b, _) = locker(&server.url(), "dlock:", ttl).await;
    let lockers = [a, b];

    // Phase 1: an ordered queue.
    let held = lockers[0].lock("hot").await.expect("acquire");
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for worker in 0..TASKS {
        let locker = lockers[worker % 2].clone();
        let order = Arc::clone(&order);
        tasks.push(tokio::spawn(async move {
            let guard = locker
                .lock("hot")
                .wait(Duration::from_secs(30))
                .await
                .expect("acquire");
            order.lock().unwrap().push(worker);
            guard.release().await.expect("release");
        }));
        until_queued(&backend_a, "dlock:hot", worker + 1).await;
    }
    held.release().await.expect("release");
    for task in tasks {
        task.await.expect("worker");
    }
    assert_eq!(
        *order.lock().unwrap(),
        (0..TASKS).collect::<Vec<_>>(),
        "grants out of queue order"
    );

    // Phase 2: free-for-all over a non-atomic read-sleep-write.
    let value = Arc::new(Mutex::new(0_u64));
    let inside = Arc::new(Mutex::new(None::<usize>));
    let grants = Arc::new(Mutex::new(Vec::<u64>::new()));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..TASKS {
        let locker = lockers[worker % 2].clone();
        let (value, inside, grants) =
            (Arc::clone(&value), Arc::clone(&inside), Arc::clone(&grants));
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = locker.lock("hot").await.expect("acquire");
                let other = inside.lock().unwrap().replace(worker);
                assert_eq!(other, None, "two holders at once");
                grants
                    .lock()
                    .unwrap()
                    .push(guard.fencing_token().expect("token"));
                let read = *value.lock().unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
                *value.lock().unwrap() = read + 1;
                inside.lock().unwrap().take();
                guard.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        task.await.expect("worker");
    }
    let acquisitions = TASKS * ROUNDS;
    println!(
        "{acquisitions} contended acquisitions in {:?}",
        started.elapsed()
    );
    assert_eq!(
        *value.lock().unwrap(),
        acquisitions as u64,
        "updates were lost"
    );
    let grants = grants.lock().unwrap().clone();
    assert_eq!(grants.len(), acquisitions);
    assert!(
        grants.windows(2).all(|w| w[0] < w[1]),
        "a grant skipped an older waiter: {grants:?}"
    );
}

/// The whole client freezes (its only runtime thread blocked, as a GC pause or SIGSTOP would)
/// for longer than its etcd lease: the lock it held is lost, and the first acquire after the
/// pause succeeds — on a fresh lease — instead of failing with "requested lease not found".
#[tokio::test(flavor = "current_thread")]
async fn after_a_pause_past_the_lease_the_first_acquire_succeeds() {
    let server = EtcdServer::start().await.expect("etcd");
    let ttl = Duration::from_secs(1);
    let (locker, _) = locker(&server.url(), "dlock:", ttl).await;
    let held = locker.lock("before").await.expect("acquire");
    std::thread::sleep(Duration::from_secs(3)); // frozen well past the lease (whole seconds)
    let after = locker
        .lock("after")
        .wait(Duration::from_secs(2))
        .await
        .expect("the first acquire after the pause");
    assert!(after.is_held());
    assert!(
        !held.is_held(),
        "the lock held across the pause is still reported held"
    );
    after.release().await.expect("release");
}

/// The lease behind a Locker's session is revoked behind its back (an operator's `etcdctl
/// lease revoke`): the next acquire, which finds the lease gone, marks the session lost — the
/// lock held on it is reported lost — and succeeds on a fresh lease, on the first call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_revoked_behind_the_locker_is_replaced_on_the_next_acquire() {
    let server = EtcdServer::start().await.expect("etcd");
    let endpoint = server.endpoint();
    let (locker, _) = locker(&server.url(), "dlock:", Duration::from_secs(10)).await;
    let held = locker.lock("first").await.expect("acquire");
    for lease in etcd_leases(&endpoint).await {
        let output = etcdctl(&endpoint)
            .args(["lease", "revoke", &lease])
            .output()
            .await
            .expect("etcdctl lease revoke");
        assert!(output.status.success(), "{output:?}");
    }
    let second = locker
        .lock("second")
        .wait(Duration::from_secs(2))
        .await
        .expect("the first acquire after the revoke");
    assert!(second.is_held());
    match tokio::time::timeout(Duration::from_secs(5), held.lost()).await {
        Ok(LostReason::SessionLost(_) | LostReason::NotOwner) => {}
        other => panic!("the lock on the revoked lease was not reported lost: {other:?}"),
    }
    let leases = etcd_leases(&endpoint).await;
    assert_eq!(leases.len(), 1, "one fresh lease: {leases:?}");
    second.release().await.expect("release");
}

/// Every member stops answering (SIGSTOP) while an acquire with `wait(1s)` is in flight: the
/// caller has its answer within the wait plus `WAIT_SLACK` (not plus the operation timeout),
/// and whatever the late request does once etcd answers again, no lock stays held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_cluster_answers_a_wait_within_its_bound_and_leaks_nothing() {
    let server = EtcdServer::start().await.expect("etcd");
    let (frozen, _) = locker(&server.url(), "dlock:", Duration::from_secs(30)).await;
    let (other, _) = locker(&server.url(), "dlock:", Duration::from_secs(30)).await;
    server.pause().expect("SIGSTOP");
    let started = Instant::now();
    let outcome = frozen.lock("k").wait(Duration::from_secs(1)).await;
    let took = started.elapsed();
    assert!(
        matches!(outcome, Err(Error::Timeout { .. } | Error::Busy { .. })),
        "{outcome:?}"
    );
    let bound = Duration::from_secs(1) + dlock_core::WAIT_SLACK + Duration::from_millis(150);
    assert!(took <= bound, "answered after {took:?}, bound {bound:?}");
    server.resume().expect("SIGCONT");
    // The late request may now be applied; its grant is released at once, so the lock frees
    // long before its 30 s ttl.
    let taken = other
        .lock("k")
        .wait(Duration::from_secs(10))
        .await
        .expect("no lock left held by the abandoned acquire");
    taken.release().await.expect("release");
}

/// `Locker::shutdown` leaves nothing of its own on etcd: its leases are revoked (etcdctl
/// lists only the other Locker's), and with them every key on them — a held lock and a
/// waiter's queue key alike; the acquire that was waiting ends with `ShutDown` rather than
/// queueing again on a new lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_revokes_every_lease_and_its_keys() {
    let server = EtcdServer::start().await.expect("etcd");
    let endpoint = server.endpoint();
    let (other, _) = locker(&server.url(), "", Duration::from_secs(30)).await;
    let (leaving, _) = locker(&server.url(), "", Duration::from_secs(30)).await;
    let _busy = other.lock("busy").await.expect("acquire");
    let _held = leaving.lock("held").await.expect("acquire");
    let waiter = spawn_waiter(&leaving, "busy");
    let give_up = Instant::now() + Duration::from_secs(10);
    while etcd_keys(&endpoint, "busy/").await.len() < 2 {
        assert!(Instant::now() < give_up, "the waiter never queued");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        etcd_leases(&endpoint).await.len(),
        2,
        "one lease per Locker"
    );

    leaving.shutdown().await.expect("shutdown");
    assert_eq!(
        etcd_leases(&endpoint).await.len(),
        1,
        "only the other Locker's lease is left"
    );
    assert_eq!(etcd_keys(&endpoint, "held/").await, Vec::<String>::new());
    assert_eq!(
        etcd_keys(&endpoint, "busy/").await.len(),
        1,
        "the queue key went"
    );
    let (waited, _) = waiter.await.expect("the waiter's task");
    assert!(
        matches!(waited, Err(Error::ShutDown)),
        "the waiting acquire after shutdown: {waited:?}"
    );
    assert_eq!(
        etcd_leases(&endpoint).await.len(),
        1,
        "no lease opened again"
    );
}

/// An acquire whose put gets no answer within the operation timeout (a proxy holds etcd's
/// replies back, so the put *was* applied) retires the lease it used. A put that lands late —
/// sent to a member that was frozen, applied when it wakes, after every delete looked for it —
/// would otherwise leave a queue key on a lease this Locker keeps alive, and every later
/// acquire of the name would wait behind it for good (`dlock-faults` found that stall with a
/// paused etcd member). So the lease is revoked as soon as the key is settled, not after its
/// idle linger of one ttl (30 s here), and the next acquire queues on a new lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_without_an_answer_retires_its_lease() {
    let server = EtcdServer::start().await.expect("etcd");
    let endpoint = server.endpoint();
    let proxy = TcpProxy::start(([127, 0, 0, 1], server.port()).into())
        .await
        .expect("proxy");
    let config = DlockConfig::default()
        .with_backend(BackendSpec::Url(format!("etcd://{}", proxy.address())))
        .with_key_prefix(String::new())
        .with_ttl(Duration::from_secs(30))
        .with_operation_timeout(Duration::from_millis(300));
    let locker = Locker::connect(&config).await.expect("connect");
    let warm = locker.lock("warm").await.expect("acquire");
    warm.release().await.expect("release");
    let leases = etcd_leases(&endpoint).await;
    assert_eq!(leases.len(), 1, "the idle lease lingers: {leases:?}");

    proxy.set(ProxyMode::DelayReplies(Duration::from_millis(700)));
    let unanswered = locker.lock("k").wait(Duration::ZERO).await;
    assert!(
        matches!(
            unanswered,
            Err(Error::Timeout { .. } | Error::Unavailable { .. })
        ),
        "{unanswered:?}"
    );
    proxy.set(ProxyMode::Pass);

    let give_up = Instant::now() + Duration::from_secs(5);
    while etcd_leases(&endpoint).await.contains(&leases[0]) {
        assert!(
            Instant::now() < give_up,
            "the lease of the unanswered put was not revoked within 5 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let next = locker
        .lock("k")
        .wait(Duration::from_secs(5))
        .await
        .expect("the name is free");
    let keys = etcd_keys(&endpoint, "k/").await;
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert!(
        !keys[0].starts_with(&format!("k/{}", leases[0])),
        "queued on the retired lease: {keys:?}"
    );
    next.release().await.expect("release");
}

/// A sample of etcd's Prometheus metrics (`/metrics` on the client URL): the sum of the
/// series named `name` whose labels contain every one of `labels`.
async fn etcd_metric(endpoint: &str, name: &str, labels: &[&str]) -> f64 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let address = endpoint.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("etcd's client port");
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: etcd\r\n\r\n")
        .await
        .expect("request");
    let mut body = String::new();
    stream.read_to_string(&mut body).await.expect("metrics");
    body.lines()
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
                && labels.iter().all(|label| line.contains(label))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Transactions etcd has answered so far.
async fn etcd_txns(endpoint: &str) -> f64 {
    etcd_metric(
        endpoint,
        "grpc_server_handled_total",
        &["grpc_method=\"Txn\""],
    )
    .await
}

/// Held locks are renewed by their lease's keepalive alone once their keys are watched: after
/// the first renewal (one transaction reads the keys), later renewals of 300 held locks send
/// etcd no transaction at all (the old renewal read every key at every cadence: 3 per round
/// here), yet a key `etcdctl del` deletes is still found: that lock is lost by the next
/// renewal, the others stay held. Releasing them all leaves no key and no watcher in etcd.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_held_locks_are_renewed_without_reading_their_keys_and_a_deletion_is_seen() {
    let server = EtcdServer::start().await.expect("etcd");
    let endpoint = server.endpoint();
    let ttl = Duration::from_secs(3);
    let url = BackendUrl::parse(&server.url()).expect("url");
    let backend = EtcdBackend::connect(&url, OPERATION_TIMEOUT)
        .await
        .expect("connect");
    let counting = Arc::new(dlock_core::conformance::CountingBackend::new(Arc::new(
        backend,
    )));
    let config = DlockConfig::default()
        .with_ttl(ttl)
        .with_operation_timeout(OPERATION_TIMEOUT);
    let locker = Locker::with_config(counting.clone(), &config).expect("config");
    let mut guards = Vec::new();
    for i in 0..300 {
        guards.push(locker.lock(&format!("held:{i}")).await.expect("acquire"));
    }
    // Each lock's first renewal reads its key and then asks for its watch: wait until etcd
    // has all 300 watchers.
    let watchers = || etcd_metric(&endpoint, "etcd_debugging_mvcc_watcher_total", &[]);
    eventually("every held key is watched", ttl * 3, async || {
        watchers().await > 299.5
    })
    .await;
    let before = etcd_txns(&endpoint).await;
    // Three more rounds of 300 leases in batches of at most 128.
    let renewed = counting.renewals() + 9;
    eventually("the watchdog renews", ttl * 4, async || {
        counting.renewals() >= renewed
    })
    .await;
    let during = etcd_txns(&endpoint).await - before;
    assert!(
        during < 0.5,
        "{during} transactions while renewing watched keys"
    );
    assert!(guards.iter().all(dlock_core::LockGuard::is_held));

    let keys = etcd_keys(&endpoint, "dlock:held:7/").await;
    assert_eq!(keys.len(), 1, "{keys:?}");
    let deleted = etcdctl(&endpoint)
        .args(["del", &keys[0]])
        .output()
        .await
        .expect("etcdctl");
    assert!(deleted.status.success(), "{deleted:?}");
    support::only_this_lock_is_lost(&guards, 7, ttl, Instant::now()).await;

    for guard in guards {
        let _ = guard.release().await;
    }
    assert_eq!(etcd_keys(&endpoint, "dlock:").await, Vec::<String>::new());
    eventually("no watcher is left", Duration::from_secs(5), async || {
        watchers().await < 0.5
    })
    .await;
}

/// A Locker shut down while its held keys are watched leaves nothing on etcd: no key, no
/// lease, no watcher (the watch stream ends before the leases are revoked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_watched_keys_leaves_no_watcher_lease_or_key() {
    let server = EtcdServer::start().await.expect("etcd");
    let endpoint = server.endpoint();
    let ttl = Duration::from_secs(3);
    let (locker, _) = locker(&server.url(), "", ttl).await;
    let mut guards = Vec::new();
    for i in 0..20 {
        guards.push(locker.lock(&format!("watched:{i}")).await.expect("acquire"));
    }
    let watchers = || etcd_metric(&endpoint, "etcd_debugging_mvcc_watcher_total", &[]);
    eventually("every held key is watched", ttl * 3, async || {
        watchers().await > 19.5
    })
    .await;

    locker.shutdown().await.expect("shutdown");
    assert_eq!(etcd_keys(&endpoint, "watched:").await, Vec::<String>::new());
    assert_eq!(etcd_leases(&endpoint).await, Vec::<String>::new());
    eventually("no watcher is left", Duration::from_secs(5), async || {
        watchers().await < 0.5
    })
    .await;
    drop(guards);
}

/// Watch streams etcd has opened so far.
async fn etcd_watch_streams(endpoint: &str) -> f64 {
    etcd_metric(
        endpoint,
        "grpc_server_started_total",
        &["grpc_method=\"Watch\"", "etcdserverpb.Watch"],
    )
    .await
}

/// The waiters of one name in one backend share one watch on it: 40 hand-offs between two
/// Lockers, each acquire queued behind the other's hold (`inspect` shows it waiting before the
/// holder releases), open one watch per Locker, not one per wait (the old waiter opened a
/// stream of its own each time: 40 here). The shared watch closes a little after its last
/// waiter left, and a shutdown leaves no watcher.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_one_name_share_one_watch() {
    let server = EtcdServer::start().await.expect("etcd");
    let endpoint = server.endpoint();
    let ttl = Duration::from_secs(10);
    let (a, backend_a) = locker(&server.url(), "", ttl).await;
    let (b, _) = locker(&server.url(), "", ttl).await;
    let watchers = || etcd_metric(&endpoint, "etcd_debugging_mvcc_watcher_total", &[]);
    let streams_before = etcd_watch_streams(&endpoint).await;

    let mut held = a.lock("hot").await.expect("first grant");
    for round in 0..40 {
        let next = if round % 2 == 0 { &b } else { &a };
        let waiter = spawn_waiter(next, "hot");
        until_queued(&backend_a, "hot", 1).await;
        held.release().await.expect("release");
        let (guard, _) = waiter.await.expect("waiter");
        held = guard.expect("the waiter's grant");
    }
    held.release().await.expect("release");

    let opened = etcd_watch_streams(&endpoint).await - streams_before;
    assert!(
        opened < 2.5,
        "{opened} watch streams opened for 40 waits on one name by two Lockers"
    );
    eventually(
        "the name's watch closes after its last waiter",
        Duration::from_secs(6),
        async || watchers().await < 0.5,
    )
    .await;

    // Again, and shut down while the watch lingers.
    let held = a.lock("hot").await.expect("grant");
    let waiter = spawn_waiter(&b, "hot");
    until_queued(&backend_a, "hot", 1).await;
    held.release().await.expect("release");
    let (guard, _) = waiter.await.expect("waiter");
    guard.expect("grant").release().await.expect("release");
    assert!(watchers().await > 0.5, "the watch lingers");
    b.shutdown().await.expect("shutdown");
    a.shutdown().await.expect("shutdown");
    eventually("no watcher is left", Duration::from_secs(1), async || {
        watchers().await < 0.5
    })
    .await;
}

/// A writer queued behind readers waits, from the name's shared watch, for every one of them
/// to go and then holds without reading the name again (the log of deletions showed its turn):
/// six readers leaving newest first cost etcd their six release transactions and nothing
/// from the writer (which read the name again after each reader: six more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_behind_readers_holds_when_the_last_leaves_without_reading_again() {
    let server = EtcdServer::start().await.expect("etcd");
    let endpoint = server.endpoint();
    let ttl = Duration::from_secs(30);
    let (readers, backend) = locker(&server.url(), "", ttl).await;
    let (writers, _) = locker(&server.url(), "", ttl).await;
    let mut guards = six_read_locks(&readers, "ledger").await;
    let writer = spawn_writer(&writers, "ledger");
    until_queued(&backend, "ledger", 1).await;

    let before = etcd_txns(&endpoint).await;
    while let Some(guard) = guards.pop() {
        guard.release().await.expect("release");
    }
    let held = writer.await.expect("writer").expect("the writer's grant");
    let during = etcd_txns(&endpoint).await - before;
    assert!(
        during < 6.5,
        "{during} transactions for six reader releases and the writer's wait"
    );
    assert_eq!(
        backend
            .inspect("ledger")
            .await
            .expect("inspect")
            .holders
            .len(),
        1
    );
    held.release().await.expect("release");
}

/// etcd #11456 through the shared watch: a waiter whose own key goes in the same revision as
/// the key ahead of it (their lease revoked: two tasks of one Locker share it, and etcd
/// deletes the holder's `k/<lease>` just before the waiter's `k/<lease>.1`) is not granted
/// on a key that no longer exists. It queues again and holds with a key of its own, which
/// etcd shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_key_goes_with_the_one_ahead_is_not_granted_without_a_key() {
    let server = EtcdServer::start().await.expect("etcd");
    let endpoint = server.endpoint();
    let (locker, backend) = locker(&server.url(), "", Duration::from_secs(10)).await;
    let holder = locker.lock("k").await.expect("grant");
    let waiter = spawn_waiter(&locker, "k");
    until_queued(&backend, "k", 1).await;
    let keys = etcd_keys(&endpoint, "k/").await;
    assert_eq!(keys.len(), 2, "{keys:?}");
    let leases = etcd_leases(&endpoint).await;
    assert_eq!(leases.len(), 1, "one lease for both: {leases:?}");

    let revoked = etcdctl(&endpoint)
        .args(["lease", "revoke", &leases[0]])
        .output()
        .await
        .expect("etcdctl");
    assert!(revoked.status.success(), "{revoked:?}");
    let (guard, _) = waiter.await.expect("waiter");
    let guard = guard.expect("the waiter's grant, on a key of its own");
    let keys = etcd_keys(&endpoint, "k/").await;
    assert_eq!(keys.len(), 1, "the grant's key must exist: {keys:?}");
    assert!(
        !keys[0].starts_with(&format!("k/{}", leases[0])),
        "the grant's key is on a new lease, not the revoked one: {keys:?}"
    );
    let info = backend.inspect("k").await.expect("inspect");
    assert_eq!(info.holders.len(), 1);
    drop(holder);
    guard.release().await.expect("release");
}

/// Ranges etcd has served so far: reads, the compares of transactions, and the previous
/// state of a key that a watch asked for (`prev_kv`).
async fn etcd_ranges(endpoint: &str) -> f64 {
    etcd_metric(endpoint, "etcd_mvcc_range_total", &[]).await
}

/// The name's shared watch costs etcd no read per deletion it sends: it does not ask for the
/// deleted key's previous state, which etcd reads from its store for every event and every
/// watcher before sending it. Six readers leaving while a writer of another Locker waits for
/// them cost etcd the ranges of six releases with nobody waiting (with `prev_kv`: six more),
/// and the writer holds once the last one left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiters_watch_costs_etcd_no_read_per_deletion() {
    let server = EtcdServer::start().await.expect("etcd");
    let endpoint = server.endpoint();
    let ttl = Duration::from_secs(30);
    let (readers, backend) = locker(&server.url(), "", ttl).await;
    let (writers, _) = locker(&server.url(), "", ttl).await;
    let watchers = || etcd_metric(&endpoint, "etcd_debugging_mvcc_watcher_total", &[]);
    let release = async |guards: Vec<dlock_core::LockGuard>| {
        for guard in guards.into_iter().rev() {
            guard.release().await.expect("release");
        }
    };

    let guards = six_read_locks(&readers, "ledger").await;
    let before = etcd_ranges(&endpoint).await;
    release(guards).await;
    let unwatched = etcd_ranges(&endpoint).await - before;
    assert!(
        unwatched > 0.5,
        "releases cost etcd no range: is the metric still there?"
    );

    let guards = six_read_locks(&readers, "ledger").await;
    let writer = spawn_writer(&writers, "ledger");
    until_queued(&backend, "ledger", 1).await;
    eventually(
        "the writer watches the name",
        Duration::from_secs(5),
        async || watchers().await > 0.5,
    )
    .await;
    let before = etcd_ranges(&endpoint).await;
    release(guards).await;
    let held = writer.await.expect("writer").expect("the writer's grant");
    let watched = etcd_ranges(&endpoint).await - before;
    // The watch's opening read may land in the window: one range, not six.
    assert!(
        watched - unwatched < 1.5,
        "six releases cost etcd {unwatched} ranges alone and {watched} with a waiter watching"
    );
    held.release().await.expect("release");
}
