//! `dlock elect`: run a command only while this process leads an election (stopped when the
//! lead is lost, as `dlock run` stops its command), or, with `--observe`, print the leaders
//! as they change.

use std::io::{IsTerminal as _, Write as _};
use std::time::Duration;

use dlock_core::{Error, ErrorKind, Leader, Locker};
use futures_util::StreamExt as _;
use serde_json::json;

use crate::args::{ElectArgs, Wait};
use crate::child::Launch;
use crate::held::Held;
use crate::run::{self, Deadline};
use crate::signals::{self, Signals};
use crate::{exit, settings};

/// The status when another candidate leads and `-n` or `--wait` said not to wait (longer).
const BUSY: u8 = 1;

/// Runs `dlock elect`; its exit status.
pub(crate) async fn elect(args: ElectArgs) -> u8 {
    let replaced = [
        args.ttl.map(|_| "DLOCK_TTL"),
        (args.no_wait || args.wait.is_some()).then_some("DLOCK_WAIT"),
    ];
    let replaced: Vec<&str> = replaced.into_iter().flatten().collect();
    let config = match settings::config(&args.connection, &replaced, |config| {
        if let Some(ttl) = args.ttl {
            config.ttl = ttl;
        }
    }) {
        Ok(config) => config,
        Err(e) => return exit::failed(&e, BUSY),
    };
    let grace = match run::grace(args.kill_after, &config) {
        Ok(grace) => grace,
        Err(e) => return exit::failed(&e, BUSY),
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
                return exit::for_error(&e, BUSY);
            }
        },
        signal = signals.next() => return signals::status_for(signal.as_raw()),
    };
    let status = if args.observe {
        observe(&locker, &args, signals).await
    } else {
        let deadline = Deadline {
            grace,
            max_hold_until: None,
            max_hold: None,
        };
        lead(&locker, &config.backend, &args, signals, &deadline).await
    };
    settings::shut_down(&locker).await;
    status
}

/// Campaigns, then runs the command (or holds the lead) while leading; the exit status.
async fn lead(
    locker: &Locker,
    service: &dlock_core::BackendSpec,
    args: &ElectArgs,
    mut signals: Signals,
    deadline: &Deadline,
) -> u8 {
    let value = args.value.clone().unwrap_or_else(default_value);
    let campaign = locker.campaign(&args.name, value);
    let campaign = match (args.no_wait, args.wait) {
        (true, _) => campaign.wait(Duration::ZERO),
        (false, Some(Wait(Some(wait)))) => campaign.wait(wait),
        (false, Some(Wait(None)) | None) => campaign,
    };
    let leadership = tokio::select! {
        elected = campaign => match elected {
            Ok(leadership) => leadership,
            Err(e) => {
                if e.kind() != ErrorKind::Busy {
                    exit::report_at(&e, service);
                } else {
                    eprintln!("dlock: `{}` has another leader", args.name);
                }
                return exit::for_error(&e, BUSY);
            }
        },
        signal = signals.next() => return signals::status_for(signal.as_raw()),
    };
    let held = Held::Leader(leadership);
    let mut env = held.env(&args.name);
    env.push(("DLOCK_BACKEND", locker.capabilities().name.to_owned()));
    if args.command.is_empty() {
        return run::hold(held, &env, signals, deadline).await;
    }
    let foreground = args.foreground || std::io::stdin().is_terminal();
    let launch = Launch {
        words: &args.command,
        shell: args.shell,
        foreground,
        env,
    };
    match launch.start() {
        Ok(job) => run::supervise(held, job, signals, deadline, foreground, None).await,
        Err((status, message)) => {
            eprintln!("dlock: {message}");
            run::release(held).await;
            status
        }
    }
}

/// Prints each leader of the election as it changes until a signal (status 0); an error
/// from the service is reported on stderr and observing goes on.
async fn observe(locker: &Locker, args: &ElectArgs, mut signals: Signals) -> u8 {
    let mut leaders = Box::pin(locker.observe(&args.name));
    loop {
        let leader = tokio::select! {
            leader = leaders.next() => leader,
            _ = signals.next() => return 0,
        };
        match leader {
            Some(Ok(leader)) => print_leader(&args.name, leader.as_ref(), args.json),
            Some(Err(e @ (Error::Unsupported { .. } | Error::InvalidKey { .. }))) => {
                return exit::failed(&e, BUSY);
            }
            Some(Err(e)) => eprintln!("dlock: observing `{}`: {}", args.name, exit::describe(&e)),
            None => return 0,
        }
    }
}

/// One line: `leader VALUE term N` / `leader -`, or a JSON object.
fn print_leader(name: &str, leader: Option<&Leader>, json: bool) {
    let line = match (leader, json) {
        (Some(leader), false) => format!("leader {} term {}", leader.value, leader.term),
        (None, false) => "leader -".to_owned(),
        (Some(leader), true) => {
            json!({"name": name, "leader": leader.value, "term": leader.term}).to_string()
        }
        (None, true) => json!({"name": name, "leader": null, "term": null}).to_string(),
    };
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
}

/// `<host name>:<pid>`: what a candidate shows unless VALUE says otherwise.
fn default_value() -> String {
    let host = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    format!("{host}:{}", std::process::id())
}
