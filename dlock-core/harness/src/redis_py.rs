//! A real redis-py client (`redis` 8.1 from PyPI, in the virtualenv
//! `scripts/install-test-deps.sh` makes), for the plain layout's interop tests: a small Python
//! program that takes and gives back redis-py's `Lock(name)` on command — `SET name token NX
//! PX`, a compare-and-delete script, polling every 20 ms while it waits.
//!
//! Commands go to its stdin one per line; it answers on stdout:
//!
//! | command | answer |
//! |---|---|
//! | `acquire <id> <name>` | `acquired <id>` once held (it waits) |
//! | `try <id> <name>` | `acquired <id>`, or `busy <id>` (`acquire(blocking=False)`) |
//! | `release <id>` | `released <id>` |
//! | `count <name> <threads> <rounds> <dir> <pause ms>` | `counted <overlaps>` once every thread has done its rounds |
//!
//! `count` runs [`SharedCounter`](crate::SharedCounter)'s writer section under the lock, and
//! pauses three times as long between rounds, as a dlock task does at the same time. Errors are answered `error <id> <what>`.

use std::time::Duration;

use tokio::process::Command;

use super::Result;
use super::counter::PYTHON_SECTION;
use super::peer::{PeerProcess, python};

const DRIVER: &str = r#"
import sys, threading
import redis

# A holder keeps the lock this long at most (the tests release far sooner).
HOLD = 30
SURELY = 60

WHO = "p"  # this side's letter in the counter's log
out = threading.Lock()
def say(line):
    with out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

client = redis.Redis.from_url(sys.argv[1])
client.ping()

def lock(name):
    return client.lock(name, timeout=HOLD, sleep=0.02, blocking_timeout=SURELY)

releases = {}

def hold(ident, name, blocking):
    try:
        held = lock(name)
        if not held.acquire(blocking=blocking):
            say("busy " + ident)
            return
        release = threading.Event()
        releases[ident] = release
        say("acquired " + ident)
        release.wait()
        held.release()
        say("released " + ident)
    except Exception as e:
        say("error %s %r" % (ident, e))

def count(name, threads, rounds, directory, pause):
    overlaps = [0]
    failures = []
    tally = threading.Lock()
    def worker():
        try:
            for _ in range(rounds):
                held = lock(name)
                if not held.acquire():
                    raise RuntimeError("not acquired within %d s" % SURELY)
                try:
                    bad = section(directory, True, pause)
                finally:
                    held.release()
                with tally:
                    overlaps[0] += bad
                time.sleep(3 * pause)  # work between locks, as a service does
        except Exception as e:
            failures.append(repr(e))
    workers = [threading.Thread(target=worker) for _ in range(threads)]
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
        threading.Thread(target=hold, args=(w[1], w[2], w[0] == "acquire"), daemon=True).start()
    elif w[0] == "release":
        release = releases.pop(w[1], None)
        if release is None:
            say("error %s not acquired" % w[1])
        else:
            release.set()
    elif w[0] == "count":
        threading.Thread(
            target=count,
            args=(w[1], int(w[2]), int(w[3]), w[4], float(w[5]) / 1000),
            daemon=True,
        ).start()
"#;

/// A running redis-py client (a Python process), killed when dropped.
#[derive(Debug)]
pub struct RedisPy(PeerProcess);

impl RedisPy {
    /// Starts the driver against the server at `url` (`redis://host:port`), returning once it
    /// answered a `PING`.
    ///
    /// # Errors
    ///
    /// [`HarnessError::MissingBinary`](crate::HarnessError::MissingBinary) when the
    /// virtualenv's Python is missing (the hint names the install script);
    /// [`HarnessError::Startup`](crate::HarnessError::Startup) when redis-py does not import
    /// or connect.
    pub async fn start(url: &str) -> Result<Self> {
        let mut command = Command::new(python("redis-py")?);
        command
            .arg("-u")
            .arg("-c")
            .arg(format!("{PYTHON_SECTION}{DRIVER}"))
            .arg(url);
        PeerProcess::start(command, &format!("redis-py driver for {url}"))
            .await
            .map(Self)
    }

    /// Sends one command line.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Io`](crate::HarnessError::Io) if the driver is gone.
    pub async fn send(&mut self, command: &str) -> Result<()> {
        self.0.send(command).await
    }

    /// The next line the driver says, or `None` if it says nothing within `within` (or exited).
    pub async fn next_line(&mut self, within: Duration) -> Option<String> {
        self.0.next_line(within).await
    }
}
