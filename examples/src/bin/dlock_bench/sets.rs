//! Lock sets: [`Locker::lock_all`](dlock_core::Locker::lock_all) of four keys and its release,
//! next to the same four keys locked one by one in their sorted order and released together —
//! what `lock_all` does where the backend cannot take a set in one step. On a single Redis
//! server the note lists the commands the server ran for one set's acquire (its command
//! statistics; a script's own commands count too: one `EVALSHA` is one round trip), and
//! those of its release; on PostgreSQL the statements it ran (`pg_stat_statements`; dlock
//! sends a set's try and its kept-record check pipelined, in one round trip).

use std::time::{Duration, Instant};

use crate::scenarios::{MAX_PAIRS, Paired, Settings, median, paired, timed_tasks};
use crate::stats::{Samples, median_run};
use crate::target::Target;

const TTL: Duration = Duration::from_secs(30);
const KEYS: usize = 4;

fn keys(rep: usize, i: usize) -> Vec<String> {
    (0..KEYS)
        .map(|k| format!("bench:set:{rep}:{i}:{k}"))
        .collect()
}

/// One task, `ops` cycles of `$acquire` (its value named `$held`) then `$release`, on one
/// runtime worker as [`timed_tasks!`] runs them; only the acquires are timed, so the run's
/// throughput is that of its acquires (`ops` over their summed time).
macro_rules! timed_acquires {
    ($ops:expr, |$i:ident| $acquire:expr, |$held:ident| $release:expr) => {{
        let ops = $ops;
        tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(ops);
            for $i in 0..ops {
                let at = Instant::now();
                let $held = $acquire;
                latencies.push(at.elapsed());
                $release;
            }
            Samples {
                elapsed: latencies.iter().sum(),
                latencies,
                ..Samples::default()
            }
        })
        .await
        .expect("task")
    }};
}

/// The acquire alone: one task, N sets of four fresh keys, `lock_all` timed (its release not),
/// against four `lock`s in order timed (their releases at once, not timed) — the step the
/// backend's one-step path replaces.
pub(crate) async fn lock_all_acquire(target: &Target, s: &Settings) -> crate::stats::Row {
    let locker = target.locker(TTL).await;
    let ops = s.uncontended_ops;
    let runs = paired!(
        s,
        |rep| {
            let locker = locker.clone();
            timed_acquires!(
                ops,
                |i| locker.lock_all(keys(rep, i)).await.expect("lock_all"),
                |set| set.release().await.expect("release")
            )
        },
        {
            let locker = locker.clone();
            timed_acquires!(
                ops,
                |i| {
                    let mut guards = Vec::with_capacity(KEYS);
                    for key in keys(usize::MAX - 1 - rep, i) {
                        guards.push(locker.lock(&key).await.expect("lock"));
                    }
                    guards
                },
                |guards| release_together(guards).await
            )
        },
        { None }
    );
    runs.row(
        target.name(),
        "lock_all of 4, acquire",
        "vs 4 locks taken in order; only the acquires timed".to_owned(),
    )
}

/// Releases `guards` side by side, as the ordered path does.
async fn release_together(guards: Vec<dlock_core::LockGuard>) {
    let released = guards.into_iter().map(dlock_core::LockGuard::release);
    for outcome in futures_util::future::join_all(released).await {
        outcome.expect("release");
    }
}

/// One task, N sets of four fresh keys: `lock_all` + release, against four `lock`s in order
/// + their releases at once.
pub(crate) async fn lock_all(target: &Target, s: &Settings) -> crate::stats::Row {
    let locker = target.locker(TTL).await;
    let ops = s.uncontended_ops;
    // A first set caches the scripts on the server; the second one's commands are counted.
    let mut commands = String::new();
    for _ in 0..2 {
        let before = target.server_commands().await;
        let set = locker
            .lock_all(keys(usize::MAX, 0))
            .await
            .expect("lock_all");
        let taken = target.server_commands().await;
        set.release().await.expect("release");
        let released = target.server_commands().await;
        if let (Some(before), Some(taken), Some(released)) = (before, taken, released) {
            commands = format!(
                "; one set's acquire ran {} on the server, its release {}",
                ran(&before, &taken),
                ran(&taken, &released)
            );
        }
    }
    let runs = paired!(
        s,
        |rep| {
            timed_tasks!(1, ops, |_t| locker.clone(), |locker, _t, i| {
                let set = locker.lock_all(keys(rep, i)).await.expect("lock_all");
                set.release().await.expect("release");
            })
        },
        {
            timed_tasks!(1, ops, |_t| locker.clone(), |locker, _t, i| {
                let mut guards = Vec::with_capacity(KEYS);
                for key in keys(usize::MAX - 1 - rep, i) {
                    guards.push(locker.lock(&key).await.expect("lock"));
                }
                release_together(guards).await;
            })
        },
        { None }
    );
    runs.row(
        target.name(),
        "lock_all of 4",
        format!("vs 4 locks taken in order, released together{commands}"),
    )
}

/// The commands run between two counts, as `name ×n`.
fn ran(
    before: &std::collections::BTreeMap<String, u64>,
    after: &std::collections::BTreeMap<String, u64>,
) -> String {
    let ran: Vec<String> = after
        .iter()
        .filter_map(|(name, calls)| {
            let more = calls - before.get(name).copied().unwrap_or(0);
            (more > 0).then(|| format!("{name} ×{more}"))
        })
        .collect();
    ran.join(", ")
}
