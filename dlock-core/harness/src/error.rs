//! The harness's error type.

use std::time::Duration;

/// What the install hint of [`HarnessError::MissingBinary`] says by default.
pub(crate) const INSTALL_HINT: &str =
    "run scripts/install-test-deps.sh (or the README's test command) to install the test servers";

/// Why a test server could not be provided.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HarnessError {
    /// A server binary (or ZooKeeper's jar) is not installed.
    #[error("`{binary}` not found on PATH: {hint}")]
    MissingBinary {
        /// The binary that was looked for, e.g. `redis-server`.
        binary: String,
        /// How to install it.
        hint: String,
    },
    /// A server (or a cluster) did not become ready.
    #[error("{server} did not start: {reason}\n--- last lines of its log ---\n{log_tail}")]
    Startup {
        /// Which server, e.g. `redis-server on 127.0.0.1:40123`.
        server: String,
        /// What went wrong: it exited, or it was not ready within the startup timeout.
        reason: String,
        /// The last lines of the server's log file.
        log_tail: String,
    },
    /// A cluster condition (e.g. an elected leader) did not hold in time.
    #[error("{what}: not reached within {after:?}")]
    Timeout {
        /// The condition that was waited for.
        what: String,
        /// How long the harness waited.
        after: Duration,
    },
    /// An I/O error: creating a temporary directory, spawning or signalling a process, or
    /// talking to a server.
    #[error("harness I/O error: {0}")]
    Io(#[from] std::io::Error),
}

impl HarnessError {
    /// A [`HarnessError::MissingBinary`] with the default install hint.
    pub(crate) fn missing(binary: impl Into<String>) -> Self {
        Self::MissingBinary {
            binary: binary.into(),
            hint: INSTALL_HINT.to_owned(),
        }
    }
}
