//! A real Apache Curator client, for interop tests: a small Java program, compiled with `javac`
//! against Debian's Curator jars (`libcurator-recipes-java`), that takes and gives back
//! Curator locks on command.
//!
//! Commands go to its stdin one per line; it answers on stdout:
//!
//! | command | answer |
//! |---|---|
//! | `acquire <id> mutex <path>` | `acquired <id>` once `InterProcessMutex(path)` is held |
//! | `acquire <id> read <path>` / `write <path>` | the same, for `InterProcessReadWriteLock(path)` |
//! | `acquire <id> sem <n> <path>` | the same, for a lease of `InterProcessSemaphoreV2(path, n)` |
//! | `acquire <id> leader <path> <participant>` | `acquired <id>` once a `LeaderSelector(path)` with that participant id leads |
//! | `acquire <id> latch <path> <participant>` | `acquired <id>` once a started `LeaderLatch(path, participant)` has leadership |
//! | `release <id>` | `released <id>` (a leader gives up its leadership: its `takeLeadership` returns; a latch is closed) |
//! | `leader <path>` | `leader <participant id or -> participants <id,id,...>`, as `LeaderSelector.getLeader()` / `getParticipants()` read them |
//! | `latch <path>` | the same, as `LeaderLatch.getLeader()` / `getParticipants()` read them |
//! | `load <rw\|sem> <path> <clients> <threads> <rounds> <hold µs>,<hold µs>,... <permits>` | `load <elapsed ns> <wait ns>,<wait ns>,...` once done: the bench's load on Curator (see below) |
//!
//! `load` is the benchmark's peer (`dlock-bench`'s read-mostly and semaphore scenarios): that
//! many threads over that many clients of their own take, `rounds` times each, a lease of
//! `InterProcessSemaphoreV2(path, permits)` (`sem`) or a lock of
//! `InterProcessReadWriteLock(path)` (`rw`: the write lock when `thread + round` is a multiple
//! of ten, else the read lock), hold it, and give it back; it answers with the wall time and
//! every wait (request to grant). Round `r` of thread `t` holds for the hold at
//! `t * rounds + r` in the list (taken round the list when it is shorter): the bench replays
//! the holds dlock's locks had, so that both hold alike.
//!
//! Each lock is taken and given back by a thread of its own (Curator's mutexes belong to the
//! thread that took them), so one driver holds and awaits many locks at once. Errors are
//! answered `error <id> <what>`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::process::Command;
use tokio::sync::OnceCell;

use super::peer::{PeerProcess, io};
use super::process::find_binary;
use super::{HarnessError, Result};

/// Debian's Curator 5 and what its lock recipes load (`libcurator-recipes-java` installs them).
const CLASSPATH: [&str; 8] = [
    "/usr/share/java/curator-recipes.jar",
    "/usr/share/java/curator-framework.jar",
    "/usr/share/java/curator-client.jar",
    "/usr/share/java/zookeeper.jar",
    "/usr/share/java/zookeeper-jute.jar",
    "/usr/share/java/guava.jar",
    "/usr/share/java/slf4j-api.jar",
    "/usr/share/java/slf4j-nop.jar",
];

const DRIVER: &str = r#"
import java.io.*;
import java.util.Collection;
import java.util.Map;
import java.util.concurrent.*;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.*;
import org.apache.curator.framework.recipes.locks.*;
import org.apache.curator.retry.RetryOneTime;

public class CuratorDriver {
    static synchronized void say(String line) { System.out.println(line); System.out.flush(); }

    interface Unlock { void run() throws Exception; }

    static void sayLeader(Participant leader, Collection<Participant> participants) {
        StringBuilder all = new StringBuilder();
        for (Participant p : participants) {
            if (all.length() > 0) all.append(',');
            all.append(p.getId());
        }
        say("leader " + (leader.isLeader() ? leader.getId() : "-") + " participants " + all);
    }

    static CuratorFramework connect(String connectString) throws Exception {
        CuratorFramework client = CuratorFrameworkFactory.builder()
            .connectString(connectString).sessionTimeoutMs(10000).connectionTimeoutMs(10000)
            .retryPolicy(new RetryOneTime(100)).build();
        client.start();
        client.blockUntilConnected();
        return client;
    }

    // load <rw|sem> <path> <clients> <threads> <rounds> <hold us>,<hold us>,... <permits>
    static String load(String connectString, String[] w) throws Exception {
        String kind = w[1], path = w[2];
        int clients = Integer.parseInt(w[3]), threads = Integer.parseInt(w[4]);
        int rounds = Integer.parseInt(w[5]), permits = Integer.parseInt(w[7]);
        String[] holdsUs = w[6].split(",");
        long[] holdsNs = new long[holdsUs.length];
        for (int i = 0; i < holdsUs.length; i++) holdsNs[i] = Long.parseLong(holdsUs[i]) * 1000;
        CuratorFramework[] cs = new CuratorFramework[clients];
        for (int i = 0; i < clients; i++) cs[i] = connect(connectString);
        long[][] waits = new long[threads][rounds];
        AtomicReference<Exception> failed = new AtomicReference<>();
        Thread[] workers = new Thread[threads];
        long started = System.nanoTime();
        for (int t = 0; t < threads; t++) {
            final int task = t;
            workers[t] = new Thread(() -> {
                try {
                    CuratorFramework c = cs[task % clients];
                    InterProcessReadWriteLock rw = new InterProcessReadWriteLock(c, path);
                    InterProcessSemaphoreV2 sem = new InterProcessSemaphoreV2(c, path, permits);
                    for (int r = 0; r < rounds; r++) {
                        long asked = System.nanoTime();
                        Unlock unlock;
                        if (kind.equals("sem")) {
                            Lease lease = sem.acquire();
                            unlock = () -> sem.returnLease(lease);
                        } else {
                            InterProcessMutex m = (task + r) % 10 == 0 ? rw.writeLock() : rw.readLock();
                            m.acquire();
                            unlock = m::release;
                        }
                        waits[task][r] = System.nanoTime() - asked;
                        LockSupport.parkNanos(holdsNs[(task * rounds + r) % holdsNs.length]);
                        unlock.run();
                    }
                } catch (Exception e) {
                    failed.set(e);
                }
            });
            workers[t].start();
        }
        for (Thread t : workers) t.join();
        long elapsed = System.nanoTime() - started;
        for (CuratorFramework c : cs) c.close();
        if (failed.get() != null) throw failed.get();
        StringBuilder out = new StringBuilder("load ").append(elapsed).append(' ');
        for (int t = 0; t < threads; t++) {
            for (int r = 0; r < rounds; r++) {
                if (t > 0 || r > 0) out.append(',');
                out.append(waits[t][r]);
            }
        }
        return out.toString();
    }

    public static void main(String[] args) throws Exception {
        CuratorFramework client = connect(args[0]);
        Map<String, CountDownLatch> releases = new ConcurrentHashMap<>();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        say("ready");
        String line;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split(" ");
            if (w[0].equals("acquire")) {
                String id = w[1];
                CountDownLatch release = new CountDownLatch(1);
                releases.put(id, release);
                new Thread(() -> {
                    try {
                        Unlock unlock;
                        switch (w[2]) {
                            case "mutex": {
                                InterProcessMutex m = new InterProcessMutex(client, w[3]);
                                m.acquire();
                                unlock = m::release;
                                break;
                            }
                            case "read":
                            case "write": {
                                InterProcessReadWriteLock rw = new InterProcessReadWriteLock(client, w[3]);
                                InterProcessMutex m = w[2].equals("read") ? rw.readLock() : rw.writeLock();
                                m.acquire();
                                unlock = m::release;
                                break;
                            }
                            case "leader": {
                                CountDownLatch given = new CountDownLatch(1);
                                LeaderSelector selector = new LeaderSelector(client, w[3], new LeaderSelectorListenerAdapter() {
                                    public void takeLeadership(CuratorFramework c) throws Exception {
                                        say("acquired " + id);
                                        release.await();
                                        given.countDown();
                                    }
                                });
                                selector.setId(w[4]);
                                selector.start();
                                given.await();
                                selector.close();
                                say("released " + id);
                                return;
                            }
                            case "latch": {
                                LeaderLatch latch = new LeaderLatch(client, w[3], w[4]);
                                latch.start();
                                latch.await();
                                say("acquired " + id);
                                release.await();
                                latch.close();
                                say("released " + id);
                                return;
                            }
                            case "sem": {
                                InterProcessSemaphoreV2 s = new InterProcessSemaphoreV2(client, w[4], Integer.parseInt(w[3]));
                                Lease lease = s.acquire();
                                unlock = () -> s.returnLease(lease);
                                break;
                            }
                            default:
                                say("error " + id + " unknown lock kind " + w[2]);
                                return;
                        }
                        say("acquired " + id);
                        release.await();
                        unlock.run();
                        say("released " + id);
                    } catch (Exception e) {
                        say("error " + id + " " + e);
                    }
                }).start();
            } else if (w[0].equals("leader")) {
                LeaderSelector reader = new LeaderSelector(client, w[1], new LeaderSelectorListenerAdapter() {
                    public void takeLeadership(CuratorFramework c) {}
                });
                try {
                    sayLeader(reader.getLeader(), reader.getParticipants());
                } catch (Exception e) {
                    say("error leader " + e);
                }
            } else if (w[0].equals("latch")) {
                LeaderLatch reader = new LeaderLatch(client, w[1]);
                try {
                    sayLeader(reader.getLeader(), reader.getParticipants());
                } catch (Exception e) {
                    say("error latch " + e);
                }
            } else if (w[0].equals("load")) {
                try {
                    say(load(args[0], w));
                } catch (Exception e) {
                    say("error load " + e);
                }
            } else if (w[0].equals("release")) {
                CountDownLatch release = releases.remove(w[1]);
                if (release == null) say("error " + w[1] + " not acquired"); else release.countDown();
            }
        }
        client.close();
        System.exit(0);
    }
}
"#;

/// The compiled driver: a directory holding `CuratorDriver.class`, made once per process.
static COMPILED: OnceCell<PathBuf> = OnceCell::const_new();

/// A running Curator client (a JVM), killed when dropped.
#[derive(Debug)]
pub struct Curator(PeerProcess);

impl Curator {
    /// Compiles the driver (once per process) and starts it against `connect_string`
    /// (`host:port,...`), returning once its client is connected.
    ///
    /// # Errors
    ///
    /// [`HarnessError::MissingBinary`] when `java`, `javac` or a Curator jar is missing (the
    /// hint names the install script); [`HarnessError::Startup`] when the driver does not
    /// compile or connect.
    pub async fn start(connect_string: &str) -> Result<Self> {
        let java = find_binary("java")?;
        let classes = COMPILED.get_or_try_init(compile).await?;
        let classpath = format!("{}:{}", classes.display(), CLASSPATH.join(":"));
        let mut command = Command::new(java);
        command
            .args(["-Xshare:auto", "-XX:TieredStopAtLevel=1", "-cp", &classpath])
            .arg("CuratorDriver")
            .arg(connect_string);
        let what = format!("Curator driver for {connect_string}");
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

    /// Kills the JVM (as a crash: its session lives until it expires).
    ///
    /// # Errors
    ///
    /// [`HarnessError::Io`] if the signal cannot be sent.
    pub async fn kill(&mut self) -> Result<()> {
        self.0.kill().await
    }
}

/// The compiled driver, in one directory per version of its source under the system's temp
/// directory: compiled by the first test process that needs it (in a directory of its own,
/// then renamed into place), reused by the others.
async fn compile() -> Result<PathBuf> {
    let version = DRIVER
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        });
    let target = std::env::temp_dir().join(format!("dlock-curator-driver-{version:016x}"));
    if target.join("CuratorDriver.class").is_file() {
        return Ok(target);
    }
    let javac = find_binary("javac")?;
    for jar in CLASSPATH {
        if !Path::new(jar).is_file() {
            return Err(HarnessError::MissingBinary {
                binary: jar.to_owned(),
                hint: format!(
                    "{jar} is missing (Debian packages `libcurator-recipes-java`, `libslf4j-java`): {}",
                    super::error::INSTALL_HINT
                ),
            });
        }
    }
    let scratch = tempfile::Builder::new()
        .prefix("dlock-curator-")
        .tempdir()?;
    let dir = scratch.path();
    std::fs::write(dir.join("CuratorDriver.java"), DRIVER)?;
    let output = Command::new(javac)
        .arg("-cp")
        .arg(CLASSPATH.join(":"))
        .arg("-d")
        .arg(dir)
        .arg(dir.join("CuratorDriver.java"))
        .output()
        .await?;
    if !output.status.success() {
        return Err(HarnessError::Startup {
            server: "javac CuratorDriver.java".to_owned(),
            reason: format!("exited with {}", output.status),
            log_tail: String::from_utf8_lossy(&output.stderr).into_owned(),
        });
    }
    // Another process may have put its copy in place first: either is the same.
    let compiled = scratch.keep();
    if std::fs::rename(&compiled, &target).is_err() {
        let _ = std::fs::remove_dir_all(&compiled);
        if !target.join("CuratorDriver.class").is_file() {
            return Err(io("cannot put the compiled Curator driver in place"));
        }
    }
    Ok(target)
}
