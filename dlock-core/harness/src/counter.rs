//! A counter in files that two processes of different languages increment under one lock, with
//! the markers that show two holders at once: the non-atomic read-sleep-write of the interop
//! tests. The kazoo driver ([`Kazoo`](crate::Kazoo)'s `count`) runs the same section on the
//! same files.
//!
//! In a directory: `counter` holds the count; a writer creates `writer` exclusively
//! (`O_EXCL`), checks that no `reader-<id>` file exists, reads the count, sleeps, writes it
//! plus one, checks again, and removes `writer`; a reader creates its `reader-<id>`, checks
//! that `writer` is absent, reads the count, sleeps, and checks that the count is unchanged and
//! `writer` still absent. Each failed check is an overlap (as are a count that does not parse
//! and a `writer` marker gone before its writer removes it). Each writer then appends its
//! side's letter to `log` (`d` for dlock), so a test can show the two sides took turns.

use std::fs;
use std::io::{ErrorKind, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tempfile::TempDir;

use super::Result;

/// The same section in Python, for the Python peers' drivers (prefixed to their source, which
/// defines `WHO`, the letter its writers add to the log): `section(directory, writer, pause)`
/// returns the overlaps it saw.
pub(crate) const PYTHON_SECTION: &str = r#"
import os, time, uuid

def read_counter(directory):
    with open(os.path.join(directory, "counter")) as f:
        return f.read()

def section(directory, writer, pause):
    bad = 0
    writer_marker = os.path.join(directory, "writer")
    if writer:
        try:
            os.close(os.open(writer_marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            bad += 1
        if any(n.startswith("reader-") for n in os.listdir(directory)):
            bad += 1
        try:
            value = int(read_counter(directory))
        except ValueError:  # another writer's write half done: an overlap
            value, bad = 0, bad + 1
        time.sleep(pause)
        with open(os.path.join(directory, "counter"), "w") as f:
            f.write(str(value + 1))
        if any(n.startswith("reader-") for n in os.listdir(directory)):
            bad += 1
        try:
            os.unlink(writer_marker)
        except FileNotFoundError:  # another writer inside removed it: an overlap
            bad += 1
        with open(os.path.join(directory, "log"), "a") as f:
            f.write(WHO)
    else:
        marker = os.path.join(directory, "reader-" + uuid.uuid4().hex)
        open(marker, "w").close()
        if os.path.exists(writer_marker):
            bad += 1
        before = read_counter(directory)
        time.sleep(pause)
        if read_counter(directory) != before or os.path.exists(writer_marker):
            bad += 1
        os.unlink(marker)
    return bad
"#;

/// The writer's section in JavaScript, for the Node peers' drivers (prefixed to their source, which
/// defines `WHO`): `await section(directory, pause)` returns the overlaps it saw.
pub(crate) const JS_SECTION: &str = r#"
const fs = require("fs");
const path = require("path");
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const anyReader = (directory) => fs.readdirSync(directory).some((n) => n.startsWith("reader-"));
async function section(directory, pause) {
  let bad = 0;
  const marker = path.join(directory, "writer");
  try {
    fs.closeSync(fs.openSync(marker, "wx"));
  } catch (e) {
    if (e.code !== "EEXIST") throw e;
    bad += 1;
  }
  if (anyReader(directory)) bad += 1;
  let value = parseInt(fs.readFileSync(path.join(directory, "counter"), "utf8"), 10);
  if (Number.isNaN(value)) { value = 0; bad += 1; }
  await sleep(pause);
  fs.writeFileSync(path.join(directory, "counter"), String(value + 1));
  if (anyReader(directory)) bad += 1;
  try {
    fs.unlinkSync(marker);
  } catch (e) {
    if (e.code !== "ENOENT") throw e;
    bad += 1;
  }
  fs.appendFileSync(path.join(directory, "log"), WHO);
  return bad;
}
"#;

/// A shared counter in a temp directory of its own, removed when dropped.
#[derive(Debug)]
pub struct SharedCounter {
    dir: TempDir,
}

impl SharedCounter {
    /// A counter at 0.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Io`](crate::HarnessError::Io) if the directory cannot be made.
    pub fn new() -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("dlock-counter-")
            .tempdir()?;
        fs::write(dir.path().join("counter"), "0")?;
        Ok(Self { dir })
    }

    /// The directory (what the peer's driver is given).
    #[must_use]
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The count.
    ///
    /// # Panics
    ///
    /// If the counter file cannot be read as a number.
    #[must_use]
    pub fn value(&self) -> u64 {
        read(self.dir()).parse().expect("a count")
    }

    /// A writer's section: increments the count, pausing `pause` between the read and the
    /// write. Returns the overlaps seen (0 when the lock held).
    ///
    /// # Panics
    ///
    /// On an I/O error other than the writer marker already existing.
    pub async fn write(&self, pause: Duration) -> u32 {
        let mut bad = 0;
        let marker = self.dir().join("writer");
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&marker)
        {
            Ok(_) => {}
            Err(error) if error.kind() == ErrorKind::AlreadyExists => bad += 1,
            Err(error) => panic!("writer marker: {error}"),
        }
        bad += u32::from(self.any_reader());
        let value: u64 = read(self.dir()).parse().unwrap_or_else(|_| {
            bad += 1; // another writer's write half done
            0
        });
        tokio::time::sleep(pause).await;
        fs::write(self.dir().join("counter"), (value + 1).to_string()).expect("write the count");
        bad += u32::from(self.any_reader());
        if fs::remove_file(&marker).is_err() {
            bad += 1; // another writer inside removed it
        }
        let mut log = fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(self.dir().join("log"))
            .expect("open the log");
        log.write_all(b"d").expect("append to the log");
        bad
    }

    /// How many writes the other side (not dlock) made so far.
    ///
    /// # Panics
    ///
    /// Never: a log not written yet counts none.
    #[must_use]
    pub fn peer_writes(&self) -> usize {
        let log = fs::read(self.dir().join("log")).unwrap_or_default();
        log.iter().filter(|side| **side != b'd').count()
    }

    /// How many times the writers changed sides, in the order they wrote (`dddppd`: 2). Two
    /// sides that ran one after the other, never at once, change once.
    ///
    /// # Panics
    ///
    /// If the log cannot be read.
    #[must_use]
    pub fn turns(&self) -> usize {
        let log = fs::read(self.dir().join("log")).unwrap_or_default();
        log.windows(2).filter(|pair| pair[0] != pair[1]).count()
    }

    /// A reader's section: reads the count, pauses, and checks no writer came in. Returns the
    /// overlaps seen.
    ///
    /// # Panics
    ///
    /// On an I/O error.
    pub async fn read(&self, pause: Duration) -> u32 {
        let mut bad = 0;
        static READERS: AtomicU64 = AtomicU64::new(0);
        let id = READERS.fetch_add(1, Ordering::Relaxed);
        let marker: PathBuf = self
            .dir()
            .join(format!("reader-rust-{}-{id}", std::process::id()));
        fs::write(&marker, "").expect("reader marker");
        let writer = self.dir().join("writer");
        bad += u32::from(writer.exists());
        let before = read(self.dir());
        tokio::time::sleep(pause).await;
        bad += u32::from(read(self.dir()) != before || writer.exists());
        fs::remove_file(&marker).expect("remove the reader marker");
        bad
    }

    fn any_reader(&self) -> bool {
        fs::read_dir(self.dir())
            .expect("list the counter's directory")
            .filter_map(std::result::Result::ok)
            .any(|entry| entry.file_name().to_string_lossy().starts_with("reader-"))
    }
}

fn read(dir: &Path) -> String {
    fs::read_to_string(dir.join("counter")).expect("read the count")
}
