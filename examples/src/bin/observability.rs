//! What an operator sees: a small workload, then dlock's metrics as a Prometheus scrape and
//! `Locker::inspect` of a lock that is held and waited for.
//!
//! Run with: `cargo run -p dlock-examples --features observability --bin observability`
//! (memory backend; set `DLOCK_URL` and add the backend's feature to use another).

use std::process::ExitCode;
use std::time::Duration;

use dlock_core::{DlockConfig, Error, Locker, LostReason};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

#[tokio::main]
async fn main() -> ExitCode {
    // In a service: `PrometheusBuilder::new().install()` also serves `/metrics` over HTTP.
    // Prometheus' naming: `dlock.acquire.duration` is `dlock_acquire_duration_seconds`.
    let recorder = PrometheusBuilder::new().with_recommended_naming(true);
    let prometheus = match recorder.install_recorder() {
        Ok(handle) => handle,
        Err(error) => {
            eprintln!("observability failed: cannot install the Prometheus recorder: {error}");
            return ExitCode::FAILURE;
        }
    };
    match run(&prometheus).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => dlock_examples::report_failure("observability", &error),
    }
}

async fn run(prometheus: &PrometheusHandle) -> Result<(), Error> {
    let config = DlockConfig::from_env()?;
    let locker = Locker::connect(&config).await?;
    println!("dlock observability on `{}`\n", config.backend);

    // Four workers settle two orders, five times each: labelled `key="order:<id>"`.
    let workers: Vec<_> = (0..4_u64)
        .map(|worker| {
            let locker = locker.clone();
            tokio::spawn(async move {
                for _ in 0..5 {
                    let key = format!("order:{}", worker % 2);
                    let guard = locker.lock(&key).key_template("order:<id>").await?;
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    guard.release().await?;
                }
                Ok::<_, Error>(())
            })
        })
        .collect();
    for worker in workers {
        worker.await.expect("worker panicked")?;
    }

    // The nightly report is held; another instance tries and is busy, a third waits.
    let report = locker
        .lock("report:nightly")
        .key_template("report:<name>")
        .ttl(Duration::from_secs(3))
        .await?;
    let busy = locker
        .lock("report:nightly")
        .key_template("report:<name>")
        .reentrant(false)
        .wait(Duration::from_millis(50))
        .await;
    println!(
        "a second instance's try: {}",
        busy.err().map_or_else(String::new, |e| e.to_string())
    );
    let waiter = tokio::spawn({
        let locker = locker.clone();
        async move {
            locker
                .lock("report:nightly")
                .key_template("report:<name>")
                .wait(Duration::from_secs(10))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(50)).await; // let the waiter queue, for the view

    let info = locker.inspect("report:nightly").await?;
    println!("\ninspect(\"report:nightly\"): a view for operators, never for check-then-act");
    for holder in &info.holders {
        println!(
            "  holder  {}  {:?}  fencing token {:?}  expires in {:?}",
            holder.owner, holder.mode, holder.fencing_token, holder.expires_in
        );
    }
    match &info.waiters {
        Some(waiters) => {
            for waiter in waiters {
                println!(
                    "  waiter  {}  {:?}",
                    waiter.owner.as_deref().unwrap_or("?"),
                    waiter.mode
                );
            }
        }
        None => println!("  (this backend's waiters queue in the clients)"),
    }

    // An operator breaks the stuck report: its holder learns at its next renewal.
    locker.force_release("report:nightly").await?;
    let reason = report.lost().await;
    println!("\nforce_release: the holder's guard is lost ({reason})");
    assert_eq!(reason, LostReason::NotOwner);
    drop(report);
    let next = waiter.await.expect("waiter panicked")?;
    next.release().await?;

    println!("\nthe Prometheus scrape (dlock's series, without the quantiles):");
    for line in prometheus.render().lines() {
        if line.contains("dlock_") && !line.starts_with('#') && !line.contains("quantile=") {
            println!("  {line}");
        }
    }
    locker.shutdown().await?;
    println!("\nall shown");
    Ok(())
}
