//! Servers shared by every test of one test binary: started once, by the first test that asks,
//! and kept until the binary exits.
//!
//! A shared server is started on a thread of its own, with a runtime of its own, that lives as
//! long as the process: no test's runtime owns its processes, so the test that happened to
//! start it can end while the others go on using it. Statics are never dropped, so the usual
//! kill-on-drop cannot end it: each of its processes runs under `setpriv --pdeathsig KILL`,
//! which has the kernel kill it when the thread that started it — here, the process — ends,
//! however it ends (a test binary killed by a timeout too). The temporary directories of a
//! test binary that has ended are removed by the next one that shares a server.

use std::cell::Cell;
use std::future::Future;
use std::path::Path;

use tokio::sync::OnceCell;

thread_local! {
    /// Set on the thread that starts shared servers.
    static FOR_THE_PROCESS: Cell<bool> = const { Cell::new(false) };
}

/// Whether a process spawned now is a shared server's (see [`shared`]): it must die with
/// this process rather than with its handle.
pub(crate) fn spawning_for_the_process() -> bool {
    FOR_THE_PROCESS.with(Cell::get)
}

/// The prefix of a shared server's temporary directories, naming this process.
pub(crate) fn temp_dir_owner() -> String {
    format!("of-{}-", std::process::id())
}

/// The server in `cell`, started by `start` at the first call in this process and shared by
/// every later one (each test keys its locks apart, e.g. with a prefix of its own).
///
/// # Panics
///
/// When `start` panics (the server could not start): in the caller, as the test's failure.
/// The next caller tries again.
///
/// # Example
///
/// ```no_run
/// use tokio::sync::OnceCell;
/// use dlock_harness::{RedisServer, shared};
///
/// static REDIS: OnceCell<RedisServer> = OnceCell::const_new();
///
/// # async fn example() {
/// let server = shared(&REDIS, || async { RedisServer::start().await.expect("redis-server") }).await;
/// println!("{}", server.url());
/// # }
/// ```
pub async fn shared<T, F, Fut>(cell: &'static OnceCell<T>, start: F) -> &'static T
where
    T: Send + Sync + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = T>,
{
    cell.get_or_init(|| start_for_the_process(start)).await
}

async fn start_for_the_process<T, F, Fut>(start: F) -> T
where
    T: Send + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = T>,
{
    let (started, server) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("dlock-harness-shared".to_owned())
        .spawn(move || {
            FOR_THE_PROCESS.with(|flag| flag.set(true));
            remove_temp_dirs_of_ended_processes();
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for a shared test server");
            runtime.block_on(async move {
                let _ = started.send(start().await);
                // Keeps this thread, its runtime (which reaps the server's processes) and so
                // the servers alive until the process ends.
                std::future::pending::<()>().await;
            });
        })
        .expect("a thread for a shared test server");
    server
        .await
        .expect("the shared test server did not start (see the panic above)")
}

/// Removes the temporary directories that shared servers of test binaries no longer running
/// left behind (their servers died with them).
fn remove_temp_dirs_of_ended_processes() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = owner_pid(&name.to_string_lossy()) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The pid in a shared server's directory name (`dlock-<kind>-of-<pid>-<random>`).
fn owner_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("dlock-")?;
    let (_, rest) = rest.split_once("-of-")?;
    rest.split_once('-')?.0.parse().ok()
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    use super::{OnceCell, owner_pid, shared};
    use crate::RedisServer;

    /// Set in the child process of [`a_shared_server_dies_with_its_process`].
    const CHILD: &str = "DLOCK_HARNESS_SHARED_CHILD";

    /// This test's binary runs this test again as a child, which starts a shared redis-server,
    /// prints its pid and its directory, and waits to be killed (`SIGKILL`: no destructor,
    /// no exit handler runs). The server must die with it, and the next sharing process must
    /// remove its directory.
    #[test]
    fn a_shared_server_dies_with_its_process() {
        static SERVER: OnceCell<RedisServer> = OnceCell::const_new();
        if std::env::var_os(CHILD).is_some() {
            let runtime = tokio::runtime::Runtime::new().expect("runtime");
            let server = runtime.block_on(shared(&SERVER, || async {
                RedisServer::start().await.expect("redis-server")
            }));
            let dir = server.log_path().parent().expect("the server's directory");
            println!("shared server {} in {}", server.pid(), dir.display());
            std::thread::sleep(Duration::from_secs(600));
            return;
        }
        let mut child = Command::new(std::env::current_exe().expect("this test binary"))
            .args([
                "--exact",
                "shared::tests::a_shared_server_dies_with_its_process",
            ])
            .args(["--nocapture", "--test-threads=1"])
            .env(CHILD, "1")
            .stdout(Stdio::piped())
            .spawn()
            .expect("the child test");
        let line = BufReader::new(child.stdout.take().expect("stdout"))
            .lines()
            .map_while(Result::ok)
            .find(|line| line.contains("shared server "))
            .expect("the child names its server");
        let (pid, dir) = line
            .split_once("shared server ")
            .and_then(|(_, rest)| rest.split_once(" in "))
            .expect("pid and directory");
        let alive = |pid: &str| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                // A zombie is dead: its parent (init, once the child is gone) has not reaped it.
                .is_ok_and(|stat| !stat.contains(") Z "))
        };
        assert!(alive(pid), "the shared server runs while its process does");
        child.kill().expect("SIGKILL the child");
        child.wait().expect("reap the child");
        let deadline = Instant::now() + Duration::from_secs(10);
        while alive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!alive(pid), "the shared server {pid} outlived its process");
        assert!(std::path::Path::new(dir).exists());
        super::remove_temp_dirs_of_ended_processes();
        assert!(
            !std::path::Path::new(dir).exists(),
            "the directory of an ended process is removed"
        );
    }

    #[test]
    fn a_shared_directory_names_its_process() {
        assert_eq!(owner_pid("dlock-zookeeper-of-4242-AbC123"), Some(4242));
        assert_eq!(owner_pid("dlock-zookeeper-AbC123"), None);
        assert_eq!(owner_pid("other-of-4242-x"), None);
    }
}
