//! One run: a shape's workers contend on one key for a while, faults are injected at random
//! times, and the checkers read the resource's history.

use std::process::Stdio;
use std::time::{Duration, Instant};

use dlock_harness::{ProxyMode, TcpProxy};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::process::{Child, Command};

use crate::checks::{self, Findings};
use crate::faults::{Fault, Plan};
use crate::resource::{FaultWindow, Resource};
use crate::shapes::{Node, Shape};
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
    /// The election workload: workers campaign for the key rather than lock it.
    pub(crate) election: bool,
}

/// Runs `plan` to the end; an error only if the run cannot start.
pub(crate) async fn run(plan: &CellPlan<'_>) -> Result<Findings, String> {
    let resource = Resource::start()
        .await
        .map_err(|e| format!("resource: {e}"))?;
    let mut workers = Vec::with_capacity(plan.workers);
    for id in 0..plan.workers {
        workers.push(Worker::start(plan, &resource, id, 0).await?);
    }
    let mut rng = StdRng::seed_from_u64(plan.seed);
    let started = Instant::now();
    while started.elapsed() < plan.duration {
        tokio::time::sleep(Duration::from_secs_f64(rng.random_range(1.0..3.0))).await;
        let fault = plan.faults[rng.random_range(0..plan.faults.len())];
        let holder = wait_for_holder(&resource, &mut rng, plan.workers).await;
        let drawn = fault.draw(&mut rng);
        let start = Instant::now();
        eprintln!(
            "  {:>5.1} s  {} (holder: worker {holder}) {drawn:?}",
            start.duration_since(started).as_secs_f64(),
            fault.name()
        );
        match inject(plan, drawn, &mut workers, holder, &resource, &mut rng).await {
            Ok(()) => resource.record_fault(FaultWindow {
                fault,
                start,
                healed: Instant::now(),
            }),
            // Not counted as injected; the next fault comes as planned.
            Err(error) => eprintln!("         not injected: {error}"),
        }
    }
    // Long enough after the last fault for a stall to show.
    tokio::time::sleep(LIVENESS_BOUND + TTL).await;
    let finished = Instant::now();
    for worker in &mut workers {
        worker.stop().await;
    }
    let history = resource.finish();
    if !history.errors.is_empty() {
        eprintln!("  errors: {:?}", history.errors);
    }
    Ok(checks::check(&history, started, finished, LIVENESS_BOUND))
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

/// Does one fault and heals it. Healing is attempted whatever happened in between, so a
/// failed step never leaves a process frozen or a proxy cut.
async fn inject(
    plan: &CellPlan<'_>,
    drawn: Plan,
    workers: &mut [Worker],
    holder: usize,
    resource: &Resource,
    rng: &mut StdRng,
) -> Result<(), String> {
    match drawn {
        Plan::PauseHolder(length) => {
            workers[holder].signal("STOP").await?;
            tokio::time::sleep(length).await;
            workers[holder].signal("CONT").await?;
        }
        Plan::KillHolder => {
            workers[holder].stop().await;
            resource.forget_holder(holder);
            let generation = workers[holder].generation + 1;
            workers[holder] = Worker::start(plan, resource, holder, generation).await?;
        }
        Plan::KillServer(down) => {
            let node = server_to_fault(plan, rng).await?;
            let killed = node.kill().await;
            tokio::time::sleep(down).await;
            let restarted = node.restart().await;
            killed.and(restarted).map_err(|e| e.to_string())?;
            plan.shape.settle().await.map_err(|e| e.to_string())?;
        }
        Plan::PauseServer(length) => {
            let node = server_to_fault(plan, rng).await?;
            let paused = node.pause();
            tokio::time::sleep(length).await;
            paused.and(node.resume()).map_err(|e| e.to_string())?;
        }
        Plan::Proxy(mode, length) => {
            workers[holder].set_proxies(mode);
            tokio::time::sleep(length).await;
            workers[holder].set_proxies(ProxyMode::Pass);
        }
    }
    Ok(())
}

/// The server a server fault hits this time (see [`Shape::fault_target`]).
async fn server_to_fault<'a>(plan: &'a CellPlan<'_>, rng: &mut StdRng) -> Result<Node<'a>, String> {
    plan.shape
        .fault_target(&plan.key, rng)
        .await
        .map_err(|e| e.to_string())
}

/// A worker process and the proxies its connections go through.
struct Worker {
    child: Child,
    proxies: Vec<TcpProxy>,
    /// How many workers held this id before (each numbers its grants anew).
    generation: u64,
}

impl Worker {
    /// Starts worker `id` of `generation`, behind proxies of its own if the plan cuts or
    /// delays connections.
    async fn start(
        plan: &CellPlan<'_>,
        resource: &Resource,
        id: usize,
        generation: u64,
    ) -> Result<Self, String> {
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
            seed: plan.seed.wrapping_add(generation << 16 | id as u64),
            first_seq: generation << 32,
            election: plan.election,
        };
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let child = Command::new(exe)
            .args(args.to_args())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("start a worker: {e}"))?;
        Ok(Self {
            child,
            proxies,
            generation,
        })
    }

    /// Sends `signal` (`STOP`, `CONT`) to the worker with kill(1).
    async fn signal(&self, signal: &str) -> Result<(), String> {
        let pid = self.child.id().ok_or("the worker is gone")?;
        let status = Command::new("kill")
            .args(["-s", signal, &pid.to_string()])
            .status()
            .await
            .map_err(|e| e.to_string())?;
        status
            .success()
            .then_some(())
            .ok_or_else(|| format!("kill -s {signal} {pid}: {status}"))
    }

    /// Puts every proxy of this worker in `mode`.
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
