//! A real node-redlock client (`redlock` 5.0.0-beta.2 with `ioredis` 5, from npm, installed by
//! `scripts/install-test-deps.sh`), for the plain layout's interop tests: a small Node program
//! that takes and gives back `redlock.acquire([name], ttl)` on command, over one or more
//! independent masters — on each, `SET name value PX` after checking that `name` does not
//! exist, all in one script, and a compare-and-delete release; polling every 20 ms (± 10)
//! while it waits.
//!
//! Commands go to its stdin one per line; it answers on stdout:
//!
//! | command | answer |
//! |---|---|
//! | `acquire <id> <name>` | `acquired <id>` once held (it waits) |
//! | `try <id> <name>` | `acquired <id>`, or `busy <id>` (no retries) |
//! | `release <id>` | `released <id>` |
//! | `count <name> <workers> <rounds> <dir> <pause ms>` | `counted <overlaps>` once every worker has done its rounds |
//!
//! `count` runs [`SharedCounter`](crate::SharedCounter)'s writer section under the lock,
//! pausing three times as long between rounds, as a dlock task does at the same time. Each
//! acquire there has node-redlock's default 10 retries (every 20 ms) and is tried again when
//! they are spent, as its users do: node-redlock 5 does not give back a lost round's keys
//! before its retries are spent, and its next rounds, with the same value, are refused on
//! them. Errors are answered `error <id> <what>`.

use std::time::Duration;

use tokio::process::Command;

use super::Result;
use super::counter::JS_SECTION;
use super::peer::{PeerProcess, node_modules};

const DRIVER: &str = r#"
const Redlock = require("redlock").default;
const Redis = require("ioredis");
const readline = require("readline");

// A holder keeps the lock this long at most (the tests release far sooner).
const HOLD = 30000;
// The counter's locks are short: node-redlock 5 leaves the keys of a lost round in place until
// the acquire's retry window ends (see acquireAgain).
const COUNT_HOLD = 2000;
const WHO = "n"; // this side's letter in the counter's log
const say = (line) => process.stdout.write(line + "\n");
const clients = process.argv.slice(1).map((url) => new Redis(url, { maxRetriesPerRequest: 1 }));
const redlock = new Redlock(clients, { retryCount: 3000, retryDelay: 20, retryJitter: 10 });
redlock.on("error", () => {});
const releases = new Map();

async function hold(id, name, blocking) {
  let lock;
  try {
    lock = await redlock.acquire([name], HOLD, blocking ? {} : { retryCount: 0 });
  } catch (e) {
    say(blocking ? `error ${id} ${e}` : `busy ${id}`);
    return;
  }
  const released = new Promise((resolve) => releases.set(id, resolve));
  say(`acquired ${id}`);
  await released;
  await lock.release();
  say(`released ${id}`);
}

// Acquires as node-redlock users do, retrying on a lost retry window: a lost round's keys stay
// on the masters that granted them, and with the same value its next rounds are refused there,
// so one acquire can lose its whole window; its failure gives back what it took.
async function acquireAgain(name) {
  const giveUp = Date.now() + 60000;
  for (;;) {
    try {
      return await redlock.acquire([name], COUNT_HOLD, { retryCount: 10 });
    } catch (e) {
      if (Date.now() > giveUp) throw e;
    }
  }
}

async function count(name, workers, rounds, directory, pause) {
  let overlaps = 0;
  const one = async () => {
    for (let r = 0; r < rounds; r++) {
      const lock = await acquireAgain(name);
      try {
        overlaps += await section(directory, pause);
      } finally {
        await lock.release();
      }
      await sleep(3 * pause); // work between locks, as a service does
    }
  };
  try {
    await Promise.all(Array.from({ length: workers }, one));
    say(`counted ${overlaps}`);
  } catch (e) {
    say(`error count ${e}`);
  }
}

Promise.all(clients.map((client) => client.ping())).then(() => {
  say("ready");
  readline.createInterface({ input: process.stdin }).on("line", (line) => {
    const w = line.split(/\s+/).filter((word) => word);
    if (w[0] === "acquire" || w[0] === "try") {
      hold(w[1], w[2], w[0] === "acquire");
    } else if (w[0] === "release") {
      const release = releases.get(w[1]);
      releases.delete(w[1]);
      if (release) release(); else say(`error ${w[1]} not acquired`);
    } else if (w[0] === "count") {
      count(w[1], Number(w[2]), Number(w[3]), w[4], Number(w[5]));
    }
  }).on("close", () => process.exit(0));
});
"#;

/// A running node-redlock client (a Node process), killed when dropped.
#[derive(Debug)]
pub struct NodeRedlock(PeerProcess);

impl NodeRedlock {
    /// Starts the driver against the masters at `urls` (`redis://host:port` each), returning
    /// once every one answered a `PING`.
    ///
    /// # Errors
    ///
    /// [`HarnessError::MissingBinary`](crate::HarnessError::MissingBinary) when `node` or the
    /// npm packages are missing (the hint names the install script);
    /// [`HarnessError::Startup`](crate::HarnessError::Startup) when it does not connect.
    pub async fn start(urls: &[String]) -> Result<Self> {
        let (node, modules) = node_modules("redlock")?;
        let mut command = Command::new(node);
        command
            .env("NODE_PATH", modules)
            .arg("-e")
            .arg(format!("{JS_SECTION}{DRIVER}"))
            .args(urls);
        let what = format!("node-redlock driver for {}", urls.join(","));
        PeerProcess::start(command, &what).await.map(Self)
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
