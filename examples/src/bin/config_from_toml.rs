//! Loads a `DlockConfig` from TOML, connects, and shows what a bad value looks like.
//!
//! Run with: `cargo run -p dlock-examples --bin config_from_toml [path/to/dlock.toml]`

use std::process::ExitCode;

use dlock_core::{DlockConfig, Error, Locker};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => dlock_examples::report_failure("config_from_toml", &error),
    }
}

async fn run() -> Result<(), Error> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/dlock.toml").to_owned());
    let text =
        std::fs::read_to_string(&path).map_err(|e| Error::config("path", &path, e.to_string()))?;
    let config = DlockConfig::from_toml_str(&text)?;
    let shown = |d: std::time::Duration| humantime::format_duration(d).to_string();
    println!(
        "loaded {path}:\n  backend {}, key prefix `{}`, ttl {}, wait {}, operation timeout {}, fencing {}",
        config.backend,
        config.key_prefix,
        shown(config.ttl),
        config
            .wait
            .map_or_else(|| "until acquired".to_owned(), shown),
        shown(config.operation_timeout),
        config.fencing,
    );

    let locker = Locker::connect(&config).await?;
    let guard = locker.lock("invoice:1").await?;
    println!(
        "locked `{}` as backend key `{}`",
        guard.key(),
        locker.backend_key(guard.key())?
    );
    guard.release().await?;

    let bad = DlockConfig::from_toml_str("ttl = \"10x\"").unwrap_err();
    println!("a bad value is reported as: {bad}");
    Ok(())
}
