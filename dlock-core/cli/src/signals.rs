//! The signals `dlock` catches while it waits for a lock or runs a command: SIGINT, SIGTERM and
//! SIGHUP, passed on to the command (or ending a hold).

use std::io;

use rustix::process::Signal;
use tokio::signal::unix::{SignalKind, signal};

/// The handlers, installed once: from then on these signals no longer end `dlock` by
/// themselves, it decides.
#[derive(Debug)]
pub(crate) struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hang_up: tokio::signal::unix::Signal,
}

impl Signals {
    /// Catches SIGINT, SIGTERM and SIGHUP.
    ///
    /// # Errors
    ///
    /// When a handler cannot be installed.
    pub(crate) fn catch() -> io::Result<Self> {
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hang_up: signal(SignalKind::hangup())?,
        })
    }

    /// The next signal that arrives.
    pub(crate) async fn next(&mut self) -> Signal {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::INT,
            _ = self.terminate.recv() => Signal::TERM,
            _ = self.hang_up.recv() => Signal::HUP,
        }
    }
}

/// The status a shell gives a process that `signal` ended: 128 + its number.
pub(crate) fn status_for(signal: i32) -> u8 {
    u8::try_from(128 + signal).unwrap_or(u8::MAX)
}
