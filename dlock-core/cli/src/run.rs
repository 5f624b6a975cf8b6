//! `dlock run`: take the lock, run the command under its lease (or hold it until interrupted),
//! release it; stop the command if the lease is lost.

use std::io::{IsTerminal as _, Write as _};
use std::time::{Duration, Instant};

use dlock_core::backend::Fencing;
use dlock_core::{DlockConfig, Error, ErrorKind, Kept, LockMode, Locker, Skip};
use rustix::process::Signal;

use crate::args::{RunArgs, Wait};
use crate::child::{Job, Launch};
use crate::held::Held;
use crate::signals::{self, Signals};
use crate::{exit, settings};

/// The longest a command has between SIGTERM and SIGKILL after a lost lease, by default.
const MAX_DEFAULT_GRACE: Duration = Duration::from_secs(5);

/// Runs `dlock run`; its exit status.
pub(crate) async fn run(args: RunArgs) -> u8 {
    let replaced = [
        args.ttl.map(|_| "DLOCK_TTL"),
        args.max_hold.map(|_| "DLOCK_MAX_HOLD"),
        (args.no_wait || args.wait.is_some()).then_some("DLOCK_WAIT"),
    ];
    let replaced: Vec<&str> = replaced.into_iter().flatten().collect();
    let mut config = match settings::config(&args.connection, &replaced, |config| {
        if let Some(ttl) = args.ttl {
            config.ttl = ttl;
        }
        if let Some(max_hold) = args.max_hold {
            config.max_hold = max_hold.0;
        }
    }) {
        Ok(config) => config,
        Err(e) => return exit::failed(&e, args.conflict_status()),
    };
    // dlock enforces the cap itself: the library would release the lock at once, while the
    // command still runs.
    let max_hold = config.max_hold.take();
    let grace = match grace(args.kill_after, &config) {
        Ok(grace) => grace,
        Err(e) => return exit::failed(&e, args.conflict_status()),
    };
    let mut signals = match Signals::catch() {
        Ok(signals) => signals,
        Err(e) => {
            eprintln!("dlock: cannot catch signals: {e}");
            return exit::UNAVAILABLE;
        }
    };
    let locker = tokio::select! {
        connected = settings::connect(&config) => match connected {
            Ok(locker) => locker,
            Err(e) => {
                exit::report_at(&e, &config.backend);
                return exit::for_error(&e, args.conflict_status());
            }
        },
        signal = signals.next() => return signals::status_for(signal.as_raw()),
    };
    let deadline = Deadline {
        grace,
        max_hold_until: None,
        max_hold,
    };
    let status = under_lock(&locker, &config, &args, signals, deadline).await;
    settings::shut_down(&locker).await;
    status
}

/// Takes the lock and runs the command under it (or holds it); the exit status. Every way
/// out — busy, the command's end, a signal, a lost lease — returns here, and the caller
/// shuts the Locker down.
async fn under_lock(
    locker: &Locker,
    config: &DlockConfig,
    args: &RunArgs,
    mut signals: Signals,
    mut deadline: Deadline,
) -> u8 {
    let guard = tokio::select! {
        acquired = acquire(locker, args) => match acquired {
            Ok(guard) => guard,
            Err(e) if args.once.is_some() && e.kind() == ErrorKind::Busy => {
                let why = match locker.inspect(&args.key).await {
                    Ok(info) => Skip::of(&info),
                    Err(_) => Skip::Running,
                };
                eprintln!("dlock: skipped: {why} (`{}`)", args.key);
                return args.conflict_status();
            }
            Err(e) => {
                exit::report_at(&e, &config.backend);
                return exit::for_error(&e, args.conflict_status());
            }
        },
        signal = signals.next() => return signals::status_for(signal.as_raw()),
    };
    deadline.max_hold_until = deadline.max_hold.map(|cap| Instant::now() + cap);
    // DLOCK_BACKEND last: a reader of a hold's output knows it has read everything.
    let mut env = guard.env(&args.key);
    env.push(("DLOCK_BACKEND", locker.capabilities().name.to_owned()));
    if args.command.is_empty() {
        return hold(guard, &env, signals, &deadline).await;
    }
    // A command that may read the terminal stays in its foreground process group: in a
    // group of its own it would stop at its first read, lock held.
    let foreground = args.foreground || std::io::stdin().is_terminal();
    let launch = Launch {
        words: &args.command,
        shell: args.shell,
        foreground,
        env,
    };
    match launch.start() {
        Ok(job) => supervise(guard, job, signals, &deadline, foreground, args.once).await,
        Err((status, message)) => {
            eprintln!("dlock: {message}");
            release(guard).await;
            status
        }
    }
}

/// When the command must be stopped although the lock was not (yet) reported lost.
#[derive(Debug)]
pub(crate) struct Deadline {
    /// The time between SIGTERM and SIGKILL; the command is also stopped this long before
    /// the lease would run out unrenewed, so that it is gone when the lock can be another's.
    pub(crate) grace: Duration,
    /// `--max-hold`: when the command has held the lock long enough.
    pub(crate) max_hold_until: Option<Instant>,
    /// `--max-hold` itself, counted from the grant.
    pub(crate) max_hold: Option<Duration>,
}

impl Deadline {
    /// The next moment to stop the command, as of the lease's current local expiry.
    fn next(&self, guard: &Held) -> Instant {
        let unrenewed = guard
            .expires_at()
            .checked_sub(self.grace)
            .unwrap_or_else(Instant::now);
        self.max_hold_until
            .map_or(unrenewed, |cap| cap.min(unrenewed))
    }

    /// Why the command must stop now, if it must: the cap, or a lease about to run out.
    fn reached(&self, guard: &Held) -> Option<String> {
        let now = Instant::now();
        if self.max_hold_until.is_some_and(|cap| now >= cap) {
            return Some("it was held for its --max-hold".to_owned());
        }
        let left = guard.expires_at().saturating_duration_since(now);
        (left <= self.grace).then(|| {
            format!(
                "its lease could not be renewed and runs out in {}",
                humantime::format_duration(Duration::from_millis(
                    u64::try_from(left.as_millis()).unwrap_or(u64::MAX)
                ))
            )
        })
    }
}

/// Takes the lock, in the mode and with the wait the flags ask for; a fencing
/// token wherever the backend issues them.
async fn acquire(locker: &Locker, args: &RunArgs) -> dlock_core::Result<Held> {
    if !args.and.is_empty() {
        return acquire_set(locker, args).await.map(Held::Set);
    }
    let request = match (args.shared, args.write, args.permits) {
        (true, _, _) => locker.read_lock(&args.key),
        (_, true, _) => locker.write_lock(&args.key),
        (false, false, Some(permits)) => locker.semaphore(&args.key, permits),
        (false, false, None) => locker.lock(&args.key),
    };
    let mut request = request.fencing(locker.capabilities().fencing != Fencing::None);
    if let Some(at_least) = args.hold_at_least {
        request = request.hold_at_least(at_least);
    }
    if args.once.is_some() {
        // A fire is skipped when busy, never waited for; nor does a nested `dlock run` of
        // the same fire re-enter it.
        request = request.reentrant(false);
    }
    let request = match (args.no_wait || args.once.is_some(), args.wait) {
        (true, _) => request.wait(Duration::ZERO),
        (false, Some(Wait(Some(wait)))) => request.wait(wait),
        (false, Some(Wait(None))) => request.wait_forever(),
        (false, None) => request,
    };
    request.await.map(Held::One)
}

/// Takes KEY and the `--and` keys as one set, in the mode and with the wait the flags ask
/// for; a fencing token per key wherever the backend issues them.
async fn acquire_set(
    locker: &Locker,
    args: &RunArgs,
) -> dlock_core::Result<dlock_core::LockSetGuard> {
    let keys = std::iter::once(&args.key).chain(&args.and);
    let request = match (args.shared, args.write) {
        (true, _) => locker.read_lock_all(keys),
        (_, true) => locker.lock_all_as(keys.map(|key| (key, LockMode::Exclusive))),
        (false, false) => locker.lock_all(keys),
    };
    let request = request.fencing(locker.capabilities().fencing != Fencing::None);
    let request = match (args.no_wait, args.wait) {
        (true, _) => request.wait(Duration::ZERO),
        (false, Some(Wait(Some(wait)))) => request.wait(wait),
        (false, Some(Wait(None))) => request.wait_forever(),
        (false, None) => request,
    };
    request.await
}

/// The time between SIGTERM and SIGKILL: `--kill-after`, else a quarter of the ttl (at most
/// 5 s). The command is stopped that long before an unrenewed lease runs out, so it must
/// leave room for renewals: at most the ttl less two watchdog intervals (a third of the ttl
/// by default).
pub(crate) fn grace(
    kill_after: Option<Duration>,
    config: &DlockConfig,
) -> dlock_core::Result<Duration> {
    let interval = config.watchdog_interval.unwrap_or(config.ttl / 3);
    let room = config.ttl.saturating_sub(interval * 2);
    let Some(grace) = kill_after else {
        return Ok((config.ttl / 4).min(MAX_DEFAULT_GRACE).min(room));
    };
    if grace > room {
        return Err(Error::config(
            "--kill-after",
            humantime::format_duration(grace).to_string(),
            format!(
                "must be at most the ttl ({}) less two watchdog intervals ({} each): the \
                 command is stopped that long before an unrenewed lease runs out",
                humantime::format_duration(config.ttl),
                humantime::format_duration(interval)
            ),
        ));
    }
    Ok(grace)
}

/// No command: prints what a command would get in its environment, then holds the lock until
/// a signal (released: status 0), a lost lease or its `--max-hold` (status 75).
pub(crate) async fn hold(
    guard: Held,
    env: &[(&str, String)],
    mut signals: Signals,
    deadline: &Deadline,
) -> u8 {
    print_env(env);
    let cap = deadline.max_hold_until.unwrap_or_else(far_future);
    tokio::select! {
        reason = guard.lost() => {
            eprintln!("dlock: lost the lock `{}`: {reason}", guard.key());
            return exit::LOST;
        }
        () = tokio::time::sleep_until(cap.into()) => {
            eprintln!("dlock: releasing the lock `{}`: it was held for its --max-hold", guard.key());
            release(guard).await;
            return exit::LOST;
        }
        _ = signals.next() => {}
    }
    match guard.release().await {
        Ok(()) => 0,
        Err(e) => exit::failed(&e, exit::UNAVAILABLE),
    }
}

/// A moment no hold reaches: a timer that never fires.
fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600)
}

/// `NAME=value` lines on stdout, flushed: what a command would get in its environment.
fn print_env(env: &[(&str, String)]) {
    let mut stdout = std::io::stdout().lock();
    for (name, value) in env {
        let _ = writeln!(stdout, "{name}={value}");
    }
    let _ = stdout.flush();
}

/// Runs the command to its end under the lease: signals to `dlock` go on to it. It is
/// stopped — SIGTERM, SIGKILL after the grace — when the lease is lost, when an unrenewed
/// lease would run out within the grace, or at its `--max-hold`; then the status is 75, else
/// the command's. With `--once`, a command that exits 0 leaves the fire's done record for
/// `once` (the retention).
pub(crate) async fn supervise(
    guard: Held,
    mut job: Job,
    mut signals: Signals,
    deadline: &Deadline,
    foreground: bool,
    once: Option<Duration>,
) -> u8 {
    let lost = guard.lost();
    tokio::pin!(lost);
    let why = loop {
        tokio::select! {
            // A command that exited is done, whatever else is ready at the same moment.
            biased;
            status = job.wait() => {
                let status = status.unwrap_or_else(|e| {
                    eprintln!("dlock: cannot wait for the command: {e}");
                    exit::CANNOT_RUN
                });
                if let (0, Some(retention), Held::One(one)) = (status, once, &guard)
                    && let Err(e) = one.keep_after_release(retention, Kept::Done)
                {
                    eprintln!("dlock: warning: no done record for `{}`: {}", guard.key(), exit::describe(&e));
                }
                release(guard).await;
                return status;
            }
            reason = &mut lost => break format!("lost the lock `{}`: {reason}", guard.key()),
            () = tokio::time::sleep_until(deadline.next(&guard).into()) => {
                // A renewal may have moved the lease on since the timer was set.
                if let Some(why) = deadline.reached(&guard) {
                    break format!("stopping the command under `{}`: {why}", guard.key());
                }
            }
            signal = signals.next() => {
                // In dlock's process group, the command gets the terminal's Ctrl-C itself.
                if !(foreground && signal == Signal::INT) {
                    job.signal(signal);
                }
            }
        }
    };
    eprintln!(
        "dlock: {why}; sending the command SIGTERM, then SIGKILL after {}",
        humantime::format_duration(deadline.grace)
    );
    job.stop(deadline.grace).await;
    if guard.is_held() {
        release(guard).await;
    }
    exit::LOST
}

/// Releases after the command ended; a failure is reported, not fatal (the command's status
/// stands, and the lease runs out by itself).
pub(crate) async fn release(guard: Held) {
    let key = guard.key();
    if let Err(e) = guard.release().await {
        eprintln!(
            "dlock: warning: could not release the lock `{key}` ({}); it frees when its lease \
             runs out",
            exit::describe(&e)
        );
    }
}
