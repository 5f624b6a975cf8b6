//! `dlock`: runs a command under a distributed lock on any dlock backend — flock(1) for a
//! fleet of machines. Installed with `cargo install dlock-cli` (from this repository:
//! `cargo install --path dlock-core/cli`), with `--features etcd` for etcd, whose client needs
//! `protoc` to build;
//! the README's "Command line" section and `dlock_core::guide::command_line` are its manual.
//!
//! ```text
//! dlock run [--url URL] [--ttl D] [--wait D | -n | --once RETENTION] [-s | --permits N]
//!           [--hold-at-least D] [-E N] [--and KEY2]… KEY -- COMMAND…
//! dlock elect [--url URL] [--ttl D] [--wait D | -n] NAME [VALUE] [-- COMMAND…]
//! dlock elect --observe [--json] [--url URL] NAME
//! dlock inspect [--url URL] [--json] KEY
//! dlock release --force [--url URL] KEY
//! ```
//!
//! Unix only: it passes signals on to the command and stops it with SIGTERM and SIGKILL.

#[cfg(not(unix))]
compile_error!("the `dlock` command line needs a Unix: it signals its command's process group");

mod args;
mod child;
mod elect;
mod exec;
mod exit;
mod held;
mod inspect;
mod release;
mod run;
mod settings;
mod signals;

use std::process::ExitCode;

use clap::Parser as _;

use crate::args::{Cli, Command};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() => {
            let _ = e.print();
            return ExitCode::from(exit::USAGE);
        }
        // --help, --version
        Err(e) => e.exit(),
    };
    if let Command::Exec(args) = &cli.command {
        return ExitCode::from(exec::exec(args));
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("dlock: cannot start: {e}");
            return ExitCode::from(exit::UNAVAILABLE);
        }
    };
    let status = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => run::run(args).await,
            Command::Elect(args) => elect::elect(args).await,
            Command::Inspect(args) => inspect::inspect(args).await,
            Command::Release(args) => release::release(args).await,
            Command::Exec(_) => unreachable!("run before the runtime starts"),
        }
    });
    ExitCode::from(status)
}
