//! A peer client's driver process, shared by [`Curator`](crate::Curator) and
//! [`Kazoo`](crate::Kazoo): commands go to its stdin one per line, answers come on its stdout,
//! and it says `ready` once its client is connected.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use super::{HarnessError, Result};

/// How long a driver may take to start and connect (a JVM's start included).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A running driver, killed when dropped.
#[derive(Debug)]
pub(crate) struct PeerProcess {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl PeerProcess {
    /// Starts `command` and returns once it says `ready`; `what` names it in errors.
    pub(crate) async fn start(mut command: Command, what: &str) -> Result<Self> {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()?;
        let stdin = child.stdin.take().ok_or_else(|| io("no stdin"))?;
        let stdout = BufReader::new(child.stdout.take().ok_or_else(|| io("no stdout"))?).lines();
        let mut peer = Self {
            child,
            stdin,
            stdout,
        };
        match peer.next_line(START_TIMEOUT).await {
            Some(line) if line == "ready" => Ok(peer),
            other => Err(HarnessError::Startup {
                server: what.to_owned(),
                reason: format!("said {other:?} instead of `ready`"),
                log_tail: String::new(),
            }),
        }
    }

    pub(crate) async fn send(&mut self, command: &str) -> Result<()> {
        self.stdin
            .write_all(format!("{command}\n").as_bytes())
            .await?;
        self.stdin.flush().await?;
        Ok(())
    }

    pub(crate) async fn next_line(&mut self, within: Duration) -> Option<String> {
        tokio::time::timeout(within, self.stdout.next_line())
            .await
            .ok()
            .and_then(|line| line.ok().flatten())
    }

    pub(crate) async fn kill(&mut self) -> Result<()> {
        self.child.kill().await?;
        Ok(())
    }
}

/// Where `scripts/install-test-deps.sh` puts the peers of other languages:
/// `$DLOCK_TEST_PEERS`, by default `/opt/dlock-test-peers`.
fn peers_dir() -> PathBuf {
    std::env::var_os("DLOCK_TEST_PEERS")
        .map_or_else(|| PathBuf::from("/opt/dlock-test-peers"), PathBuf::from)
}

/// The Python peers' virtualenv interpreter (`<peers>/python/bin/python`); `peer` names the
/// client in the error when it is missing.
pub(crate) fn python(peer: &str) -> Result<PathBuf> {
    let python = peers_dir().join("python/bin/python");
    if python.is_file() {
        Ok(python)
    } else {
        Err(HarnessError::MissingBinary {
            binary: python.display().to_string(),
            hint: format!(
                "the virtualenv with {peer} is missing: {}",
                super::error::INSTALL_HINT
            ),
        })
    }
}

/// The Node peers' packages (`<peers>/node/node_modules`, for `NODE_PATH`), and `node`;
/// `peer` names the package in the error when it is missing.
pub(crate) fn node_modules(peer: &str) -> Result<(PathBuf, PathBuf)> {
    let modules = peers_dir().join("node/node_modules");
    let node = super::process::find_binary("node")?;
    if modules.join(peer).is_dir() {
        Ok((node, modules))
    } else {
        Err(HarnessError::MissingBinary {
            binary: modules.join(peer).display().to_string(),
            hint: format!("npm's {peer} is missing: {}", super::error::INSTALL_HINT),
        })
    }
}

pub(crate) fn io(what: &str) -> HarnessError {
    HarnessError::Io(std::io::Error::other(what.to_owned()))
}
