//! PostgreSQL: `initdb` into a temp dir, then `postgres` on a free loopback port. As root, both
//! run as the `postgres` system user (they refuse to run as root).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tempfile::TempDir;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

use super::process::{
    STARTUP_TIMEOUT, ServerProcess, Spec, find_binary, is_executable, probe, process_methods,
    retry_startup, temp_dir,
};
use super::tls::TestCerts;
use super::wire::postgres_accepts;
use super::{HarnessError, Result, ports};

/// Where Debian installs each PostgreSQL version (`/usr/lib/postgresql/<version>/bin`).
const DEBIAN_PREFIX: &str = "/usr/lib/postgresql";
/// `initdb` needs more time than a server start on a slow machine.
const INITDB_TIMEOUT: Duration = Duration::from_secs(60);
/// The superuser `initdb` creates, which is also the database name in [`PostgresServer::url`].
const SUPERUSER: &str = "postgres";

/// A PostgreSQL server (trust authentication, superuser `postgres`, `fsync=off`) on a free
/// loopback port, with its cluster and socket in its own temp dir, killed on drop.
///
/// Killing the postmaster also waits for its backends to exit, so a
/// [`restart`](Self::restart) (crash recovery on the same data directory) does not trip over
/// them.
#[derive(Debug)]
pub struct PostgresServer {
    process: ServerProcess,
    bin_dir: PathBuf,
    _dir: TempDir,
}

process_methods!(PostgresServer);

impl PostgresServer {
    /// Creates a cluster with `initdb` and starts `postgres`, waiting until it accepts a
    /// session.
    ///
    /// # Errors
    ///
    /// [`HarnessError::MissingBinary`] if PostgreSQL's server binaries are not installed,
    /// [`HarnessError::Startup`] if `initdb` failed or the server did not start (after one
    /// retry on a new port).
    pub async fn start() -> Result<Self> {
        Self::start_with(&[]).await
    }

    /// Like [`start`](Self::start), with more server settings (`name=value`, each passed as
    /// `-c name=value`): for example `shared_preload_libraries=pg_stat_statements`, which
    /// counts the statements the server ran.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start); a setting the server rejects fails its startup.
    pub async fn start_with(settings: &[&str]) -> Result<Self> {
        let bin_dir = find_bin_dir()?;
        let user = server_user()?;
        let settings: Vec<String> = settings.iter().map(|s| (*s).to_owned()).collect();
        retry_startup(|| Self::launch(&bin_dir, user, None, &settings)).await
    }

    /// Like [`start`](Self::start), with TLS on (`ssl=on`, `certs`' server certificate): a
    /// TLS session must present a client certificate that their CA signed for the user
    /// (`hostssl … clientcert=verify-full`); plain-text sessions are still accepted (the
    /// readiness probe is one). [`tls_url`](Self::tls_url) asks for `verify-full`.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub async fn start_tls(certs: &TestCerts) -> Result<Self> {
        let bin_dir = find_bin_dir()?;
        let user = server_user()?;
        retry_startup(|| Self::launch(&bin_dir, user, Some(certs), &[])).await
    }

    async fn launch(
        bin_dir: &Path,
        user: Option<(u32, u32)>,
        tls: Option<&TestCerts>,
        settings: &[String],
    ) -> Result<Self> {
        let dir = temp_dir("postgres")?;
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))?;
        }
        let data = dir.path().join("data");
        init_cluster(bin_dir, dir.path(), &data, user).await?;
        let tls_settings = match tls {
            Some(certs) => enable_tls(certs, dir.path(), &data, user)?,
            None => Vec::new(),
        };
        let port = ports::free_port()?;
        let server = format!("postgres on 127.0.0.1:{port}");
        let spec = Spec::new(server, bin_dir.join("postgres"), dir.path())
            .flags([
                ("-D", &data.to_string_lossy()),
                ("-p", &port.to_string()),
                ("-h", "127.0.0.1"),
                ("-k", &dir.path().to_string_lossy()),
                ("-c", "fsync=off"),
                ("-c", "synchronous_commit=off"),
                ("-c", "full_page_writes=off"),
            ])
            .args(tls_settings)
            .args(
                settings
                    .iter()
                    .flat_map(|setting| ["-c".to_owned(), setting.clone()]),
            )
            .user(user);
        let ready = probe(move || postgres_accepts(port, SUPERUSER));
        let process = ServerProcess::start(spec, port, ready, STARTUP_TIMEOUT).await?;
        Ok(Self {
            process,
            bin_dir: bin_dir.to_owned(),
            _dir: dir,
        })
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`
    #[must_use]
    pub fn url(&self) -> String {
        format!(
            "postgres://{SUPERUSER}@127.0.0.1:{}/{SUPERUSER}",
            self.port()
        )
    }

    /// [`url`](Self::url) with `sslmode=verify-full`, for a server started with
    /// [`start_tls`](Self::start_tls) (the TLS files are the caller's to add).
    #[must_use]
    pub fn tls_url(&self) -> String {
        format!("{}?sslmode=verify-full", self.url())
    }

    /// The directory of the PostgreSQL binaries used (`psql` is there too).
    #[must_use]
    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }
}

impl PostgresServer {
    /// An interactive `psql` session on the server, as the superuser: a plain SQL client
    /// for interop tests.
    ///
    /// # Errors
    ///
    /// [`HarnessError::MissingBinary`] without `psql`; [`HarnessError::Io`] if it cannot be
    /// started.
    pub async fn psql(&self) -> Result<PsqlSession> {
        let psql = self.bin_dir.join("psql");
        if !is_executable(&psql) {
            return Err(HarnessError::missing("psql"));
        }
        let mut child = tokio::process::Command::new(psql)
            .args(["-X", "-A", "-t", "-q", "-h", "127.0.0.1", "-U", SUPERUSER])
            .args(["-p", &self.port().to_string(), SUPERUSER])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        Ok(PsqlSession {
            _child: child,
            stdin,
            stdout,
        })
    }
}

/// A `psql` process reading SQL from a pipe, one session for its whole life.
#[derive(Debug)]
pub struct PsqlSession {
    _child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    stdout: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl PsqlSession {
    /// Runs `sql` (one or more statements) and returns the rows it printed, one line each,
    /// columns separated by `|`; statements without rows print nothing.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Io`] if `psql` exited or its pipes broke.
    pub async fn run(&mut self, sql: &str) -> Result<Vec<String>> {
        const DONE: &str = "__dlock_harness_done__";
        self.stdin
            .write_all(format!("{sql}\n\\echo {DONE}\n").as_bytes())
            .await?;
        self.stdin.flush().await?;
        let mut rows = Vec::new();
        loop {
            let line = self.stdout.next_line().await?.ok_or_else(|| {
                std::io::Error::other(format!("psql exited while running `{sql}`"))
            })?;
            if line == DONE {
                return Ok(rows);
            }
            if !line.is_empty() {
                rows.push(line);
            }
        }
    }
}

/// Runs `initdb` (as `user`), logging to `dir/initdb.log`.
async fn init_cluster(
    bin_dir: &Path,
    dir: &Path,
    data: &Path,
    user: Option<(u32, u32)>,
) -> Result<()> {
    let spec = Spec::new("initdb", bin_dir.join("initdb"), dir)
        .log_to(dir.join("initdb.log"))
        .flags([("-D", &data.to_string_lossy()), ("-U", SUPERUSER)])
        .args(["--auth=trust", "--no-sync", "--encoding=UTF8", "--locale=C"])
        .user(user);
    spec.run(INITDB_TIMEOUT).await
}

/// Copies `certs`' server files into `dir` (the server refuses a key that others can read, and
/// must be able to read its files), makes TLS sessions need a client certificate for their
/// user, and gives the server settings that turn TLS on.
fn enable_tls(
    certs: &TestCerts,
    dir: &Path,
    data: &Path,
    user: Option<(u32, u32)>,
) -> Result<Vec<String>> {
    use std::os::unix::fs::PermissionsExt as _;
    let mut settings = vec!["-c".to_owned(), "ssl=on".to_owned()];
    for (setting, from, name) in [
        ("ssl_cert_file", certs.server_cert_file(), "server.crt"),
        ("ssl_key_file", certs.server_key_file(), "server.key"),
        ("ssl_ca_file", certs.ca_file(), "ca.crt"),
    ] {
        let to = dir.join(name);
        std::fs::copy(from, &to)?;
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o600))?;
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&to, Some(uid), Some(gid))?;
        }
        settings.extend(["-c".to_owned(), format!("{setting}={}", to.display())]);
    }
    let hba = data.join("pg_hba.conf");
    let rules = std::fs::read_to_string(&hba)?;
    std::fs::write(
        &hba,
        format!("hostssl all all 127.0.0.1/32 trust clientcert=verify-full\n{rules}"),
    )?;
    Ok(settings)
}

/// The highest-versioned `/usr/lib/postgresql/<version>/bin` with `initdb` and `postgres`, or
/// the directory of `initdb` on `PATH`.
fn find_bin_dir() -> Result<PathBuf> {
    let has_server =
        |bin: &Path| is_executable(&bin.join("initdb")) && is_executable(&bin.join("postgres"));
    let mut versions: Vec<(Vec<u32>, PathBuf)> = std::fs::read_dir(DEBIAN_PREFIX)
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = entry
                .file_name()
                .to_str()?
                .split('.')
                .map(str::parse)
                .collect::<Result<Vec<u32>, _>>()
                .ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, bin)| has_server(bin))
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Ok(bin);
    }
    let initdb = find_binary("initdb")?;
    let bin = initdb.parent().map(Path::to_path_buf).unwrap_or_default();
    if has_server(&bin) {
        Ok(bin)
    } else {
        Err(HarnessError::missing("postgres"))
    }
}

/// The uid and gid of the `postgres` system user when running as root; `None` otherwise (the
/// server then runs as the current user).
fn server_user() -> Result<Option<(u32, u32)>> {
    if effective_uid()? != 0 {
        return Ok(None);
    }
    let passwd = std::fs::read_to_string("/etc/passwd")?;
    let user = passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        match fields.as_slice() {
            [name, _, uid, gid, ..] if *name == "postgres" => {
                Some((uid.parse().ok()?, gid.parse().ok()?))
            }
            _ => None,
        }
    });
    user.map(Some).ok_or_else(|| HarnessError::Startup {
        server: "postgres".to_owned(),
        reason:
            "running as root, but there is no `postgres` system user to run initdb and postgres as"
                .to_owned(),
        log_tail: String::new(),
    })
}

/// The effective uid, from `/proc/self/status`.
fn effective_uid() -> Result<u32> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let uid = status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .and_then(|euid| euid.parse().ok());
    uid.ok_or_else(|| std::io::Error::other("no Uid line in /proc/self/status").into())
}
