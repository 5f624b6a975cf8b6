//! One renewal task per Locker.
//!
//! It keeps every registered lease alive by renewing it every `cadence` (ttl/3 by default),
//! batching all leases that are due together into as few backend calls as the backend allows,
//! and marks a lease lost when a renewal answers "not the owner", when the backend pushes a
//! loss, or when the lease's local deadline passes without a successful renewal. Renewals run
//! in their own tasks so a hung server never delays the deadline checks of other leases.
//!
//! Leases wait in an agenda ordered by when each next needs the task (renewal, local
//! deadline, `max_hold`): a look takes only the leases due, so the work per cadence is
//! O(N log N) in the number of leases held, whatever the size of the backend's batches, and
//! a renewal's answer never waits behind a scan of every lease.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
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
    /// Its place in [`Table::agenda`].
    slot: Slot,
}

impl Entry {
    /// When the task must next look at this lease: its renewal (unless one is in flight),
    /// its local deadline, the end of its `max_hold`, whichever comes first.
    fn needs_attention_at(&self) -> Instant {
        let mut at = self.watch.deadline();
        if self.cadence.is_some() && !self.renewing {
            at = at.min(self.next_renewal);
        }
        if let Some((until, _)) = self.hold_until {
            at = at.min(until);
        }
        at
    }
}

/// A place in the agenda: when, and a sequence number that tells leases due at the same
/// instant apart.
type Slot = (Instant, u64);

/// The watched leases by owner, each also in the agenda by when it needs attention, and the
/// task's schedule, under one lock. The task looks only at the leases the agenda says are
/// due (or, for renewals, nearly due): its work per cadence grows with the number of leases
/// as N log N, whatever the size of the backend's renewal batches.
#[derive(Debug, Default)]
struct Table {
    leases: LeasesByOwner,
    agenda: BTreeMap<Slot, OwnerId>,
    /// The next agenda slot's sequence number.
    next_seq: u64,
    /// The longest cadence of any lease watched so far: renewals due within a fifth of it are
    /// looked at early, to join a batch.
    longest_cadence: Duration,
    /// When the task will look again on its own (`None`: never, nothing to watch). A new
    /// lease wakes the task only if it needs attention earlier, so acquiring costs no wake-up.
    scheduled: Option<Instant>,
    /// Leases the task looked at so far: what its work costs, counted.
    visits: u64,
}

/// foldhash: randomly seeded per map, and much cheaper than SipHash on an owner id, which
/// every lock and unlock hashes.
type LeasesByOwner = HashMap<OwnerId, Entry, foldhash::fast::RandomState>;

impl Table {
    /// Watches `entry` under `owner` (in place of any lease of that owner).
    fn insert(&mut self, owner: OwnerId, mut entry: Entry) -> Instant {
        self.remove(&owner);
        if let Some(cadence) = entry.cadence {
            self.longest_cadence = self.longest_cadence.max(cadence);
        }
        let at = entry.needs_attention_at();
        entry.slot = self.new_slot(at);
        self.agenda.insert(entry.slot, owner.clone());
        self.leases.insert(owner, entry);
        at
    }

    /// Stops watching `owner`'s lease, and hands it back.
    fn remove(&mut self, owner: &OwnerId) -> Option<Entry> {
        let entry = self.leases.remove(owner)?;
        self.agenda.remove(&entry.slot);
        Some(entry)
    }

    /// Moves `owner`'s lease to its place in the agenda after its state changed.
    fn reschedule(&mut self, owner: &OwnerId) {
        let Some(entry) = self.leases.get(owner) else {
            return;
        };
        let (old, at) = (entry.slot, entry.needs_attention_at());
        let slot = self.new_slot(at);
        if let Some(entry) = self.leases.get_mut(owner) {
            entry.slot = slot;
        }
        let owner = self.agenda.remove(&old).unwrap_or_else(|| owner.clone());
        self.agenda.insert(slot, owner);
    }

    fn new_slot(&mut self, at: Instant) -> Slot {
        self.next_seq += 1;
        (at, self.next_seq)
    }

    /// Takes out of the agenda the owners of the leases that need attention by `horizon`,
    /// earliest first (they stay watched: [`reschedule`](Self::reschedule) puts them back).
    fn take_due(&mut self, horizon: Instant) -> Vec<OwnerId> {
        let mut due = Vec::new();
        while let Some(entry) = self.agenda.first_entry() {
            if entry.key().0 > horizon {
                break;
            }
            due.push(entry.remove());
        }
        self.visits += due.len() as u64;
        due
    }

    /// When the earliest lease needs attention.
    fn next_attention(&self) -> Option<Instant> {
        self.agenda.first_key_value().map(|((at, _), _)| *at)
    }

    /// Stops watching every lease, and hands them back.
    fn drain(&mut self) -> impl Iterator<Item = Entry> + '_ {
        self.agenda.clear();
        self.leases.drain().map(|(_, entry)| entry)
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
        let started = self.ensure_running();
        let mut entries = self.shared.entries();
        let needs_attention_at = entries.insert(
            lease.owner.clone(),
            Entry {
                lease,
                watch,
                cadence,
                next_renewal,
                renewing: false,
                hold_until,
                slot: (next_renewal, 0),
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
        self.shared.entries().leases.len()
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
        let drained: Vec<Entry> = self.shared.entries().drain().collect();
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

/// Expires overdue leases, starts due renewals, and returns when to look again. Looks only
/// at the leases the agenda has due by now, or with a renewal due within a fifth of the
/// longest cadence (renewed a little early rather than alone: leases taken within a fifth of
/// a cadence of each other share one batch).
fn tick(shared: &Arc<Shared>, settings: &Settings) -> Instant {
    let now = Instant::now();
    let mut due = Vec::new();
    let mut expired = Vec::new();
    let mut capped = Vec::new();
    let mut entries = shared.entries();
    let horizon = now + entries.longest_cadence / 5;
    for owner in entries.take_due(horizon) {
        let Some(entry) = entries.leases.get_mut(&owner) else {
            continue;
        };
        if let Some((until, cap)) = entry.hold_until
            && until <= now
        {
            entry.watch.mark_lost(LostReason::MaxHold(cap));
            capped.push(entry.lease.clone());
            entries.remove(&owner);
            continue;
        }
        entry.watch.expire_if_due();
        if !entry.watch.is_held() {
            expired.push((entry.lease.clone(), entry.watch.deadline()));
            entries.remove(&owner);
            continue;
        }
        if let Some(cadence) = entry.cadence
            && !entry.renewing
            && entry.next_renewal <= now + cadence / 5
        {
            entry.renewing = true;
            due.push(entry.lease.clone());
        }
        entries.reschedule(&owner);
    }
    // With nothing to watch, look again in a while anyway: a lease taken meanwhile that
    // needs attention later than that does not have to wake this task (one wake-up saved
    // per lock of a Locker that holds one lock at a time).
    let next_wake = entries.next_attention().unwrap_or(now + IDLE_LOOK);
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
        let Some(entry) = entries.leases.get_mut(&lease.owner) else {
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
                continue;
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
        entries.reschedule(&lease.owner);
    }
    drop(entries);
    span.record("renewed", renewed);
    span.record("lost", lost);
    span.record("failed", retried);
    shared.changed.notify_one();
}

#[cfg(test)]
mod tests {
    use async_trait::async_trait;

    use super::*;
    use crate::backend::{Capabilities, MemoryBackend};
    use crate::lease::{AcquireOutcome, AcquireRequest, ReleaseOutcome};
    use crate::meter::Meter;
    use crate::{LockMode, Result};

    /// The memory backend, renewing in batches of 128 leases (etcd's size).
    #[derive(Debug)]
    struct InBatchesOf128(MemoryBackend);

    #[async_trait]
    impl LockBackend for InBatchesOf128 {
        async fn acquire(
            &self,
            req: &AcquireRequest,
            deadline: Option<Instant>,
        ) -> Result<AcquireOutcome> {
            self.0.acquire(req, deadline).await
        }

        async fn renew(&self, leases: &[Lease]) -> Result<Vec<RenewOutcome>> {
            self.0.renew(leases).await
        }

        async fn release(&self, lease: &Lease) -> Result<ReleaseOutcome> {
            self.0.release(lease).await
        }

        fn capabilities(&self) -> Capabilities {
            self.0.capabilities().max_renew_batch(128)
        }
    }

    /// 10,000 leases renewed in batches of 128 for three cadences: the task looks at each
    /// lease a few times per cadence, not once per batch (a scan of every lease after each
    /// batch's answer was 10,000 × 79 visits per cadence), and none is lost.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn work_per_cadence_grows_with_the_leases_not_the_batches() {
        const LEASES: usize = 10_000;
        let (ttl, cadence) = (Duration::from_millis(900), Duration::from_millis(300));
        let backend: Arc<dyn LockBackend> = Arc::new(InBatchesOf128(MemoryBackend::new()));
        let watchdog = Watchdog::new(Arc::clone(&backend), Duration::from_secs(5));
        let mut watches = Vec::with_capacity(LEASES);
        for i in 0..LEASES {
            let request = AcquireRequest::new(format!("k{i}"), OwnerId::random("t"), ttl);
            let Ok(AcquireOutcome::Acquired(lease)) = backend.acquire(&request, None).await else {
                panic!("a free key");
            };
            let watch = Arc::new(LeaseWatch::new(
                Arc::clone(&lease.key),
                0,
                ttl,
                lease.valid_from,
                Meter::new("memory", LockMode::Exclusive, &lease.key),
            ));
            watchdog.watch(lease, Arc::clone(&watch), Some(cadence), None);
            watches.push(watch);
        }
        let visits = || watchdog.shared.entries().visits;
        let before = visits();
        tokio::time::sleep(cadence * 3).await;
        let per_lease_per_cadence = (visits() - before) as f64 / (LEASES * 3) as f64;
        let lost = watches.iter().filter(|watch| !watch.is_held()).count();
        assert_eq!(lost, 0, "leases lost while renewed every cadence");
        assert_eq!(watchdog.watched(), LEASES);
        assert!(
            per_lease_per_cadence < 4.0,
            "the watchdog looked at each lease {per_lease_per_cadence:.1} times per cadence"
        );
        println!("lease visits per lease per cadence: {per_lease_per_cadence:.2}");
    }
}
