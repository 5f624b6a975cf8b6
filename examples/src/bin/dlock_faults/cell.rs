//! One run: a shape's workers contend on one key for a while, faults are injected at random
//! times, and the checkers read the resource's history.

use std::process::Stdio;
use std::time::{Duration, Instant};

use dlock_core::harness::{ProxyMode, TcpProxy};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::process::{Child, Command};

use crate::checks::{self, Findings};
use crate::faults::{Fault, Plan};
use crate::resource::{FaultWindow, Resource};
use crate::shapes::Shape;
use crate::worker::WorkerArgs;
use crate::{LIVENESS_BOUND, TTL};

/// What one run does.
pub(crate) struct CellPlan<'a> {
    pub(crate) shape: &'a Shape,
    /// The faults to draw from, one at a time.
    pub(crate) faults: Vec<Fault>,
    pub(crate) workers: usize,
    pub(crate) duration: Duration,
    pub(crate) key: String,
    pub(crate) seed: u64,
}

/// What one run found, and which faults it injected.
pub(crate) struct CellOutcome {
    pub(crate) findings: Findings,
    pub(crate) injected: Vec<Fault>,
}

/// Runs `plan` to the end.
pub(crate) async fn run(plan: &CellPlan<'_>) -> Result<CellOutcome, String> {
    let resource = Resource::start()
        .await
        .map_err(|e| format!("resource: {e}"))?;
    let mut workers = Vec::with_capacity(plan.workers);
    for id in 0..plan.workers {
        workers.push(Worker::start(plan, &resource, id).await?);
    }
    let mut rng = StdRng::seed_from_u64(plan.seed);
    let started = Instant::now();
    let mut injected = Vec::new();
    while started.elapsed() < plan.duration {
        tokio::time::sleep(Duration::from_secs_f64(rng.random_range(1.0..3.0))).await;
        let fault = plan.faults[rng.random_range(0..plan.faults.len())];
        let holder = wait_for_holder(&resource, &mut rng, plan.workers).await;
        let start = Instant::now();
        let drawn = fault.draw(&mut rng);
        eprintln!(
            "  {:>5.1} s  {} (holder: worker {holder}) {drawn:?}",
            start.duration_since(started).as_secs_f64(),
            fault.name()
        );
        inject(plan, drawn, &mut workers, holder, &resource, &mut rng).await?;
        resource.record_fault(FaultWindow {
            start,
            healed: Instant::now(),
        });
        injected.push(fault);
    }
    // Time to recover from the last fault, so that a stall after it shows.
    tokio::time::sleep(TTL * 2).await;
    let finished = Instant::now();
    for worker in &mut workers {
        worker.stop().await;
    }
    let history = resource.finish();
    if !history.errors.is_empty() {
        eprintln!("  errors: {:?}", history.errors);
    }
    Ok(CellOutcome {
        findings: checks::check(&history, started, finished, LIVENESS_BOUND),
        injected,
    })
}

/// The worker in the critical section, waiting up to a second for one; else one at random.
async fn wait_for_holder(resource: &Resource, rng: &mut StdRng, workers: usize) -> usize {
    let give_up = Instant::now() + Duration::from_secs(1);
    while Instant::now() < give_up {
        if let Some(holder) = resource.holder() {
            return holder;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    rng.random_range(0..workers)
}

async fn inject(
    plan: &CellPlan<'_>,
    drawn: Plan,
    workers: &mut [Worker],
    holder: usize,
    resource: &Resource,
    rng: &mut StdRng,
) -> Result<(), String> {
    let fault_server = async |rng: &mut StdRng| {
        plan.shape
            .fault_target(&plan.key, rng)
            .await
            .map_err(|e| format!("no server to fault: {e}"))
    };
    match drawn {
        Plan::PauseHolder(length) => {
            workers[holder].signal("STOP")?;
            tokio::time::sleep(length).await;
            workers[holder].signal("CONT")?;
        }
        Plan::PauseServer(length) => {
            let node = fault_server(rng).await?;
            node.pause().map_err(|e| e.to_string())?;
            tokio::time::sleep(length).await;
            node.resume().map_err(|e| e.to_string())?;
        }
        Plan::KillHolder => {
            workers[holder].stop().await;
            workers[holder] = Worker::start(plan, resource, holder).await?;
        }
        Plan::KillServer(length) => {
            let node = fault_server(rng).await?;
            node.kill().await.map_err(|e| e.to_string())?;
            tokio::time::sleep(length).await;
            node.restart().await.map_err(|e| e.to_string())?;
            plan.shape.settle().await.map_err(|e| e.to_string())?;
        }
        Plan::Proxy(mode, length) => {
            workers[holder].set_proxies(mode);
            tokio::time::sleep(length).await;
            workers[holder].set_proxies(ProxyMode::Pass);
        }
    }
    Ok(())
}

/// A worker process and the proxies its connections go through.
struct Worker {
    child: Child,
    proxies: Vec<TcpProxy>,
}

impl Worker {
    async fn start(plan: &CellPlan<'_>, resource: &Resource, id: usize) -> Result<Self, String> {
        let mut proxies = Vec::new();
        if plan.faults.iter().any(|fault| fault.needs_proxies()) {
            for address in plan.shape.addresses() {
                proxies.push(TcpProxy::start(address).await.map_err(|e| e.to_string())?);
            }
        }
        let via: Vec<_> = proxies.iter().map(TcpProxy::address).collect();
        let args = WorkerArgs {
            id,
            url: plan.shape.url_via(&via),
            key: plan.key.clone(),
            resource: resource.address(),
            seed: plan.seed.wrapping_add(id as u64 + 1),
        };
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let child = Command::new(exe)
            .args(args.to_args())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("start a worker: {e}"))?;
        Ok(Self { child, proxies })
    }

    fn signal(&self, signal: &str) -> Result<(), String> {
        let pid = self.child.id().ok_or("the worker is gone")?;
        let status = std::process::Command::new("kill")
            .args(["-s", signal, &pid.to_string()])
            .status()
            .map_err(|e| e.to_string())?;
        status
            .success()
            .then_some(())
            .ok_or_else(|| format!("kill -s {signal} {pid}: {status}"))
    }

    fn set_proxies(&self, mode: ProxyMode) {
        for proxy in &self.proxies {
            proxy.set(mode);
        }
    }

    /// Kills the worker (`SIGKILL`) and reaps it.
    async fn stop(&mut self) {
        let _ = self.child.kill().await;
    }
}
