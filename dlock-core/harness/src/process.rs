//! One server process: finding its binary, spawning it with its output in a log file, polling
//! its readiness, signalling it (`SIGSTOP`/`SIGCONT`/`SIGKILL` via the `kill` command), and
//! restarting it with the same command line. It is killed and reaped on drop.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::fs::OpenOptions;
use std::future::Future;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};
use tokio::sync::Mutex;

use super::{HarnessError, Result};
use crate::shared;

/// How long a single server may take to become ready.
pub(crate) const STARTUP_TIMEOUT: Duration = Duration::from_secs(20);
/// How often readiness is polled.
const POLL_INTERVAL: Duration = Duration::from_millis(25);
/// How long a killed process (and its children) may take to disappear.
const EXIT_TIMEOUT: Duration = Duration::from_secs(10);
/// How many log lines a [`HarnessError::Startup`] carries.
const LOG_TAIL_LINES: usize = 40;

/// A readiness check: true once the server answers its protocol.
pub(crate) type Probe = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = bool> + Send>> + Send + Sync>;

/// Wraps an async readiness check as a [`Probe`].
pub(crate) fn probe<F, Fut>(check: F) -> Probe
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = bool> + Send + 'static,
{
    Arc::new(move || Box::pin(check()))
}

/// Finds `name` on `PATH` (or checks it, if it is a path), like `which`.
pub(crate) fn find_binary(name: &str) -> Result<PathBuf> {
    let candidates: Vec<PathBuf> = if name.contains('/') {
        vec![PathBuf::from(name)]
    } else {
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|dir| dir.join(name))
            .collect()
    };
    candidates
        .into_iter()
        .find(|path| is_executable(path))
        .ok_or_else(|| HarnessError::missing(name))
}

/// Whether `path` is a file with an execute bit.
pub(crate) fn is_executable(path: &Path) -> bool {
    path.metadata()
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// A new temporary directory for one server, named after it (and, for a server shared by a
/// whole test binary, after the binary's process: see [`shared`](crate::shared)).
pub(crate) fn temp_dir(kind: &str) -> Result<tempfile::TempDir> {
    let owner = if shared::spawning_for_the_process() {
        shared::temp_dir_owner()
    } else {
        String::new()
    };
    Ok(tempfile::Builder::new()
        .prefix(&format!("dlock-{kind}-{owner}"))
        .tempdir()?)
}

/// Runs `attempt`, and once more if it failed to start (e.g. a port was taken meanwhile; every
/// attempt picks new ports).
pub(crate) async fn retry_startup<T, F, Fut>(mut attempt: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    match attempt().await {
        Err(error @ HarnessError::Startup { .. }) => {
            tracing::warn!(%error, "test server did not start; retrying once with new ports");
            attempt().await
        }
        other => other,
    }
}

/// Polls `check` every few milliseconds until it is true (returns true) or `timeout` passes.
pub(crate) async fn poll_until<F, Fut>(timeout: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let found = poll_for(timeout, || {
        let check = check();
        async move { check.await.then_some(()) }
    });
    found.await.is_some()
}

/// Polls `find` every few milliseconds until it finds something or `timeout` passes.
pub(crate) async fn poll_for<T, F, Fut>(timeout: Duration, mut find: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(found) = find().await {
            return Some(found);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// The last [`LOG_TAIL_LINES`] lines of the file at `path`.
pub(crate) fn log_tail(path: &Path) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
        }
        Err(error) => format!("(cannot read {}: {error})", path.display()),
    }
}

/// How to run a server: its command line, working directory, log file and user.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    /// A human-readable name for errors, e.g. `redis-server on 127.0.0.1:40123`.
    server: String,
    program: PathBuf,
    args: Vec<OsString>,
    dir: PathBuf,
    log: PathBuf,
    user: Option<(u32, u32)>,
}

impl Spec {
    /// Runs `program` in `dir`, logging stdout and stderr to `dir/server.log`.
    pub(crate) fn new(server: impl Into<String>, program: impl Into<PathBuf>, dir: &Path) -> Self {
        Self {
            server: server.into(),
            program: program.into(),
            args: Vec::new(),
            dir: dir.to_owned(),
            log: dir.join("server.log"),
            user: None,
        }
    }

    /// Appends arguments.
    pub(crate) fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|arg| arg.as_ref().to_owned()));
        self
    }

    /// Appends `--flag value` pairs.
    pub(crate) fn flags<const N: usize>(self, pairs: [(&str, &str); N]) -> Self {
        self.args(pairs.into_iter().flat_map(|(flag, value)| [flag, value]))
    }

    /// Runs the server as this uid and gid (for PostgreSQL, which refuses to run as root).
    pub(crate) fn user(mut self, user: Option<(u32, u32)>) -> Self {
        self.user = user;
        self
    }

    /// Logs to `log` instead of `dir/server.log`.
    pub(crate) fn log_to(mut self, log: PathBuf) -> Self {
        self.log = log;
        self
    }

    /// Runs a one-shot command (e.g. `initdb`) to completion; a failure is a
    /// [`HarnessError::Startup`] with the tail of its log.
    pub(crate) async fn run(&self, timeout: Duration) -> Result<()> {
        let mut child = self.spawn()?;
        let reason = match tokio::time::timeout(timeout, child.wait()).await {
            Ok(status) if status.as_ref().is_ok_and(ExitStatus::success) => return Ok(()),
            Ok(status) => format!("it failed ({})", status?),
            Err(_) => format!("it did not finish within {timeout:?}"),
        };
        Err(HarnessError::Startup {
            server: self.server.clone(),
            reason,
            log_tail: log_tail(&self.log),
        })
    }

    fn spawn(&self) -> Result<Child> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let mut command = if shared::spawning_for_the_process() {
            // Dies with this process, not with its handle (which a static never drops).
            let mut command = Command::new(find_binary("setpriv")?);
            command
                .args(["--pdeathsig", "KILL", "--"])
                .arg(&self.program);
            command
        } else {
            Command::new(&self.program)
        };
        command
            .args(&self.args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true);
        if let Some((uid, gid)) = self.user {
            command.uid(uid).gid(gid);
        }
        tracing::debug!(server = %self.server, program = %self.program.display(), args = ?self.args, "spawning test server");
        Ok(command.spawn()?)
    }
}

/// A running server process. Killed (`SIGKILL`) and reaped, with any children it forked, on drop.
pub(crate) struct ServerProcess {
    spec: Spec,
    probe: Probe,
    port: u16,
    timeout: Duration,
    pid: AtomicU32,
    /// False once the harness killed it: signals must not reach a recycled pid.
    running: AtomicBool,
    child: Mutex<Option<Child>>,
}

impl fmt::Debug for ServerProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerProcess")
            .field("server", &self.spec.server)
            .field("port", &self.port)
            .field("pid", &self.pid())
            .field("dir", &self.spec.dir)
            .finish_non_exhaustive()
    }
}

impl ServerProcess {
    /// Spawns the server without waiting for it (cluster members need each other to get ready).
    pub(crate) fn spawn(spec: Spec, port: u16, probe: Probe, timeout: Duration) -> Result<Self> {
        let child = spec.spawn()?;
        let pid = child.id().unwrap_or_default();
        Ok(Self {
            spec,
            probe,
            port,
            timeout,
            pid: AtomicU32::new(pid),
            running: AtomicBool::new(true),
            child: Mutex::new(Some(child)),
        })
    }

    /// Spawns the server and waits until it is ready.
    pub(crate) async fn start(
        spec: Spec,
        port: u16,
        probe: Probe,
        timeout: Duration,
    ) -> Result<Self> {
        let process = Self::spawn(spec, port, probe, timeout)?;
        process.wait_ready().await?;
        Ok(process)
    }

    /// Waits until the probe succeeds; fails at once if the process exits.
    pub(crate) async fn wait_ready(&self) -> Result<()> {
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Some(status) = self.exit_status().await {
                return Err(self.startup_error(format!("it exited ({status})")));
            }
            if (self.probe)().await {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(self.startup_error(format!("not ready within {:?}", self.timeout)));
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// A [`HarnessError::Startup`] for this server, with the tail of its log.
    pub(crate) fn startup_error(&self, reason: String) -> HarnessError {
        HarnessError::Startup {
            server: self.spec.server.clone(),
            reason,
            log_tail: log_tail(&self.spec.log),
        }
    }

    /// The exit status if the process has exited (or was killed by the harness).
    async fn exit_status(&self) -> Option<String> {
        match self.child.lock().await.as_mut() {
            None => Some("killed by the harness".to_owned()),
            Some(child) => match child.try_wait() {
                Ok(status) => status.map(|status| status.to_string()),
                Err(error) => Some(format!("cannot wait for it: {error}")),
            },
        }
    }

    /// The loopback port clients connect to.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// The pid of the current (or last) process.
    pub(crate) fn pid(&self) -> u32 {
        self.pid.load(Ordering::Relaxed)
    }

    /// The log file the server's stdout and stderr go to.
    pub(crate) fn log_path(&self) -> &Path {
        &self.spec.log
    }

    /// Freezes the process with `SIGSTOP`.
    pub(crate) fn pause(&self) -> Result<()> {
        self.signal("STOP")
    }

    /// Thaws a paused process with `SIGCONT`.
    pub(crate) fn resume(&self) -> Result<()> {
        self.signal("CONT")
    }

    fn signal(&self, signal: &str) -> Result<()> {
        if !self.running.load(Ordering::Acquire) {
            let message = format!("{} is not running (killed)", self.spec.server);
            return Err(io::Error::other(message).into());
        }
        send_signal(self.pid(), signal)
    }

    /// Kills the process with `SIGKILL` and waits until it (and any children) are gone.
    pub(crate) async fn kill(&self) -> Result<()> {
        let mut slot = self.child.lock().await;
        self.running.store(false, Ordering::Release);
        if let Some(mut child) = slot.take() {
            kill_and_reap(&mut child).await?;
        }
        Ok(())
    }

    /// Kills the process if it is running, starts it again with the same command line (same
    /// ports, same data directory) and waits until it is ready.
    pub(crate) async fn restart(&self) -> Result<()> {
        {
            let mut slot = self.child.lock().await;
            self.running.store(false, Ordering::Release);
            if let Some(mut child) = slot.take() {
                kill_and_reap(&mut child).await?;
            }
            let child = self.spec.spawn()?;
            self.pid
                .store(child.id().unwrap_or_default(), Ordering::Relaxed);
            self.running.store(true, Ordering::Release);
            *slot = Some(child);
        }
        self.wait_ready().await
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Some(child) = self.child.get_mut().take() {
            kill_and_reap_blocking(child);
        }
    }
}

/// Sends a signal with the `kill` command (no libc needed).
pub(crate) fn send_signal(pid: u32, signal: &str) -> Result<()> {
    let status = std::process::Command::new("kill")
        .args(["-s", signal, &pid.to_string()])
        .stderr(Stdio::null())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!("kill -s {signal} {pid} failed ({status})")).into())
    }
}

/// `SIGKILL`s `child`, reaps it, and waits for the children it forked (PostgreSQL backends).
async fn kill_and_reap(child: &mut Child) -> io::Result<ExitStatus> {
    let orphans = child.id().map(children_of).unwrap_or_default();
    let status = match child.try_wait()? {
        Some(status) => status,
        None => {
            child.start_kill()?;
            tokio::time::timeout(EXIT_TIMEOUT, child.wait())
                .await
                .map_err(|_| {
                    io::Error::new(io::ErrorKind::TimedOut, "killed server did not exit")
                })??
        }
    };
    poll_until(EXIT_TIMEOUT, || {
        std::future::ready(!orphans.iter().any(|&pid| is_alive(pid)))
    })
    .await;
    Ok(status)
}

/// [`kill_and_reap`] for `Drop`, which cannot await.
fn kill_and_reap_blocking(mut child: Child) {
    let orphans = child.id().map(children_of).unwrap_or_default();
    let _ = child.start_kill();
    let deadline = Instant::now() + EXIT_TIMEOUT;
    let gone = |child: &mut Child| matches!(child.try_wait(), Ok(Some(_)) | Err(_));
    while !gone(&mut child) || orphans.iter().any(|&pid| is_alive(pid)) {
        if Instant::now() >= deadline {
            tracing::warn!(pid = ?child.id(), "killed test server did not exit");
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The pids of `parent`'s direct children, from `/proc`.
fn children_of(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| proc_stat(pid).is_some_and(|(_, ppid)| ppid == parent))
        .collect()
}

/// Whether `pid` exists and is not a zombie.
pub(crate) fn is_alive(pid: u32) -> bool {
    proc_stat(pid).is_some_and(|(state, _)| !matches!(state, 'Z' | 'X'))
}

/// The state and parent pid of `pid`, from `/proc/<pid>/stat`.
fn proc_stat(pid: u32) -> Option<(char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces: parse after the last ')'.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Adds the public process-control methods to a server type with a `process: ServerProcess`
/// field.
macro_rules! process_methods {
    ($server:ty) => {
        impl $server {
            /// The loopback port clients connect to.
            #[must_use]
            pub fn port(&self) -> u16 {
                self.process.port()
            }

            /// The pid of the server process (it changes on [`restart`](Self::restart)).
            #[must_use]
            pub fn pid(&self) -> u32 {
                self.process.pid()
            }

            /// The file the server's stdout and stderr are logged to.
            #[must_use]
            pub fn log_path(&self) -> &std::path::Path {
                self.process.log_path()
            }

            /// Freezes the server with `SIGSTOP`: connections stay open but nothing is answered.
            ///
            /// # Errors
            ///
            /// [`HarnessError::Io`](crate::HarnessError::Io) if the signal could not be
            /// sent (e.g. the server was killed).
            pub fn pause(&self) -> $crate::Result<()> {
                self.process.pause()
            }

            /// Thaws a [`pause`](Self::pause)d server with `SIGCONT`.
            ///
            /// # Errors
            ///
            /// [`HarnessError::Io`](crate::HarnessError::Io) if the signal could not be
            /// sent (e.g. the server was killed).
            pub fn resume(&self) -> $crate::Result<()> {
                self.process.resume()
            }

            /// Kills the server with `SIGKILL` (a crash: nothing is flushed) and waits until it
            /// is gone. [`restart`](Self::restart) brings it back.
            ///
            /// # Errors
            ///
            /// [`HarnessError::Io`](crate::HarnessError::Io) if it could not be killed
            /// or did not exit.
            pub async fn kill(&self) -> $crate::Result<()> {
                self.process.kill().await
            }

            /// Kills the server if it is running (`SIGKILL`), starts it again on the same ports
            /// with the same data directory, and waits until it is ready.
            ///
            /// # Errors
            ///
            /// [`HarnessError::Startup`](crate::HarnessError::Startup) if it does not
            /// come back (e.g. another process took its port meanwhile), or
            /// [`HarnessError::Io`](crate::HarnessError::Io).
            pub async fn restart(&self) -> $crate::Result<()> {
                self.process.restart().await
            }
        }
    };
}
pub(crate) use process_methods;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_binary_names_the_install_script() {
        let error = find_binary("dlock-no-such-server").unwrap_err();
        assert!(
            matches!(&error, HarnessError::MissingBinary { binary, .. } if binary == "dlock-no-such-server")
        );
        assert_eq!(
            error.to_string(),
            "`dlock-no-such-server` not found on PATH: run scripts/install-test-deps.sh \
             (or the README's test command) to install the test servers"
        );
    }

    #[test]
    fn finds_binaries_on_path_and_by_path() {
        assert!(find_binary("kill").is_ok());
        assert!(find_binary("/bin/sh").is_ok());
        assert!(find_binary("/etc/passwd").is_err(), "not executable");
    }

    #[test]
    fn sees_children_and_their_death() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        assert!(children_of(std::process::id()).contains(&child.id()));
        assert!(is_alive(child.id()));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!is_alive(child.id()));
    }

    #[tokio::test]
    async fn retries_a_failed_startup_once() {
        let mut attempts = 0;
        let result: Result<()> = retry_startup(|| {
            attempts += 1;
            std::future::ready(Err(HarnessError::Startup {
                server: "s".into(),
                reason: "r".into(),
                log_tail: String::new(),
            }))
        })
        .await;
        assert!(result.is_err());
        assert_eq!(attempts, 2);
    }
}
