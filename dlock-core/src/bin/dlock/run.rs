//! `dlock run`: take the lock, run the command under its lease (or hold it until interrupted),
//! release it; stop the command if the lease is lost.

use std::io::Write as _;
use std::time::Duration;

use dlock_core::backend::Fencing;
use dlock_core::{DlockConfig, Error, LockGuard, Locker};
use rustix::process::Signal;

use crate::args::RunArgs;
use crate::child::{Job, Launch};
use crate::signals::{self, Signals};
use crate::{exit, settings};

/// The longest a command has between SIGTERM and SIGKILL after a lost lease, by default.
const MAX_DEFAULT_GRACE: Duration = Duration::from_secs(5);

/// Runs `dlock run`; its exit status.
pub(crate) async fn run(args: RunArgs) -> u8 {
    let config = match settings::config(&args.connection, |config| {
        if let Some(ttl) = args.ttl {
            config.ttl = ttl;
        }
        if args.max_hold.is_some() {
            config.max_hold = args.max_hold;
        }
    }) {
        Ok(config) => config,
        Err(e) => return exit::failed(&e, args.conflict_exit_code),
    };
    let grace = match grace(args.kill_after, &config) {
        Ok(grace) => grace,
        Err(e) => return exit::failed(&e, args.conflict_exit_code),
    };
    let mut signals = match Signals::catch() {
        Ok(signals) => signals,
        Err(e) => {
            eprintln!("dlock: cannot catch signals: {e}");
            return exit::UNAVAILABLE;
        }
    };
    let (locker, guard) = tokio::select! {
        acquired = acquire(&config, &args) => match acquired {
            Ok(acquired) => acquired,
            Err(e) => {
                exit::report_at(&e, &config.backend);
                return exit::for_error(&e, args.conflict_exit_code);
            }
        },
        signal = signals.next() => return signals::status_for(signal.as_raw()),
    };
    // DLOCK_BACKEND last: a reader of a hold's output knows it has read everything.
    let mut env = vec![("DLOCK_KEY", args.key.clone())];
    if let Some(token) = guard.fencing_token() {
        env.push(("DLOCK_FENCING_TOKEN", token.to_string()));
    }
    env.push(("DLOCK_BACKEND", locker.capabilities().name.to_owned()));
    if args.command.is_empty() {
        return hold(guard, &env, signals).await;
    }
    let launch = Launch {
        words: &args.command,
        shell: args.shell,
        foreground: args.foreground,
        env,
    };
    match launch.start() {
        Ok(job) => supervise(guard, job, signals, grace, args.foreground).await,
        Err((status, message)) => {
            eprintln!("dlock: {message}");
            release(guard).await;
            status
        }
    }
}

/// Connects and takes the lock, in the mode and with the wait the flags ask for; a fencing
/// token wherever the backend issues them.
async fn acquire(config: &DlockConfig, args: &RunArgs) -> dlock_core::Result<(Locker, LockGuard)> {
    let locker = settings::connect(config).await?;
    let request = match (args.shared, args.permits) {
        (true, _) => locker.read_lock(&args.key),
        (false, Some(permits)) => locker.semaphore(&args.key, permits),
        (false, None) => locker.lock(&args.key),
    };
    let request = request.fencing(locker.capabilities().fencing != Fencing::None);
    let request = match (args.no_wait, args.wait) {
        (true, _) => request.wait(Duration::ZERO),
        (false, Some(wait)) => request.wait(wait),
        (false, None) => request,
    };
    let guard = request.await?;
    Ok((locker, guard))
}

/// The time between SIGTERM and SIGKILL: `--kill-after`, else a third of the ttl (at most
/// 5 s); shorter than the ttl either way.
fn grace(kill_after: Option<Duration>, config: &DlockConfig) -> dlock_core::Result<Duration> {
    let Some(grace) = kill_after else {
        return Ok((config.ttl / 3).min(MAX_DEFAULT_GRACE));
    };
    if grace >= config.ttl {
        return Err(Error::config(
            "--kill-after",
            humantime::format_duration(grace).to_string(),
            format!(
                "must be shorter than the ttl ({}): the command must be gone before its lock \
                 can be someone else's",
                humantime::format_duration(config.ttl)
            ),
        ));
    }
    Ok(grace)
}

/// No command: prints what a command would get in its environment, then holds the lock until
/// a signal (released: status 0) or a lost lease (status 75).
async fn hold(guard: LockGuard, env: &[(&str, String)], mut signals: Signals) -> u8 {
    print_env(env);
    tokio::select! {
        reason = guard.lost() => {
            eprintln!("dlock: lost the lock `{}`: {reason}", guard.key());
            return exit::LOST;
        }
        _ = signals.next() => {}
    }
    match guard.release().await {
        Ok(()) => 0,
        Err(e) => exit::failed(&e, exit::UNAVAILABLE),
    }
}

/// `NAME=value` lines on stdout, flushed: what a command would get in its environment.
fn print_env(env: &[(&str, String)]) {
    let mut stdout = std::io::stdout().lock();
    for (name, value) in env {
        let _ = writeln!(stdout, "{name}={value}");
    }
    let _ = stdout.flush();
}

/// Runs the command to its end under the lease: signals to `dlock` go on to it, and a lost
/// lease stops it. The command's status, or 75 when the lease was lost.
async fn supervise(
    guard: LockGuard,
    mut job: Job,
    mut signals: Signals,
    grace: Duration,
    foreground: bool,
) -> u8 {
    let lost = guard.lost();
    tokio::pin!(lost);
    loop {
        tokio::select! {
            status = job.wait() => {
                let status = status.unwrap_or_else(|e| {
                    eprintln!("dlock: cannot wait for the command: {e}");
                    exit::CANNOT_RUN
                });
                release(guard).await;
                return status;
            }
            signal = signals.next() => {
                // In dlock's process group, the command gets the terminal's Ctrl-C itself.
                if !(foreground && signal == Signal::INT) {
                    job.signal(signal);
                }
            }
            reason = &mut lost => {
                eprintln!(
                    "dlock: lost the lock `{}`: {reason}; stopping the command (SIGTERM, then \
                     SIGKILL after {})",
                    guard.key(),
                    humantime::format_duration(grace)
                );
                job.stop(grace).await;
                return exit::LOST;
            }
        }
    }
}

/// Releases after the command ended; a failure is reported, not fatal (the command's status
/// stands, and the lease runs out by itself).
async fn release(guard: LockGuard) {
    let key = guard.key().to_owned();
    if let Err(e) = guard.release().await {
        eprintln!(
            "dlock: warning: could not release the lock `{key}` ({}); it frees when its lease \
             runs out",
            exit::describe(&e)
        );
    }
}
