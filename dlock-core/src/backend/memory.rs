//! The in-process backend: the embedded default and the reference implementation of the
//! [`LockBackend`] contract.
//!
//! Locks live in a table shared by every clone of one [`MemoryBackend`], so they exclude tasks
//! of one process only. All three modes: exclusive, shared (read-write locks) and permits
//! (semaphores). Leases really expire, fencing tokens strictly increase across every grant, and
//! waiters are granted the key in FIFO order by direct hand-off: a release gives it to the
//! oldest waiter — and to the waiters right behind it that may hold next to it (readers, or
//! permits up to the limit) — and wakes just those, so a releaser that re-requests at once
//! queues behind them, and a reader that arrives while a writer waits queues behind the
//! writer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::sync::watch;

use super::waiters::{Ticket, WaitQueues};
use crate::backend::{Capabilities, Fencing, HolderChanges, LockBackend};
use crate::lease::{
    AcquireAllOutcome, AcquireOutcome, AcquireRequest, Lease, OwnerId, ReleaseOutcome, RenewOutcome,
};
use crate::{Error, HolderInfo, Kept, LockInfo, LockMode, Result, WaiterInfo};

/// In-process locks with real leases, FIFO hand-off and fencing tokens.
///
/// Clones share one lock table: give clones to several [`Locker`](crate::Locker)s to model
/// several clients of one lock service.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
/// use dlock_core::Locker;
/// use dlock_core::backend::MemoryBackend;
///
/// let table = MemoryBackend::new();
/// let a = Locker::from_backend(table.clone());
/// let b = Locker::from_backend(table);
/// let held = a.lock("report").await?;
/// assert!(b.try_lock("report").await.is_err());
/// held.release().await?;
/// assert!(b.try_lock("report").await.is_ok());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
pub struct MemoryBackend {
    shared: Arc<Mutex<Table>>,
    /// Who waits for which key. Locked after the table, never before it.
    queues: Arc<WaitQueues<Wanted>>,
}

#[derive(Debug, Default)]
struct Table {
    keys: HashMap<Arc<str>, KeyState>,
    last_token: u64,
    /// Bumped when a key's holders change, while someone listens
    /// ([`LockBackend::holder_changes`]).
    changes: watch::Sender<u64>,
}

/// One key: who holds it, and (while a semaphore is in use) its limit.
#[derive(Debug, Default)]
struct KeyState {
    holders: Vec<Holder>,
    /// The limit of the semaphore on this key, stored by its first permit request and kept
    /// while the key has holders or waiters.
    permit_limit: Option<u32>,
}

#[derive(Debug)]
struct Holder {
    owner: OwnerId,
    mode: LockMode,
    ttl: Duration,
    granted_at: Instant,
    expires_at: Instant,
    token: u64,
    /// Set once the grant ended but the key is kept held until `expires_at`.
    kept: Option<Kept>,
    /// What the grant shows others (an election candidate's value).
    value: Option<Arc<str>>,
}

impl Holder {
    fn new(wanted: &Wanted, now: Instant, token: u64) -> Self {
        Self {
            owner: wanted.owner.clone(),
            mode: wanted.mode,
            ttl: wanted.ttl,
            granted_at: now,
            expires_at: now + wanted.ttl,
            token,
            kept: None,
            value: wanted.value.clone(),
        }
    }
}

/// What a queued acquire waits to be granted.
#[derive(Debug, Clone)]
struct Wanted {
    owner: OwnerId,
    mode: LockMode,
    ttl: Duration,
    value: Option<Arc<str>>,
}

impl Wanted {
    fn of(req: &AcquireRequest) -> Self {
        Self {
            owner: req.owner.clone(),
            mode: req.mode,
            ttl: req.ttl,
            value: req.value.clone(),
        }
    }
}

impl KeyState {
    /// Whether a grant in `mode` may join the current holders: an exclusive grant only on a
    /// free key, a shared one next to shared ones, a permit next to fewer than `limit`
    /// permits.
    fn admits(&self, mode: LockMode) -> bool {
        let holders = &self.holders;
        match mode {
            _ if holders.is_empty() => true,
            LockMode::Exclusive => false,
            LockMode::Shared => holders.iter().all(|h| h.mode == LockMode::Shared),
            LockMode::Permit { limit } => {
                holders
                    .iter()
                    .all(|h| matches!(h.mode, LockMode::Permit { .. }))
                    && holders.len() < usize::try_from(limit).unwrap_or(usize::MAX)
            }
        }
    }

    fn holder(&self, owner: &OwnerId) -> Option<&Holder> {
        self.holders.iter().find(|h| &h.owner == owner)
    }

    /// `owner`'s live grant (not a record kept after it ended).
    fn live_grant(&mut self, owner: &OwnerId) -> Option<&mut Holder> {
        self.holders
            .iter_mut()
            .find(|h| &h.owner == owner && h.kept.is_none())
    }

    /// Removes `owner`'s live grant; returns whether it held one.
    fn remove_holder(&mut self, owner: &OwnerId) -> bool {
        let before = self.holders.len();
        self.holders
            .retain(|h| &h.owner != owner || h.kept.is_some());
        self.holders.len() < before
    }

    /// The soonest moment a holder's lease runs out.
    fn first_expiry(&self) -> Option<Instant> {
        self.holders.iter().map(|h| h.expires_at).min()
    }
}

impl Table {
    /// The state of `key`, created empty if the table has none (the key is copied only then).
    fn state_of(&mut self, key: &str) -> &mut KeyState {
        if !self.keys.contains_key(key) {
            self.keys.insert(Arc::from(key), KeyState::default());
        }
        self.keys
            .get_mut(key)
            .unwrap_or_else(|| unreachable!("inserted above"))
    }

    fn grant(&mut self, key: &str, req: &AcquireRequest, now: Instant) {
        self.last_token += 1;
        let token = self.last_token;
        self.state_of(key)
            .holders
            .push(Holder::new(&Wanted::of(req), now, token));
        self.changed();
    }

    /// Tells the listeners of [`LockBackend::holder_changes`], if any, that holders changed.
    fn changed(&self) {
        if self.changes.receiver_count() > 0 {
            self.changes
                .send_modify(|count| *count = count.wrapping_add(1));
        }
    }

    /// Drops expired holders and hands the key to the waiters at the head of its queue, in
    /// order, as long as each is admitted next to the holders (several readers, several
    /// permits, or one writer). Forgets a key nobody holds or waits for.
    fn settle(&mut self, key: &str, now: Instant, queues: &WaitQueues<Wanted>) {
        let Self {
            keys, last_token, ..
        } = self;
        let Some(state) = keys.get_mut(key) else {
            return;
        };
        let before = state.holders.len();
        state.holders.retain(|h| h.expires_at > now);
        let mut changed = state.holders.len() < before;
        queues.hand_off_while(key, |wanted| {
            if !state.admits(wanted.mode) {
                return false;
            }
            *last_token += 1;
            state.holders.push(Holder::new(wanted, now, *last_token));
            changed = true;
            true
        });
        if state.holders.is_empty() && queues.len(key) == 0 {
            keys.remove(key);
        }
        if changed {
            self.changed();
        }
    }

    /// Checks `req`'s semaphore limit against the one stored for its key, storing it if the
    /// key has none.
    fn check_permit_limit(
        &mut self,
        req: &AcquireRequest,
        queues: &WaitQueues<Wanted>,
    ) -> Result<()> {
        let LockMode::Permit { limit } = req.mode else {
            return Ok(());
        };
        let state = self.state_of(&req.key);
        match state.permit_limit {
            Some(stored) if stored != limit => {
                let mismatch = Error::PermitLimitMismatch {
                    key: req.key.to_string(),
                    stored,
                    requested: limit,
                };
                if state.holders.is_empty() && queues.len(&req.key) == 0 {
                    self.keys.remove(&*req.key);
                }
                Err(mismatch)
            }
            _ => {
                state.permit_limit = Some(limit);
                Ok(())
            }
        }
    }

    fn lease_if_owner(&self, req: &AcquireRequest) -> Option<Lease> {
        let holder = self.keys.get(&*req.key)?.holder(&req.owner)?;
        Some(Lease::new(req, holder.granted_at).with_fencing_token(holder.token))
    }

    /// How long until a holder of `key` may let go: the soonest lease end.
    fn remaining(&self, key: &str, now: Instant) -> Option<Duration> {
        let expiry = self.keys.get(key)?.first_expiry()?;
        Some(expiry.saturating_duration_since(now))
    }

    /// Whether `mode` is granted at once: nobody waits (a newcomer never overtakes a waiter,
    /// so a waiting writer is not starved by readers) and the holders admit it.
    fn grants_newcomer(&self, key: &str, mode: LockMode, queues: &WaitQueues<Wanted>) -> bool {
        queues.len(key) == 0 && self.keys.get(key).is_none_or(|s| s.admits(mode))
    }
}

/// A queued acquire; dropping it (the acquire future was cancelled) leaves nothing behind.
struct QueueTicket<'a> {
    backend: &'a MemoryBackend,
    req: &'a AcquireRequest,
    ticket: Option<Ticket<Wanted>>,
    granted: bool,
}

impl Drop for QueueTicket<'_> {
    fn drop(&mut self) {
        if self.granted {
            return;
        }
        let mut table = self.backend.table();
        drop(self.ticket.take()); // leaves the queue
        if let Some(state) = table.keys.get_mut(&*self.req.key)
            // Granted by hand-off while we were being cancelled: pass it on.
            && state.remove_holder(&self.req.owner)
        {
            table.changed();
        }
        table.settle(&self.req.key, Instant::now(), &self.backend.queues);
    }
}

impl MemoryBackend {
    /// An empty lock table.
    ///
    /// # Examples
    ///
    /// ```
    /// let backend = dlock_core::backend::MemoryBackend::new();
    /// assert_eq!(backend.held_keys(), 0);
    /// ```
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The process-wide table called `name` (what `memory://name` URLs connect to): every
    /// call with the same name returns a clone of one table.
    ///
    /// # Examples
    ///
    /// ```
    /// use dlock_core::backend::MemoryBackend;
    /// let a = MemoryBackend::shared_table("jobs");
    /// let _ = MemoryBackend::shared_table("jobs"); // the same table as `a`
    /// # drop(a);
    /// ```
    #[must_use]
    pub fn shared_table(name: &str) -> Self {
        static TABLES: std::sync::OnceLock<Mutex<HashMap<String, MemoryBackend>>> =
            std::sync::OnceLock::new();
        let tables = TABLES.get_or_init(Mutex::default);
        let mut tables = tables.lock().unwrap_or_else(PoisonError::into_inner);
        tables.entry(name.to_owned()).or_default().clone()
    }

    /// How many keys are currently held or waited on (expired holders not yet noticed count
    /// until the next operation on their key). Useful to show that nothing leaked.
    #[must_use]
    pub fn held_keys(&self) -> usize {
        let mut table = self.table();
        let now = Instant::now();
        let keys: Vec<Arc<str>> = table.keys.keys().cloned().collect();
        for key in &keys {
            table.settle(key, now, &self.queues);
        }
        table.keys.len()
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        // The table is consistent after every statement, so a panic elsewhere cannot leave it
        // half-updated: recover from poisoning.
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn wait_in_queue(
        &self,
        req: &AcquireRequest,
        deadline: Option<Instant>,
        ticket: Ticket<Wanted>,
    ) -> AcquireOutcome {
        let mut queued = QueueTicket {
            backend: self,
            req,
            ticket: Some(ticket),
            granted: false,
        };
        loop {
            let holder_expiry = self
                .table()
                .keys
                .get(&*req.key)
                .and_then(KeyState::first_expiry);
            let wake_at = match (holder_expiry, deadline) {
                (Some(e), Some(d)) => Some(e.min(d)),
                (e, d) => e.or(d),
            };
            if let Some(ticket) = &queued.ticket {
                ticket.wait(wake_at).await;
            }
            let now = Instant::now();
            let mut table = self.table();
            table.settle(&req.key, now, &self.queues);
            if let Some(lease) = table.lease_if_owner(req) {
                queued.granted = true;
                return AcquireOutcome::Acquired(lease);
            }
            let requeued = queued
                .ticket
                .as_ref()
                .is_some_and(|ticket| self.queues.requeue_front(ticket, Wanted::of(req)));
            if requeued {
                // We were handed the lock, but that grant ended before we ran (it expired
                // while this task was starved, or was broken): we were first in line.
                table.state_of(&req.key);
                table.settle(&req.key, now, &self.queues);
                if let Some(lease) = table.lease_if_owner(req) {
                    queued.granted = true;
                    return AcquireOutcome::Acquired(lease);
                }
            }
            if deadline.is_some_and(|d| d <= now) {
                return AcquireOutcome::Busy {
                    retry_after: table.remaining(&req.key, now),
                };
            }
        }
    }
}

#[async_trait]
impl LockBackend for MemoryBackend {
    async fn acquire(
        &self,
        req: &AcquireRequest,
        deadline: Option<Instant>,
    ) -> Result<AcquireOutcome> {
        let now = Instant::now();
        let ticket = {
            let mut table = self.table();
            table.settle(&req.key, now, &self.queues);
            table.check_permit_limit(req, &self.queues)?;
            if table.grants_newcomer(&req.key, req.mode, &self.queues) {
                table.grant(&req.key, req, now);
                let lease = table.lease_if_owner(req).expect("just granted");
                return Ok(AcquireOutcome::Acquired(lease));
            }
            if deadline.is_some_and(|d| d <= now) {
                let retry_after = table.remaining(&req.key, now);
                table.settle(&req.key, now, &self.queues); // forgets a limit stored just now
                return Ok(AcquireOutcome::Busy { retry_after });
            }
            table.state_of(&req.key);
            self.queues.enqueue(&req.key, Wanted::of(req))
        };
        Ok(self.wait_in_queue(req, deadline, ticket).await)
    }

    async fn acquire_together(
        &self,
        requests: &[AcquireRequest],
    ) -> Result<Option<AcquireAllOutcome>> {
        let now = Instant::now();
        let mut table = self.table();
        let checked = requests.iter().try_for_each(|req| {
            table.settle(&req.key, now, &self.queues);
            table.check_permit_limit(req, &self.queues)
        });
        let busy = requests
            .iter()
            .position(|req| !table.grants_newcomer(&req.key, req.mode, &self.queues));
        if checked.is_err() || busy.is_some() {
            let retry_after = busy.and_then(|at| table.remaining(&requests[at].key, now));
            for req in requests {
                table.settle(&req.key, now, &self.queues); // forgets limits stored just now
            }
            checked?;
            return Ok(busy.map(|index| AcquireAllOutcome::Busy { index, retry_after }));
        }
        let leases = requests
            .iter()
            .map(|req| {
                table.grant(&req.key, req, now);
                table.lease_if_owner(req).expect("just granted")
            })
            .collect();
        Ok(Some(AcquireAllOutcome::Acquired(leases)))
    }

    async fn renew(&self, leases: &[Lease]) -> Result<Vec<RenewOutcome>> {
        let now = Instant::now();
        let mut table = self.table();
        Ok(leases
            .iter()
            .map(|lease| {
                table.settle(&lease.key, now, &self.queues);
                let holder = table
                    .keys
                    .get_mut(&*lease.key)
                    .and_then(|s| s.live_grant(&lease.owner));
                match holder {
                    Some(h) => {
                        h.expires_at = now + h.ttl;
                        RenewOutcome::Renewed { valid_from: now }
                    }
                    None => RenewOutcome::NotOwner,
                }
            })
            .collect())
    }

    async fn release(&self, lease: &Lease) -> Result<ReleaseOutcome> {
        let now = Instant::now();
        let mut table = self.table();
        table.settle(&lease.key, now, &self.queues);
        let released = table
            .keys
            .get_mut(&*lease.key)
            .is_some_and(|state| state.remove_holder(&lease.owner));
        if !released {
            return Ok(ReleaseOutcome::NotHeld);
        }
        table.changed();
        table.settle(&lease.key, now, &self.queues);
        Ok(ReleaseOutcome::Released)
    }

    async fn release_together(&self, leases: &[Lease]) -> Result<Option<Vec<ReleaseOutcome>>> {
        let mut outcomes = Vec::with_capacity(leases.len());
        for lease in leases {
            outcomes.push(self.release(lease).await?);
        }
        Ok(Some(outcomes))
    }

    async fn release_keeping(
        &self,
        lease: &Lease,
        keep: Duration,
        kept: Kept,
    ) -> Result<ReleaseOutcome> {
        let now = Instant::now();
        let mut table = self.table();
        table.settle(&lease.key, now, &self.queues);
        let Some(holder) = table
            .keys
            .get_mut(&*lease.key)
            .and_then(|state| state.live_grant(&lease.owner))
            .filter(|holder| holder.mode == LockMode::Exclusive)
        else {
            return Ok(ReleaseOutcome::NotHeld);
        };
        holder.kept = Some(kept);
        holder.expires_at = now + keep;
        table.changed();
        Ok(ReleaseOutcome::Released)
    }

    async fn force_release(&self, key: &str) -> Result<bool> {
        let now = Instant::now();
        let mut table = self.table();
        table.settle(key, now, &self.queues);
        let removed = table
            .keys
            .get_mut(key)
            .is_some_and(|state| !std::mem::take(&mut state.holders).is_empty());
        if removed {
            table.changed();
        }
        table.settle(key, now, &self.queues);
        Ok(removed)
    }

    async fn inspect(&self, key: &str) -> Result<LockInfo> {
        let now = Instant::now();
        let mut table = self.table();
        table.settle(key, now, &self.queues);
        let holders = table.keys.get(key).map_or_else(Vec::new, |state| {
            state
                .holders
                .iter()
                .map(|holder| {
                    HolderInfo::new(holder.owner.as_str(), holder.mode)
                        .with_fencing_token(Some(holder.token))
                        .with_expires_in(Some(holder.expires_at.saturating_duration_since(now)))
                        .with_kept(holder.kept)
                        .with_value(holder.value.as_deref().map(str::to_owned))
                })
                .collect()
        });
        drop(table);
        let waiters = self
            .queues
            .queued(key)
            .into_iter()
            .map(|wanted| WaiterInfo::new(Some(wanted.owner.as_str().to_owned()), wanted.mode))
            .collect();
        Ok(LockInfo {
            holders,
            waiters: Some(waiters),
        })
    }

    async fn proclaim(&self, lease: &Lease, value: &str) -> Result<bool> {
        let now = Instant::now();
        let mut table = self.table();
        table.settle(&lease.key, now, &self.queues);
        let Some(holder) = table
            .keys
            .get_mut(&*lease.key)
            .and_then(|state| state.live_grant(&lease.owner))
        else {
            return Ok(false);
        };
        holder.value = Some(Arc::from(value));
        table.changed();
        Ok(true)
    }

    async fn holder_changes(&self, _key: &str) -> Result<HolderChanges> {
        // Every change of the table wakes every listener: each re-reads its own key.
        let mut changes = self.table().changes.subscribe();
        changes.mark_unchanged();
        Ok(Box::pin(futures_util::stream::unfold(
            changes,
            |mut changes| async move {
                changes.changed().await.ok()?;
                Some((Ok(()), changes))
            },
        )))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new("memory")
            .fair(true)
            .read_write(true)
            .semaphore(true)
            .fencing(Fencing::Volatile)
            .keeps(true)
            .together(true)
            .election(true)
            .max_renew_batch(usize::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(key: &str, ttl: Duration) -> AcquireRequest {
        AcquireRequest::new(key, OwnerId::random("test"), ttl)
    }

    async fn grant(backend: &MemoryBackend, req: &AcquireRequest) -> Lease {
        match backend.acquire(req, Some(Instant::now())).await.unwrap() {
            AcquireOutcome::Acquired(lease) => lease,
            busy => panic!("not granted: {busy:?}"),
        }
    }

    #[tokio::test]
    async fn cancelled_waiters_leave_the_table_empty() {
        let backend = MemoryBackend::new();
        let holder = grant(&backend, &request("k", Duration::from_secs(30))).await;
        let waiter = request("k", Duration::from_secs(30));
        let cancelled =
            tokio::time::timeout(Duration::from_millis(20), backend.acquire(&waiter, None)).await;
        assert!(cancelled.is_err());
        assert_eq!(
            backend.queues.len("k"),
            0,
            "a cancelled waiter stayed queued"
        );
        backend.release(&holder).await.unwrap();
        assert_eq!(
            backend.held_keys(),
            0,
            "the released key or its queue leaked"
        );
    }

    /// A releaser that re-requests at once queues behind the waiter it handed the lock to,
    /// so it cannot starve it (rslock's releaser re-acquires while others sleep).
    #[tokio::test]
    async fn release_hands_off_to_the_oldest_waiter_without_barging() {
        let backend = MemoryBackend::new();
        let first = request("k", Duration::from_secs(30));
        let lease = grant(&backend, &first).await;
        let waiter_req = request("k", Duration::from_secs(30));
        let waiter = tokio::spawn({
            let (backend, req) = (backend.clone(), waiter_req.clone());
            async move { backend.acquire(&req, None).await }
        });
        while backend.queues.len("k") == 0 {
            tokio::task::yield_now().await;
        }
        backend.release(&lease).await.unwrap();
        let again = request("k", Duration::from_secs(30));
        let barge = backend.acquire(&again, Some(Instant::now())).await.unwrap();
        assert!(
            matches!(barge, AcquireOutcome::Busy { .. }),
            "the releaser barged ahead"
        );
        match waiter.await.unwrap().unwrap() {
            AcquireOutcome::Acquired(lease) => assert_eq!(lease.owner, waiter_req.owner),
            busy => panic!("waiter not served: {busy:?}"),
        }
    }

    /// A waiter handed the lock whose grant is broken before it runs is not forgotten: it
    /// goes back to the head of the queue and gets the lock.
    #[tokio::test]
    async fn a_waiter_whose_hand_off_grant_was_broken_still_gets_the_lock() {
        let backend = MemoryBackend::new();
        let lease = grant(&backend, &request("k", Duration::from_secs(30))).await;
        let waiter = tokio::spawn({
            let backend = backend.clone();
            async move {
                let req = request("k", Duration::from_secs(30));
                backend.acquire(&req, None).await
            }
        });
        while backend.queues.len("k") == 0 {
            tokio::task::yield_now().await;
        }
        // Hand off to the waiter, then break its grant before it is polled (this test runs on
        // a current-thread runtime: the waiter cannot run in between).
        backend.release(&lease).await.unwrap();
        assert!(backend.force_release("k").await.unwrap());
        let outcome = tokio::time::timeout(Duration::from_secs(5), waiter).await;
        let outcome = outcome.expect("the waiter hung").unwrap().unwrap();
        assert!(
            matches!(outcome, AcquireOutcome::Acquired(_)),
            "{outcome:?}"
        );
    }

    #[tokio::test]
    async fn expiry_hands_off_to_the_waiter_at_the_holders_ttl() {
        let backend = MemoryBackend::new();
        let ttl = Duration::from_millis(80);
        let started = Instant::now();
        let _vanished = grant(&backend, &request("k", ttl)).await;
        let waiter = request("k", Duration::from_secs(30));
        let outcome = backend
            .acquire(&waiter, Some(Instant::now() + Duration::from_secs(5)))
            .await
            .unwrap();
        assert!(matches!(outcome, AcquireOutcome::Acquired(_)));
        assert!(
            started.elapsed() >= ttl,
            "granted before the holder's ttl ran out"
        );
    }
}
