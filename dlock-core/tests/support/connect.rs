//! A Locker connected the way an application connects one: through `DlockConfig`.

use std::time::Duration;

use dlock_core::{BackendSpec, DlockConfig, Locker};

/// The settings of a Locker on `url` with lease `ttl` and `operation_timeout`, the rest
/// default (a test adds what it needs: a key prefix, fencing).
pub fn config_at(url: &str, ttl: Duration, operation_timeout: Duration) -> DlockConfig {
    DlockConfig::default()
        .with_backend(BackendSpec::Url(url.to_owned()))
        .with_ttl(ttl)
        .with_operation_timeout(operation_timeout)
}

/// A Locker on `url` with lease `ttl` and `operation_timeout`, through [`Locker::connect`].
pub async fn locker_at(url: &str, ttl: Duration, operation_timeout: Duration) -> Locker {
    locker_with(&config_at(url, ttl, operation_timeout)).await
}

/// A Locker with `config`, through [`Locker::connect`].
pub async fn locker_with(config: &DlockConfig) -> Locker {
    Locker::connect(config).await.expect("connect")
}
