//! etcd client errors as dlock's: unavailable (transient) or refused, and the one answer that
//! means a session's lease is gone.

use etcd_client::Error as EtcdError;
use tonic::Code;

use crate::Error;

/// [`Error::Unavailable`] for transport failures and the statuses of a cluster that cannot
/// serve now (no leader, overloaded, deadline exceeded); [`Error::Refused`] for the answers
/// that refuse (authentication, permission, invalid or failed-precondition requests).
pub(super) fn from_etcd(error: EtcdError) -> Error {
    if is_transient(&error) {
        Error::unavailable("etcd", error)
    } else {
        Error::refused("etcd", error)
    }
}

fn is_transient(error: &EtcdError) -> bool {
    match error {
        EtcdError::IoError(_)
        | EtcdError::TransportError(_)
        | EtcdError::WatchError(_)
        | EtcdError::LeaseKeepAliveError(_)
        | EtcdError::EndpointError(_) => true,
        EtcdError::GRpcStatus(status) => matches!(
            status.code(),
            Code::Unavailable
                | Code::DeadlineExceeded
                | Code::Aborted
                | Code::Cancelled
                | Code::ResourceExhausted
                | Code::Internal
                | Code::Unknown
        ),
        _ => false,
    }
}

/// Whether `error` is etcd's answer for a request that names a lease it no longer has
/// (expired or revoked): the session that lease stood for is lost.
pub(super) fn is_lease_not_found(error: &Error) -> bool {
    let (Error::Refused { source, .. } | Error::Unavailable { source, .. }) = error else {
        return false;
    };
    source
        .downcast_ref::<EtcdError>()
        .is_some_and(names_a_lost_lease)
}

/// [`is_lease_not_found`] for the client's own error (a keepalive stream's, too).
pub(super) fn names_a_lost_lease(error: &EtcdError) -> bool {
    match error {
        EtcdError::GRpcStatus(status) => {
            status.code() == Code::NotFound && status.message().contains("lease not found")
        }
        EtcdError::LeaseKeepAliveError(message) => message.contains("not found"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn statuses_are_sorted_into_unavailable_and_refused() {
        let status = |code, message: &str| EtcdError::GRpcStatus(tonic::Status::new(code, message));
        let no_leader = from_etcd(status(Code::Unavailable, "etcdserver: no leader"));
        assert_eq!(no_leader.kind(), ErrorKind::Unavailable);
        let auth = from_etcd(status(
            Code::InvalidArgument,
            "etcdserver: authentication failed, invalid user ID or password",
        ));
        assert_eq!(auth.kind(), ErrorKind::Refused);
        let lease = from_etcd(status(
            Code::NotFound,
            "etcdserver: requested lease not found",
        ));
        assert!(is_lease_not_found(&lease));
        assert!(!is_lease_not_found(&auth));
    }
}
