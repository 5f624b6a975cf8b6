//! PostgreSQL's errors as dlock's, and the time bound on every statement.

use std::future::Future;
use std::time::Duration;

use tokio_postgres::error::SqlState;

use crate::Error;
use crate::error::within;

/// dlock's error for a tokio-postgres error: a connection that is closed or cannot be made,
/// or a server shutting down or refusing connections, is [`Error::Unavailable`]; an error the
/// server answers a statement with (permissions, a missing schema) is [`Error::Refused`].
pub(super) fn from_pg(error: tokio_postgres::Error) -> Error {
    let described = describe(&error);
    if is_unavailable(&error) {
        Error::unavailable("postgres", described)
    } else {
        Error::refused("postgres", described)
    }
}

/// What the server said (tokio-postgres shows a server's error as just `db error`):
/// `FATAL: terminating connection due to administrator command (57P01)`.
pub(super) fn describe(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("{}: {} ({})", db.severity(), db.message(), db.code().code()),
        None => {
            // The causes too: a failed TLS handshake shows only that it failed, and its
            // source says why (`invalid peer certificate: UnknownIssuer`).
            let mut described = error.to_string();
            let mut source = std::error::Error::source(error);
            while let Some(cause) = source {
                let cause_text = cause.to_string();
                if !described.contains(&cause_text) {
                    described.push_str(": ");
                    described.push_str(&cause_text);
                }
                source = cause.source();
            }
            described
        }
    }
}

/// Whether `error` means the server or the connection is gone, rather than a refusal.
pub(super) fn is_unavailable(error: &tokio_postgres::Error) -> bool {
    if error.is_closed() {
        return true;
    }
    match error.code() {
        // No SQLSTATE: an I/O error, a timeout while connecting, a protocol error.
        None => true,
        Some(code) => {
            code.code().starts_with("08") // connection exception
                || *code == SqlState::ADMIN_SHUTDOWN
                || *code == SqlState::CRASH_SHUTDOWN
                || *code == SqlState::CANNOT_CONNECT_NOW
                || *code == SqlState::TOO_MANY_CONNECTIONS
                || code.code() == "57P05" // idle_session_timeout
        }
    }
}

/// Whether `error` is `lock_timeout` running out (SQLSTATE `55P03`): the lock is busy.
pub(super) fn is_lock_timeout(error: &tokio_postgres::Error) -> bool {
    error.code() == Some(&SqlState::LOCK_NOT_AVAILABLE)
}

/// Awaits `request`, giving [`Error::Timeout`] after `timeout`.
pub(super) async fn timed<T>(
    timeout: Duration,
    operation: &'static str,
    request: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> crate::Result<T> {
    timed_raw(timeout, operation, request)
        .await?
        .map_err(from_pg)
}

/// Like [`timed`], keeping PostgreSQL's own error (for the callers that act on `55P03`).
pub(super) async fn timed_raw<T>(
    timeout: Duration,
    operation: &'static str,
    request: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> crate::Result<Result<T, tokio_postgres::Error>> {
    within("postgres", operation, timeout, request).await
}
