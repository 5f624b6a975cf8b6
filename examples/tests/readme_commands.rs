//! The README's commands, run the way the README shows them: the example binaries on memory
//! and on real Redis, etcd, ZooKeeper and PostgreSQL servers, the bench's smoke run, and a check that every
//! `cargo run` line of the README names a binary and features this crate has.
//!
//! (`orders_http` and the README's `curl` lines are covered by `tests/orders_http.rs`; that
//! the quickstart builds and runs with *default* features is `scripts/check-quickstart.sh`'s
//! job in CI, since this suite runs with every feature on.)

use std::process::Output;
use std::time::Duration;

use dlock_harness::{EtcdServer, PostgresServer, RedisNodes, RedisServer, ZkServer};
use tokio::process::Command;

/// Runs an example binary with `DLOCK_URL` set (or removed, for `None`) and its arguments;
/// panics with its output unless it exits 0. The limit only stops a hang: the bench's smoke
/// run, a debug build starting a server of every kind, took over two minutes beside a busy
/// loop on one of two cores.
async fn run(binary: &str, url: Option<&str>, args: &[&str]) -> String {
    let mut command = Command::new(binary);
    command.args(args).kill_on_drop(true);
    match url {
        Some(url) => command.env("DLOCK_URL", url),
        None => command.env_remove("DLOCK_URL"),
    };
    let output: Output = tokio::time::timeout(Duration::from_secs(360), command.output())
        .await
        .unwrap_or_else(|_| panic!("{binary} {args:?} did not finish in 6 minutes"))
        .expect("the binary starts");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{binary} {args:?} on {url:?} failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

const QUICKSTART: &str = env!("CARGO_BIN_EXE_quickstart");

#[tokio::test]
async fn the_quickstart_passes_on_memory() {
    let out = run(QUICKSTART, None, &[]).await;
    assert!(out.starts_with("dlock quickstart on `memory://`"), "{out}");
    assert!(out.contains("all five demonstrations passed"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quickstart_passes_on_redis() {
    let server = RedisServer::start().await.unwrap();
    let out = run(QUICKSTART, Some(&server.url()), &[]).await;
    assert!(
        out.starts_with(&format!("dlock quickstart on `{}`", server.url())),
        "{out}"
    );
    assert!(out.contains("all five demonstrations passed"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quickstart_passes_on_etcd() {
    let server = EtcdServer::start().await.unwrap();
    let out = run(QUICKSTART, Some(&server.url()), &[]).await;
    assert!(out.contains("all five demonstrations passed"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quickstart_passes_on_zookeeper() {
    let server = ZkServer::start().await.unwrap();
    let url = format!("{}/app1", server.url());
    let out = run(QUICKSTART, Some(&url), &[]).await;
    assert!(out.contains("all five demonstrations passed"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quickstart_passes_on_postgres() {
    let server = PostgresServer::start().await.unwrap();
    let out = run(QUICKSTART, Some(&server.url()), &[]).await;
    assert!(out.contains("all five demonstrations passed"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quickstart_passes_on_redlock() {
    let masters = RedisNodes::start(5).await.unwrap();
    let out = run(QUICKSTART, Some(&masters.url()), &[]).await;
    assert!(out.contains("issues no fencing tokens"), "{out}");
    assert!(
        out.contains("all four demonstrations this backend can show passed"),
        "{out}"
    );
}

#[tokio::test]
async fn orders_macro_passes_on_memory() {
    let out = run(env!("CARGO_BIN_EXE_orders_macro"), None, &[]).await;
    assert!(
        out.starts_with("#[distributed_lock] on `memory://`"),
        "{out}"
    );
}

#[tokio::test]
async fn observability_prints_the_scrape_and_the_inspect_view() {
    let out = run(env!("CARGO_BIN_EXE_observability"), None, &[]).await;
    assert!(
        out.starts_with("dlock observability on `memory://`"),
        "{out}"
    );
    for expected in [
        r#"dlock_acquire_duration_seconds_count{backend="memory",mode="exclusive",key="order:<id>",outcome="acquired"} 20"#,
        r#"dlock_acquire_duration_seconds_count{backend="memory",mode="exclusive",key="report:<name>",outcome="busy"} 1"#,
        r#"dlock_lost_total{backend="memory",mode="exclusive",key="report:<name>",reason="not_owner"} 1"#,
        "  holder  ",
        "  waiter  ",
        "all shown",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
}

#[tokio::test]
async fn rwlock_passes_on_memory() {
    let out = run(env!("CARGO_BIN_EXE_rwlock"), None, &[]).await;
    assert!(out.starts_with("a read-write lock on `memory://`"), "{out}");
    assert!(out.contains("all checks passed"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rwlock_passes_on_etcd() {
    let server = EtcdServer::start().await.unwrap();
    let out = run(env!("CARGO_BIN_EXE_rwlock"), Some(&server.url()), &[]).await;
    assert!(out.contains("all checks passed"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rwlock_passes_on_zookeeper() {
    let server = ZkServer::start().await.unwrap();
    let out = run(env!("CARGO_BIN_EXE_rwlock"), Some(&server.url()), &[]).await;
    assert!(out.contains("all checks passed"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rwlock_passes_on_postgres() {
    let server = PostgresServer::start().await.unwrap();
    let out = run(env!("CARGO_BIN_EXE_rwlock"), Some(&server.url()), &[]).await;
    assert!(out.contains("all checks passed"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rwlock_passes_on_redis() {
    let server = RedisServer::start().await.unwrap();
    let out = run(env!("CARGO_BIN_EXE_rwlock"), Some(&server.url()), &[]).await;
    assert!(out.contains("all checks passed"), "{out}");
}

#[tokio::test]
async fn leader_passes_on_memory() {
    let out = run(env!("CARGO_BIN_EXE_leader"), None, &[]).await;
    assert!(out.starts_with("leader election on `memory://`"), "{out}");
    assert!(out.contains("all checks passed"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_passes_on_etcd() {
    let server = EtcdServer::start().await.unwrap();
    let out = run(env!("CARGO_BIN_EXE_leader"), Some(&server.url()), &[]).await;
    assert!(out.contains("all checks passed"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_passes_on_zookeeper() {
    let server = ZkServer::start().await.unwrap();
    let out = run(env!("CARGO_BIN_EXE_leader"), Some(&server.url()), &[]).await;
    assert!(out.contains("all checks passed"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_passes_on_redis() {
    let server = RedisServer::start().await.unwrap();
    let out = run(env!("CARGO_BIN_EXE_leader"), Some(&server.url()), &[]).await;
    assert!(out.contains("all checks passed"), "{out}");
}

#[tokio::test]
async fn config_from_toml_loads_the_example_file() {
    let out = run(env!("CARGO_BIN_EXE_config_from_toml"), None, &[]).await;
    assert!(
        out.contains("backend memory://, key prefix `billing:`"),
        "{out}"
    );
    assert!(out.contains("as backend key `billing:invoice:1`"), "{out}");
}

#[tokio::test]
async fn the_bench_smoke_run_starts_its_servers_and_prints_every_backend() {
    let bench = env!("CARGO_BIN_EXE_dlock-bench");
    let out = run(bench, None, &["--servers", "auto", "--quick"]).await;
    for backend in [
        "memory",
        "redis",
        "etcd",
        "zookeeper",
        "postgres",
        "redlock",
    ] {
        for scenario in ["uncontended", "many-keys", "contended"] {
            assert!(
                out.lines()
                    .any(|line| line.starts_with(&format!("| {backend} | {scenario} |"))),
                "no {backend} {scenario} row:\n{out}"
            );
        }
    }
    let help = run(bench, None, &["--help"]).await;
    assert!(help.contains("dlock_bench/README.md"), "{help}");
}

/// Every `cargo run` line of the README names one of this crate's binaries and only features
/// this crate has, so a command copied from the README works.
#[test]
fn the_readme_commands_name_existing_binaries_and_features() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    let manifest: toml::Table =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
            .unwrap()
            .parse()
            .unwrap();
    let features = manifest["features"].as_table().unwrap();
    // This crate's binaries: `src/bin/<name>.rs`, and the `[[bin]]` tables.
    let mut binaries: Vec<String> =
        std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/src/bin"))
            .unwrap()
            .filter_map(|entry| {
                let name = entry.unwrap().file_name().into_string().unwrap();
                name.strip_suffix(".rs").map(str::to_owned)
            })
            .collect();
    for bin in manifest["bin"].as_array().unwrap() {
        binaries.push(bin["name"].as_str().unwrap().to_owned());
    }
    assert!(binaries.iter().any(|b| b == "quickstart"), "{binaries:?}");
    let commands: Vec<&str> = readme
        .lines()
        .filter(|line| line.contains("cargo run"))
        .collect();
    assert!(commands.len() >= 5, "{commands:?}");
    for line in commands {
        let words: Vec<&str> = line.split_whitespace().collect();
        let after = |flag: &str| {
            words
                .iter()
                .position(|w| *w == flag)
                .map(|i| words[i + 1].trim_end_matches(['`', ')', ',', '.']))
        };
        assert_eq!(after("-p"), Some("dlock-examples"), "{line}");
        let bin = after("--bin").unwrap_or_else(|| panic!("no --bin: {line}"));
        assert!(
            binaries.iter().any(|b| b == bin),
            "unknown binary `{bin}`: {line}"
        );
        if let Some(list) = after("--features") {
            for feature in list.split(',') {
                assert!(
                    features.contains_key(feature),
                    "unknown feature `{feature}`: {line}"
                );
            }
        }
        // A binary's `required-features` must be on the line; a non-memory URL needs its
        // backend's feature; nothing else needs any.
        let required: Vec<&str> = manifest["bin"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["name"].as_str() == Some(bin))
            .filter_map(|b| b.get("required-features")?.as_array())
            .flatten()
            .filter_map(|f| f.as_str())
            .collect();
        let listed: Vec<&str> =
            after("--features").map_or_else(Vec::new, |l| l.split(',').collect());
        for feature in &required {
            assert!(
                listed.contains(feature),
                "`{bin}` needs `--features {feature}`: {line}"
            );
        }
        let needs_features = !required.is_empty()
            || (line.contains("DLOCK_URL=") && !line.contains("DLOCK_URL=memory"));
        assert_eq!(
            !listed.is_empty(),
            needs_features,
            "features (a binary's required features and non-memory URLs need one, nothing else does): {line}"
        );
    }
}
