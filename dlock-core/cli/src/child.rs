//! The command run under the lock: started in a process group of its own, signalled, and
//! stopped (SIGTERM, then SIGKILL) when the lease is lost.

use std::ffi::OsString;
use std::io;
use std::os::unix::process::ExitStatusExt as _;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process, kill_process_group, test_kill_process_group};
use tokio::process::{Child, Command};

use crate::{exit, signals};

/// How to start the command.
#[derive(Debug)]
pub(crate) struct Launch<'a> {
    /// The command and its arguments.
    pub(crate) words: &'a [OsString],
    /// Through `sh -c`, its words joined by spaces.
    pub(crate) shell: bool,
    /// In `dlock`'s process group rather than its own.
    pub(crate) foreground: bool,
    /// Variables added to the command's environment.
    pub(crate) env: Vec<(&'static str, String)>,
}

/// A running command.
#[derive(Debug)]
pub(crate) struct Job {
    child: Child,
    pid: Pid,
    /// Signals go to its whole process group (everything it started), not just to it.
    whole_group: bool,
}

impl Launch<'_> {
    /// Starts the command.
    ///
    /// # Errors
    ///
    /// The exit status and message for a command that cannot be started: 127 when it is not
    /// found, 126 otherwise (as shells do).
    pub(crate) fn start(self) -> Result<Job, (u8, String)> {
        let words: Vec<OsString> = if self.shell {
            let mut script = OsString::new();
            for (i, word) in self.words.iter().enumerate() {
                if i > 0 {
                    script.push(" ");
                }
                script.push(word);
            }
            vec!["sh".into(), "-c".into(), script]
        } else {
            self.words.to_vec()
        };
        let mut command = through_exec(&words).unwrap_or_else(|| {
            let mut direct = Command::new(&words[0]);
            direct.args(&words[1..]);
            direct
        });
        // An outer dlock's token is not this lock's: without a token of its own, none.
        command.env_remove("DLOCK_FENCING_TOKEN").envs(self.env);
        if !self.foreground {
            command.process_group(0);
        }
        let child = command.spawn().map_err(|e| {
            let shown = self.words[0].to_string_lossy();
            match e.kind() {
                io::ErrorKind::NotFound => {
                    (exit::NOT_FOUND, format!("`{shown}`: command not found"))
                }
                _ => (exit::CANNOT_RUN, format!("cannot run `{shown}`: {e}")),
            }
        })?;
        let pid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .and_then(Pid::from_raw)
            .ok_or_else(|| {
                (
                    exit::CANNOT_RUN,
                    "the command exited before it started".to_owned(),
                )
            })?;
        Ok(Job {
            child,
            pid,
            whole_group: !self.foreground,
        })
    }
}

/// `words` started through `dlock __exec` (see `exec.rs`), so that the command dies with
/// `dlock`; `None` where that is not possible (not Linux, or this program's path unknown).
fn through_exec(words: &[OsString]) -> Option<Command> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    let me = std::env::current_exe().ok()?;
    let mut command = Command::new(me);
    command
        .arg("__exec")
        .arg(rustix::process::getpid().as_raw_nonzero().to_string())
        .arg("--")
        .args(words);
    Some(command)
}

impl Job {
    /// Sends `signal` to the command (and everything in its process group); a command that
    /// is already gone is not an error.
    pub(crate) fn signal(&self, signal: Signal) {
        let sent = if self.whole_group {
            kill_process_group(self.pid, signal)
        } else {
            kill_process(self.pid, signal)
        };
        if let Err(e) = sent
            && e != rustix::io::Errno::SRCH
        {
            eprintln!("dlock: cannot signal the command: {e}");
        }
    }

    /// Waits for the command to exit; its status as a shell reports it.
    ///
    /// # Errors
    ///
    /// When the operating system cannot wait for it.
    pub(crate) async fn wait(&mut self) -> io::Result<u8> {
        self.child.wait().await.map(status_code)
    }

    /// Stops the command: SIGTERM, then SIGKILL to whatever is left of it once `grace` has
    /// run out. In a process group of its own, what it started gets the same grace: the
    /// group is watched until it is empty, not only the command.
    pub(crate) async fn stop(&mut self, grace: Duration) {
        let give_up = Instant::now() + grace;
        self.signal(Signal::TERM);
        let exited = tokio::time::timeout_at(give_up.into(), self.child.wait())
            .await
            .is_ok();
        let gone = exited && (!self.whole_group || self.group_empties_by(give_up).await);
        if gone {
            return;
        }
        eprintln!(
            "dlock: the command did not exit within {} of SIGTERM: sending SIGKILL",
            humantime::format_duration(grace)
        );
        self.signal(Signal::KILL);
        let _ = self.child.wait().await;
    }

    /// Whether the command's process group has no process left by `give_up`. Nothing tells
    /// when the last one exits, so this checks every 20 ms.
    async fn group_empties_by(&self, give_up: Instant) -> bool {
        loop {
            if test_kill_process_group(self.pid) == Err(rustix::io::Errno::SRCH) {
                return true;
            }
            if Instant::now() >= give_up {
                return false;
            }
            tokio::time::sleep(GROUP_CHECK).await;
        }
    }
}

/// How often [`Job::stop`] looks whether a stopped command's process group is empty.
const GROUP_CHECK: Duration = Duration::from_millis(20);

/// A child's status as a shell reports it: its exit code, or 128 + the signal that ended it.
fn status_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(u8::MAX),
        (None, Some(signal)) => signals::status_for(signal),
        (None, None) => u8::MAX,
    }
}
