//! Redis client errors as dlock's: unavailable (transient) or refused; keys of another
//! application named.

use redis::{ErrorKind, FromRedisValue, RedisError, ServerErrorKind, Value};

use super::keys::RedisName;
use crate::Error;

/// [`Error::Unavailable`] for failures of the connection or of a cluster that is loading,
/// failing over or down — worth retrying later; [`Error::Refused`] for everything the server
/// answered and refused (authentication, permissions, a key of another type, a script error).
pub(super) fn from_redis(error: RedisError) -> Error {
    if is_transient(&error) {
        Error::unavailable("redis", error)
    } else {
        Error::refused("redis", error)
    }
}

/// A script's answer that a key of lock `key` holds another type (`lock <type>`,
/// `fence <type>`) as the error that tells the user: another application uses the name.
pub(super) fn foreign_key(key: &str, reply: Value) -> Error {
    let found = String::from_redis_value(reply).unwrap_or_default();
    let (which, kind) = found.split_once(' ').unwrap_or(("lock", &found));
    let name = if which == "fence" {
        RedisName::fence(key)
    } else {
        RedisName::lock(key)
    };
    Error::refused(
        "redis",
        format!(
            "Redis key `{name}` holds a {kind}, not a dlock lock: another application uses this key name (choose another key prefix)"
        ),
    )
}

fn is_transient(error: &RedisError) -> bool {
    error.is_io_error()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_timeout()
        || matches!(
            error.kind(),
            ErrorKind::ClusterConnectionNotFound
                | ErrorKind::Server(
                    ServerErrorKind::BusyLoading
                        | ServerErrorKind::TryAgain
                        | ServerErrorKind::ClusterDown
                        | ServerErrorKind::MasterDown
                        | ServerErrorKind::ReadOnly
                )
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind as Kind;

    #[test]
    fn connection_failures_are_unavailable_and_answers_refused() {
        let reset = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert_eq!(from_redis(reset).kind(), Kind::Unavailable);
        let loading = RedisError::from((
            ErrorKind::Server(ServerErrorKind::BusyLoading),
            "Redis is loading the dataset in memory",
        ));
        assert_eq!(from_redis(loading).kind(), Kind::Unavailable);
        let auth = RedisError::from((ErrorKind::AuthenticationFailed, "WRONGPASS"));
        assert_eq!(from_redis(auth).kind(), Kind::Refused);
        let perm = RedisError::from((ErrorKind::Server(ServerErrorKind::NoPerm), "NOPERM"));
        assert_eq!(from_redis(perm).kind(), Kind::Refused);
    }
}
