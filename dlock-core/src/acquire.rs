//! How a Locker takes a lock: the steps of an acquire — check the request, re-enter a hold of
//! this task, ask the backend within the wait, keep the grant under the watchdog.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tracing::Instrument as _;

use crate::backend::Fencing;
use crate::guard::LockGuard;
use crate::hold::Hold;
use crate::keeper::LeaseKeeper;
use crate::lease::{AcquireOutcome, AcquireRequest, Lease, OwnerId};
use crate::lease_watch::LeaseWatch;
use crate::meter::{self, Meter};
use crate::mode::LockKind;
use crate::reentrancy::HolderId;
use crate::state::LockerState;
use crate::{Error, Kept, LockMode, Result};

/// The most an acquire that waits (`wait(d)`, `d > 0`) may answer after its wait ran out,
/// whatever the server does (capped by the operation timeout): time for the last attempt's
/// round trip and for giving up a queued place.
///
/// # Examples
///
/// ```
/// assert_eq!(dlock_core::WAIT_SLACK, std::time::Duration::from_millis(250));
/// ```
pub const WAIT_SLACK: Duration = Duration::from_millis(250);

/// What a [`LockRequest`](crate::LockRequest) asks for.
#[derive(Debug)]
pub(crate) struct AcquireOptions<'a> {
    pub(crate) key: &'a str,
    pub(crate) ttl: Option<Duration>,
    /// `None`: the Locker's default; `Some(None)`: until acquired.
    pub(crate) wait: Option<Option<Duration>>,
    pub(crate) watchdog: bool,
    /// Whether a hold of the current task on the key is re-entered.
    pub(crate) reentrant: bool,
    /// Whether the grant must carry a fencing token; `None`: the Locker's default.
    pub(crate) fencing: Option<bool>,
    /// The longest the lock is held; `None`: the Locker's default.
    pub(crate) max_hold: Option<Duration>,
    /// How long after the grant a release still leaves the key held on the server.
    pub(crate) hold_at_least: Option<Duration>,
    /// How the key is held.
    pub(crate) mode: LockMode,
    /// The recipe the grant belongs to (an exclusive hold: a mutex or a writer).
    pub(crate) kind: LockKind,
    /// The template the key was built from: its metrics' `key` label.
    pub(crate) key_template: Option<&'a str>,
    /// What the grant shows others: an election candidate's value.
    pub(crate) value: Option<&'a str>,
}

/// What [`LockerState::check`] found valid in a request.
pub(crate) struct Checked {
    pub(crate) full_key: Arc<str>,
    pub(crate) ttl: Duration,
    pub(crate) fencing: bool,
}

impl LockerState {
    /// Takes a lock as `options` describe: checks the request, re-enters a hold of this task
    /// where the mode allows, else asks the backend (within the wait) and keeps the grant.
    /// Acquires under a `dlock.acquire` span (debug level): the key as the caller gave it,
    /// mode, backend, and once decided how long it waited, the outcome (`acquired`,
    /// `reentered`, `busy`, `failed`) and the fencing token.
    pub(crate) async fn acquire(&self, options: AcquireOptions<'_>) -> Result<LockGuard> {
        let span = tracing::debug_span!(
            "dlock.acquire",
            key = options.key,
            mode = %options.mode,
            backend = self.capabilities.name,
            waited_us = tracing::field::Empty,
            outcome = tracing::field::Empty,
            fencing_token = tracing::field::Empty,
        );
        let started = Instant::now();
        let meter = self.meter(&options);
        let acquired = self
            .acquire_inner(options, &meter, started)
            .instrument(span.clone())
            .await;
        let outcome = match &acquired {
            Ok(guard) if guard.is_nested() => "reentered",
            Ok(_) => "acquired",
            Err(Error::Busy { .. }) => "busy",
            Err(_) => "failed",
        };
        meter.acquired(outcome, started.elapsed());
        if !span.is_disabled() {
            let waited = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
            span.record("waited_us", waited);
            span.record("outcome", outcome);
            if let Some(token) = acquired.as_ref().ok().and_then(LockGuard::fencing_token) {
                span.record("fencing_token", token);
            }
        }
        acquired
    }

    /// The metrics labels of a request: backend, mode, and the key template (or the raw
    /// key where the config opts in, else `*`).
    pub(crate) fn meter(&self, options: &AcquireOptions<'_>) -> Meter {
        let key = match options.key_template {
            Some(template) => template,
            None if self.config.metrics_raw_keys => options.key,
            None => meter::ANY_KEY,
        };
        Meter::new(self.capabilities.name, options.mode, key)
    }

    async fn acquire_inner(
        &self,
        options: AcquireOptions<'_>,
        meter: &Meter,
        started: Instant,
    ) -> Result<LockGuard> {
        if self.shut_down.load(Ordering::SeqCst) {
            return Err(Error::ShutDown);
        }
        let checked = self.check(&options)?;
        let holder = HolderId::current();
        if options.reentrant
            && let Some(guard) = self.reenter(&options, &checked, holder)?
        {
            return Ok(guard);
        }
        let lease = self.grant(&options, checked, meter, started).await?;
        self.keep(&options, lease, holder, meter.clone(), started)
    }

    /// Validates `options` against the settings and the backend, before any round trip.
    pub(crate) fn check(&self, options: &AcquireOptions<'_>) -> Result<Checked> {
        let full_key = crate::key::full_key(&self.config.key_prefix, options.key)?;
        let ttl = options.ttl.unwrap_or(self.config.ttl);
        if ttl < Duration::from_millis(10) {
            return Err(Error::config(
                "ttl",
                humantime::format_duration(ttl).to_string(),
                "must be at least 10ms",
            ));
        }
        if options.max_hold.is_some_and(|cap| cap.is_zero()) {
            return Err(Error::config("max_hold", "0s", "must be positive"));
        }
        if options.mode == (LockMode::Permit { limit: 0 }) {
            return Err(Error::config(
                "permits",
                "0",
                "a semaphore needs at least one permit",
            ));
        }
        if !self.capabilities.supports(options.mode) {
            return Err(Error::Unsupported {
                backend: self.capabilities.name,
                operation: match options.mode {
                    LockMode::Permit { .. } => "semaphores",
                    _ => "read-write locks",
                },
            });
        }
        if options.value.is_some() && !self.capabilities.election {
            return Err(Error::Unsupported {
                backend: self.capabilities.name,
                operation: "leader election",
            });
        }
        if options.hold_at_least.is_some() {
            self.capabilities
                .check_keeps(options.mode, "hold_at_least")?;
        }
        let fencing = options.fencing.unwrap_or(self.config.fencing);
        if fencing && self.capabilities.fencing == Fencing::None {
            return Err(Error::Unsupported {
                backend: self.capabilities.name,
                operation: "fencing tokens",
            });
        }
        Ok(Checked {
            full_key,
            ttl,
            fencing,
        })
    }

    /// A nested guard on the hold this task has on the key, if the mode re-enters it: any
    /// lock inside a write lock (a read lock there is a downgrade), a read lock inside a read
    /// lock. Permits never re-enter.
    ///
    /// # Errors
    ///
    /// [`Error::LockUpgrade`] for a write lock inside this task's read lock; the hold's
    /// [`Error::LeaseLost`] once it is lost; [`Error::Config`] for a fencing token asked of a
    /// hold taken without one.
    pub(crate) fn reenter(
        &self,
        options: &AcquireOptions<'_>,
        checked: &Checked,
        holder: HolderId,
    ) -> Result<Option<LockGuard>> {
        if matches!(options.mode, LockMode::Permit { .. }) {
            return Ok(None);
        }
        let Some(hold) = self.reentrancy.find(holder, &checked.full_key) else {
            return Ok(None);
        };
        if let Some(lost) = hold.lost_error() {
            return Err(lost);
        }
        if hold.lease().mode == LockMode::Shared && options.mode == LockMode::Exclusive {
            return Err(Error::LockUpgrade {
                key: options.key.to_owned(),
            });
        }
        if checked.fencing && hold.lease().fencing_token.is_none() {
            return Err(Error::config(
                "fencing",
                "true",
                format!(
                    "this task already holds `{}` without a fencing token, and a nested \
                     acquire shares that grant: ask for the token on the outermost one",
                    options.key
                ),
            ));
        }
        tracing::trace!(key = options.key, mode = %options.mode, "dlock: re-entered");
        Ok(Some(LockGuard::new(hold, true, holder)))
    }

    /// Asks the backend for a new grant, within the caller's wait counted from `started`.
    ///
    /// # Errors
    ///
    /// [`Error::Busy`] when the wait ran out; the backend's errors, bounded in time.
    async fn grant(
        &self,
        options: &AcquireOptions<'_>,
        checked: Checked,
        meter: &Meter,
        started: Instant,
    ) -> Result<Lease> {
        let grant = self.grants.fetch_add(1, Ordering::Relaxed) + 1;
        let full_key = Arc::clone(&checked.full_key);
        let request = AcquireRequest::new(
            checked.full_key,
            OwnerId::numbered(&self.id, grant),
            checked.ttl,
        )
        .with_fencing(checked.fencing)
        .with_mode(options.mode)
        .with_kind(options.kind)
        .with_value(options.value.map(Arc::from));
        let wait = options.wait.unwrap_or(self.config.wait);
        let _waiting = (wait != Some(Duration::ZERO)).then(|| meter.waiting());
        // Debug, not warn: tasks of one service contending for a key is the common case; a
        // task waiting for its own spawner's lock is the case this line explains. The holds
        // table is looked up only when the line would be written (not on every acquire).
        if wait != Some(Duration::ZERO)
            && tracing::enabled!(tracing::Level::DEBUG)
            && self.reentrancy.is_held(&full_key)
        {
            tracing::debug!(
                key = options.key,
                "dlock: waiting for a lock this Locker holds in another task; if that task \
                 waits for this one, neither ends: pass `guard.hand_off()` to the spawned task"
            );
        }
        let operation_timeout = self.keeper.operation_timeout();
        let attempt = async {
            match wait {
                Some(wait) => {
                    // One attempt is one operation; a wait gets a short slack past its end.
                    let slack = if wait.is_zero() {
                        operation_timeout
                    } else {
                        WAIT_SLACK.min(operation_timeout)
                    };
                    let deadline = started + wait;
                    self.acquire_by(request, deadline, deadline + slack).await
                }
                None => {
                    let mut in_flight = Unconfirmed::of(&self.keeper, &request);
                    let outcome = self.keeper.backend().acquire(&request, None).await;
                    in_flight.answered_with(&outcome);
                    outcome
                }
            }
        };
        // A shutdown ends a wait at once: the attempt is dropped, which the backend's
        // acquire is safe against, and a grant it made meanwhile is given back.
        let outcome = tokio::select! {
            biased;
            () = self.stopping.cancelled() => Err(Error::ShutDown),
            outcome = attempt => outcome,
        };
        match outcome.map_err(|error| for_the_caller(error, options.key))? {
            AcquireOutcome::Acquired(lease) => Ok(lease),
            AcquireOutcome::Busy { retry_after } => Err(Error::Busy {
                key: options.key.to_owned(),
                waited: started.elapsed(),
                retry_after,
                by_this_locker: self.reentrancy.is_held(&full_key),
            }),
        }
    }

    /// The backend's acquire of `request`, waiting natively until `deadline`, answered by
    /// `answer_by` whatever the server does ([`Error::Timeout`] then). An attempt still in
    /// flight at `answer_by` goes on in the background for at most the operation timeout,
    /// and whatever it was granted is released: a late grant is never left to its ttl.
    async fn acquire_by(
        &self,
        request: AcquireRequest,
        deadline: Instant,
        answer_by: Instant,
    ) -> Result<AcquireOutcome> {
        let mut in_flight = Unconfirmed::of(&self.keeper, &request);
        let keeper = Arc::clone(&self.keeper);
        let mut attempt =
            Box::pin(async move { keeper.backend().acquire(&request, Some(deadline)).await });
        if let Ok(outcome) = tokio::time::timeout_at(answer_by.into(), attempt.as_mut()).await {
            in_flight.answered_with(&outcome);
            return outcome;
        }
        // The attempt goes on in the background, which settles its grant.
        let unconfirmed = in_flight.take();
        let keeper = Arc::clone(&self.keeper);
        let key = Arc::clone(&unconfirmed.key);
        let spawned = self.keeper.watchdog().spawn(async move {
            let finished = tokio::time::timeout(keeper.operation_timeout(), attempt).await;
            // A grant that came too late, or a request that may still be applied after this
            // (an owner-checked release of a grant that never was changes nothing).
            match finished {
                Ok(Ok(AcquireOutcome::Acquired(lease))) => keeper.release_once_answered(lease),
                Ok(Ok(AcquireOutcome::Busy { .. })) => {}
                Ok(Err(error)) if !may_have_been_applied(&error) => {}
                Ok(Err(_)) | Err(_) => keeper.release_once_answered(unconfirmed),
            }
        });
        if !spawned {
            tracing::debug!(%key, "dlock: no runtime to finish a late acquire; a late grant expires at its ttl");
        }
        Err(self.keeper.timeout("acquire"))
    }

    /// Puts a fresh grant under the watchdog and wraps it in this task's guard.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] when the grant came too late to be used safely (it is released in
    /// the background).
    pub(crate) fn keep(
        &self,
        options: &AcquireOptions<'_>,
        lease: Lease,
        holder: HolderId,
        meter: Meter,
        started: Instant,
    ) -> Result<LockGuard> {
        // The backend may grant less than asked (a negotiated session timeout): trust the
        // shorter of the two.
        let ttl = lease.ttl.min(options.ttl.unwrap_or(self.config.ttl));
        let watch = Arc::new(LeaseWatch::new(
            Arc::clone(&lease.key),
            self.config.key_prefix.len(),
            ttl,
            lease.valid_from,
            meter,
        ));
        let cadence = options.watchdog.then(|| self.cadence(ttl));
        let max_hold = options.max_hold.or(self.config.max_hold);
        self.keeper
            .watchdog()
            .watch(lease.clone(), Arc::clone(&watch), cadence, max_hold);
        let hold = Hold::new(
            Arc::clone(&self.keeper),
            Arc::clone(&self.reentrancy),
            lease,
            watch,
        );
        if let Some(at_least) = options.hold_at_least {
            // From the answer, which came after the server's grant: at least long enough.
            hold.keep_until(Some((Instant::now() + at_least, Kept::AtLeast)));
        }
        let guard = LockGuard::new(Arc::new(hold), false, holder);
        tracing::debug!(
            fencing_token = guard.fencing_token(),
            waited_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
            "dlock: acquired"
        );
        if let Some(reason) = guard.lost_reason() {
            // Granted, but the reply came too late to use it safely; dropping the guard
            // releases the grant in the background.
            return Err(Error::LeaseLost {
                key: options.key.to_owned(),
                reason,
            });
        }
        Ok(guard)
    }

    /// The watchdog's renewal period for a lease of `ttl`: the configured interval if it
    /// leaves room for a second try before the lease runs out, else `ttl / 3`.
    fn cadence(&self, ttl: Duration) -> Duration {
        match self.config.watchdog_interval {
            Some(interval) if interval <= ttl / 2 => interval,
            _ => ttl / 3,
        }
    }
}

/// A backend's error as the caller should see it: keys named as the caller gave them.
fn for_the_caller(error: Error, user_key: &str) -> Error {
    match error {
        Error::PermitLimitMismatch {
            stored, requested, ..
        } => Error::PermitLimitMismatch {
            key: user_key.to_owned(),
            stored,
            requested,
        },
        other => other,
    }
}

/// Whether an acquire that failed with `error` may still have been granted on the server (the
/// request was sent, and no answer came back), so its owner's grant must be released.
pub(crate) fn may_have_been_applied(error: &Error) -> bool {
    error.kind() == crate::ErrorKind::Unavailable
}

/// A grant that may be made on the server with nobody told: an acquire sent and not yet
/// answered. Dropped before [`answered_with`](Self::answered_with) — the caller's future was
/// cancelled mid-request, or the answer was an error after which the request may still be
/// applied — it is released (owner-checked: a grant that never was changes nothing) in the
/// background, so a cancelled acquire never leaves a lock to its ttl.
pub(crate) struct Unconfirmed<'a> {
    keeper: &'a Arc<LeaseKeeper>,
    lease: Option<Lease>,
}

impl<'a> Unconfirmed<'a> {
    /// `request`, about to be sent.
    pub(crate) fn of(keeper: &'a Arc<LeaseKeeper>, request: &AcquireRequest) -> Self {
        Self {
            keeper,
            lease: Some(Lease::new(request, Instant::now())),
        }
    }

    /// The request was answered with `outcome`: settled, unless the answer is an error after
    /// which the request may still be applied.
    pub(crate) fn answered_with<T>(&mut self, outcome: &Result<T>) {
        if !outcome.as_ref().is_err_and(may_have_been_applied) {
            self.lease = None;
        }
    }

    /// The lease, for whoever settles it instead.
    fn take(mut self) -> Lease {
        self.lease
            .take()
            .unwrap_or_else(|| unreachable!("taken once"))
    }
}

impl Drop for Unconfirmed<'_> {
    fn drop(&mut self) {
        if let Some(lease) = self.lease.take() {
            self.keeper.release_once_answered(lease);
        }
    }
}
