//! One renewal task per Locker.
//!
//! It keeps every registered lease alive by renewing it every `cadence` (ttl/3 by default),
//! batching all leases that are due together into as few backend calls as the backend allows,
//! and marks a lease lost when a renewal answers "not the owner", when the backend pushes a
//! loss, or when the lease's local deadline passes without a successful renewal. Renewals run
//! in their own tasks so a hung server never delays the deadline checks of other leases.

use std::collections::HashMap;
use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, broadcast};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::LostReason;
use crate::backend::LockBackend;
use crate::backend::background::Background;
use crate::error::within;
use crate::lease::{Lease, LostLease, OwnerId, RenewOutcome, drift_margin};
use crate::lease_watch::LeaseWatch;

/// The watchdog of one Locker.
#[derive(Debug)]
pub(crate) struct Watchdog {
    shared: Arc<Shared>,
    backend: Arc<dyn LockBackend>,
    operation_timeout: Duration,
    /// The task, once started: a runtime that ends takes it along (it is then finished), and
    /// the next acquire starts another.
    task: Mutex<Option<JoinHandle<()>>>,
    /// Subscribed when the Locker is built, so no loss pushed after a grant is missed.
    pushed_losses: Mutex<Option<broadcast::Receiver<LostLease>>>,
    /// Work spawned on the Locker's behalf (background releases), which a shutdown awaits,
    /// on the runtime of the latest acquire when spawned from outside any runtime (a guard
    /// dropped in synchronous code).
    background: Background,
}

#[derive(Debug, Default)]
struct Shared {
    entries: Mutex<Table>,
    changed: Notify,
    shutdown: CancellationToken,
}

#[derive(Debug)]
struct Entry {
    lease: Lease,
    watch: Arc<LeaseWatch>,
    /// `None`: never renewed (`.watchdog(false)`).
    cadence: Option<Duration>,
    next_renewal: Instant,
    renewing: bool,
    /// When the lock's `max_hold` ends, and the cap itself.
    hold_until: Option<(Instant, Duration)>,
}

/// The watched leases by owner, and the task's schedule, under one lock.
#[derive(Debug, Default)]
struct Table {
    leases: LeasesByOwner,
    /// When the task will look again on its own (`None`: never, nothing to watch). A new
    /// lease wakes the task only if it needs attention earlier, so acquiring costs no wake-up.
    scheduled: Option<Instant>,
}

/// foldhash: randomly seeded per map, and much cheaper than SipHash on an owner id, which
/// every lock and unlock hashes.
type LeasesByOwner = HashMap<OwnerId, Entry, foldhash::fast::RandomState>;

impl Deref for Table {
    type Target = LeasesByOwner;

    fn deref(&self) -> &Self::Target {
        &self.leases
    }
}

impl DerefMut for Table {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.leases
    }
}

impl Shared {
    fn entries(&self) -> MutexGuard<'_, Table> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What the watchdog task needs besides the shared state.
#[derive(Debug, Clone)]
struct Settings {
    backend: Arc<dyn LockBackend>,
    operation_timeout: Duration,
    max_batch: usize,
    /// The backend keeps leases alive by itself (a session): the core must release a lease
    /// whose local deadline passed, or it would outlive its ttl.
    release_expired: bool,
}

impl Watchdog {
    pub(crate) fn new(backend: Arc<dyn LockBackend>, operation_timeout: Duration) -> Self {
        let pushed_losses = backend.lost_leases();
        Self {
            shared: Arc::default(),
            backend,
            operation_timeout,
            task: Mutex::new(None),
            pushed_losses: Mutex::new(pushed_losses),
            background: Background::new(),
        }
    }

    /// Starts watching `lease`: renewing it every `cadence` (if `Some`), enforcing its
    /// local deadline, and ending it after `max_hold` (if `Some`: marked lost and released).
    /// Called from within a tokio runtime (an acquire).
    pub(crate) fn watch(
        &self,
        lease: Lease,
        watch: Arc<LeaseWatch>,
        cadence: Option<Duration>,
        max_hold: Option<Duration>,
    ) {
        if self.shared.shutdown.is_cancelled() {
            // Granted while the Locker shut down: lost at once (the guard's drop releases it).
            watch.mark_lost(LostReason::Shutdown);
            return;
        }
        let next_renewal = lease.valid_from + cadence.unwrap_or(Duration::ZERO);
        let hold_until = max_hold.map(|cap| (lease.valid_from + cap, cap));
        let mut needs_attention_at = match cadence {
            Some(_) => next_renewal.min(watch.deadline()),
            None => watch.deadline(),
        };
        if let Some((until, _)) = hold_until {
            needs_attention_at = needs_attention_at.min(until);
        }
        let started = self.ensure_running();
        let mut entries = self.shared.entries();
        entries.insert(
            lease.owner.clone(),
            Entry {
                lease,
                watch,
                cadence,
                next_renewal,
                renewing: false,
                hold_until,
            },
        );
        let scheduled = entries.scheduled;
        drop(entries);
        if started || scheduled.is_none_or(|at| needs_attention_at < at) {
            self.shared.changed.notify_one();
        }
    }

    /// Stops watching the lease of `owner` (it was released or dropped). The task is not
    /// woken: at its next scheduled look it simply no longer finds the lease.
    pub(crate) fn forget(&self, owner: &OwnerId) {
        self.shared.entries().remove(owner);
    }

    /// How many leases are being watched.
    pub(crate) fn watched(&self) -> usize {
        self.shared.entries().len()
    }

    /// Runs `work` in the background, on the current runtime or the one of the latest
    /// acquire; `false` if there is none.
    pub(crate) fn spawn(&self, work: impl Future<Output = ()> + Send + 'static) -> bool {
        self.background.spawn(work)
    }

    /// Waits, at most `bound`, for the work [`spawn`](Self::spawn) started to finish
    /// (releases of dropped guards, of grants that came too late); `false` if some is still
    /// running.
    pub(crate) async fn settle(&self, bound: Duration) -> bool {
        self.background.settle(bound).await
    }

    /// (Re)starts the task if it is not running: a runtime that ended (e.g. one test's) takes
    /// its tasks with it, and the next acquire in another runtime must not go unwatched.
    /// Returns whether it (re)started the task.
    fn ensure_running(&self) -> bool {
        let mut task = self.task.lock().unwrap_or_else(PoisonError::into_inner);
        if task.as_ref().is_some_and(|task| !task.is_finished()) {
            return false;
        }
        let Some(runtime) = self.background.runtime() else {
            return false;
        };
        let pushed_losses = self
            .pushed_losses
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            // A restart after the first task died: losses pushed meanwhile are found by the
            // next renewal.
            .or_else(|| self.backend.lost_leases());
        let capabilities = self.backend.capabilities();
        let settings = Settings {
            backend: Arc::clone(&self.backend),
            operation_timeout: self.operation_timeout,
            max_batch: capabilities.max_renew_batch.max(1),
            release_expired: capabilities.self_renewing,
        };
        let shared = Arc::clone(&self.shared);
        *task = Some(runtime.spawn(run(shared, settings, pushed_losses)));
        true
    }

    pub(crate) fn shutdown(&self) {
        self.shared.shutdown.cancel();
    }

    /// Stops the task and takes every watched lease, marked lost with `reason`, for the
    /// caller to release; leases watched from now on are lost at once.
    pub(crate) fn shut_down_and_drain(&self, reason: &LostReason) -> Vec<Lease> {
        self.shutdown();
        let drained: Vec<Entry> = self
            .shared
            .entries()
            .drain()
            .map(|(_, entry)| entry)
            .collect();
        drained
            .into_iter()
            .map(|entry| {
                entry.watch.mark_lost(reason.clone());
                entry.lease
            })
            .collect()
    }
}

async fn run(
    shared: Arc<Shared>,
    settings: Settings,
    mut pushed_losses: Option<broadcast::Receiver<LostLease>>,
) {
    loop {
        let sleep = tokio::time::sleep_until(tick(&shared, &settings).into());
        let pushed = async {
            match pushed_losses.as_mut() {
                Some(rx) => rx.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = shared.shutdown.cancelled() => return,
            () = shared.changed.notified() => {}
            () = sleep => {}
            loss = pushed => match loss {
                Ok(loss) => apply_pushed_loss(&shared, &loss),
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::warn!(missed, "dlock: watchdog missed backend loss reports; the next renewals will find them");
                }
                Err(broadcast::error::RecvError::Closed) => pushed_losses = None,
            },
        }
    }
}

fn apply_pushed_loss(shared: &Shared, loss: &LostLease) {
    if let Some(entry) = shared.entries().remove(&loss.owner) {
        entry.watch.mark_lost(loss.reason.clone());
    }
}

/// How often a watchdog with no leases looks anyway; see [`tick`].
const IDLE_LOOK: Duration = Duration::from_secs(1);

/// Expires overdue leases, starts due renewals, and returns when to look again.
fn tick(shared: &Arc<Shared>, settings: &Settings) -> Instant {
    let now = Instant::now();
    let mut due = Vec::new();
    let mut expired = Vec::new();
    let mut capped = Vec::new();
    let mut next_wake: Option<Instant> = None;
    let mut entries = shared.entries();
    entries.retain(|_, entry| {
        if let Some((until, cap)) = entry.hold_until {
            if until <= now {
                entry.watch.mark_lost(LostReason::MaxHold(cap));
                capped.push(entry.lease.clone());
                return false;
            }
            next_wake = earliest(next_wake, until);
        }
        entry.watch.expire_if_due();
        if !entry.watch.is_held() {
            expired.push((entry.lease.clone(), entry.watch.deadline()));
            return false;
        }
        if let Some(cadence) = entry.cadence {
            // Renew a little early rather than alone: leases taken within a fifth of a
            // cadence of each other share one batch.
            if !entry.renewing && entry.next_renewal <= now + cadence / 5 {
                entry.renewing = true;
                due.push(entry.lease.clone());
            } else if !entry.renewing {
                next_wake = earliest(next_wake, entry.next_renewal);
            }
        }
        next_wake = earliest(next_wake, entry.watch.deadline());
        true
    });
    // With nothing to watch, look again in a while anyway: a lease taken meanwhile that
    // needs attention later than that does not have to wake this task (one wake-up saved
    // per lock of a Locker that holds one lock at a time).
    let next_wake = next_wake.unwrap_or(now + IDLE_LOOK);
    // Published under the entries lock, so a lease inserted concurrently either was seen
    // above or sees this schedule (and wakes the task if it needs attention sooner).
    entries.scheduled = Some(next_wake);
    drop(entries);
    for batch in due.chunks(settings.max_batch) {
        tokio::spawn(renew_batch(
            Arc::clone(shared),
            settings.clone(),
            batch.to_vec(),
        ));
    }
    if settings.release_expired {
        for (lease, deadline) in expired {
            // Once its full ttl has run: the local deadline is a drift margin early, and the
            // lock must not free before the ttl promised to the holder's peers.
            let not_before = deadline + drift_margin(lease.ttl);
            tokio::spawn(release_unwatched(
                settings.clone(),
                lease,
                Some(not_before),
                "past its local deadline",
            ));
        }
    }
    for lease in capped {
        tokio::spawn(release_unwatched(
            settings.clone(),
            lease,
            None,
            "held for its max_hold",
        ));
    }
    next_wake
}

/// Releases a lease the watchdog stopped watching, at `not_before` if given, within the
/// operation timeout: `why` says which (past its local deadline on a self-renewing backend,
/// whose session would otherwise keep it; or held for its `max_hold`, whose work may never
/// end).
async fn release_unwatched(
    settings: Settings,
    lease: Lease,
    not_before: Option<Instant>,
    why: &'static str,
) {
    if let Some(at) = not_before {
        tokio::time::sleep_until(at.into()).await;
    }
    let outcome = tokio::time::timeout(
        settings.operation_timeout,
        settings.backend.as_ref().release(&lease),
    )
    .await;
    tracing::debug!(key = %lease.key, ?outcome, why, "dlock: watchdog released a lease");
}

fn earliest(current: Option<Instant>, candidate: Instant) -> Option<Instant> {
    Some(current.map_or(candidate, |c| c.min(candidate)))
}

async fn renew_batch(shared: Arc<Shared>, settings: Settings, batch: Vec<Lease>) {
    let span = tracing::debug_span!(
        "dlock.renew",
        backend = settings.backend.capabilities().name,
        batch = batch.len(),
        renewed = tracing::field::Empty,
        lost = tracing::field::Empty,
        failed = tracing::field::Empty,
    );
    let sent_at = Instant::now();
    let timeout = settings.operation_timeout;
    let name = settings.backend.capabilities().name;
    let outcomes = within(
        name,
        "renew",
        timeout,
        settings.backend.as_ref().renew(&batch),
    )
    .instrument(span.clone())
    .await
    .and_then(|outcomes| outcomes);
    let _in_span = span.enter();
    let (mut renewed, mut lost, mut retried) = (0_usize, 0_usize, 0_usize);
    let mut entries = shared.entries();
    for (i, lease) in batch.iter().enumerate() {
        let Some(entry) = entries.get_mut(&lease.owner) else {
            continue; // released meanwhile
        };
        entry.renewing = false;
        let cadence = entry.cadence.unwrap_or(Duration::ZERO);
        let outcome = match &outcomes {
            Ok(list) => list.get(i),
            Err(_) => None,
        };
        match outcome {
            Some(RenewOutcome::Renewed { valid_from }) => {
                entry.watch.renewed((*valid_from).min(Instant::now()));
                entry.next_renewal = sent_at + cadence;
                renewed += 1;
                entry.watch.meter().renewal("renewed");
                tracing::trace!(key = %entry.watch.user_key(), "dlock: lease renewed");
            }
            Some(RenewOutcome::NotOwner) => {
                lost += 1;
                entry.watch.meter().renewal("lost");
                entry.watch.mark_lost(LostReason::NotOwner);
                entries.remove(&lease.owner);
            }
            failed => {
                let error = match (failed, &outcomes) {
                    (Some(RenewOutcome::Failed(e)), _) | (_, Err(e)) => e.to_string(),
                    _ => "the backend returned too few outcomes".to_owned(),
                };
                retried += 1;
                entry.watch.meter().renewal("failed");
                // Retry soon, but never hammer: a third of the cadence, at least 10 ms.
                entry.next_renewal = Instant::now() + (cadence / 3).max(Duration::from_millis(10));
                tracing::warn!(key = %entry.watch.user_key(), %error, "dlock: lease renewal failed; retrying until the lease deadline");
            }
        }
    }
    drop(entries);
    span.record("renewed", renewed);
    span.record("lost", lost);
    span.record("failed", retried);
    shared.changed.notify_one();
}
