//! A Locker connected the way an application connects one: through `DlockConfig`.

#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use dlock_core::{BackendSpec, DlockConfig, Locker};

/// A Locker on `url` with lease `ttl` and `operation_timeout`, through [`Locker::connect`].
pub async fn locker_at(url: &str, ttl: Duration, operation_timeout: Duration) -> Locker {
    let config = DlockConfig::default()
        .with_backend(BackendSpec::Url(url.to_owned()))
        .with_ttl(ttl)
        .with_operation_timeout(operation_timeout);
    Locker::connect(&config).await.expect("connect")
}
