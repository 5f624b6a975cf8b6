//! A real kazoo client (Python's ZooKeeper client, `kazoo` 2.11 from PyPI, in the virtualenv
//! `scripts/install-test-deps.sh` makes), for interop tests: a small Python program that takes
//! and gives back kazoo's `Lock`, `ReadLock` and `WriteLock` on command, each with the
//! `extra_lock_patterns` that make it wait for dlock's (Curator-named) nodes:
//!
//! | kazoo recipe | `extra_lock_patterns` |
//! |---|---|
//! | `Lock` | `["-lock-"]` (dlock's and Curator's mutex nodes) |
//! | `ReadLock` | `["__WRIT__"]` (their write nodes) |
//! | `WriteLock` | `["__READ__", "__WRIT__"]` |
//!
//! Commands go to its stdin one per line; it answers on stdout:
//!
//! | command | answer |
//! |---|---|
//! | `acquire <id> <lock\|read\|write> <path>` | `acquired <id>` once held (it waits) |
//! | `try <id> <lock\|read\|write> <path>` | `acquired <id>`, or `busy <id>` (kazoo's `acquire(blocking=False)`) |
//! | `release <id>` | `released <id>` |
//! | `count <lock\|rw> <path> <threads> <rounds> <dir> <pause ms>` | `counted <overlaps>` once every thread has done its rounds |
//!
//! `count` is the shared-counter stress: each thread takes the lock `rounds` times (`rw`: the
//! write lock when `thread + round` is a multiple of three, else the read lock) and runs the
//! critical section of [`SharedCounter`](crate::SharedCounter) on the files in `dir`, as a
//! dlock task does at the same time. Errors are answered `error <id> <what>`.

use std::time::Duration;

use tokio::process::Command;

use super::Result;
use super::counter::PYTHON_SECTION;
use super::peer::{PeerProcess, python};

const DRIVER: &str = r#"
import sys, threading
from kazoo.client import KazooClient
from kazoo.recipe.lock import Lock, ReadLock, WriteLock

RECIPES = {"lock": Lock, "read": ReadLock, "write": WriteLock}
# dlock's node names (Curator's) each recipe must wait for, besides kazoo's own.
PATTERNS = {"lock": ["-lock-"], "read": ["__WRIT__"], "write": ["__READ__", "__WRIT__"]}
SURELY = 60

WHO = "k"  # this side's letter in the counter's log
out = threading.Lock()
def say(line):
    with out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

client = KazooClient(hosts=sys.argv[1])
client.start(timeout=30)

def recipe(kind, path, ident):
    return RECIPES[kind](client, path, "kazoo-" + ident, extra_lock_patterns=PATTERNS[kind])

releases = {}

def hold(ident, kind, path, blocking):
    try:
        lock = recipe(kind, path, ident)
        if not lock.acquire(blocking=blocking, timeout=SURELY if blocking else None):
            say("busy " + ident)
            return
        release = threading.Event()
        releases[ident] = release
        say("acquired " + ident)
        release.wait()
        lock.release()
        say("released " + ident)
    except Exception as e:
        say("error %s %r" % (ident, e))

def count(kind, path, threads, rounds, directory, pause):
    overlaps = [0]
    failures = []
    tally = threading.Lock()
    def worker(t):
        try:
            locks = {k: recipe(k, path, "count-%d" % t) for k in RECIPES}
            for r in range(rounds):
                k = "lock" if kind == "lock" else ("write" if (t + r) % 3 == 0 else "read")
                lock = locks[k]
                lock.acquire(timeout=SURELY)
                try:
                    bad = section(directory, k != "read", pause)
                finally:
                    lock.release()
                with tally:
                    overlaps[0] += bad
        except Exception as e:
            failures.append(repr(e))
    workers = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if failures:
        say("error count " + "; ".join(failures))
    else:
        say("counted %d" % overlaps[0])

say("ready")
for line in sys.stdin:
    w = line.split()
    if not w:
        continue
    if w[0] in ("acquire", "try"):
        threading.Thread(target=hold, args=(w[1], w[2], w[3], w[0] == "acquire"), daemon=True).start()
    elif w[0] == "release":
        release = releases.pop(w[1], None)
        if release is None:
            say("error %s not acquired" % w[1])
        else:
            release.set()
    elif w[0] == "count":
        threading.Thread(
            target=count,
            args=(w[1], w[2], int(w[3]), int(w[4]), w[5], float(w[6]) / 1000),
            daemon=True,
        ).start()
client.stop()
"#;

/// A running kazoo client (a Python process), killed when dropped.
#[derive(Debug)]
pub struct Kazoo(PeerProcess);

impl Kazoo {
    /// Starts the driver against `connect_string` (`host:port,...`), returning once its client
    /// is connected.
    ///
    /// # Errors
    ///
    /// [`HarnessError::MissingBinary`] when the virtualenv's Python is missing (the hint names
    /// the install script); [`HarnessError::Startup`] when kazoo does not import or connect.
    pub async fn start(connect_string: &str) -> Result<Self> {
        let mut command = Command::new(python("kazoo")?);
        command
            .arg("-u")
            .arg("-c")
            .arg(format!("{PYTHON_SECTION}{DRIVER}"))
            .arg(connect_string);
        let what = format!("kazoo driver for {connect_string}");
        PeerProcess::start(command, &what).await.map(Self)
    }

    /// Sends one command line.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Io`] if the driver is gone.
    pub async fn send(&mut self, command: &str) -> Result<()> {
        self.0.send(command).await
    }

    /// The next line the driver says, or `None` if it says nothing within `within` (or exited).
    pub async fn next_line(&mut self, within: Duration) -> Option<String> {
        self.0.next_line(within).await
    }
}
