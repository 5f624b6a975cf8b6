//! The test-server harness really starts, serves, and cleans up every kind of server.

use std::net::{Ipv4Addr, TcpListener};
use std::path::Path;
use std::time::{Duration, Instant};

use dlock_harness::{
    EtcdCluster, EtcdServer, HarnessError, PostgresServer, RedisCluster, RedisNodes, RedisServer,
    ZkEnsemble, ZkServer,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::Command;

/// Runs a command, asserts it succeeded, and returns its stdout.
async fn run(program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> String {
    run_with_stderr(program, args).await.0
}

/// Runs a command, asserts it succeeded, and returns its stdout and stderr.
async fn run_with_stderr(program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> (String, String) {
    let program = program.as_ref().to_owned();
    let output = Command::new(&program)
        .args(args)
        .env("ETCDCTL_API", "3")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "{program:?} {args:?} failed ({}):\n{stdout}{stderr}",
        output.status
    );
    (stdout, stderr)
}

/// Writes four keys through the node on port `write` and reads them back through the node
/// on port `read`; `redis-cli -c` follows the MOVED redirections in between.
async fn write_through_read_through(write: &str, read: &str, value: &str) {
    for key in ["a", "b", "c", "d"] {
        let set = run("redis-cli", &["-c", "-p", write, "SET", key, value]).await;
        assert_eq!(set.trim(), "OK");
        let got = run("redis-cli", &["-c", "-p", read, "GET", key]).await;
        assert_eq!(got.trim(), value);
    }
}

/// Sends a ZooKeeper four-letter word.
async fn four_letter_word(port: u16, word: &str) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    stream.write_all(word.as_bytes()).await.unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).await.unwrap();
    reply
}

/// The pid and port of each server of a cluster, read before it is dropped.
fn pids_and_ports<T>(servers: &[T], pid_and_port: impl Fn(&T) -> (u32, u16)) -> Vec<(u32, u16)> {
    servers.iter().map(pid_and_port).collect()
}

/// [`assert_gone`] for every server of a dropped cluster.
fn assert_all_gone(gone: Vec<(u32, u16)>) {
    for (pid, port) in gone {
        assert_gone(pid, port);
    }
}

/// Asserts that the process is gone (`kill -0` fails) and its port can be bound again.
fn assert_gone(pid: u32, port: u16) {
    let alive = std::process::Command::new("kill")
        .args(["-0", &pid.to_string()])
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(!alive, "process {pid} is still alive after drop");
    assert!(
        TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok(),
        "port {port} is still taken after drop"
    );
}

/// Unwraps a harness result, printing the error's Display (it names the install script, or
/// carries the server's log tail).
fn must<T>(result: Result<T, HarnessError>) -> T {
    result.unwrap_or_else(|error| panic!("{error}"))
}

fn timed(what: &str, started: Instant) {
    eprintln!("{what}: {:.2?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_server_serves_and_is_cleaned_up() {
    let started = Instant::now();
    let redis = must(RedisServer::start().await);
    timed("redis start", started);
    assert_eq!(redis.url(), format!("redis://127.0.0.1:{}", redis.port()));
    assert_eq!(
        redis.command(&["SET", "greeting", "hello"]).await.unwrap(),
        "OK"
    );
    assert_eq!(redis.command(&["GET", "greeting"]).await.unwrap(), "hello");
    assert_eq!(redis.command(&["GET", "missing"]).await.unwrap(), "(nil)");
    assert!(redis.command(&["NOSUCHCOMMAND"]).await.is_err());
    let (pid, port) = (redis.pid(), redis.port());
    drop(redis);
    assert_gone(pid, port);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_server_takes_extra_arguments() {
    let redis = must(RedisServer::start_with(&["--appendonly", "yes"]).await);
    assert_eq!(
        redis
            .command(&["CONFIG", "GET", "appendonly"])
            .await
            .unwrap(),
        "appendonly\nyes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_pause_stops_answers_until_resume() {
    let redis = must(RedisServer::start().await);
    redis.pause().unwrap();
    let paused = tokio::time::timeout(Duration::from_millis(500), redis.command(&["PING"])).await;
    assert!(paused.is_err(), "a paused server answered: {paused:?}");
    redis.resume().unwrap();
    assert_eq!(redis.command(&["PING"]).await.unwrap(), "PONG");
    // A paused server is still killed on drop.
    redis.pause().unwrap();
    let (pid, port) = (redis.pid(), redis.port());
    drop(redis);
    assert_gone(pid, port);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restart_keeps_the_port_and_loses_the_data() {
    let redis = must(RedisServer::start().await);
    let (old_pid, port) = (redis.pid(), redis.port());
    redis.command(&["SET", "k", "v"]).await.unwrap();
    must(redis.restart().await);
    assert_eq!(redis.port(), port);
    assert_ne!(redis.pid(), old_pid);
    assert_eq!(redis.command(&["GET", "k"]).await.unwrap(), "(nil)");
    // kill, then restart from the killed state.
    redis.kill().await.unwrap();
    assert!(redis.command(&["PING"]).await.is_err());
    assert!(
        redis.pause().is_err(),
        "a killed server's pid must not be signalled"
    );
    must(redis.restart().await);
    assert_eq!(redis.command(&["PING"]).await.unwrap(), "PONG");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_serves_and_is_cleaned_up() {
    let started = Instant::now();
    let cluster = must(RedisCluster::start(3).await);
    timed("redis cluster start", started);
    let nodes = cluster.nodes();
    assert_eq!(nodes.len(), 3);
    for node in nodes {
        let info = node.command(&["CLUSTER", "INFO"]).await.unwrap();
        assert!(info.contains("cluster_state:ok"), "{info}");
        assert!(info.contains("cluster_known_nodes:3"), "{info}");
    }
    let addrs: Vec<String> = nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port()))
        .collect();
    assert_eq!(
        cluster.url(),
        format!("redis+cluster://{}", addrs.join(","))
    );
    assert_eq!(cluster.urls()[0], format!("redis://{}", addrs[0]));
    // `-c` follows MOVED redirections: a key written through one node is read through another.
    let (p0, p2) = (nodes[0].port().to_string(), nodes[2].port().to_string());
    write_through_read_through(&p0, &p2, "cluster-value").await;
    // A killed node comes back with its nodes.conf and the cluster heals.
    let started = Instant::now();
    nodes[1].kill().await.unwrap();
    must(nodes[1].restart().await);
    cluster.wait_until_healthy().await.unwrap();
    timed("redis cluster node restart", started);
    write_through_read_through(&p0, &p2, "healed").await;

    let gone: Vec<(u32, u16)> = nodes.iter().map(|n| (n.pid(), n.port())).collect();
    drop(cluster);
    for (pid, port) in gone {
        assert_gone(pid, port);
        assert_gone(pid, port + 10_000);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_nodes_are_independent() {
    let nodes = must(RedisNodes::start(5).await);
    assert_eq!(nodes.urls().len(), 5);
    assert!(nodes.url().starts_with("redlock://127.0.0.1:"));
    nodes.nodes()[0]
        .command(&["SET", "only-here", "1"])
        .await
        .unwrap();
    for node in &nodes.nodes()[1..] {
        assert_eq!(node.command(&["GET", "only-here"]).await.unwrap(), "(nil)");
    }
    let gone = pids_and_ports(nodes.nodes(), |n| (n.pid(), n.port()));
    drop(nodes);
    assert_all_gone(gone);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_server_serves_and_is_cleaned_up() {
    let started = Instant::now();
    let etcd = must(EtcdServer::start().await);
    timed("etcd start", started);
    assert_eq!(etcd.url(), format!("etcd://127.0.0.1:{}", etcd.port()));
    let endpoint = format!("--endpoints={}", etcd.endpoint());
    assert_eq!(
        run("etcdctl", &[&endpoint, "put", "greeting", "hello"])
            .await
            .trim(),
        "OK"
    );
    assert_eq!(
        run(
            "etcdctl",
            &[&endpoint, "get", "greeting", "--print-value-only"]
        )
        .await
        .trim(),
        "hello"
    );
    let (pid, port, peer) = (etcd.pid(), etcd.port(), etcd.peer_port());
    drop(etcd);
    assert_gone(pid, port);
    assert_gone(pid, peer);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_server_started_with_flags_runs_with_them() {
    // Compaction every second: the old revision of a key is gone soon after it was replaced.
    let etcd = must(
        EtcdServer::start_with(&[
            "--auto-compaction-mode=periodic",
            "--auto-compaction-retention=1s",
        ])
        .await,
    );
    let endpoint = format!("--endpoints={}", etcd.endpoint());
    // A new etcd is at revision 1: the two puts make revisions 2 and 3.
    for value in ["v1", "v2"] {
        run("etcdctl", &[&endpoint, "put", "k", value]).await;
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let read = Command::new("etcdctl")
            .args([&endpoint, "get", "k", "--rev=2"])
            .env("ETCDCTL_API", "3")
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&read.stderr);
        if !read.status.success() && stderr.contains("compacted") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "revision 2 still readable after 20 s: the compaction flags did not reach etcd"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_cluster_serves_survives_a_leader_kill_and_is_cleaned_up() {
    let started = Instant::now();
    let cluster = must(EtcdCluster::start(3).await);
    timed("etcd cluster start", started);
    let endpoints = format!("--endpoints={}", cluster.endpoints().join(","));
    let members = run("etcdctl", &[&endpoints, "member", "list"]).await;
    assert_eq!(members.lines().count(), 3, "{members}");
    assert!(cluster.url().starts_with("etcd://127.0.0.1:"));
    assert_eq!(cluster.url().matches(',').count(), 2);
    assert_eq!(
        run("etcdctl", &[&endpoints, "put", "k", "v"]).await.trim(),
        "OK"
    );
    for endpoint in cluster.endpoints() {
        let one = format!("--endpoints={endpoint}");
        assert_eq!(
            run("etcdctl", &[&one, "get", "k", "--print-value-only"])
                .await
                .trim(),
            "v"
        );
    }

    let started = Instant::now();
    let leader = cluster.leader().await.unwrap();
    cluster.member(leader).kill().await.unwrap();
    let new_leader = cluster.leader().await.unwrap();
    assert_ne!(new_leader, leader);
    timed("etcd re-election", started);
    must(cluster.member(leader).restart().await);
    let old = format!("--endpoints={}", cluster.member(leader).endpoint());
    assert_eq!(
        run("etcdctl", &[&old, "get", "k", "--print-value-only"])
            .await
            .trim(),
        "v"
    );

    let gone = pids_and_ports(cluster.members(), |m| (m.pid(), m.port()));
    drop(cluster);
    assert_all_gone(gone);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_server_serves_and_is_cleaned_up() {
    let started = Instant::now();
    let zk = must(ZkServer::start().await);
    timed("zookeeper start", started);
    assert_eq!(zk.url(), format!("zk://127.0.0.1:{}", zk.port()));
    assert_eq!(four_letter_word(zk.port(), "ruok").await, "imok");
    assert_eq!(zk.mode().await.as_deref(), Some("standalone"));
    let zk_cli = "/usr/share/zookeeper/bin/zkCli.sh";
    if Path::new(zk_cli).exists() {
        let server = zk.connect_string();
        let create = [
            "-waitforconnection",
            "-server",
            &server,
            "create",
            "/dlock-smoke",
            "hi",
        ];
        let (stdout, stderr) = run_with_stderr(zk_cli, &create).await;
        assert!(
            stdout.contains("Created /dlock-smoke") || stderr.contains("Created /dlock-smoke"),
            "{stdout}{stderr}"
        );
    }
    let (pid, port) = (zk.pid(), zk.port());
    drop(zk);
    assert_gone(pid, port);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_ensemble_elects_one_leader_and_is_cleaned_up() {
    let started = Instant::now();
    let ensemble = must(ZkEnsemble::start(3).await);
    timed("zookeeper ensemble start", started);
    let mut modes = Vec::new();
    for member in ensemble.members() {
        let srvr = four_letter_word(member.port(), "srvr").await;
        modes.push(
            srvr.lines()
                .find_map(|l| l.strip_prefix("Mode: "))
                .unwrap_or("?")
                .to_owned(),
        );
    }
    modes.sort();
    assert_eq!(modes, ["follower", "follower", "leader"]);
    assert_eq!(ensemble.connect_string().matches("127.0.0.1:").count(), 3);
    assert_eq!(
        ensemble.url(),
        format!("zk://{}", ensemble.connect_string())
    );

    let started = Instant::now();
    let leader = ensemble.leader().await.unwrap();
    ensemble.member(leader).kill().await.unwrap();
    let new_leader = ensemble.leader().await.unwrap();
    assert_ne!(new_leader, leader);
    timed("zookeeper re-election", started);
    must(ensemble.member(leader).restart().await);
    assert_eq!(
        ensemble.member(leader).mode().await.as_deref(),
        Some("follower")
    );

    let gone = pids_and_ports(ensemble.members(), |m| (m.pid(), m.port()));
    drop(ensemble);
    assert_all_gone(gone);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_serves_survives_a_crash_and_is_cleaned_up() {
    let started = Instant::now();
    let pg = must(PostgresServer::start().await);
    timed("postgres start (initdb included)", started);
    assert_eq!(
        pg.url(),
        format!("postgres://postgres@127.0.0.1:{}/postgres", pg.port())
    );
    let psql = pg.bin_dir().join("psql");
    let port = pg.port().to_string();
    let select = [
        "-h",
        "127.0.0.1",
        "-p",
        &port,
        "-U",
        "postgres",
        "-Atc",
        "select 1",
    ];
    assert_eq!(run(&psql, &select).await.trim(), "1");

    let started = Instant::now();
    pg.kill().await.unwrap();
    must(pg.restart().await);
    timed("postgres crash restart", started);
    assert_eq!(run(&psql, &select).await.trim(), "1");

    let (pid, port) = (pg.pid(), pg.port());
    drop(pg);
    assert_gone(pid, port);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_fails_to_start_reports_its_log() {
    let started = Instant::now();
    let error = RedisServer::start_with(&["--no-such-directive", "1"])
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "an exited server is noticed at once"
    );
    match &error {
        HarnessError::Startup {
            server,
            reason,
            log_tail,
        } => {
            assert!(server.starts_with("redis-server on 127.0.0.1:"), "{server}");
            assert!(reason.contains("exited"), "{reason}");
            assert!(log_tail.contains("no-such-directive"), "{log_tail}");
        }
        other => panic!("expected a startup error, got {other:?}"),
    }
    assert!(
        error.to_string().contains("last lines of its log"),
        "{error}"
    );
}
