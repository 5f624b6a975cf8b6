//! The metrics dlock records (the crate docs' "Metrics" section lists them), on the
//! [`metrics`](https://docs.rs/metrics) facade with the `metrics` feature; without it a
//! [`Meter`] is empty and every call compiles to nothing.

use std::time::Duration;

use crate::LockMode;
use crate::LostReason;

/// The `key` label of a request that names no template, unless raw keys are asked for.
pub(crate) const ANY_KEY: &str = "*";

/// The labels of one lock's metrics, and the recording of each event.
#[derive(Debug, Clone, Default)]
pub(crate) struct Meter {
    #[cfg(feature = "metrics")]
    labels: Vec<metrics::Label>,
}

impl Meter {
    /// The labels of a lock of `backend` held in `mode`, `key` being its label value.
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn new(backend: &'static str, mode: LockMode, key: &str) -> Self {
        #[cfg(feature = "metrics")]
        {
            let mode = match mode {
                LockMode::Exclusive => "exclusive",
                LockMode::Shared => "shared",
                LockMode::Permit { .. } => "permit",
            };
            let key = if key == ANY_KEY {
                metrics::SharedString::const_str(ANY_KEY)
            } else {
                metrics::SharedString::from(key.to_owned())
            };
            Self {
                labels: vec![
                    metrics::Label::from_static_parts("backend", backend),
                    metrics::Label::from_static_parts("mode", mode),
                    metrics::Label::new("key", key),
                ],
            }
        }
        #[cfg(not(feature = "metrics"))]
        Self {}
    }

    /// Describes every metric (unit and help text) to the recorder installed now; a
    /// recorder installed later sees the metrics without descriptions.
    pub(crate) fn describe() {
        #[cfg(feature = "metrics")]
        {
            use metrics::Unit;
            metrics::describe_histogram!(
                "dlock.acquire.duration",
                Unit::Seconds,
                "Time from asking for a lock to the grant or the failure"
            );
            metrics::describe_histogram!(
                "dlock.hold.duration",
                Unit::Seconds,
                "Time from a grant to its release or loss"
            );
            metrics::describe_gauge!(
                "dlock.lock.count",
                Unit::Count,
                "Locks held, and acquires waiting, by this process"
            );
            metrics::describe_counter!(
                "dlock.renewals",
                Unit::Count,
                "Lease renewals by the watchdog, by outcome"
            );
            metrics::describe_counter!("dlock.lost", Unit::Count, "Leases lost, by reason");
            metrics::describe_counter!(
                "dlock.once",
                Unit::Count,
                "Fires of once-per-fire jobs, by outcome: ran, failed, skipped_running, skipped_done"
            );
        }
    }

    #[cfg(feature = "metrics")]
    fn with(&self, name: &'static str, value: &'static str) -> Vec<metrics::Label> {
        let mut labels = Vec::with_capacity(self.labels.len() + 1);
        labels.extend_from_slice(&self.labels);
        labels.push(metrics::Label::from_static_parts(name, value));
        labels
    }

    /// An acquire ended with `outcome` after `took`.
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn acquired(&self, outcome: &'static str, took: Duration) {
        #[cfg(feature = "metrics")]
        metrics::histogram!("dlock.acquire.duration", self.with("outcome", outcome)).record(took);
    }

    /// An acquire that may wait started: counted as waiting until the result is dropped.
    #[must_use]
    pub(crate) fn waiting(&self) -> Waiting {
        #[cfg(feature = "metrics")]
        {
            let gauge = metrics::gauge!("dlock.lock.count", self.with("state", "waiting"));
            gauge.increment(1.0);
            Waiting(gauge)
        }
        #[cfg(not(feature = "metrics"))]
        Waiting()
    }

    /// A grant is held from now on.
    pub(crate) fn held(&self) {
        #[cfg(feature = "metrics")]
        metrics::gauge!("dlock.lock.count", self.with("state", "held")).increment(1.0);
    }

    /// A grant held for `held_for` ended with `outcome` (`released` or `lost`).
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn hold_ended(&self, outcome: &'static str, held_for: Duration) {
        #[cfg(feature = "metrics")]
        {
            metrics::gauge!("dlock.lock.count", self.with("state", "held")).decrement(1.0);
            metrics::histogram!("dlock.hold.duration", self.with("outcome", outcome))
                .record(held_for);
        }
    }

    /// A renewal of this lock answered `outcome`.
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn renewal(&self, outcome: &'static str) {
        #[cfg(feature = "metrics")]
        metrics::counter!("dlock.renewals", self.with("outcome", outcome)).increment(1);
    }

    /// The lease was lost for `reason`.
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn once(&self, outcome: &'static str) {
        #[cfg(feature = "metrics")]
        metrics::counter!("dlock.once", self.with("outcome", outcome)).increment(1);
    }

    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn lost(&self, reason: &LostReason) {
        #[cfg(feature = "metrics")]
        {
            let reason = match reason {
                LostReason::NotOwner => "not_owner",
                LostReason::Expired => "expired",
                LostReason::MaxHold(_) => "max_hold",
                LostReason::Shutdown => "shutdown",
                LostReason::SessionLost(_) => "session_lost",
            };
            metrics::counter!("dlock.lost", self.with("reason", reason)).increment(1);
        }
    }
}

/// An acquire counted in `dlock.lock.count{state="waiting"}` while this lives.
#[derive(Debug)]
pub(crate) struct Waiting(#[cfg(feature = "metrics")] metrics::Gauge);

impl Drop for Waiting {
    fn drop(&mut self) {
        #[cfg(feature = "metrics")]
        self.0.decrement(1.0);
    }
}
