//! The faults, and how each is done to a running shape.

use std::time::Duration;

use dlock_harness::ProxyMode;
use rand::Rng;
use rand::rngs::StdRng;

use crate::TTL;

/// A fault the runner injects while the workers run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The worker in the critical section is frozen (`SIGSTOP`) for 1.5 ttl, then thawed.
    PauseHolder,
    /// The worker in the critical section is killed (`SIGKILL`); a new worker takes its place.
    KillHolder,
    /// A server (an ensemble's leader, one Redis master at random) is killed (`SIGKILL`) and
    /// restarted 0.2–2 s later on the same ports and data directory.
    KillServer,
    /// The same server is frozen (`SIGSTOP`) for 1.5 ttl, then thawed.
    PauseServer,
    /// The holder's connections are cut, and new ones refused, for 0.5–3 s.
    CutConnection,
    /// The servers' replies to the holder arrive 0.5–1.5 ttl late, for 2–5 s.
    DelayReplies,
}

impl Fault {
    pub(crate) const ALL: [Self; 6] = [
        Self::PauseHolder,
        Self::KillHolder,
        Self::KillServer,
        Self::PauseServer,
        Self::CutConnection,
        Self::DelayReplies,
    ];

    pub(crate) const fn name(self) -> &'static str {
        match self {
            Self::PauseHolder => "pause-holder",
            Self::KillHolder => "kill-holder",
            Self::KillServer => "kill-server",
            Self::PauseServer => "pause-server",
            Self::CutConnection => "cut-connection",
            Self::DelayReplies => "delay-replies",
        }
    }

    pub(crate) fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|fault| fault.name() == name)
    }

    /// Whether the fault needs each worker behind proxies of its own.
    pub(crate) const fn needs_proxies(self) -> bool {
        matches!(self, Self::CutConnection | Self::DelayReplies)
    }

    /// How the fault goes this time: its length (and delay), drawn from `rng`.
    pub(crate) fn draw(self, rng: &mut StdRng) -> Plan {
        let between = |rng: &mut StdRng, low: f64, high: f64| {
            Duration::from_secs_f64(rng.random_range(low..high))
        };
        match self {
            Self::PauseHolder => Plan::PauseHolder(TTL.mul_f64(1.5)),
            Self::KillHolder => Plan::KillHolder,
            Self::KillServer => Plan::KillServer(between(rng, 0.2, 2.0)),
            Self::PauseServer => Plan::PauseServer(TTL.mul_f64(1.5)),
            Self::CutConnection => Plan::Proxy(ProxyMode::Cut, between(rng, 0.5, 3.0)),
            Self::DelayReplies => {
                let delay = TTL.mul_f64(rng.random_range(0.5..1.5));
                Plan::Proxy(ProxyMode::DelayReplies(delay), between(rng, 2.0, 5.0))
            }
        }
    }
}

/// One fault's drawn parameters.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Plan {
    /// The holder frozen this long.
    PauseHolder(Duration),
    /// The holder killed for good (a new worker replaces it).
    KillHolder,
    /// A server killed, and restarted after this long.
    KillServer(Duration),
    /// A server frozen this long.
    PauseServer(Duration),
    /// The holder's proxies in this mode for this long.
    Proxy(ProxyMode, Duration),
}
