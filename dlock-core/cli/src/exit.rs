//! The exit statuses of `dlock`, and the message for a failure.

use std::error::Error as _;

use dlock_core::{BackendSpec, Error, ErrorKind};

/// Bad usage or configuration (`EX_USAGE`, as flock(1)): a bad flag, an invalid duration, an
/// unknown backend, a mode the backend lacks.
pub(crate) const USAGE: u8 = 64;
/// The lock service failed: unreachable, timed out, refused (`EX_UNAVAILABLE`).
pub(crate) const UNAVAILABLE: u8 = 69;
/// The lease was lost while the command ran, and the command was stopped (`EX_TEMPFAIL`: a
/// later run may well succeed).
pub(crate) const LOST: u8 = 75;
/// The command was found but could not be run (the shells' status).
pub(crate) const CANNOT_RUN: u8 = 126;
/// The command was not found (the shells' status).
pub(crate) const NOT_FOUND: u8 = 127;

/// The status for a failed lock operation; `busy` for a lock held by someone else.
pub(crate) fn for_error(error: &Error, busy: u8) -> u8 {
    match error.kind() {
        ErrorKind::Busy => busy,
        ErrorKind::LeaseLost => LOST,
        ErrorKind::InvalidInput | ErrorKind::Unsupported => USAGE,
        _ => UNAVAILABLE,
    }
}

/// Reports `error` ([`report`]); its status ([`for_error`]).
pub(crate) fn failed(error: &Error, busy: u8) -> u8 {
    report(error);
    for_error(error, busy)
}

/// Prints `dlock: <error>: <cause>: …` on stderr, each cause once.
pub(crate) fn report(error: &Error) {
    eprintln!("dlock: {}", describe(error));
}

/// Like [`report`], naming the lock service (passwords hidden) when it failed: the backend's
/// own message may not say which server it could not reach.
pub(crate) fn report_at(error: &Error, service: &BackendSpec) {
    match error.kind() {
        ErrorKind::Unavailable | ErrorKind::Refused => {
            eprintln!("dlock: {} (lock service {service})", describe(error));
        }
        _ => report(error),
    }
}

/// The error and the causes its own message does not already include.
pub(crate) fn describe(error: &Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        let said = inner.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = inner.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn busy_takes_the_conflict_status_and_others_their_own() {
        let busy = Error::Busy {
            key: "job".into(),
            waited: Duration::ZERO,
            retry_after: None,
            by_this_locker: false,
        };
        assert_eq!(for_error(&busy, 42), 42);
        assert_eq!(
            for_error(&Error::config("ttl", "0s", "too short"), 1),
            USAGE
        );
        let down = Error::unavailable("redis", std::io::Error::other("connection refused"));
        assert_eq!(for_error(&down, 1), UNAVAILABLE);
        assert!(
            describe(&down).contains("connection refused"),
            "{}",
            describe(&down)
        );
    }
}
