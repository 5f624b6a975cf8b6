//! `dlock release --force`: breaks a lock whoever holds it.

use crate::args::ReleaseArgs;
use crate::{exit, settings};

/// Runs `dlock release --force`: 0 when a lock was broken, 1 when there was none.
pub(crate) async fn release(args: ReleaseArgs) -> u8 {
    let config = match settings::config(&args.connection, &[], |_| {}) {
        Ok(config) => config,
        Err(e) => return exit::failed(&e, exit::UNAVAILABLE),
    };
    let broken = async {
        let locker = settings::connect(&config).await?;
        locker.force_release(&args.key).await
    };
    match broken.await {
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
    }
}
