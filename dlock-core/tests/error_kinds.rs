//! Each kind of failure a caller can act on arrives as its own `Error` variant (and
//! `ErrorKind`), told apart by matching — never by reading a message: busy, lease lost,
//! unavailable (server down or frozen), refused (bad credentials, a foreign key), invalid
//! input; unsupported is `tests/fencing.rs` (fencing tokens asked of a backend without them).
//! Real servers where a server is involved.

use std::time::Duration;

use dlock_core::{DlockConfig, Error, ErrorKind, Locker, LostReason};
use dlock_harness::RedisServer;

fn redis_config(url: &str) -> DlockConfig {
    DlockConfig::from_toml_str(&format!(
        "backend = \"{url}\"\noperation_timeout = \"500ms\""
    ))
    .expect("config")
}

/// `key` taken from another task (the holding task itself would re-enter).
async fn held_elsewhere(locker: &Locker, key: &'static str) -> dlock_core::LockGuard {
    let locker = locker.clone();
    tokio::spawn(async move { locker.lock(key).await.expect("acquire") })
        .await
        .expect("task")
}

#[tokio::test]
async fn busy() {
    let locker = Locker::memory();
    let _held = held_elsewhere(&locker, "report").await;
    let error = locker.try_lock("report").await.unwrap_err();
    assert!(
        matches!(error, Error::Busy { ref key, .. } if key == "report"),
        "{error:?}"
    );
    assert_eq!(error.kind(), ErrorKind::Busy);
    assert!(error.is_retryable());
}

#[tokio::test]
async fn lease_lost() {
    let locker = Locker::memory();
    let guard = locker
        .lock("job")
        .ttl(Duration::from_millis(30))
        .watchdog(false)
        .await
        .unwrap();
    let error = guard
        .run(tokio::time::sleep(Duration::from_secs(5)))
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            Error::LeaseLost {
                reason: LostReason::Expired,
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(error.kind(), ErrorKind::LeaseLost);
    assert!(!error.is_retryable());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unavailable_when_the_server_is_down_or_frozen() {
    let server = RedisServer::start().await.unwrap();
    let locker = Locker::connect(&redis_config(&server.url())).await.unwrap();
    server.pause().expect("SIGSTOP");
    let error = locker.try_lock("k").await.unwrap_err();
    assert!(matches!(error, Error::Timeout { .. }), "frozen: {error:?}");
    assert_eq!(error.kind(), ErrorKind::Unavailable);
    assert!(error.is_retryable());
    server.resume().expect("SIGCONT");
    server.kill().await.unwrap();
    let error = locker.try_lock("k").await.unwrap_err();
    assert!(
        matches!(
            error,
            Error::Unavailable {
                backend: "redis",
                ..
            } | Error::Timeout { .. }
        ),
        "down: {error:?}"
    );
    assert_eq!(error.kind(), ErrorKind::Unavailable);
    let error = Locker::connect(&redis_config(&server.url()))
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            Error::Unavailable {
                backend: "redis",
                ..
            } | Error::Timeout { .. }
        ),
        "connect to a closed port: {error:?}"
    );
}

fn assert_refused_by_redis(error: &Error) {
    assert!(
        matches!(
            error,
            Error::Refused {
                backend: "redis",
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(error.kind(), ErrorKind::Refused);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_on_a_foreign_key_and_on_a_wrong_password() {
    let server = RedisServer::start().await.unwrap();
    let locker = Locker::connect(&redis_config(&server.url())).await.unwrap();
    // Another application's hash where the lock would live: the server refuses the lock's
    // commands on it.
    let full_key = format!("{{{}}}", locker.backend_key("taken").unwrap());
    server
        .command(&["HSET", &full_key, "field", "value"])
        .await
        .unwrap();
    let error = locker.try_lock("taken").await.unwrap_err();
    assert_refused_by_redis(&error);
    assert!(!error.is_retryable());

    // Credentials the server does not accept.
    server
        .command(&["CONFIG", "SET", "requirepass", "s3cret"])
        .await
        .unwrap();
    let wrong = format!("redis://:wrong@127.0.0.1:{}", server.port());
    let error = Locker::connect(&redis_config(&wrong)).await.unwrap_err();
    assert_refused_by_redis(&error);
}

#[tokio::test]
async fn invalid_input() {
    let error = Locker::memory().lock("").await.unwrap_err();
    assert!(matches!(error, Error::InvalidKey { .. }), "{error:?}");
    assert_eq!(error.kind(), ErrorKind::InvalidInput);
    let error = DlockConfig::from_toml_str("ttl = \"0s\"").unwrap_err();
    assert!(
        matches!(error, Error::Config { ref field, .. } if field == "ttl"),
        "{error:?}"
    );
    assert_eq!(error.kind(), ErrorKind::InvalidInput);
    assert!(!error.is_retryable());
}
