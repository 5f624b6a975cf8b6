//! Redis Sentinel failovers with real processes: a master with two replicas behind three
//! sentinels ([`RedisSentinels`]). A lock held and a writer waiting while the master is failed
//! over (forced with `SENTINEL FAILOVER`, or the master SIGKILLed): the holder keeps its lock
//! on the new master or is told it lost it, the waiter is served by the new master, a fenced
//! resource never accepts two holders, and tokens after the failover are above every token
//! before. With the replicas frozen, an acquire that asks a replica to acknowledge it fails
//! with [`Error::NotReplicated`] within the operation timeout and leaves no key.

mod support;

use std::time::{Duration, Instant};

use dlock_core::{Error, LockGuard, Locker};
use dlock_harness::{RedisSentinels, RedisServer};

const OPERATION_TIMEOUT: Duration = Duration::from_secs(2);
const TTL: Duration = Duration::from_secs(3);

async fn locker(url: &str) -> Locker {
    support::connect::locker_at(url, TTL, OPERATION_TIMEOUT).await
}

/// A resource that checks fencing tokens: it takes a write only with a token at least as
/// high as every token it saw.
#[derive(Default)]
struct Fenced {
    highest: u64,
    refused: u32,
}

impl Fenced {
    fn write(&mut self, guard: &LockGuard) -> bool {
        self.write_with(guard.fencing_token().expect("a fenced lock"))
    }

    fn write_with(&mut self, token: u64) -> bool {
        if token < self.highest {
            self.refused += 1;
            return false;
        }
        self.highest = token;
        true
    }
}

/// `try_lock(key)` until it is granted, or a minute passed: right after a failover a grant
/// can be refused (retryable) until the new master's replicas are in sync.
async fn granted_soon(locker: &Locker, key: &str) -> LockGuard {
    let give_up = Instant::now() + Duration::from_secs(60);
    loop {
        match locker.try_lock(key).await {
            Ok(guard) => return guard,
            Err(error) if error.is_retryable() && Instant::now() < give_up => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => panic!("{key}: {error}"),
        }
    }
}

/// Tokens handed out before the failover: `rounds` grants of `key`, each released.
async fn tokens_before(locker: &Locker, key: &str, rounds: usize) -> u64 {
    let mut highest = 0;
    for _ in 0..rounds {
        let guard = locker.lock(key).fencing(true).await.expect("lock");
        highest = highest.max(guard.fencing_token().expect("token"));
        guard.release().await.expect("release");
    }
    highest
}

/// Holds `key` in one Locker, has another wait for it, runs `fail_over`, and checks what
/// the module docs say.
async fn holder_and_waiter_through(
    group: &RedisSentinels,
    fail_over: impl AsyncFnOnce(&RedisSentinels) -> u16,
) {
    let url = format!("{}?min_replicas=1&replica_timeout=500ms", group.url());
    let (holder, waiter) = (locker(&url).await, locker(&url).await);
    // Sends nothing until the failover is over. After a SIGKILL only the sentinels'
    // announcement can move it (its old master is gone, and nothing else tells it).
    let idle = locker(&url).await;
    let key = "order:42";
    let before = tokens_before(&holder, key, 5).await;
    let mut resource = Fenced::default();
    let held = holder.lock(key).fencing(true).await.expect("lock");
    assert!(resource.write(&held));
    // A wait that meets the failover may end in a retryable error (a re-check sent to the
    // dead master; a grant the new master's replicas, still syncing, did not acknowledge):
    // the waiter asks again, as an application would.
    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        async move {
            let give_up = Instant::now() + Duration::from_secs(60);
            loop {
                let asked = waiter.lock(key).fencing(true).wait(Duration::from_secs(60));
                match asked.await {
                    Err(error) if error.is_retryable() && Instant::now() < give_up => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    outcome => return outcome,
                }
            }
        }
    });
    // The waiter is in line before the master goes.
    support::processes::eventually("the waiter queues", Duration::from_secs(5), async || {
        holder
            .inspect(key)
            .await
            .is_ok_and(|info| info.waiters.is_some_and(|w| !w.is_empty()))
    })
    .await;
    let old_master = fail_over(group).await;
    let new_master = group
        .wait_for_new_master(old_master)
        .await
        .expect("failover");
    // The announcement reached the idle Locker's listeners within a second of the sentinels'
    // agreement: its first request goes to the new master (the old one is dead or a replica).
    tokio::time::sleep(Duration::from_secs(1)).await;
    match idle.try_lock("idle").await {
        Ok(first) => first.release().await.expect("release"),
        // Reached the new master, whose replicas are not in sync yet.
        Err(Error::NotReplicated { .. }) => {}
        Err(error) => panic!("the idle Locker's first lock: {error}"),
    }
    idle.shutdown().await.expect("shutdown");
    // A few renewals on the new master (or a loss).
    tokio::time::sleep(TTL).await;
    if held.is_held() {
        let info = holder
            .inspect(key)
            .await
            .expect("inspect on the new master");
        // The waiter has not been served, so the holder the new master shows is ours.
        assert!(
            !info.holders.is_empty() && !waiting.is_finished(),
            "the holder says it holds {key}, but the new master shows {info:?}"
        );
        assert!(
            resource.write(&held),
            "the holder's write after the failover"
        );
    }
    let lost = !held.is_held();
    if lost {
        assert!(
            tokio::time::timeout(Duration::ZERO, held.lost())
                .await
                .is_ok(),
            "a holder that no longer holds was told"
        );
    }
    let held_token = held.fencing_token().expect("token");
    let _ = held.release().await;
    let served = waiting
        .await
        .expect("waiter task")
        .expect("the waiter is served");
    assert!(resource.write(&served), "the waiter's write");
    // A holder that lost its lock in the failover writes late: the resource refuses it.
    if lost {
        assert!(
            !resource.write_with(held_token),
            "a stale holder's late write"
        );
    }
    assert_eq!(resource.refused, u32::from(lost), "writes refused");
    let token = served.fencing_token().expect("token");
    assert!(
        token > before,
        "a token after the failover ({token}) is not above those before ({before})"
    );
    // The grant is on the new master, which the sentinels name.
    let on_master = new_master
        .command(&["KEYS", "*order:42}"])
        .await
        .expect("KEYS");
    assert!(!on_master.is_empty() && on_master != "(nil)", "{on_master}");
    served.release().await.expect("release on the new master");
    // New locks go to the new master too.
    let again = granted_soon(&waiter, "after").await;
    again.release().await.expect("release");
    holder.shutdown().await.expect("shutdown");
    waiter.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_failover_keeps_the_holder_and_serves_the_waiter() {
    let group = RedisSentinels::start(2).await.expect("sentinels");
    holder_and_waiter_through(&group, async |group| {
        let old = group.master().await.expect("master").port();
        group.failover().await.expect("SENTINEL FAILOVER");
        old
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_is_followed_to_its_successor() {
    let group = RedisSentinels::start(2).await.expect("sentinels");
    holder_and_waiter_through(&group, async |group| {
        let master: &RedisServer = group.master().await.expect("master");
        master.kill().await.expect("SIGKILL the master");
        master.port()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_replicas_refuse_a_grant_within_the_timeout_and_leave_no_key() {
    let group = RedisSentinels::start(2).await.expect("sentinels");
    let url = format!("{}?min_replicas=1&replica_timeout=500ms", group.url());
    let locker = locker(&url).await;
    let replicas = group.replicas().await.expect("replicas");
    for replica in &replicas {
        replica.pause().expect("SIGSTOP");
    }
    let started = Instant::now();
    let outcome = locker.lock("stock:7").wait(Duration::from_secs(10)).await;
    let took = started.elapsed();
    for replica in &replicas {
        replica.resume().expect("SIGCONT");
    }
    assert!(
        matches!(
            &outcome,
            Err(Error::NotReplicated {
                acked: 0,
                wanted: 1,
                ..
            })
        ),
        "{outcome:?}"
    );
    assert!(outcome.as_ref().unwrap_err().is_retryable());
    assert!(took < OPERATION_TIMEOUT, "answered after {took:?}");
    let master = group.master().await.expect("master");
    let keys = master.command(&["KEYS", "*stock:7*"]).await.expect("KEYS");
    assert!(keys.is_empty() || keys == "(nil)", "left behind: {keys}");
    // With the replicas back, the same lock is granted.
    let guard = granted_soon(&locker, "stock:7").await;
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_sentinel_urls_and_unreachable_sentinels_are_clear_errors() {
    let parse = |url: &str| {
        dlock_core::DlockConfig::from_toml_str(&format!(
            "backend = \"{url}\"\noperation_timeout = \"500ms\""
        ))
    };
    let config = |url: &str| parse(url).unwrap();
    let error = parse("redis+sentinel://127.0.0.1:1").unwrap_err();
    assert!(matches!(error, Error::Config { .. }), "{error}");
    assert!(error.to_string().contains("master's name"), "{error}");
    let started = Instant::now();
    let error = Locker::connect(&config("redis+sentinel://127.0.0.1:1/m"))
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Unavailable { .. }), "{error}");
    assert!(error.to_string().contains("127.0.0.1:1"), "{error}");
    assert!(started.elapsed() < Duration::from_secs(2));
    let group = RedisSentinels::start(0).await.expect("sentinels");
    let wrong = group.url().replace("dlock-master", "no-such-master");
    let error = Locker::connect(&config(&wrong)).await.unwrap_err();
    assert!(error.to_string().contains("no-such-master"), "{error}");
    let error = Locker::connect(&config(&format!(
        "{}?min_replicas=1&replica_timeout=1s",
        group.url()
    )))
    .await
    .unwrap_err();
    assert!(error.to_string().contains("replica_timeout"), "{error}");
}
