//! The conformance suite: the behaviour every backend must show, as one function per
//! scenario, run by each backend's tests. **Not API-stable.**
//!
//! A [`Target`] says how to open a new client ("process") of the lock service under test and
//! what to expect of it ([`Expectations`]: fencing, fairness, the short lease the timing
//! scenarios use). [`conformance_tests!`](crate::conformance_tests) turns the whole suite into
//! one `#[tokio::test]` per scenario:
//!
//! ```ignore
//! dlock_core::conformance_tests!(memory, async {
//!     let table = dlock_core::backend::MemoryBackend::new();
//!     dlock_core::conformance::Target::new(
//!         move || { let t = table.clone(); async move { std::sync::Arc::new(t) } },
//!         dlock_core::conformance::Expectations::of(&dlock_core::backend::MemoryBackend::new()),
//!     )
//! });
//! ```
//!
//! Scenarios panic with a message saying what went wrong.

mod admin;
mod contract;
mod election;
mod exclusion;
mod jobs;
mod leases;
mod modes;
mod multi_key;
mod reentrancy;
mod support;
mod waiting;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

// Every scenario is a `pub async fn(&Target<B>)` in one of the files above, registered once:
// in the list of `conformance_tests!` below.
pub use admin::*;
pub use contract::*;
pub use election::*;
pub use exclusion::*;
pub use jobs::*;
pub use leases::*;
pub use modes::*;
pub use multi_key::*;
pub use reentrancy::*;
pub use support::CountingBackend;
pub use waiting::*;

use crate::backend::{Capabilities, Fencing, LockBackend};
use crate::config::DlockConfig;
use crate::lease::{AcquireOutcome, AcquireRequest};
use crate::locker::Locker;

type Connect<B> = dyn Fn() -> Pin<Box<dyn Future<Output = Arc<B>> + Send>> + Send + Sync;

/// A lock service under test: how to open another client of it, and what to expect.
pub struct Target<B: LockBackend + ?Sized> {
    connect: Arc<Connect<B>>,
    /// What the scenarios may rely on.
    pub expect: Expectations,
}

impl<B: LockBackend + ?Sized> fmt::Debug for Target<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("expect", &self.expect)
            .finish_non_exhaustive()
    }
}

impl<B: LockBackend + ?Sized> Target<B> {
    /// A target whose clients come from `connect`. Each call must return a new client of the
    /// **same** lock service (for memory: a clone of one table).
    pub fn new<F, Fut>(connect: F, expect: Expectations) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Arc<B>> + Send + 'static,
    {
        Self {
            connect: Arc::new(move || Box::pin(connect())),
            expect,
        }
    }

    /// A target on a service that `server` keeps running (a harness process, its
    /// certificates: anything, dropped with the target), whose clients come from `connect`;
    /// the expectations are read off a first client and adjusted by `adjust` (the lease and
    /// slack the service's timing needs, what its capabilities do not say).
    pub async fn serving<S, C, Fut>(
        server: S,
        connect: C,
        adjust: impl FnOnce(Expectations) -> Expectations,
    ) -> Self
    where
        B: Sized,
        S: Send + Sync + 'static,
        C: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = B> + Send + 'static,
    {
        let expect = adjust(Expectations::of(&connect().await));
        Self::new(
            move || {
                let _running = &server;
                let client = connect();
                async move { Arc::new(client.await) }
            },
            expect,
        )
    }

    /// Returns once `count` acquires wait on `full_key`, as a client's
    /// [`inspect`](LockBackend::inspect) of the service lists them, so ordering scenarios know
    /// a waiter has queued instead of sleeping and hoping it has. Where waiters queue in each
    /// client rather than on the service (RedLock), after a pause long enough for a
    /// waiter to enqueue on a healthy backend.
    pub(crate) async fn until_queued(&self, full_key: &str, count: usize) {
        let client = (self.connect)().await;
        let give_up = std::time::Instant::now() + self.expect.slack * 20;
        loop {
            let waiting = match client.inspect(full_key).await {
                Ok(crate::LockInfo {
                    waiters: Some(waiters),
                    ..
                }) => waiters.len(),
                _ => {
                    tokio::time::sleep(self.expect.slack / 2).await;
                    return;
                }
            };
            if waiting >= count {
                return;
            }
            assert!(
                std::time::Instant::now() < give_up,
                "waiter {count} never queued on `{full_key}` ({waiting} did)"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// [`until_queued`](Self::until_queued) for a reader or permit, the `count`th waiter:
    /// where the backend does not list those, until the waiters before it are listed, then
    /// half the slack (as for a backend that lists no waiters).
    pub(crate) async fn until_share_queued(&self, full_key: &str, count: usize) {
        if self.expect.lists_share_waiters {
            self.until_queued(full_key, count).await;
        } else {
            self.until_queued(full_key, count - 1).await;
            tokio::time::sleep(self.expect.slack / 2).await;
        }
    }

    /// Grants `request` to a new client that then crashes: it is connected on a runtime of its
    /// own, in a thread of its own, and after the grant the client and its lease are forgotten
    /// and the runtime shut down — no release, no keepalive, no clean-up runs, as when its
    /// process is killed. Returns whether the grant was made.
    pub(crate) async fn grant_then_crash(&self, request: AcquireRequest) -> bool {
        let connect = Arc::clone(&self.connect);
        let crashed = tokio::task::spawn_blocking(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the crashing client");
            let granted = runtime.block_on(async move {
                let client = connect().await;
                let outcome = client
                    .acquire(&request, Some(std::time::Instant::now()))
                    .await
                    .expect("raw acquire");
                let granted = matches!(outcome, AcquireOutcome::Acquired(_));
                std::mem::forget(outcome);
                std::mem::forget(client);
                granted
            });
            // Its tasks (connections, keepalives) die with it.
            drop(runtime);
            granted
        });
        crashed
            .await
            .expect("the crashing client's thread panicked")
    }

    /// A new client of the service, used directly through the backend contract.
    pub async fn client(&self) -> Arc<B> {
        (self.connect)().await
    }

    /// A new client wrapped in a [`Locker`] with the suite's settings (the short lease,
    /// a prefix unique to this call so scenarios never see each other's keys).
    pub async fn locker(&self) -> Locker {
        self.locker_with_prefix(&self.expect.prefix).await
    }

    /// Like [`locker`](Self::locker), over a client wrapped in a [`CountingBackend`], to show
    /// what the core does *not* send (a re-entry, an unsupported mode).
    pub async fn counting_locker(&self) -> (Arc<CountingBackend<B>>, Locker) {
        let counting = Arc::new(CountingBackend::new(self.client().await));
        let backend = Arc::clone(&counting) as Arc<dyn LockBackend>;
        let locker = Locker::with_config(backend, &self.config(&self.expect.prefix))
            .expect("suite settings are valid");
        (counting, locker)
    }

    /// Like [`locker`](Self::locker), with every lock asking for a fencing token when the
    /// backend issues them (`fencing = true`).
    pub async fn fenced_locker(&self) -> Locker {
        let config = DlockConfig {
            fencing: self.expect.fencing(),
            ..self.config(&self.expect.prefix)
        };
        self.locker_with_config(&config).await
    }

    /// A way to make, from any thread and runtime, a Locker like [`locker`](Self::locker)'s:
    /// its client is connected on the runtime that awaits the future, so a scenario can run a
    /// whole client — connections, watchdog — on a runtime of its own.
    pub(crate) fn locker_maker(
        &self,
    ) -> impl Fn() -> Pin<Box<dyn Future<Output = Locker> + Send>> + Send + 'static {
        let connect = Arc::clone(&self.connect);
        let config = self.config(&self.expect.prefix);
        move || {
            let (connect, config) = (Arc::clone(&connect), config.clone());
            Box::pin(async move {
                let client = connect().await;
                Locker::with_config(Arc::new(client), &config).expect("suite settings are valid")
            })
        }
    }

    /// Like [`locker`](Self::locker) with an explicit key prefix; two Lockers with the same
    /// prefix contend for the same keys.
    pub async fn locker_with_prefix(&self, prefix: &str) -> Locker {
        self.locker_with_config(&self.config(prefix)).await
    }

    async fn locker_with_config(&self, config: &DlockConfig) -> Locker {
        let client = self.client().await;
        Locker::with_config(Arc::new(client), config).expect("suite settings are valid")
    }

    /// The suite's settings: the short lease, the operation timeout, `prefix`.
    fn config(&self, prefix: &str) -> DlockConfig {
        DlockConfig {
            key_prefix: prefix.to_owned(),
            ttl: self.expect.ttl,
            operation_timeout: self.expect.operation_timeout,
            ..DlockConfig::default()
        }
    }
}

/// What a backend promises: its own [`Capabilities`] (the scenarios of a mode it lacks check
/// that asking for it is `Unsupported`; fairness and fencing are checked where claimed), and
/// what the capabilities do not say, as explicit parameters of the suite.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Expectations {
    /// What the backend says it can do, read off a client of it.
    pub capabilities: Capabilities,
    /// `force_release` is supported (used to delete a key behind its holder's back).
    pub force_release: bool,
    /// [`inspect`](crate::backend::LockBackend::inspect) is supported (otherwise the
    /// scenario checks that it says `Unsupported`).
    pub inspect: bool,
    /// The short lease the timing scenarios use. It must be long enough for a few round trips.
    pub ttl: Duration,
    /// Scheduling and network slack allowed on top of every expected time.
    pub slack: Duration,
    /// How late after its ttl the service itself frees the lock of a crashed client (etcd
    /// looks for expired leases every 500 ms, then commits the revocation); zero where the
    /// ttl is the key's own expiry (memory, Redis).
    pub expiry_lag: Duration,
    /// The service frees a crashed client's locks as soon as its connection closes, before
    /// the ttl (PostgreSQL: a session's locks end with it): the scenarios with a crashed
    /// holder then expect the lock free at once rather than after the ttl.
    pub frees_on_disconnect: bool,
    /// The operation timeout the suite's Lockers use.
    pub operation_timeout: Duration,
    /// Key prefix for this run's Lockers.
    pub prefix: String,
    /// How much longer than asked a backend may keep a released lock: the unit its expiries
    /// are rounded up to (etcd leases: whole seconds); zero where they are exact.
    pub keep_rounding: Duration,
    /// A free lock set is taken in one backend call
    /// ([`acquire_together`](crate::backend::LockBackend::acquire_together)) and released in
    /// one; by default where the capabilities claim it.
    pub sets_in_one_call: bool,
    /// Racing acquires may all lose one attempt: a quorum backend (RedLock) whose masters
    /// each granted a different racer gives nobody a majority. At most one still wins.
    pub split_votes: bool,
    /// [`inspect`](crate::backend::LockBackend::inspect) lists waiting readers and permits
    /// (Redis lists only the writers in its line: readers and permits wait in their Lockers).
    pub lists_share_waiters: bool,
}

impl Expectations {
    /// Expectations read off `backend`'s capabilities, with a 300 ms lease and 250 ms slack.
    pub fn of(backend: &(impl LockBackend + ?Sized)) -> Self {
        Self {
            capabilities: backend.capabilities(),
            force_release: true,
            inspect: true,
            ttl: Duration::from_millis(300),
            slack: Duration::from_millis(250),
            expiry_lag: Duration::ZERO,
            frees_on_disconnect: false,
            operation_timeout: Duration::from_secs(2),
            prefix: format!("conformance:{:08x}:", rand::random::<u32>()),
            split_votes: false,
            keep_rounding: Duration::ZERO,
            sets_in_one_call: backend.capabilities().together,
            lists_share_waiters: true,
        }
    }

    /// Sets [`Expectations::lists_share_waiters`].
    #[must_use]
    pub const fn lists_share_waiters(mut self, lists: bool) -> Self {
        self.lists_share_waiters = lists;
        self
    }

    /// Whether grants carry strictly increasing tokens.
    #[must_use]
    pub fn fencing(&self) -> bool {
        self.capabilities.fencing != Fencing::None
    }

    /// Sets [`Expectations::split_votes`].
    #[must_use]
    pub const fn split_votes(mut self, possible: bool) -> Self {
        self.split_votes = possible;
        self
    }

    /// Sets [`Expectations::sets_in_one_call`].
    #[must_use]
    pub const fn sets_in_one_call(mut self, one_call: bool) -> Self {
        self.sets_in_one_call = one_call;
        self
    }

    /// Sets [`Expectations::keep_rounding`].
    #[must_use]
    pub const fn keep_rounding(mut self, rounding: Duration) -> Self {
        self.keep_rounding = rounding;
        self
    }

    /// Sets [`Expectations::ttl`].
    #[must_use]
    pub const fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Sets [`Expectations::slack`].
    #[must_use]
    pub const fn slack(mut self, slack: Duration) -> Self {
        self.slack = slack;
        self
    }

    /// Sets [`Expectations::expiry_lag`].
    #[must_use]
    pub const fn expiry_lag(mut self, lag: Duration) -> Self {
        self.expiry_lag = lag;
        self
    }

    /// Sets [`Expectations::frees_on_disconnect`].
    #[must_use]
    pub const fn frees_on_disconnect(mut self, frees: bool) -> Self {
        self.frees_on_disconnect = frees;
        self
    }

    /// The soonest a crashed holder's lock of lease `ttl` may be free again.
    pub(crate) const fn crashed_holder_keeps(&self, ttl: Duration) -> Duration {
        if self.frees_on_disconnect {
            Duration::ZERO
        } else {
            ttl
        }
    }

    /// Sets [`Expectations::force_release`].
    #[must_use]
    pub const fn force_release(mut self, supported: bool) -> Self {
        self.force_release = supported;
        self
    }

    /// Sets [`Expectations::inspect`].
    #[must_use]
    pub const fn inspect(mut self, supported: bool) -> Self {
        self.inspect = supported;
        self
    }
}

/// Generates one `#[tokio::test]` per conformance scenario, in a module named `$name`.
///
/// `$target` is an async expression evaluating to a [`Target`]; it runs once per test.
#[macro_export]
macro_rules! conformance_tests {
    ($name:ident, $target:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            $crate::conformance_tests!(@tests $target;
                mutual_exclusion_read_sleep_write,
                try_lock_race_has_one_winner,
                ttl_expiry_after_holder_vanishes,
                watchdog_keeps_lock_past_three_ttls,
                lease_expires_without_watchdog,
                lost_lease_cancels_work,
                paused_holder_never_resumes_its_work,
                dropped_guard_releases,
                non_owner_release_and_renew_refused,
                release_is_idempotent,
                fencing_tokens_strictly_increase,
                fencing_on_request,
                invalid_keys_are_rejected,
                wait_deadline_is_honoured,
                try_lock_does_not_wait,
                waiter_woken_promptly_on_release,
                waiters_are_served_in_order,
                waiters_of_many_lockers_are_served_in_order,
                cancelled_wait_leaves_nothing_behind,
                given_up_waiter_leaves_nothing_behind,
                reentrancy_is_per_task,
                hand_off_shares_the_hold,
                readers_overlap,
                writer_excludes_readers_and_writers,
                waiting_writer_is_not_starved,
                semaphore_never_exceeds_its_limit,
                vanished_permit_frees_at_its_ttl,
                semaphore_limit_mismatch_is_an_error,
                downgrade_reenters_and_upgrade_errors,
                cancelled_reader_or_permit_leaves_nothing_behind,
                tokens_increase_across_modes,
                max_hold_ends_a_hold,
                shutdown_releases_every_lock,
                shutdown_ends_waiting_acquires,
                inspect_shows_holders_and_waiters,
                hold_at_least_keeps_a_released_lock,
                hold_at_least_outlives_the_holder,
                queued_waiter_waits_out_a_kept_release,
                kept_lock_is_owner_checked,
                once_runs_a_fire_once,
                once_runs_again_after_a_failure,
                lock_set_takes_all_or_none,
                lock_set_takes_no_kept_key,
                lock_sets_in_opposite_orders_never_deadlock,
                lock_set_wait_covers_the_whole_set,
                cancelled_lock_set_leaves_nothing_behind,
                losing_one_member_cancels_the_set_work,
                lock_set_behind_a_held_key_is_refused,
                set_release_wakes_waiters_of_each_member,
                election_has_one_leader_at_a_time,
                observers_see_each_leader_in_order,
                proclaim_is_only_for_the_leader,
                resign_hands_over_promptly,
                paused_leader_wakes_deposed,
            );
        }
    };
    (@tests $target:expr; $($scenario:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $scenario() {
                let target = $target.await;
                $crate::conformance::$scenario(&target).await;
            }
        )*
    };
}
