//! dlock and real Apache Curator 5 (Debian's `libcurator-recipes-java`, driven by a small
//! Java program the harness compiles with `javac`) on the same ZooKeeper paths: each waits
//! for the other's `InterProcessMutex`, `InterProcessReadWriteLock` and
//! `InterProcessSemaphoreV2`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dlock_core::{DlockConfig, Error, Locker};
use dlock_harness::{Curator, ZkServer};
use tokio::sync::mpsc;

/// How long the other side is given to show that it does not get in.
const NOT_YET: Duration = Duration::from_millis(500);
/// A bound on anything that must happen (never reached when things work).
const SURELY: Duration = Duration::from_secs(20);

/// A standalone server, a Locker on it whose keys are the paths themselves (no prefix), and a
/// Curator client.
async fn setup() -> (ZkServer, Locker, Curator) {
    setup_with("").await
}

/// As [`setup`], dlock's URL ending with `query`.
async fn setup_with(query: &str) -> (ZkServer, Locker, Curator) {
    let server = ZkServer::start().await.expect("zookeeper");
    let config = DlockConfig::default()
        .with_backend(dlock_core::BackendSpec::Url(format!(
            "{}{query}",
            server.url()
        )))
        .with_key_prefix(String::new())
        .with_ttl(Duration::from_secs(10));
    let locker = Locker::connect(&config).await.expect("connect");
    let curator = Curator::start(&server.connect_string())
        .await
        .expect("Curator driver");
    (server, locker, curator)
}

async fn said(curator: &mut Curator, expected: &str) {
    let line = curator.next_line(SURELY).await;
    assert_eq!(line.as_deref(), Some(expected), "Curator's answer");
}

async fn silent(curator: &mut Curator) {
    let line = curator.next_line(NOT_YET).await;
    assert_eq!(line, None, "Curator got in while dlock held the lock");
}

async fn send(curator: &mut Curator, command: &str) {
    curator.send(command).await.expect("Curator driver alive");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlock_and_curators_mutex_wait_for_each_other() {
    let (_server, locker, mut curator) = setup().await;
    let key = "interop/mutex";

    send(&mut curator, "acquire c1 mutex /interop/mutex").await;
    said(&mut curator, "acquired c1").await;
    let info = locker.inspect(key).await.expect("inspect");
    assert!(
        matches!(info.holders.as_slice(), [c1] if c1.mode == dlock_core::LockMode::Exclusive && c1.fencing_token.is_some()),
        "inspect shows Curator's holder: {info:?}"
    );
    let busy = locker.lock(key).wait(NOT_YET).await;
    assert!(matches!(busy, Err(Error::Busy { .. })), "{busy:?}");
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move { locker.lock(key).wait(SURELY).await })
    };
    send(&mut curator, "release c1").await;
    said(&mut curator, "released c1").await;
    let released = Instant::now();
    let guard = waiter
        .await
        .unwrap()
        .expect("dlock gets the lock Curator gave back");
    println!(
        "dlock got the mutex {:?} after Curator released it",
        released.elapsed()
    );

    send(&mut curator, "acquire c2 mutex /interop/mutex").await;
    silent(&mut curator).await;
    guard.release().await.expect("release");
    said(&mut curator, "acquired c2").await;
    send(&mut curator, "release c2").await;
    said(&mut curator, "released c2").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlock_and_curators_read_write_lock_share_reads_and_exclude_writes() {
    let (_server, locker, mut curator) = setup().await;
    let key = "interop/rw";

    // A Curator reader and a dlock reader hold together.
    send(&mut curator, "acquire r1 read /interop/rw").await;
    said(&mut curator, "acquired r1").await;
    let reader = locker
        .read_lock(key)
        .wait(SURELY)
        .await
        .expect("a dlock reader next to a Curator reader");
    reader.release().await.expect("release");
    send(&mut curator, "release r1").await;
    said(&mut curator, "released r1").await;

    // A Curator writer excludes dlock readers.
    send(&mut curator, "acquire w1 write /interop/rw").await;
    said(&mut curator, "acquired w1").await;
    let busy = locker.read_lock(key).wait(NOT_YET).await;
    assert!(matches!(busy, Err(Error::Busy { .. })), "{busy:?}");
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move { locker.write_lock(key).wait(SURELY).await })
    };
    send(&mut curator, "release w1").await;
    said(&mut curator, "released w1").await;

    // A dlock writer excludes Curator readers.
    let writer = waiter.await.unwrap().expect("dlock writer after Curator's");
    send(&mut curator, "acquire r2 read /interop/rw").await;
    silent(&mut curator).await;
    writer.release().await.expect("release");
    said(&mut curator, "acquired r2").await;
    send(&mut curator, "release r2").await;
    said(&mut curator, "released r2").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlock_and_curators_semaphore_share_two_permits() {
    let (_server, locker, mut curator) = setup().await;
    let key = "interop/semaphore";

    send(&mut curator, "acquire s1 sem 2 /interop/semaphore").await;
    said(&mut curator, "acquired s1").await;
    send(&mut curator, "acquire s2 sem 2 /interop/semaphore").await;
    said(&mut curator, "acquired s2").await;
    let info = locker.inspect(key).await.expect("inspect");
    assert_eq!(
        info.holders.len(),
        2,
        "inspect shows Curator's permits: {info:?}"
    );
    let busy = locker.semaphore(key, 2).wait(NOT_YET).await;
    assert!(matches!(busy, Err(Error::Busy { .. })), "{busy:?}");
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move { locker.semaphore(key, 2).wait(SURELY).await })
    };
    send(&mut curator, "release s1").await;
    said(&mut curator, "released s1").await;
    let permit = waiter
        .await
        .unwrap()
        .expect("dlock's permit after Curator's");

    // Curator's s2 and dlock's permit are out: a third waits.
    send(&mut curator, "acquire s3 sem 2 /interop/semaphore").await;
    silent(&mut curator).await;
    permit.release().await.expect("release");
    said(&mut curator, "acquired s3").await;
    for id in ["s2", "s3"] {
        send(&mut curator, &format!("release {id}")).await;
        said(&mut curator, &format!("released {id}")).await;
    }
}

/// Inside a shared section, counted under a local mutex: (now, most).
#[derive(Default)]
struct Occupancy(Mutex<(usize, usize)>);

impl Occupancy {
    fn enter(&self) {
        let mut counts = self.0.lock().unwrap();
        counts.0 += 1;
        counts.1 = counts.1.max(counts.0);
    }
    fn leave(&self) {
        self.0.lock().unwrap().0 -= 1;
    }
    fn most(&self) -> usize {
        self.0.lock().unwrap().1
    }
}

/// Three Curator holders and three dlock tasks take permits of one semaphore of 2, four times
/// each, holding each for 30 ms. A permit is counted from when its holder learns it has it
/// until just before it gives it back — within the real holding time — so more than 2 inside
/// is a real overcommit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_shared_by_curator_and_dlock_never_exceeds_its_limit() {
    const ROUNDS: usize = 4;
    const HOLD: Duration = Duration::from_millis(30);
    let (_server, locker, mut curator) = setup().await;
    let key = "interop/shared-semaphore";
    let occupancy = Arc::new(Occupancy::default());

    let mut dlock_tasks = Vec::new();
    for _ in 0..3 {
        let (locker, occupancy) = (locker.clone(), Arc::clone(&occupancy));
        dlock_tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let permit = locker.semaphore(key, 2).wait(SURELY).await.expect("permit");
                occupancy.enter();
                tokio::time::sleep(HOLD).await;
                occupancy.leave();
                permit.release().await.expect("release");
            }
        }));
    }

    // Curator's side: each of c0..c2 acquires, holds for HOLD (a timer task), releases, again.
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<String>();
    let mut rounds_left = [ROUNDS; 3];
    for id in 0..3 {
        send(&mut curator, &format!("acquire c{id} sem 2 /{key}")).await;
    }
    let mut finished = 0;
    while finished < 3 {
        tokio::select! {
            line = curator.next_line(SURELY) => {
                let line = line.expect("Curator answers");
                let (what, id) = line.split_once(' ').expect("`<what> <id>`");
                let index: usize = id[1..].parse().expect("c<n>");
                match what {
                    "acquired" => {
                        occupancy.enter();
                        let (occupancy, done_tx, id) = (Arc::clone(&occupancy), done_tx.clone(), id.to_owned());
                        tokio::spawn(async move {
                            tokio::time::sleep(HOLD).await;
                            occupancy.leave();
                            let _ = done_tx.send(id);
                        });
                    }
                    "released" => {
                        rounds_left[index] -= 1;
                        if rounds_left[index] == 0 {
                            finished += 1;
                        } else {
                            send(&mut curator, &format!("acquire {id} sem 2 /{key}")).await;
                        }
                    }
                    _ => panic!("Curator: {line}"),
                }
            }
            Some(id) = done_rx.recv() => send(&mut curator, &format!("release {id}")).await,
        }
    }
    for task in dlock_tasks {
        task.await.expect("dlock task");
    }
    assert!(
        occupancy.most() <= 2,
        "{} permits out at once",
        occupancy.most()
    );
    assert_eq!(occupancy.most(), 2, "permits never overlapped");
}

/// Curator's `LeaderSelector` and dlock campaign on one path, both ways: each sees the other
/// lead (dlock's `leader`; Curator's `getLeader()` / `getParticipants()`, which read dlock's
/// value as a participant id), waits behind it, and leads once it gives up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlock_and_curators_leader_selector_take_turns_and_see_each_other() {
    let (_server, locker, mut curator) = setup().await;
    let name = "interop/scheduler";

    // Curator leads; dlock sees it and waits.
    send(
        &mut curator,
        "acquire l1 leader /interop/scheduler curator-node",
    )
    .await;
    said(&mut curator, "acquired l1").await;
    let leader = locker
        .leader(name)
        .await
        .expect("leader")
        .expect("a leader");
    assert_eq!(
        leader.value, "curator-node",
        "dlock's view of Curator's leader"
    );
    let campaign = {
        let locker = locker.clone();
        tokio::spawn(async move { locker.campaign(name, "dlock-node").await })
    };
    tokio::time::sleep(NOT_YET).await;
    assert!(
        !campaign.is_finished(),
        "dlock was elected while Curator leads"
    );
    send(&mut curator, "leader /interop/scheduler").await;
    said(
        &mut curator,
        "leader curator-node participants curator-node,dlock-node",
    )
    .await;
    send(&mut curator, "release l1").await;
    said(&mut curator, "released l1").await;
    let leading = tokio::time::timeout(SURELY, campaign)
        .await
        .expect("dlock is elected once Curator gave up")
        .unwrap()
        .expect("campaign");
    assert!(
        leading.term() > leader.term,
        "term {} after {}",
        leading.term(),
        leader.term
    );

    // dlock leads; Curator sees it and waits.
    send(&mut curator, "leader /interop/scheduler").await;
    said(&mut curator, "leader dlock-node participants dlock-node").await;
    send(
        &mut curator,
        "acquire l2 leader /interop/scheduler curator-node",
    )
    .await;
    silent(&mut curator).await;
    leading.resign().await.expect("resign");
    said(&mut curator, "acquired l2").await;
    let leader = locker
        .leader(name)
        .await
        .expect("leader")
        .expect("a leader");
    assert_eq!(leader.value, "curator-node");
    send(&mut curator, "release l2").await;
    said(&mut curator, "released l2").await;
}

/// Curator's `LeaderLatch` and dlock (`?election=latch`) campaign on one path, both ways: each
/// sees the other lead (dlock's `leader`; the latch's `getLeader()` / `getParticipants()`,
/// which read dlock's value as a participant id), waits behind it, and leads once it gives
/// up; dlock's node is a latch's (`…-latch-<seq>`), not a mutex's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlock_and_curators_leader_latch_take_turns_and_see_each_other() {
    let (server, locker, mut curator) = setup_with("?election=latch").await;
    let name = "interop/latch";

    // Curator leads; dlock sees it and waits.
    send(&mut curator, "acquire l1 latch /interop/latch curator-node").await;
    said(&mut curator, "acquired l1").await;
    let leader = locker
        .leader(name)
        .await
        .expect("leader")
        .expect("a leader");
    assert_eq!(
        leader.value, "curator-node",
        "dlock's view of Curator's leader"
    );
    let campaign = {
        let locker = locker.clone();
        tokio::spawn(async move { locker.campaign(name, "dlock-node").await })
    };
    tokio::time::sleep(NOT_YET).await;
    assert!(
        !campaign.is_finished(),
        "dlock was elected while Curator leads"
    );
    send(&mut curator, "latch /interop/latch").await;
    said(
        &mut curator,
        "leader curator-node participants curator-node,dlock-node",
    )
    .await;
    send(&mut curator, "release l1").await;
    said(&mut curator, "released l1").await;
    let leading = tokio::time::timeout(SURELY, campaign)
        .await
        .expect("dlock is elected once Curator gave up")
        .unwrap()
        .expect("campaign");
    assert!(leading.term() > leader.term);
    let children = zk_children(&server, "/interop/latch").await;
    assert!(
        children.len() == 1 && children[0].contains("-latch-"),
        "dlock's candidate is not a latch node: {children:?}"
    );

    // dlock leads; Curator sees it and waits.
    send(&mut curator, "latch /interop/latch").await;
    said(&mut curator, "leader dlock-node participants dlock-node").await;
    send(&mut curator, "acquire l2 latch /interop/latch curator-node").await;
    silent(&mut curator).await;
    leading.resign().await.expect("resign");
    said(&mut curator, "acquired l2").await;
    let leader = locker
        .leader(name)
        .await
        .expect("leader")
        .expect("a leader");
    assert_eq!(leader.value, "curator-node");
    send(&mut curator, "release l2").await;
    said(&mut curator, "released l2").await;
}

/// The children of `path`, read by a raw ZooKeeper client.
async fn zk_children(server: &ZkServer, path: &str) -> Vec<String> {
    let client = zookeeper_client::Client::connect(&server.connect_string())
        .await
        .expect("raw client");
    client.list_children(path).await.expect("list")
}
