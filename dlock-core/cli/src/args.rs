//! The command line's grammar: subcommands, flags and their help (clap).

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use dlock_grammar::duration as grammar;

/// Runs a command under a distributed lock, on any dlock backend: flock(1) for a fleet.
#[derive(Debug, Parser)]
#[command(name = "dlock", version, after_help = EXIT_CODES)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The exit statuses, shown under `--help` (the README's "Command line" lists them too).
const EXIT_CODES: &str = "\
Exit status of `dlock run`:
  the command's   the command ran (128+N if a signal N ended it)
  1, or -E N      the lock is busy: -n, or --wait ran out
  0, or -E N      with --once: the fire was skipped (another run holds it, or ran it)
  64              bad usage or configuration
  69              the lock service failed (unreachable, timed out, refused)
  75              the lease was lost while the command ran; it was stopped
  126, 127        the command cannot be run / was not found";

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Runs COMMAND while holding the lock KEY; with no COMMAND, holds it until interrupted.
    Run(RunArgs),
    /// Runs COMMAND only while this process leads the election NAME (stopped when the lead is
    /// lost, as `run` stops it); with --observe, prints the leaders of NAME as they change.
    Elect(ElectArgs),
    /// Shows who holds the lock KEY (fencing tokens, expiry) and who waits for it.
    Inspect(InspectArgs),
    /// Breaks the lock KEY whoever holds it; the holder is not told until its next renewal.
    Release(ReleaseArgs),
    /// How `dlock run` starts its command (not for users): see `exec.rs`.
    #[command(name = "__exec", hide = true)]
    Exec(ExecArgs),
}

/// `dlock __exec PARENT -- COMMAND…`.
#[derive(Debug, Args)]
pub(crate) struct ExecArgs {
    /// The pid of the `dlock run` that started this.
    pub(crate) parent: i32,
    /// The command and its arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
    pub(crate) command: Vec<OsString>,
}

/// Where the lock service is and how keys are named; every subcommand takes these.
#[derive(Debug, Args)]
pub(crate) struct Connection {
    /// The lock service, as a dlock URL: redis://h:6379, redis+cluster://h1,h2,h3,
    /// redlock://h1,h2,h3, etcd://h:2379, zk://h:2181, postgres://user@h/db (rediss://,
    /// etcds://, zks:// for TLS). Default: $DLOCK_URL, then the --config file's `backend`.
    #[arg(long, value_name = "URL")]
    pub(crate) url: Option<String>,
    /// A TOML file with the library's `DlockConfig` fields; DLOCK_* variables and flags win
    /// over it.
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Put before KEY on the service (default `dlock:`, or $DLOCK_KEY_PREFIX). An empty prefix
    /// shares names with `etcdctl lock` and Curator.
    #[arg(long, value_name = "PREFIX")]
    pub(crate) key_prefix: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    pub(crate) connection: Connection,
    /// The lease: how long the lock outlives a dlock that crashed. Renewed while the command
    /// runs. Default: $DLOCK_TTL, else 30s.
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub(crate) ttl: Option<Duration>,
    /// Give up after waiting this long for the lock, with the conflict status (-E);
    /// `forever` waits until acquired. Default: $DLOCK_WAIT, else until acquired.
    #[arg(short, long, value_name = "DURATION", value_parser = wait)]
    pub(crate) wait: Option<Wait>,
    /// Do not wait: if the lock is held, exit at once with the conflict status (-E).
    #[arg(short = 'n', long, conflicts_with = "wait")]
    pub(crate) no_wait: bool,
    /// Take the lock shared (the read side of a read-write lock): shared holders run side by
    /// side, never next to an exclusive one.
    #[arg(short, long, conflicts_with = "permits")]
    pub(crate) shared: bool,
    /// Take the lock exclusive as the write side of a read-write lock (on ZooKeeper, Curator's
    /// `InterProcessReadWriteLock` writer, which excludes its readers; elsewhere the same
    /// lock as without it).
    #[arg(short = 'x', long, conflicts_with_all = ["shared", "permits"])]
    pub(crate) write: bool,
    /// Take one of N permits of a semaphore: up to N commands hold KEY at once. Every user of
    /// KEY must give the same N.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) permits: Option<u32>,
    /// Run KEY — naming one fire of a scheduled job, e.g. `report-2026-11-25` — at most once
    /// across every machine: a busy lock is skipped (never waited for), and a command that
    /// exits 0 leaves a `done` record for RETENTION (by the lock service's clock), so a run of
    /// the same KEY within it is skipped too. A skip prints why on stderr (`skipped: done`,
    /// `skipped: running`) and exits 0 unless -E says otherwise. A failed command leaves no
    /// record.
    #[arg(
        long,
        value_name = "RETENTION",
        value_parser = duration,
        conflicts_with_all = ["wait", "no_wait", "shared", "write", "permits"],
        requires = "command"
    )]
    pub(crate) once: Option<Duration>,
    /// Keep the lock taken at least this long after it was granted, even if the command ends
    /// sooner (and dlock exits): the lock service holds it, by its own clock (ShedLock's
    /// lockAtLeastFor). Exclusive locks.
    #[arg(long, value_name = "DURATION", value_parser = duration, conflicts_with_all = ["shared", "permits"])]
    pub(crate) hold_at_least: Option<Duration>,
    /// The exit status when the lock is busy. Default: 1; with --once, 0.
    #[arg(short = 'E', long, value_name = "STATUS")]
    pub(crate) conflict_exit_code: Option<u8>,
    /// How long a command being stopped has between SIGTERM and SIGKILL. It is stopped when
    /// the lease is lost, and this long before a lease that could not be renewed runs out.
    /// Default: a quarter of the ttl, at most 5s; at most the ttl less two watchdog intervals.
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub(crate) kill_after: Option<Duration>,
    /// Hold the lock at most this long: then the command is stopped as on a lost lease;
    /// `none` for no limit. Default: $DLOCK_MAX_HOLD, else for as long as the command runs.
    #[arg(long, value_name = "DURATION", value_parser = optional)]
    pub(crate) max_hold: Option<Limit>,
    /// Run COMMAND through `sh -c` (its words joined by spaces).
    #[arg(long)]
    pub(crate) shell: bool,
    /// Keep COMMAND in dlock's process group, so it can read the terminal and gets Ctrl-C
    /// from it; the default when stdin is a terminal. Signals from dlock then reach only
    /// COMMAND itself, not the processes it started.
    #[arg(long)]
    pub(crate) foreground: bool,
    /// Also lock KEY2 (repeatable): KEY and every KEY2 are taken together — all or none, in
    /// one order whatever order they are named in, under one --wait — so two runs naming the
    /// same keys never wait for each other in a circle. The command gets `DLOCK_KEYS` and
    /// `DLOCK_FENCING_TOKENS`: the keys and their tokens in the order taken, separated by
    /// spaces.
    #[arg(
        long = "and",
        value_name = "KEY2",
        conflicts_with_all = ["once", "hold_at_least", "permits"]
    )]
    pub(crate) and: Vec<String>,
    /// The lock's name.
    #[arg(value_name = "KEY")]
    pub(crate) key: String,
    /// The command to run under the lock, and its arguments (after `--` if they start with
    /// `-`).
    #[arg(
        value_name = "COMMAND",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub(crate) command: Vec<OsString>,
}

impl RunArgs {
    /// The exit status when the lock is busy: `-E`, else 1 (0 for a skipped `--once` fire).
    pub(crate) fn conflict_status(&self) -> u8 {
        self.conflict_exit_code
            .unwrap_or(if self.once.is_some() { 0 } else { 1 })
    }
}

#[derive(Debug, Args)]
pub(crate) struct ElectArgs {
    #[command(flatten)]
    pub(crate) connection: Connection,
    /// Print the leaders of NAME as they change, one line each (`leader VALUE term N`, or
    /// `leader -` when nobody leads), until interrupted; campaign for nothing.
    #[arg(long, conflicts_with_all = ["ttl", "wait", "no_wait", "kill_after", "shell", "foreground"])]
    pub(crate) observe: bool,
    /// With --observe: one JSON object per line (`{"name":…,"leader":…,"term":…}`, `leader`
    /// null when nobody leads).
    #[arg(long, requires = "observe")]
    pub(crate) json: bool,
    /// The leadership's lease: how long it outlives a dlock that crashed. Default: $DLOCK_TTL,
    /// else 30s.
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub(crate) ttl: Option<Duration>,
    /// Give up after waiting this long to lead, with status 1; `forever` waits until elected.
    /// Default: $DLOCK_WAIT, else until elected.
    #[arg(short, long, value_name = "DURATION", value_parser = wait)]
    pub(crate) wait: Option<Wait>,
    /// Do not wait: if someone leads, exit at once with status 1.
    #[arg(short = 'n', long, conflicts_with = "wait")]
    pub(crate) no_wait: bool,
    /// How long a command being stopped has between SIGTERM and SIGKILL (as for `run`).
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub(crate) kill_after: Option<Duration>,
    /// Run COMMAND through `sh -c` (its words joined by spaces).
    #[arg(long)]
    pub(crate) shell: bool,
    /// Keep COMMAND in dlock's process group (as for `run`).
    #[arg(long)]
    pub(crate) foreground: bool,
    /// The election's name.
    #[arg(value_name = "NAME")]
    pub(crate) name: String,
    /// What others see of this candidate (`dlock elect --observe`, `etcdctl elect -l`,
    /// Curator's participant id). Default: `<host name>:<pid>`.
    #[arg(value_name = "VALUE")]
    pub(crate) value: Option<String>,
    /// The command to run while leading, and its arguments (after `--`). With none, prints
    /// what it would get and leads until interrupted. It gets `DLOCK_TERM` (the term, also
    /// `DLOCK_FENCING_TOKEN`) and `DLOCK_LEADER` (VALUE).
    #[arg(value_name = "COMMAND", last = true, allow_hyphen_values = true)]
    pub(crate) command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub(crate) struct InspectArgs {
    #[command(flatten)]
    pub(crate) connection: Connection,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    /// The lock's name.
    #[arg(value_name = "KEY")]
    pub(crate) key: String,
}

#[derive(Debug, Args)]
pub(crate) struct ReleaseArgs {
    #[command(flatten)]
    pub(crate) connection: Connection,
    /// Required: breaking a lock someone else holds lets two run at once unless they check
    /// fencing tokens.
    #[arg(long, required = true)]
    pub(crate) force: bool,
    /// The lock's name.
    #[arg(value_name = "KEY")]
    pub(crate) key: String,
}

/// A duration flag, in dlock's one duration grammar (`10s`, `1m 30s`, `250ms`; a bare number
/// is refused with the hint to add its unit), as the config file and `DLOCK_*` take them.
fn duration(text: &str) -> Result<Duration, String> {
    grammar::parse(text).map_err(|e| e.to_string())
}

/// `--wait`: a duration, or `forever` (`None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Wait(pub(crate) Option<Duration>);

fn wait(text: &str) -> Result<Wait, String> {
    grammar::parse_wait(text)
        .map(Wait)
        .map_err(|e| e.to_string())
}

/// `--max-hold`: a duration, or `none` (`None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limit(pub(crate) Option<Duration>);

fn optional(text: &str) -> Result<Limit, String> {
    grammar::parse_optional(text)
        .map(Limit)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_grammar_is_consistent() {
        Cli::command().debug_assert();
    }

    macro_rules! duration_cases {
        ($($name:ident: $text:literal => $kind:ident($($arg:tt)*),)*) => {
            #[test]
            fn wait_reads_every_case_of_the_duration_table() {
                $(
                    // `--wait=..`: a value starting with `-` is not taken for a flag.
                    let flag = format!("--wait={}", $text);
                    let parsed = Cli::try_parse_from(["dlock", "run", flag.as_str(), "job"]);
                    match (expected!($kind $($arg)*), parsed) {
                        (Expected::Wait(wait), Ok(Cli { command: Command::Run(run), .. })) => {
                            assert_eq!(run.wait, Some(Wait(wait)), "{:?}", $text);
                        }
                        (Expected::Error(hint), Err(error)) => {
                            let message = error.to_string();
                            assert!(message.contains(hint), "{:?}: {message}", $text);
                        }
                        (expected, got) => panic!("{:?}: expected {expected:?}, got {got:?}", $text),
                    }
                )*
            }
        };
    }

    include!("../../tests/data/duration_cases.rs");

    #[test]
    fn durations_take_units() {
        assert_eq!(duration("1m 30s"), Ok(Duration::from_secs(90)));
        assert_eq!(wait("forever"), Ok(Wait(None)));
        assert_eq!(optional("none"), Ok(Limit(None)));
        let bare = duration("5").unwrap_err();
        assert!(bare.contains("`5` has no unit"), "{bare}");
        assert!(duration("-1s").is_err());
    }

    #[test]
    fn the_command_keeps_its_own_flags() {
        let cli = Cli::try_parse_from(["dlock", "run", "-n", "job", "ls", "-l", "--all"]).unwrap();
        let Command::Run(run) = cli.command else {
            panic!("run")
        };
        assert!(run.no_wait);
        assert_eq!(run.key, "job");
        assert_eq!(run.command, ["ls", "-l", "--all"]);
        let cli = Cli::try_parse_from(["dlock", "run", "job", "--", "-x"]).unwrap();
        let Command::Run(run) = cli.command else {
            panic!("run")
        };
        assert_eq!(run.command, ["-x"]);
    }

    #[test]
    fn release_needs_force() {
        let err = Cli::try_parse_from(["dlock", "release", "job"]).unwrap_err();
        assert!(err.to_string().contains("--force"), "{err}");
    }
}
