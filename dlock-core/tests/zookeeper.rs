//! The ZooKeeper backend against real servers: the nodes it writes (Curator's names, nothing
//! left behind, container parents), session timeouts inside the server's bounds, credentials
//! and chroot, fencing tokens across a re-created parent, and faults — a create whose reply
//! is lost, a connection cut past the session timeout (the holder stops before anyone else
//! gets in, checked by fencing tokens at a resource), every server paused.
//!
//! Waiting for a condition polls it (with a limit); no assertion depends on a sleep being long
//! enough.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dlock_core::backend::{
    AcquireOutcome, AcquireRequest, BackendUrl, LockBackend, OwnerId, ZooKeeperBackend,
};
use dlock_core::{BackendSpec, DlockConfig, Error, ErrorKind, Locker, LostReason};
use dlock_harness::{ProxyMode, TcpProxy, ZkEnsemble, ZkServer};
use zookeeper_client::Client;

const TIMEOUT: Duration = Duration::from_secs(2);

async fn locker(url: &str, ttl: Duration) -> Locker {
    support::connect::locker_with(
        &support::connect::config_at(url, ttl, TIMEOUT).with_key_prefix(String::new()),
    )
    .await
}

async fn raw(connect_string: &str) -> Client {
    Client::connect(connect_string).await.expect("raw client")
}

async fn children(client: &Client, path: &str) -> Vec<String> {
    match client.list_children(path).await {
        Ok(children) => children,
        Err(zookeeper_client::Error::NoNode) => Vec::new(),
        Err(error) => panic!("list {path}: {error}"),
    }
}

/// Polls the async `condition` until it holds, for up to 15 s.
async fn eventually(what: &str, condition: impl AsyncFnMut() -> bool) {
    support::processes::eventually(what, Duration::from_secs(15), condition).await;
}

/// `_c_<36-char uuid>-<lock name><10 digits>`, Curator's protected sequential name.
fn is_curator_name(name: &str, lock_name: &str) -> bool {
    let Some(rest) = name.strip_prefix("_c_") else {
        return false;
    };
    let (uuid, rest) = rest.split_at(36.min(rest.len()));
    let uuid_ok = uuid.len() == 36
        && uuid.chars().enumerate().all(|(i, c)| {
            if [8, 13, 18, 23].contains(&i) {
                c == '-'
            } else {
                c.is_ascii_hexdigit()
            }
        });
    let sequence = rest
        .strip_prefix('-')
        .and_then(|r| r.strip_prefix(lock_name));
    uuid_ok && sequence.is_some_and(|s| s.len() == 10 && s.bytes().all(|b| b.is_ascii_digit()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_are_named_as_curator_names_them_and_nothing_is_left_behind() {
    let server = ZkServer::start().await.expect("zookeeper");
    let zk = raw(&server.connect_string()).await;
    let locker = locker(&server.url(), Duration::from_secs(5)).await;

    let mutex = locker.lock("layout/mutex").await.expect("lock");
    let reader = locker.read_lock("layout/rw").await.expect("read");
    let writer = locker.write_lock("layout/rw2").await.expect("write");
    let permit = locker
        .semaphore("layout/semaphore", 2)
        .await
        .expect("permit");
    for (path, lock_name) in [
        ("/layout/mutex", "lock-"),
        ("/layout/rw", "__READ__"),
        ("/layout/rw2", "__WRIT__"),
        ("/layout/semaphore/leases", "lease-"),
    ] {
        let names = children(&zk, path).await;
        assert!(
            names.len() == 1 && is_curator_name(&names[0], lock_name),
            "{path}: {names:?}"
        );
        let (_, stat) = zk
            .get_data(&format!("{path}/{}", names[0]))
            .await
            .expect("the node");
        assert_ne!(stat.ephemeral_owner, 0, "{path}: not ephemeral");
    }
    let lease = &children(&zk, "/layout/semaphore/leases").await[0];
    let (data, _) = zk
        .get_data(&format!("/layout/semaphore/leases/{lease}"))
        .await
        .unwrap();
    assert_eq!(
        data, b"dlock-permits=2",
        "the limit is stored with the permit"
    );
    // The semaphore's mutex was given back: `locks` is empty (or already gone).
    assert!(children(&zk, "/layout/semaphore/locks").await.is_empty());
    let mut layout = children(&zk, "/layout/semaphore").await;
    layout.sort();
    assert!(
        layout.iter().all(|c| c == "leases" || c == "locks"),
        "nothing else under a lock path: {layout:?}"
    );

    for guard in [mutex, reader, writer, permit] {
        guard.release().await.expect("release");
    }
    for path in [
        "/layout/mutex",
        "/layout/rw",
        "/layout/rw2",
        "/layout/semaphore/leases",
    ] {
        assert!(children(&zk, path).await.is_empty(), "{path} left behind");
    }
    // The parents are containers: ZooKeeper deletes them once empty.
    eventually("the empty lock paths are deleted", || async {
        children(&zk, "/layout").await.is_empty()
    })
    .await;
}

/// The server grants session timeouts between 2 and 20 ticks (1 s and 10 s in the harness):
/// a longer ttl gets the maximum as its lease; a shorter one keeps its local deadline, but a
/// crashed holder's lock frees only when the server expires the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttls_outside_the_servers_session_bounds() {
    let server = ZkServer::start().await.expect("zookeeper");
    let url = BackendUrl::parse(&server.url()).unwrap();
    let backend = ZooKeeperBackend::connect(&url, TIMEOUT)
        .await
        .expect("connect");
    let ask = |key: &str, ttl| AcquireRequest::new(key, OwnerId::random("ttl-test"), ttl);
    let AcquireOutcome::Acquired(long) = backend
        .acquire(&ask("ttl/long", Duration::from_secs(30)), None)
        .await
        .unwrap()
    else {
        panic!("free lock busy");
    };
    assert_eq!(
        long.ttl,
        Duration::from_secs(10),
        "clamped to the server's maximum"
    );
    backend.release(&long).await.unwrap();

    // A holder with a 300 ms ttl crashes (its runtime and client vanish without a word).
    let short = Duration::from_millis(300);
    let crashed_url = url.clone();
    let granted = tokio::task::spawn_blocking(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let backend = ZooKeeperBackend::connect(&crashed_url, TIMEOUT)
                .await
                .unwrap();
            let outcome = backend
                .acquire(&ask("ttl/short", short), None)
                .await
                .unwrap();
            let AcquireOutcome::Acquired(lease) = &outcome else {
                panic!("free lock busy");
            };
            assert_eq!(lease.ttl, short, "a short ttl keeps its local deadline");
            std::mem::forget(outcome);
            std::mem::forget(backend);
            Instant::now()
        })
    })
    .await
    .unwrap();
    let waiter = locker(&server.url(), Duration::from_secs(5)).await;
    let guard = waiter
        .lock("ttl/short")
        .wait(Duration::from_secs(10))
        .await
        .expect("freed when the session expires");
    let freed = granted.elapsed();
    println!("a crashed 300 ms holder freed its lock after {freed:?}");
    assert!(
        freed >= Duration::from_millis(900),
        "freed after {freed:?}, before the server's minimum session timeout (1 s)"
    );
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chroot_and_digest_credentials_and_no_password_in_sight() {
    let server = ZkServer::start().await.expect("zookeeper");
    let url = format!("zk://app:s3cret@{}/tenants/a", server.connect_string());
    let locker = locker(&url, Duration::from_secs(5)).await;
    let guard = locker
        .lock("jobs/nightly")
        .await
        .expect("lock under the chroot");
    let zk = raw(&server.connect_string()).await;
    assert_eq!(children(&zk, "/tenants/a/jobs/nightly").await.len(), 1);
    for shown in [
        format!("{locker:?}"),
        format!("{:?}", BackendUrl::parse(&url).unwrap()),
    ] {
        assert!(!shown.contains("s3cret"), "password shown: {shown}");
    }
    guard.release().await.unwrap();

    let closed = format!("zk://app:s3cret@127.0.0.1:{}/x", free_port());
    let config = DlockConfig::default()
        .with_backend(BackendSpec::Url(closed))
        .with_operation_timeout(Duration::from_millis(500));
    let started = Instant::now();
    let error = Locker::connect(&config).await.expect_err("nobody listens");
    assert!(
        matches!(error, Error::Unavailable { .. } | Error::Timeout { .. }),
        "{error:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    assert!(!error.to_string().contains("s3cret"), "{error}");
    assert!(!format!("{config:?}").contains("s3cret"));
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A lock path's container is deleted and made again (sequence numbers restart at 0): the
/// token, the node's czxid, still increases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_increase_across_a_recreated_lock_path() {
    let server = ZkServer::start().await.expect("zookeeper");
    let zk = raw(&server.connect_string()).await;
    let locker = locker(&server.url(), Duration::from_secs(5)).await;
    let first = locker.lock("fence/path").await.unwrap();
    let token = first.fencing_token().expect("ZooKeeper issues tokens");
    first.release().await.unwrap();
    eventually("the lock path is gone", || async {
        zk.check_stat("/fence/path").await.unwrap().is_none()
    })
    .await;
    let second = locker.lock("fence/path").await.unwrap();
    assert!(second.fencing_token().unwrap() > token);
    second.release().await.unwrap();
}

/// The server applies a create but its reply is lost (the proxy drops replies, then cuts the
/// connection): the client reconnects within its session, finds its node by its `_c_` uuid,
/// and holds with exactly that one node. A waiting acquire whose create reply was lost and
/// that is then cancelled leaves nothing either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_create_reply_leaves_one_node_or_none() {
    let server = ZkServer::start().await.expect("zookeeper");
    let zk = raw(&server.connect_string()).await;
    let proxy = TcpProxy::start(server.connect_string().parse().unwrap())
        .await
        .unwrap();
    let config = DlockConfig::default()
        .with_backend(BackendSpec::Url(format!("zk://{}", proxy.address())))
        .with_key_prefix(String::new())
        .with_ttl(Duration::from_secs(10))
        .with_operation_timeout(Duration::from_secs(8));
    let client = Locker::connect(&config).await.expect("connect");
    // Make the lock paths (persistent: no container manager deletes them) and open the
    // session on them first, so that the lost reply is a plain create's into a directory the
    // client knows.
    let persistent =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    for path in ["/lost-reply/a", "/lost-reply/b"] {
        zk.mkdir(path, &persistent).await.unwrap();
        let key = path.trim_start_matches('/');
        client.lock(key).await.unwrap().release().await.unwrap();
    }

    held_through_a_lost_reply(&client, &proxy, &zk, "lost-reply/a").await;

    // Now a waiter behind another holder loses its create's reply and is cancelled.
    let holder = locker(&server.url(), Duration::from_secs(10)).await;
    let held = holder.lock("lost-reply/b").await.unwrap();
    proxy.set(ProxyMode::DropReplies);
    let waiting = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .lock("lost-reply/b")
                .wait(Duration::from_secs(10))
                .await
        })
    };
    eventually("the waiter's create reaches the server", || async {
        children(&zk, "/lost-reply/b").await.len() == 2
    })
    .await;
    waiting.abort();
    assert!(waiting.await.unwrap_err().is_cancelled());
    proxy.set(ProxyMode::Cut);
    proxy.set(ProxyMode::Pass);
    eventually("the cancelled waiter's node is deleted", || async {
        children(&zk, "/lost-reply/b").await.len() == 1
    })
    .await;
    held.release().await.unwrap();

    // A fresh key's directory and node are made in one multi, whose reply is lost: the node
    // is found by its uuid after the reconnect, and held alone.
    held_through_a_lost_reply(&client, &proxy, &zk, "lost-reply/c").await;
}

/// `client` takes `key` while `proxy` drops the replies; once its create (or multi) reached
/// the server, the connection is cut and let through again: the acquire is granted with
/// exactly one node, which its release deletes.
async fn held_through_a_lost_reply(client: &Locker, proxy: &TcpProxy, zk: &Client, key: &str) {
    let path = format!("/{key}");
    proxy.set(ProxyMode::DropReplies);
    let acquiring = {
        let (client, key) = (client.clone(), key.to_owned());
        tokio::spawn(async move { client.lock(&key).wait(Duration::from_secs(10)).await })
    };
    eventually("the create reaches the server", || async {
        children(zk, &path).await.len() == 1
    })
    .await;
    proxy.set(ProxyMode::Cut);
    proxy.set(ProxyMode::Pass);
    let guard = acquiring
        .await
        .unwrap()
        .expect("granted after the reconnect");
    assert_eq!(children(zk, &path).await.len(), 1, "a duplicate node");
    guard.release().await.unwrap();
    assert!(children(zk, &path).await.is_empty());
}

/// A fresh key's directory is made together with its node, in one multi. Taking and giving
/// back a fresh key is then three requests — the multi, the multi-read of the queue and the
/// kept record, the delete — as many as a key whose directory this Locker knows (a plain
/// create), where a create answered `NoNode`, the `mkdir` and the create again made it more
/// (the server counted four). The token of a node made with its directory is its czxid. A
/// key whose parents are missing too, and a directory another client made, still end in a
/// held lock and leave nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_keys_directory_is_made_with_its_node() {
    let server = ZkServer::start().await.expect("zookeeper");
    let other = locker(&server.url(), Duration::from_secs(30)).await;
    let locker = locker(&server.url(), Duration::from_secs(30)).await;
    let zk = raw(&server.connect_string()).await;
    locker
        .lock("warm-up")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let packets = || async { server.monitor("zk_packets_received").await.expect("mntr") };
    // The fewest requests one lock + release of `key` took over five tries (a session's ping
    // may fall inside one), less what reading the count itself adds.
    let requests = |keys: [String; 5]| {
        let (locker, packets) = (locker.clone(), &packets);
        async move {
            let mut fewest = f64::MAX;
            for key in keys {
                let idle = packets().await;
                let before = packets().await;
                let guard = locker.lock(&key).await.expect("acquire");
                guard.release().await.expect("release");
                let after = packets().await;
                fewest = fewest.min((after - before) - (before - idle));
            }
            fewest
        }
    };
    let fresh = requests(std::array::from_fn(|i| format!("fresh-{i}"))).await;
    let known = requests(std::array::from_fn(|_| "fresh-0".to_owned())).await;
    assert_eq!(fresh, 3.0, "a fresh key's lock and release");
    assert_eq!(known, 3.0, "a known key's lock and release");

    // The token of a node made with its directory is its czxid, as of a node made alone.
    for key in ["token-fresh", "token-fresh"] {
        let guard = locker.lock(key).fencing(true).await.unwrap();
        let nodes = children(&zk, &format!("/{key}")).await;
        let (_, stat) = zk.get_data(&format!("/{key}/{}", nodes[0])).await.unwrap();
        assert_eq!(guard.fencing_token(), u64::try_from(stat.czxid).ok());
        guard.release().await.unwrap();
    }

    let deep = locker.lock("deep/er/key").await.expect("missing parents");
    assert_eq!(children(&zk, "/deep/er/key").await.len(), 1);
    deep.release().await.unwrap();

    let held = other.lock("theirs").await.unwrap();
    let busy = locker.lock("theirs").wait(Duration::ZERO).await;
    assert!(matches!(busy, Err(Error::Busy { .. })), "{busy:?}");
    assert_eq!(
        children(&zk, "/theirs").await.len(),
        1,
        "the busy try's node is gone"
    );
    held.release().await.unwrap();
    locker
        .lock("theirs")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    assert!(children(&zk, "/theirs").await.is_empty());
    assert!(children(&zk, "/deep/er/key").await.is_empty());
}

/// A node's create and the listing that tells whether it holds travel together (a session's
/// requests are served in order), so an uncontended lock is one round trip and a permit
/// three (its mutex's create and listing, its lease's create and listing, the mutex given
/// back — with the limit check beside it when others hold), where they were two and five. Counted with every reply delayed by `DELAY`: each
/// round trip then costs at least `DELAY`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_and_its_listing_are_one_round_trip() {
    const DELAY: Duration = Duration::from_millis(300);
    let server = ZkServer::start().await.expect("zookeeper");
    let proxy = TcpProxy::start(server.connect_string().parse().unwrap())
        .await
        .unwrap();
    let config = DlockConfig::default()
        .with_backend(BackendSpec::Url(format!("zk://{}", proxy.address())))
        .with_key_prefix(String::new())
        .with_ttl(Duration::from_secs(30))
        .with_operation_timeout(Duration::from_secs(10));
    let locker = Locker::connect(&config).await.expect("connect");
    // The semaphore's directories and a lock's, persistent (no container manager deletes
    // them), known to the Locker once it used them; the first permit also opens the session.
    let zk = raw(&server.connect_string()).await;
    let persistent =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    for dir in [
        "/piped-permits/locks",
        "/piped-permits/leases",
        "/piped-known",
    ] {
        zk.mkdir(dir, &persistent).await.unwrap();
    }
    let permit = locker.semaphore("piped-permits", 2).await.unwrap();
    permit.release().await.unwrap();
    locker
        .lock("piped-known")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    proxy.set(ProxyMode::DelayReplies(DELAY));
    let round_trips = |took: Duration| took.as_secs_f64() / DELAY.as_secs_f64();
    // A fresh path (made with its node), and a known one (kept: a container the server
    // reaps once empty would make it fresh again).
    for key in ["piped-fresh", "piped-known"] {
        let asked = Instant::now();
        let guard = locker.lock(key).await.expect("acquire");
        let took = round_trips(asked.elapsed());
        assert!(took < 2.0, "{key}: {took:.2} round trips");
        guard.release().await.unwrap();
    }
    let asked = Instant::now();
    let permit = locker.semaphore("piped-permits", 2).await.expect("permit");
    let took = round_trips(asked.elapsed());
    assert!(took < 4.0, "a permit: {took:.2} round trips");
    // Beside a holder, the check of the stored limit (a read of the other lease) travels
    // with the mutex's giving back: still three.
    let asked = Instant::now();
    let second = locker.semaphore("piped-permits", 2).await.expect("permit");
    let took = round_trips(asked.elapsed());
    assert!(
        took < 4.0,
        "a permit beside a holder: {took:.2} round trips"
    );
    second.release().await.unwrap();
    permit.release().await.unwrap();
    proxy.set(ProxyMode::Pass);
    locker.shutdown().await.unwrap();
}

/// A permit's hand-off is the release's event and the semaphore's mutex given back: the
/// waiter holding the mutex takes the room at the event of `leases` (only the mutex holder
/// makes a lease, so a change there is a deletion), and the next waiter for the mutex, with
/// nothing else before it, holds the mutex at its predecessor's deletion and makes its lease
/// at once — neither lists again, where Curator's recipe does both times. Counted in the
/// server's packets from a holder's release until the next permit is granted and the waiter
/// after it made its lease: the fewest over three hand-offs (a session's ping may fall inside
/// one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_is_handed_on_by_events_alone() {
    let server = ZkServer::start().await.expect("zookeeper");
    let locker = locker(&server.url(), Duration::from_secs(10)).await;
    let zk = raw(&server.connect_string()).await;
    let key = "handed-on";
    let leases = format!("/{key}/leases");
    let packets = || async { server.monitor("zk_packets_received").await.expect("mntr") };
    let watches = || async { server.monitor("zk_watch_count").await.expect("mntr") };
    // No watchdog: a renewal would send requests (and set watches) of its own.
    let permit = || {
        let locker = locker.clone();
        tokio::spawn(async move { locker.semaphore(key, 1).watchdog(false).await })
    };
    let mut holder = permit().await.unwrap().unwrap();
    let mut waiting = permit();
    // Its lease made, and the children watch on `leases` set with the listing behind it.
    eventually("the first waiter's lease", async || {
        children(&zk, &leases).await.len() == 2
    })
    .await;
    // What reading the count adds to it: the fewest of three reads (a ping may fall between).
    let mut reading = f64::MAX;
    for _ in 0..3 {
        let first = packets().await;
        reading = reading.min(packets().await - first);
    }
    let mut fewest = f64::MAX;
    for _ in 0..3 {
        let watching = watches().await;
        let next = permit();
        // Its mutex node made, and its data watch on the waiting one's set.
        eventually("the next waiter's watch", async || {
            watches().await > watching
        })
        .await;
        let before = packets().await;
        holder.release().await.unwrap();
        // The next waiter's lease appears (beside the waiting one's); read without a watch,
        // which would linger and blur the count of watches above.
        let mut listings = 0.0;
        eventually("the next waiter's lease", async || {
            listings += 1.0;
            children(&zk, &leases).await.len() == 2
        })
        .await;
        holder = waiting.await.unwrap().expect("the waiting one's permit");
        // The check of the stored limit is sent once the lease's listing is answered, and
        // may reach the server after the observer saw the lease: read until it is counted.
        // Less what each read of the count adds, the release's delete and the observer's
        // listings.
        let (mut reads, mut handed_on) = (0.0, 0.0);
        eventually("the hand-off's requests", async || {
            reads += 1.0;
            handed_on = (packets().await - before) - reading * reads - 1.0 - listings;
            handed_on >= 4.0
        })
        .await;
        fewest = fewest.min(handed_on);
        waiting = next;
    }
    // The mutex given back; the next waiter's lease, its listing and the check of the
    // stored limit (beside another lease). Listing `leases` or `locks` again adds one each
    // (before the lease appears).
    assert_eq!(fewest, 4.0, "requests of a hand-off");
    holder.release().await.unwrap();
    waiting.await.unwrap().unwrap().release().await.unwrap();
    locker.shutdown().await.unwrap();
    assert!(children(&zk, &leases).await.is_empty());
}

/// A lock's hand-off is the watch event alone: the waiter whose only blocker is deleted holds
/// without listing the lock's children and kept record again, where Curator's recipe lists
/// again. Counted in the server's packets from the holder's release until the waiter holds:
/// the fewest over three hand-offs (a session's ping may fall inside one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_is_handed_on_by_the_event_alone() {
    let server = ZkServer::start().await.expect("zookeeper");
    let locker = locker(&server.url(), Duration::from_secs(10)).await;
    let zk = raw(&server.connect_string()).await;
    let key = "handed-on-lock";
    let packets = || async { server.monitor("zk_packets_received").await.expect("mntr") };
    let watches = || async { server.monitor("zk_watch_count").await.expect("mntr") };
    // No watchdog: a renewal would send requests (and set watches) of its own.
    let lock = || {
        let locker = locker.clone();
        tokio::spawn(async move { locker.lock(key).watchdog(false).wait(TIMEOUT * 5).await })
    };
    let mut holder = lock().await.unwrap().unwrap();
    // What reading the count adds to it: the fewest of three reads (a ping may fall between).
    let mut reading = f64::MAX;
    for _ in 0..3 {
        let first = packets().await;
        reading = reading.min(packets().await - first);
    }
    let mut fewest = f64::MAX;
    for _ in 0..3 {
        let watching = watches().await;
        let waiting = lock();
        // Its node made, and its data watch on the holder's node set.
        eventually("the waiter's watch", async || watches().await > watching).await;
        let before = packets().await;
        holder.release().await.unwrap();
        holder = waiting.await.unwrap().expect("the waiter's lock");
        let after = packets().await;
        // Less what reading the count adds and the release's delete.
        fewest = fewest.min((after - before) - reading - 1.0);
    }
    // Listing the children (with the kept record) after the event adds one.
    assert_eq!(fewest, 0.0, "requests of a hand-off beside the release");
    holder.release().await.unwrap();
    locker.shutdown().await.unwrap();
    assert!(children(&zk, &format!("/{key}")).await.is_empty());
}

/// A waiter whose connection is cut while the lock ahead of it is released keeping it
/// (`hold_at_least`) waits the keep out. Set again on the new connection, its watch reports
/// the node deleted (the keep's `setData` before the delete is not told), so the waiter
/// lists again and reads the record rather than holding at the event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_reconnected_across_a_kept_release_waits_it_out() {
    let server = ZkServer::start().await.expect("zookeeper");
    let zk = raw(&server.connect_string()).await;
    let proxy = TcpProxy::start(server.connect_string().parse().unwrap())
        .await
        .unwrap();
    let ttl = Duration::from_secs(10);
    let holder = locker(&server.url(), ttl).await;
    let waiter = locker(&format!("zk://{}", proxy.address()), ttl).await;
    let key = "kept-across-a-reconnection";
    let at_least = Duration::from_secs(3);
    let watches = || async { server.monitor("zk_watch_count").await.expect("mntr") };
    let asked = Instant::now();
    // No watchdog: a renewal would set a watch of its own.
    let held = holder
        .lock(key)
        .watchdog(false)
        .hold_at_least(at_least)
        .await
        .unwrap();
    let watching = watches().await;
    let waiting = {
        let waiter = waiter.clone();
        tokio::spawn(async move {
            let guard = waiter.lock(key).watchdog(false).wait(at_least * 3).await;
            (guard, asked.elapsed())
        })
    };
    // Its node made, and its data watch on the holder's node set.
    eventually("the waiter's watch", async || watches().await > watching).await;
    let connections = proxy.accepted();
    proxy.set(ProxyMode::Cut);
    held.release().await.unwrap();
    proxy.set(ProxyMode::Pass);
    let (guard, admitted) = waiting.await.unwrap();
    let guard = guard.expect("the waiter's lock, once the keep is over");
    assert!(
        proxy.accepted() > connections,
        "the waiter's client never reconnected"
    );
    assert!(
        admitted >= at_least,
        "the waiter held {admitted:?} after the kept grant was asked for, within its keep of \
         {at_least:?}"
    );
    guard.release().await.unwrap();
    waiter.shutdown().await.unwrap();
    holder.shutdown().await.unwrap();
    assert!(children(&zk, &format!("/{key}")).await.is_empty());
}

/// A waiter whose connection dies right after a request of its wait went out (the reply lost,
/// its session alive) asks again on the new connection and goes on waiting, rather than
/// failing its acquire: the listing of the queue after the waiter ahead of it left, then the
/// watch on the holder that listing found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_lost_while_waiting_is_asked_again() {
    /// A ZooKeeper ping's bytes (length, xid, opcode): the client's only other writes.
    const PING: usize = 12;
    let server = ZkServer::start().await.expect("zookeeper");
    let zk = raw(&server.connect_string()).await;
    let proxy = TcpProxy::start(server.connect_string().parse().unwrap())
        .await
        .unwrap();
    let ttl = Duration::from_secs(10);
    let holder = locker(&server.url(), ttl).await;
    let leaver = locker(&server.url(), ttl).await;
    let waiter = locker(&format!("zk://{}", proxy.address()), ttl).await;
    let watches = || async { server.monitor("zk_watch_count").await.expect("mntr") };
    for (request, passing) in [("listing", 0), ("watch", 1)] {
        let key = format!("asked-again-{request}");
        let held = holder.lock(&key).watchdog(false).await.unwrap();
        let before = watches().await;
        let leaving = {
            let (leaver, key) = (leaver.clone(), key.clone());
            tokio::spawn(async move { leaver.lock(&key).await })
        };
        eventually("the second's watch", async || watches().await > before).await;
        let before = watches().await;
        let waiting = {
            let (waiter, key) = (waiter.clone(), key.clone());
            tokio::spawn(async move {
                let wait = Duration::from_secs(30);
                waiter.lock(&key).watchdog(false).wait(wait).await
            })
        };
        eventually("the third's watch", async || watches().await > before).await;
        let connections = proxy.accepted();
        // The second leaves; the third lists the queue again, then watches the holder.
        proxy.set(ProxyMode::CutAfterRequest {
            over: PING,
            passing,
        });
        leaving.abort();
        eventually("the third's connection cut and made again", async || {
            proxy.accepted() > connections
        })
        .await;
        held.release().await.unwrap();
        let guard = waiting.await.unwrap().unwrap_or_else(|error| {
            panic!("the third's lock, its {request} asked again: {error:?}")
        });
        guard.release().await.unwrap();
        assert!(children(&zk, &format!("/{key}")).await.is_empty());
    }
    for locker in [waiter, leaver, holder] {
        locker.shutdown().await.unwrap();
    }
}

/// A locker through `proxy` with a 3 s ttl — its client gives up on a connection that
/// answered nothing for 0.4 × that, 1.2 s — and `key`'s path made (persistent) and known to it.
async fn silent_prone_locker(
    proxy: &TcpProxy,
    zk: &Client,
    key: &str,
    operation_timeout: Duration,
) -> Locker {
    let config = DlockConfig::default()
        .with_backend(BackendSpec::Url(format!("zk://{}", proxy.address())))
        .with_key_prefix(String::new())
        .with_ttl(Duration::from_secs(3))
        .with_operation_timeout(operation_timeout);
    let locker = Locker::connect(&config).await.expect("connect");
    let persistent =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    zk.mkdir(&format!("/{key}"), &persistent).await.unwrap();
    locker.lock(key).await.unwrap().release().await.unwrap();
    locker
}

/// A create whose reply is lost on a connection that then goes silent — no reset, nothing
/// answered — is found by its uuid once the client has given up on that connection and
/// reconnected within its session: the acquire is granted with exactly that one node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_lost_on_a_silent_connection_is_found_after_the_reconnect() {
    let server = ZkServer::start().await.expect("zookeeper");
    let zk = raw(&server.connect_string()).await;
    let proxy = TcpProxy::start(server.connect_string().parse().unwrap())
        .await
        .unwrap();
    let locker = silent_prone_locker(&proxy, &zk, "silent", Duration::from_secs(10)).await;
    let opened = proxy.accepted();
    proxy.set(ProxyMode::DropReplies);
    let acquiring = {
        let locker = locker.clone();
        tokio::spawn(async move { locker.lock("silent").await })
    };
    eventually("the create reaches the server", || async {
        children(&zk, "/silent").await.len() == 1
    })
    .await;
    eventually("the client gives up on the silent connection", || async {
        proxy.accepted() > opened
    })
    .await;
    proxy.set(ProxyMode::Pass);
    let guard = acquiring
        .await
        .unwrap()
        .expect("granted after the reconnect");
    assert_eq!(children(&zk, "/silent").await.len(), 1, "a duplicate node");
    guard.release().await.unwrap();
    assert!(children(&zk, "/silent").await.is_empty());
}

/// A connection that stays silent past the operation timeout fails the acquire as the
/// service being unavailable — retryable — not as a refusal, within that timeout; the failed
/// acquire leaves no node once the client is through again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_is_unavailable_not_refused() {
    let server = ZkServer::start().await.expect("zookeeper");
    let zk = raw(&server.connect_string()).await;
    let proxy = TcpProxy::start(server.connect_string().parse().unwrap())
        .await
        .unwrap();
    let timeout = Duration::from_secs(4);
    let locker = silent_prone_locker(&proxy, &zk, "silent", timeout).await;
    proxy.set(ProxyMode::DropReplies);
    let started = Instant::now();
    let acquiring = tokio::spawn(async move {
        let outcome = locker.lock("silent").await;
        (outcome, started.elapsed())
    });
    eventually("the create reaches the server", || async {
        children(&zk, "/silent").await.len() == 1
    })
    .await;
    let (outcome, took) = acquiring.await.unwrap();
    proxy.set(ProxyMode::Pass);
    match outcome {
        Err(error) => {
            assert_eq!(error.kind(), ErrorKind::Unavailable, "{error:?}");
            assert!(error.is_retryable(), "{error}");
        }
        Ok(_) => panic!("granted on a connection that answers nothing"),
    }
    assert!(
        took < timeout + Duration::from_secs(2),
        "failed after {took:?}"
    );
    // The create the server applied is deleted by its uuid once the client is through again.
    eventually("the failed acquire leaves no node", || async {
        children(&zk, "/silent").await.is_empty()
    })
    .await;
}

/// A store that accepts a write only with a fencing token at least as high as any it saw, and
/// counts the writes it refused.
#[derive(Default)]
struct FencedStore {
    highest: Mutex<u64>,
    refused: Mutex<u64>,
}

impl FencedStore {
    fn write(&self, token: u64) {
        let mut highest = self.highest.lock().unwrap();
        if token < *highest {
            *self.refused.lock().unwrap() += 1;
        } else {
            *highest = token;
        }
    }
}

/// The holder's connection is cut (by a proxy) for longer than its session timeout, while it
/// writes to a fenced store: its guard reports the lease lost, and its work stops, before the
/// server expires the session and grants the lock to another client — whose writes then
/// never meet a stale one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_cut_off_stops_before_anyone_else_gets_the_lock() {
    let ttl = Duration::from_secs(2);
    let server = ZkServer::start().await.expect("zookeeper");
    let proxy = TcpProxy::start(server.connect_string().parse().unwrap())
        .await
        .unwrap();
    let holder = locker(&format!("zk://{}", proxy.address()), ttl).await;
    let other = locker(&server.url(), ttl).await;
    let store = Arc::new(FencedStore::default());

    let guard = holder.lock("cut/job").fencing(true).await.unwrap();
    let token = guard.fencing_token().unwrap();
    let lost = guard.lost();
    let work = {
        let store = Arc::clone(&store);
        async move {
            loop {
                store.write(token);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    let holding = tokio::spawn(async move {
        let outcome: dlock_core::Result<()> = guard.run(work).await;
        (outcome, Instant::now())
    });
    proxy.set(ProxyMode::Cut);
    let cut = Instant::now();
    let waiting = tokio::spawn(async move {
        let guard = other
            .lock("cut/job")
            .fencing(true)
            .wait(Duration::from_secs(20))
            .await;
        (guard, Instant::now())
    });
    let reason = lost.await;
    let (outcome, stopped) = holding.await.unwrap();
    assert!(
        matches!(outcome, Err(Error::LeaseLost { .. })),
        "{outcome:?}"
    );
    assert!(matches!(reason, LostReason::Expired), "{reason}");
    let (granted, at) = waiting.await.unwrap();
    let guard = granted.expect("the other client gets the lock after the session expired");
    println!(
        "holder stopped {:?} after the cut, the other got the lock {:?} after it",
        stopped - cut,
        at - cut
    );
    assert!(
        stopped < at,
        "the cut-off holder was still working when the other got in"
    );
    let new_token = guard.fencing_token().unwrap();
    assert!(new_token > token);
    store.write(new_token);
    assert_eq!(
        *store.refused.lock().unwrap(),
        0,
        "a stale write reached the store"
    );
    guard.release().await.unwrap();
    proxy.set(ProxyMode::Pass);
}

/// Every server of the ensemble is paused (SIGSTOP): the holder cannot renew, its guard is
/// lost at its local deadline and `run` returns `LeaseLost`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_servers_paused_lose_the_lock_at_its_local_deadline() {
    let ttl = Duration::from_secs(2);
    let ensemble = ZkEnsemble::start(3).await.expect("zookeeper ensemble");
    let holder = locker(&ensemble.url(), ttl).await;
    let guard = holder.lock("paused/job").await.unwrap();
    for member in ensemble.members() {
        member.pause().expect("SIGSTOP");
    }
    let paused = Instant::now();
    let outcome = guard.run(std::future::pending::<()>()).await;
    let after = paused.elapsed();
    for member in ensemble.members() {
        member.resume().expect("SIGCONT");
    }
    println!("lost {after:?} after every server was paused (ttl {ttl:?})");
    assert!(
        matches!(outcome, Err(Error::LeaseLost { .. })),
        "{outcome:?}"
    );
    assert!(matches!(guard.lost_reason(), Some(LostReason::Expired)));
    assert!(
        after <= ttl,
        "lost {after:?} after the pause, later than the ttl"
    );
}

/// `Locker::shutdown` closes its ZooKeeper session before it returns: its nodes — the one
/// holding a lock and a waiter's queued node — are gone at once (not at the session
/// timeout), and the waiting acquire ends with `ShutDown` rather than opening a new session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_the_session_and_its_nodes_go() {
    let server = ZkServer::start().await.expect("zookeeper");
    let (other, leaving) = (
        locker(&server.url(), Duration::from_secs(30)).await,
        locker(&server.url(), Duration::from_secs(30)).await,
    );
    let client = raw(&server.connect_string()).await;
    let _busy = other.lock("busy").await.expect("acquire");
    let _held = leaving.lock("held").await.expect("acquire");
    let waiter = tokio::spawn({
        let leaving = leaving.clone();
        async move { leaving.lock("busy").wait(Duration::from_secs(30)).await }
    });
    eventually("the waiter queued", || async {
        children(&client, "/busy").await.len() == 2
    })
    .await;

    leaving.shutdown().await.expect("shutdown");
    assert_eq!(children(&client, "/held").await, Vec::<String>::new());
    assert_eq!(
        children(&client, "/busy").await.len(),
        1,
        "the waiter's node went"
    );
    let waited = waiter.await.expect("the waiter's task");
    assert!(
        matches!(waited, Err(Error::ShutDown)),
        "the waiting acquire after shutdown: {waited:?}"
    );
    assert_eq!(
        children(&client, "/busy").await.len(),
        1,
        "no node queued again"
    );
}

/// A lock kept after its release is a persistent record in `/_dlock_kept` (the lock path's
/// slashes escaped), apart from the lock path — where Curator would count any child as a
/// contender — and the lock path keeps no node. Records that expired on keys nobody locks
/// again (past fires) are swept by later keeps; `/_dlock_kept` is no key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_records_sit_apart_and_expired_ones_are_swept() {
    let server = ZkServer::start().await.expect("zookeeper");
    let zk = raw(&server.connect_string()).await;
    let locker = locker(&server.url(), Duration::from_secs(2)).await;
    let fire = async |fire: &str| {
        let ran = locker
            .once("jobs/nightly", fire)
            .retention(Duration::from_secs(1))
            .run(async { Ok::<_, Error>(()) })
            .await
            .expect("once");
        assert!(ran.ran().is_some(), "fire {fire}: {ran:?}");
    };
    fire("1").await;
    let record = "/_dlock_kept/jobs%2Fnightly@1";
    let (data, stat) = zk.get_data(record).await.expect("the done record");
    let data = String::from_utf8(data).expect("text");
    assert!(data.ends_with("|done|1000"), "{data}");
    assert_eq!(
        stat.ephemeral_owner, 0,
        "the record must outlive the session"
    );
    assert!(
        children(&zk, "/jobs/nightly@1").await.is_empty(),
        "a node was left under the lock path"
    );

    // Later fires keep their own records and sweep the expired ones.
    let give_up = Instant::now() + Duration::from_secs(15);
    for next in 2.. {
        fire(&next.to_string()).await;
        if !children(&zk, "/_dlock_kept")
            .await
            .iter()
            .any(|c| c == "jobs%2Fnightly@1")
        {
            break;
        }
        assert!(
            Instant::now() < give_up,
            "the expired record was never swept"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A key kept again once its record expired: the record is overwritten.
    for round in 0..2 {
        let guard = locker
            .lock("jobs/again")
            .hold_at_least(Duration::from_millis(50))
            .wait(Duration::from_secs(5))
            .await
            .expect("lock");
        guard
            .release()
            .await
            .unwrap_or_else(|error| panic!("round {round}: release, keeping: {error}"));
    }

    let refused = locker.try_lock("_dlock_kept/x").await;
    assert!(
        matches!(refused, Err(Error::InvalidKey { .. })),
        "{refused:?}"
    );
}

/// Held locks are renewed by their session once their nodes are watched: each lock's first
/// renewal reads its node with an exists-watch (the server then counts 300 watches for 300
/// held locks), later ones only confirm the session (a few requests a ttl, not 300 reads a
/// cadence). A node deleted by another client is
/// still found: that lock is lost by the next renewal, the others stay held. Releasing them
/// all leaves no node and no watch on the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_held_locks_are_watched_not_read_and_a_deletion_is_seen() {
    let server = ZkServer::start().await.expect("zookeeper");
    let ttl = Duration::from_secs(3);
    let locker = locker(&server.url(), ttl).await;
    let mut guards = Vec::new();
    for i in 0..300 {
        guards.push(locker.lock(&format!("held-{i}")).await.expect("acquire"));
    }
    let watches = || async { server.monitor("zk_watch_count").await.unwrap_or(-1.0) };
    eventually("every held node is watched", || async {
        watches().await > 299.5
    })
    .await;
    // For longer than a ttl, so every lock needed three renewals to stay held: requests
    // confirming the session and pings only, where reading the nodes would be 300 a cadence.
    let packets = || async { server.monitor("zk_packets_received").await.expect("mntr") };
    let before = packets().await;
    tokio::time::sleep(ttl + Duration::from_millis(500)).await;
    let during = packets().await - before;
    assert!(guards.iter().all(dlock_core::LockGuard::is_held));
    assert!(
        during < 60.0,
        "{during} requests while renewing 300 watched locks"
    );

    let client = raw(&server.connect_string()).await;
    let nodes = children(&client, "/held-7").await;
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    client
        .delete(&format!("/held-7/{}", nodes[0]), None)
        .await
        .expect("delete the held node");
    support::only_this_lock_is_lost(&guards, 7, ttl, Instant::now()).await;

    for guard in guards {
        let _ = guard.release().await;
    }
    assert_eq!(children(&client, "/held-0").await, Vec::<String>::new());
    eventually("no watch is left", || async { watches().await < 0.5 }).await;
}

/// A Locker shut down while its held nodes are watched leaves nothing on the server: no
/// node, no watch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_watched_nodes_leaves_no_node_or_watch() {
    let server = ZkServer::start().await.expect("zookeeper");
    let ttl = Duration::from_secs(3);
    let locker = locker(&server.url(), ttl).await;
    let mut guards = Vec::new();
    for i in 0..20 {
        guards.push(locker.lock(&format!("watched-{i}")).await.expect("acquire"));
    }
    let watches = || async { server.monitor("zk_watch_count").await.unwrap_or(-1.0) };
    eventually("every held node is watched", || async {
        watches().await > 19.5
    })
    .await;

    locker.shutdown().await.expect("shutdown");
    let client = raw(&server.connect_string()).await;
    assert_eq!(children(&client, "/watched-0").await, Vec::<String>::new());
    eventually("no watch is left", || async { watches().await < 0.5 }).await;
    drop(guards);
}
