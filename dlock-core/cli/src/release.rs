//! `dlock release --force`: breaks a lock whoever holds it.

use crate::args::ReleaseArgs;
use crate::{exit, settings};

/// Runs `dlock release --force`: 0 when a lock was broken, 1 when there was none.
pub(crate) async fn release(args: ReleaseArgs) -> u8 {
    let config = match settings::config(&args.connection, &[], |_| {}) {
        Ok(config) => config,
        Err(e) => return exit::failed(&e, exit::UNAVAILABLE),
    };
    let locker = match settings::connect(&config).await {
        Ok(locker) => locker,
        Err(e) => {
            exit::report_at(&e, &config.backend);
            return exit::for_error(&e, exit::UNAVAILABLE);
        }
    };
    let status = match locker.force_release(&args.key).await {
        Ok(true) => {
            println!("released {}", args.key);
            0
        }
        Ok(false) => {
            println!("{} was not held", args.key);
            1
        }
        Err(e) => {
            exit::report_at(&e, &config.backend);
            exit::for_error(&e, exit::UNAVAILABLE)
        }
    };
    settings::shut_down(&locker).await;
    status
}
