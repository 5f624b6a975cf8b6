//! Many locks held at once (`--scenario held`): one Locker takes N locks (1,000, 10,000 and
//! 100,000 by default; `--held N,N,...`) with a 3 s ttl, 32 acquires in flight, and holds
//! them for three ttls while its watchdog keeps them. Per size: the wall time and client CPU
//! per acquire, the client CPU per held lock per second of keeping them, the watchdog's
//! renewal calls per ttl (one call is one batch; on Redis the note adds the scripts the server
//! ran), client memory per lock (and the server's, on Redis), the leases lost and the acquires
//! refused. Work that grows faster than N shows as a per-lock figure growing from row to row.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock_core::conformance::CountingBackend;
use dlock_core::{DlockConfig, LockGuard, Locker};
use futures_util::StreamExt;

use crate::stats::{Row, Samples};
use crate::target::Target;

const TTL: Duration = Duration::from_secs(3);
const KEPT_FOR: u32 = 3; // ttls
const IN_FLIGHT: usize = 32;

/// The row's name for `locks`.
fn scenario(locks: usize) -> &'static str {
    match locks {
        1_000 => "held 1k",
        10_000 => "held 10k",
        100_000 => "held 100k",
        _ => "held",
    }
}

/// `locks` locks taken by one Locker and held for three ttls.
pub(crate) async fn held(target: &Target, locks: usize) -> Row {
    let connected = target.locker(TTL).await;
    let counting = Arc::new(CountingBackend::new(Arc::clone(connected.backend())));
    let config = DlockConfig::default().with_ttl(TTL);
    let locker = Locker::with_config(counting.clone(), &config).expect("config");
    let (rss_before, server_before) = (resident_bytes(), target.server_memory().await);
    let (cpu_before, started) = (cpu_time(), Instant::now());
    let mut takers = Vec::with_capacity(IN_FLIGHT);
    for first in 0..IN_FLIGHT {
        let locker = locker.clone();
        takers.push(tokio::spawn(async move {
            let (mut guards, mut latencies, mut refused) = (Vec::new(), Vec::new(), Vec::new());
            for i in (first..locks).step_by(IN_FLIGHT) {
                let at = Instant::now();
                match locker.lock(&format!("bench:held:{locks}:{i}")).await {
                    Ok(guard) => guards.push(guard),
                    Err(error) => refused.push(error.to_string()),
                }
                latencies.push(at.elapsed());
            }
            (guards, latencies, refused)
        }));
    }
    let (mut guards, mut run, mut refused): (Vec<LockGuard>, Samples, Vec<String>) =
        (Vec::with_capacity(locks), Samples::default(), Vec::new());
    for taker in takers {
        let (taken, latencies, errors) = taker.await.expect("taker");
        guards.extend(taken);
        run.latencies.extend(latencies);
        refused.extend(errors);
    }
    run.elapsed = started.elapsed();
    let acquire_cpu = cpu_time().saturating_sub(cpu_before);
    let client_bytes = resident_bytes().saturating_sub(rss_before);
    let server_bytes = match (server_before, target.server_memory().await) {
        (Some(before), Some(after)) => Some(after.saturating_sub(before)),
        _ => None,
    };
    let (renewals_before, scripts_before) = (counting.renewals(), target.server_scripts().await);
    let cpu_before = cpu_time();
    tokio::time::sleep(TTL * KEPT_FOR).await;
    let keep_cpu = cpu_time().saturating_sub(cpu_before);
    let renewals = counting.renewals() - renewals_before;
    let scripts = match (scripts_before, target.server_scripts().await) {
        (Some(before), Some(after)) => Some(after.saturating_sub(before)),
        _ => None,
    };
    let lost = guards.iter().filter(|guard| !guard.is_held()).count();
    let held = guards.len();
    futures_util::stream::iter(guards)
        .for_each_concurrent(IN_FLIGHT, |guard| async move {
            let _ = guard.release().await;
        })
        .await;
    drop(connected);
    let per_lock = |total: f64| total / held.max(1) as f64;
    let micros = |d: Duration| d.as_secs_f64() * 1e6;
    let mut note = format!(
        "{held}/{locks} taken, {lost} lost after {KEPT_FOR} ttls of {TTL:?}; acquire {:.0} µs of \
         wall time and {:.1} µs of client CPU per lock; keeping them {:.2} µs of client CPU \
         per lock per second, {:.1} renewal calls per ttl; client memory {:.0} B per lock",
        per_lock(micros(run.elapsed)),
        per_lock(micros(acquire_cpu)),
        per_lock(micros(keep_cpu)) / (TTL * KEPT_FOR).as_secs_f64(),
        renewals as f64 / f64::from(KEPT_FOR),
        per_lock(client_bytes as f64),
    );
    if let Some(scripts) = scripts {
        note += &format!(
            ", {:.1} renewal scripts per ttl",
            scripts as f64 / f64::from(KEPT_FOR)
        );
    }
    if let Some(bytes) = server_bytes {
        note += &format!(", server memory {:.0} B per lock", per_lock(bytes as f64));
    }
    if let Some(first) = refused.first() {
        note += &format!("; {} refused, the first: {first}", refused.len());
    }
    Row::new(target.name(), scenario(locks), &run, f64::NAN, note)
}

/// This process's CPU time so far (user + system, all threads), from `/proc/self/stat`, in
/// the kernel's clock ticks of 10 ms (`USER_HZ` is 100 on Linux).
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name (which may hold spaces) start after its `)`.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    // utime and stime are the 14th and 15th fields, the 12th and 13th after the name.
    let ticks = |at: usize| fields.get(at).and_then(|f| f.parse::<u64>().ok());
    match (ticks(11), ticks(12)) {
        (Some(user), Some(system)) => Duration::from_millis((user + system) * 10),
        _ => Duration::ZERO,
    }
}

/// This process's resident memory, from `/proc/self/status`.
fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map_or(0, |kb| kb * 1024)
}
