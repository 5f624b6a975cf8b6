//! The fault-injection runner's short mode, as the README's test command runs it: every
//! backend and cluster shape through a random mix of faults (a holder frozen or killed, a
//! server or leader killed or frozen, a holder's connection cut or its replies delayed),
//! failing on any violation the backend's design does not explain. The seed is printed, so a
//! failure can be replayed with the command in the output.

use std::time::Duration;

use tokio::process::Command;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_backend_keeps_its_promises_under_a_mix_of_faults() {
    let output = Command::new(env!("CARGO_BIN_EXE_dlock-faults"))
        .arg("--short")
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(600), output)
        .await
        .expect("the short run finishes within 10 minutes")
        .expect("dlock-faults starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "dlock-faults --short failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    for shape in [
        "Redis, 1 server",
        "Redis Cluster, 3 masters",
        "RedLock, 5 masters",
        "etcd, 1 member",
        "etcd, 3 members",
        "ZooKeeper, 1 server",
        "ZooKeeper, 3 servers",
        "PostgreSQL",
    ] {
        let row = stdout
            .lines()
            .find(|line| line.starts_with(&format!("| {shape} | mixed |")))
            .unwrap_or_else(|| panic!("no row for {shape}:\n{stdout}"));
        let acquired: u64 = row.split('|').nth(3).unwrap().trim().parse().unwrap();
        let faults: u64 = row.split('|').nth(4).unwrap().trim().parse().unwrap();
        assert!(acquired > 0 && faults > 0, "{shape} ran nothing: {row}");
    }
}
