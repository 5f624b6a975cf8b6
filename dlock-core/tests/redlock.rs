//! RedLock against five harness-started `redis-server`s (no persistence), with masters killed,
//! frozen (SIGSTOP) and restarted empty while locks are held or wanted. Double holders are
//! detected with a non-atomic read-sleep-write of shared state, not a counter.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dlock_core::{DlockConfig, Error, Locker};
use dlock_harness::{ProxyMode, RedisNodes, TcpProxy};

const OPERATION_TIMEOUT: Duration = Duration::from_secs(1);

async fn locker(url: &str, ttl: Duration) -> Locker {
    support::connect::locker_at(url, ttl, OPERATION_TIMEOUT).await
}

/// `tasks` tasks over two Lockers each take `key` `rounds` times and, holding it, read the
/// shared value, yield for a while, and write it back plus one: with a double holder an
/// increment is lost. Returns the final value.
async fn read_sleep_write(url: &str, key: &str, tasks: usize, rounds: usize) -> usize {
    let lockers = [
        locker(url, Duration::from_secs(5)).await,
        locker(url, Duration::from_secs(5)).await,
    ];
    let value = Arc::new(Mutex::new(0_usize));
    let mut running = Vec::new();
    for t in 0..tasks {
        let (locker, value, key) = (lockers[t % 2].clone(), Arc::clone(&value), key.to_owned());
        running.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let guard = locker
                    .lock(&key)
                    .wait(Duration::from_secs(20))
                    .await
                    .expect("granted with a majority up");
                let read = *value.lock().unwrap();
                tokio::time::sleep(Duration::from_millis(2)).await;
                *value.lock().unwrap() = read + 1;
                guard.release().await.expect("release");
            }
        }));
    }
    for task in running {
        task.await.expect("task");
    }
    Arc::try_unwrap(value)
        .expect("every task is done")
        .into_inner()
        .expect("not poisoned")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_of_five_masters_down_still_grant_and_still_exclude() {
    let nodes = RedisNodes::start(5).await.expect("redis-servers");
    nodes.nodes()[1].kill().await.expect("kill");
    nodes.nodes()[3].kill().await.expect("kill");
    let (tasks, rounds) = (6, 15);
    let end = read_sleep_write(&nodes.url(), "ledger", tasks, rounds).await;
    assert_eq!(end, tasks * rounds, "two holders at once lost an update");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_of_five_masters_down_never_grant_and_fail_within_the_bounds() {
    let nodes = RedisNodes::start(5).await.expect("redis-servers");
    let url = nodes.url();
    let locker = locker(&url, Duration::from_secs(5)).await;
    for i in [0, 2, 4] {
        nodes.nodes()[i].kill().await.expect("kill");
    }
    let started = Instant::now();
    let tried = locker.try_lock("ledger").await;
    assert!(
        matches!(
            tried,
            Err(Error::Unavailable { .. } | Error::Timeout { .. })
        ),
        "expected a backend error without a majority, got {tried:?}"
    );
    assert!(
        started.elapsed() < OPERATION_TIMEOUT * 2,
        "took {:?}",
        started.elapsed()
    );
    let started = Instant::now();
    let waited = locker.lock("ledger").wait(Duration::from_secs(2)).await;
    assert!(
        matches!(
            waited,
            Err(Error::Unavailable { .. } | Error::Timeout { .. } | Error::Busy { .. })
        ),
        "expected busy or a backend error without a majority, got {waited:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2) + OPERATION_TIMEOUT * 2,
        "took {:?}",
        started.elapsed()
    );
    // A Locker that starts while a majority is down says so at once.
    let started = Instant::now();
    let config =
        DlockConfig::from_toml_str(&format!("backend = \"{url}\"\noperation_timeout = \"1s\""))
            .expect("config");
    let connected = Locker::connect(&config).await;
    assert!(
        matches!(
            connected,
            Err(Error::Unavailable { .. } | Error::Timeout { .. })
        ),
        "connected without a majority: {connected:?}"
    );
    assert!(
        started.elapsed() < OPERATION_TIMEOUT * 2,
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_master_does_not_delay_acquires_or_releases() {
    let nodes = RedisNodes::start(5).await.expect("redis-servers");
    // A 10 s ttl with `node_timeout=2%`: a master gets 200 ms, against the 1 s operation
    // timeout a frozen master would otherwise cost every request. But an acquire or release
    // stops waiting once a majority said yes, so the frozen master costs nothing at all.
    let url = format!("{}?node_timeout=2%", nodes.url());
    let locker = locker(&url, Duration::from_secs(10)).await;
    let frozen = &nodes.nodes()[2];
    frozen.pause().expect("SIGSTOP");
    let mut slowest = Duration::ZERO;
    for i in 0..5 {
        let started = Instant::now();
        let guard = locker
            .lock(&format!("job:{i}"))
            .await
            .expect("granted by the other four");
        guard.release().await.expect("release");
        slowest = slowest.max(started.elapsed());
    }
    // A waiter, too: it subscribes on the live masters, loses a round and is woken by the
    // release.
    let other = self::locker(&url, Duration::from_secs(10)).await;
    let held = locker.lock("job:contended").await.expect("acquire");
    let waiting = tokio::spawn(async move {
        let guard = other
            .lock("job:contended")
            .wait(Duration::from_secs(20))
            .await;
        (guard, Instant::now())
    });
    // The waiter lost its first round and queued: its own key is not on any live master.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let releasing = Instant::now();
    held.release().await.expect("release");
    let (guard, granted) = waiting.await.expect("waiter");
    guard
        .expect("the waiter gets the lock")
        .release()
        .await
        .expect("release");
    let handed_over = granted - releasing;
    frozen.resume().expect("SIGCONT");
    println!(
        "slowest acquire + release with a frozen master: {slowest:?}; hand-over {handed_over:?}"
    );
    // A lost round waits (at most its bound) for its give-back on the frozen master, so a
    // hand-over may cost one node timeout, never more.
    assert!(
        handed_over < Duration::from_millis(400),
        "the hand-over waited {handed_over:?} (node timeout 200 ms)"
    );
    assert!(
        slowest < Duration::from_millis(200),
        "an acquire waited {slowest:?} for the frozen master (node timeout 200 ms): a majority \
         of the other four should have been enough"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minority_restarted_empty_keeps_the_lock_and_a_majority_loses_it() {
    let nodes = RedisNodes::start(5).await.expect("redis-servers");
    let url = nodes.url();
    let ttl = Duration::from_secs(3);
    let (holder, other) = (locker(&url, ttl).await, locker(&url, ttl).await);
    let guard = holder.lock("ledger").await.expect("acquire");

    // Two masters restart without persistence: they come back without the lock, but three
    // still hold it, so nobody else can get a majority, and the holder keeps renewing.
    for i in [0, 1] {
        nodes.nodes()[i].restart().await.expect("restart");
    }
    let tried = other.try_lock("ledger").await;
    assert!(
        matches!(tried, Err(Error::Busy { .. })),
        "granted a second time with a minority restarted: {tried:?}"
    );
    let renewed_past = Instant::now() + ttl;
    while Instant::now() < renewed_past {
        assert!(
            guard.is_held(),
            "the holder lost the lock to a minority restart: {:?}",
            guard.lost_reason()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A third restarts: only two masters hold the lock. The holder's next renewal (every
    // ttl/3) finds no majority and reports the lease lost; the other Locker can take it.
    nodes.nodes()[2].restart().await.expect("restart");
    let restarted = Instant::now();
    tokio::time::timeout(ttl, guard.lost())
        .await
        .expect("the holder never noticed that a majority forgot its lock");
    println!(
        "lease lost {:?} after the third restart",
        restarted.elapsed()
    );
    assert!(!guard.is_held());
    let taken = other
        .lock("ledger")
        .wait(ttl)
        .await
        .expect("the other Locker takes the lock the majority forgot");
    taken.release().await.expect("release");
}

/// A waiter hears a release only from the masters that had confirmed its subscription when
/// its attempt marked their keys. Here the two masters holding the lock confirm late (their
/// new connections are held up by a proxy) and the holder releases in between: the waiter
/// tries again when their confirmations come, instead of sleeping out the holder's ttl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_before_a_late_subscription_confirms_is_not_missed() {
    let nodes = RedisNodes::start(4).await.expect("redis-servers");
    let [free, second, third, elsewhere] = nodes.nodes() else {
        unreachable!("four servers")
    };
    let mut proxies = Vec::new();
    for server in [second, third] {
        let address = server.addr().parse().expect("address");
        proxies.push(TcpProxy::start(address).await.expect("proxy"));
    }
    // The holder's masters and the waiter's share two servers (the waiter reaches them
    // through the proxies); the holder's third master is elsewhere, the waiter's is free.
    let ttl = Duration::from_secs(30);
    let holder = locker(
        &format!(
            "redlock://{},{},{}",
            elsewhere.addr(),
            second.addr(),
            third.addr()
        ),
        ttl,
    )
    .await;
    let waiter = locker(
        &format!(
            "redlock://{},{},{}",
            free.addr(),
            proxies[0].address(),
            proxies[1].address()
        ),
        ttl,
    )
    .await;
    let guard = holder.lock("order:7").await.expect("acquire");
    // The waiter's command connections are open (it pinged every master); its subscription
    // connections open at its first wait, and are held up on the two shared masters.
    for proxy in &proxies {
        proxy.set(ProxyMode::HoldNew);
    }
    let waiting = tokio::spawn(async move {
        let guard = waiter.lock("order:7").wait(Duration::from_secs(20)).await;
        (guard, Instant::now())
    });
    // Its queued round found the lock free on its own master and held on the shared two,
    // which it marked waited for: their release publishes, to nobody subscribed yet.
    let marked = async {
        for server in [second, third] {
            while !server
                .command(&["GET", "{dlock:order:7}"])
                .await
                .is_ok_and(|value| value.ends_with("|waited"))
            {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), marked)
        .await
        .expect("the waiter never marked the shared masters' keys");
    guard.release().await.expect("release");
    let subscribed_at = Instant::now();
    for proxy in &proxies {
        proxy.set(ProxyMode::Pass);
    }
    let (acquired, at) = waiting.await.expect("waiter");
    acquired
        .expect("the waiter gets the released lock")
        .release()
        .await
        .expect("release");
    let took = at - subscribed_at;
    println!("granted {took:?} after the late subscriptions could confirm");
    assert!(
        took < Duration::from_secs(3),
        "the waiter took {took:?} to notice a release made before its subscription confirmed \
         (the holder's ttl is {ttl:?}, its wait bound 20 s)"
    );
}

/// Three of five masters stop answering (SIGSTOP) for a second while an acquire with
/// `wait(5s)` is in flight: its rounds find no majority of answers, which it tries again
/// within its wait — as a round lost to another holder — rather than answering `Unavailable`
/// at once; once they are resumed, it is granted — the attempts the frozen masters apply
/// late are its own, granted anew, not a holder to wait out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_frozen_inside_a_wait_is_waited_out() {
    let nodes = RedisNodes::start(5).await.expect("redis-servers");
    let locker = locker(&nodes.url(), Duration::from_secs(5)).await;
    let frozen = [0, 2, 4];
    for i in frozen {
        nodes.nodes()[i].pause().expect("SIGSTOP");
    }
    let started = Instant::now();
    let acquiring = tokio::spawn(async move {
        let guard = locker.lock("ledger").wait(Duration::from_secs(5)).await;
        (guard, locker)
    });
    // The length of the fault, not a guess at an ordering.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !acquiring.is_finished(),
        "the acquire answered within {:?}, with most of its wait left, while a majority was \
         frozen: {:?}",
        started.elapsed(),
        acquiring.await.map(|(guard, _)| guard)
    );
    for i in frozen {
        nodes.nodes()[i].resume().expect("SIGCONT");
    }
    let (guard, _locker) = acquiring.await.expect("the acquiring task");
    let guard = guard.expect("granted once the masters answer again");
    assert!(guard.is_held());
    guard.release().await.expect("release");
}

/// Every master stops answering (SIGSTOP) for 2.5 s — longer than the 1 s operation timeout
/// — while an acquire with `wait(5s)` is in flight: its first round and its subscription to
/// the release channel alike go unanswered, and are tried again within the wait; once the
/// masters are resumed, it is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_master_frozen_inside_a_wait_is_waited_out() {
    let nodes = RedisNodes::start(5).await.expect("redis-servers");
    let locker = locker(&nodes.url(), Duration::from_secs(5)).await;
    for node in nodes.nodes() {
        node.pause().expect("SIGSTOP");
    }
    let started = Instant::now();
    let acquiring = tokio::spawn(async move {
        let guard = locker.lock("ledger").wait(Duration::from_secs(5)).await;
        (guard, locker)
    });
    // The length of the fault, not a guess at an ordering.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(
        !acquiring.is_finished(),
        "the acquire answered within {:?} while every master was frozen: {:?}",
        started.elapsed(),
        acquiring.await.map(|(guard, _)| guard)
    );
    for node in nodes.nodes() {
        node.resume().expect("SIGCONT");
    }
    let (guard, _locker) = acquiring.await.expect("the acquiring task");
    let guard = guard.expect("granted once the masters answer again");
    guard.release().await.expect("release");
}

/// A waiter cancelled while its round is still at work on the masters leaves no key behind,
/// even when the round's attempt lands after the holder let go. The waiter reaches three
/// fresh masters through proxies that hold every reply back 300 ms; its queued round's
/// script is not cached there yet, so each master answers `NOSCRIPT` and the attempt sends
/// the script itself one (delayed) reply later. Cancelled in between, with the holder's
/// release right after, that second request finds the lock free and takes it: the waiter's
/// clean-up must come after it, not before. (Seen failing when the clean-up was sent at the
/// cancellation: the key stayed for its ttl.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_cancelled_mid_round_leaves_no_key() {
    const DELAY: Duration = Duration::from_millis(300);
    let nodes = RedisNodes::start(3).await.expect("redis-servers");
    let mut proxies = Vec::new();
    for server in nodes.nodes() {
        let address = server.addr().parse().expect("address");
        proxies.push(TcpProxy::start(address).await.expect("proxy"));
    }
    let through_proxies: Vec<String> = proxies.iter().map(|p| p.address().to_string()).collect();
    let ttl = Duration::from_secs(30);
    let holder = locker(&nodes.url(), ttl).await;
    let newcomer = locker(&nodes.url(), ttl).await;
    let waiter = locker(&format!("redlock://{}", through_proxies.join(",")), ttl).await;
    // The release script is cached on the masters (only the queued acquire's is not), so a
    // clean-up sent at the cancellation reaches them at once.
    let warm_up = holder.lock("warm-up").await.expect("acquire");
    warm_up.release().await.expect("release");
    let key = "order:8";
    let guard = holder.lock(key).await.expect("acquire");
    let (mut noscript_before, mut evals_before) = (Vec::new(), Vec::new());
    for server in nodes.nodes() {
        noscript_before.push(stat(server, "errorstats", "errorstat_NOSCRIPT:count=").await);
        evals_before.push(stat(server, "commandstats", "cmdstat_eval:calls=").await);
    }
    for proxy in &proxies {
        proxy.set(ProxyMode::DelayReplies(DELAY));
    }
    let waiting = tokio::spawn(async move { waiter.lock(key).wait_forever().await.map(drop) });
    // Its queued round has reached every master: each answered it NOSCRIPT (the answer is
    // on its way back, 300 ms long).
    every_master_counted_more(
        &nodes,
        "errorstats",
        "errorstat_NOSCRIPT:count=",
        &noscript_before,
    )
    .await
    .expect("the waiter's queued round never reached the masters");
    waiting.abort();
    assert!(
        waiting.await.is_err_and(|e| e.is_cancelled()),
        "the waiter was granted"
    );
    guard.release().await.expect("release");
    // The round's second request (the script sent whole, `EVAL`) reaches every master and
    // finds the lock free.
    every_master_counted_more(&nodes, "commandstats", "cmdstat_eval:calls=", &evals_before)
        .await
        .expect("the cancelled round's script never reached the masters");
    // A key the cancelled round took would hold the lock for the whole 30 s ttl.
    let taken = newcomer
        .lock(key)
        .wait(Duration::from_secs(3))
        .await
        .expect("the cancelled waiter left its key on the masters");
    taken.release().await.expect("release");
}

/// A release stops waiting once a majority settled it, but still ends on every master: the
/// first release on a master takes two round trips (`NOSCRIPT`, then the script), and the
/// slowest master's used to be dropped half-way, leaving its key to the ttl. With the masters'
/// scripts flushed before each round, every master is empty once the Locker has shut down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_ends_on_every_master_even_the_one_not_waited_for() {
    let nodes = RedisNodes::start(3).await.expect("redis-servers");
    let mut left = Vec::new();
    for round in 0..60 {
        for server in nodes.nodes() {
            server
                .command(&["SCRIPT", "FLUSH"])
                .await
                .expect("SCRIPT FLUSH");
        }
        let locker = locker(&nodes.url(), Duration::from_secs(30)).await;
        let guard = locker.lock("first-release").await.expect("lock");
        guard.release().await.expect("release");
        locker.shutdown().await.expect("shutdown");
        for (master, server) in nodes.nodes().iter().enumerate() {
            if server.command(&["DBSIZE"]).await.expect("DBSIZE") != "0" {
                left.push((round, master));
                server.command(&["FLUSHALL"]).await.expect("FLUSHALL");
            }
        }
    }
    assert!(
        left.is_empty(),
        "keys left after release (round, master): {left:?}"
    );
}

/// Waits (at most 10 s) until every master's [`stat`] has grown past its count in `before`.
async fn every_master_counted_more(
    nodes: &RedisNodes,
    section: &str,
    prefix: &str,
    before: &[u64],
) -> Result<(), tokio::time::error::Elapsed> {
    let grown = async {
        for (server, before) in nodes.nodes().iter().zip(before) {
            while stat(server, section, prefix).await <= *before {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), grown).await
}

/// The number after `prefix` in `server`'s `INFO section` (0 when it has no such line).
async fn stat(server: &dlock_harness::RedisServer, section: &str, prefix: &str) -> u64 {
    let info = server.command(&["INFO", section]).await.expect("INFO");
    info.lines()
        .find_map(|line| line.strip_prefix(prefix))
        .map_or(0, |rest| {
            let number = rest.split(',').next().unwrap_or_default();
            number.trim().parse().expect("a count")
        })
}
