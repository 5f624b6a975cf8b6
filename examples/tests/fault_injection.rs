//! The fault-injection runner's short mode, as the README's test command runs it: every
//! backend and cluster shape through a random mix of faults (a holder frozen or killed, a
//! server or leader killed or frozen, a holder's connection cut or its replies delayed),
//! failing on any violation the backend's design does not explain. The seed is printed, so a
//! failure can be replayed with the command in the output.
//!
//! The shapes run in two runners side by side (each shape's servers and workers are its
//! own): the cells mostly wait for faults to heal, so two at a time halve the wall time
//! without crowding the two cores.

use std::time::Duration;

use tokio::process::Command;

/// The shapes of each runner, Redis-like and session-like mixed so both runners are about as
/// long.
const HALVES: [(&str, &[&str]); 2] = [
    (
        "redis,etcd,zk,postgres",
        &[
            "Redis, 1 server",
            "etcd, 1 member",
            "ZooKeeper, 1 server",
            "PostgreSQL",
        ],
    ),
    (
        "redis-cluster,redis-sentinel,redlock,etcd-3,zk-3",
        &[
            "Redis Cluster, 3 masters",
            "Redis Sentinel, 1 master + 2 replicas",
            "RedLock, 5 masters",
            "etcd, 3 members",
            "ZooKeeper, 3 servers",
        ],
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_backend_keeps_its_promises_under_a_mix_of_faults() {
    let runs = HALVES.map(|(shapes, titles)| async move {
        let output = Command::new(env!("CARGO_BIN_EXE_dlock-faults"))
            .args(["--short", "--shapes", shapes])
            .kill_on_drop(true)
            .output();
        let output = tokio::time::timeout(Duration::from_secs(600), output)
            .await
            .expect("the short run finishes within 10 minutes")
            .expect("dlock-faults starts");
        (titles, output)
    });
    let [first, second] = runs;
    let (first, second) = tokio::join!(first, second);
    for (titles, output) in [first, second] {
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        println!("{stdout}");
        assert!(
            output.status.success(),
            "dlock-faults --short failed ({}):\n{stdout}\n{stderr}",
            output.status
        );
        for shape in titles {
            let row = stdout
                .lines()
                .find(|line| line.starts_with(&format!("| {shape} | mixed |")))
                .unwrap_or_else(|| panic!("no row for {shape}:\n{stdout}"));
            let acquired: u64 = row.split('|').nth(3).unwrap().trim().parse().unwrap();
            let faults: u64 = row.split('|').nth(4).unwrap().trim().parse().unwrap();
            assert!(acquired > 0 && faults > 0, "{shape} ran nothing: {row}");
        }
    }
}
