//! A worker process: locks the run's key again and again and, under the lock, reads the
//! resource, waits a moment and writes it back, through [`LockGuard::run`] so that a lost
//! lease stops the work.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use dlock_core::backend::Fencing;
use dlock_core::{BackendSpec, DlockConfig, Leadership, LockGuard, Locker};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use crate::{OPERATION_TIMEOUT, TTL};

/// How long one acquire may wait before the worker reports it and tries again.
const WAIT: Duration = Duration::from_secs(30);

/// What a worker is told on its command line.
pub(crate) struct WorkerArgs {
    pub(crate) id: usize,
    pub(crate) url: String,
    pub(crate) key: String,
    pub(crate) resource: SocketAddr,
    pub(crate) seed: u64,
    /// The number of this worker's first grant (a replacement continues where no other
    /// worker of its id numbered).
    pub(crate) first_seq: u64,
    /// The election workload: campaign for the key rather than lock it.
    pub(crate) election: bool,
}

impl WorkerArgs {
    /// The arguments after `worker`, as [`to_args`](Self::to_args) writes them.
    pub(crate) fn parse(args: &[String]) -> Option<Self> {
        let [id, url, key, resource, seed, first_seq, workload] = args else {
            return None;
        };
        Some(Self {
            id: id.parse().ok()?,
            url: url.clone(),
            key: key.clone(),
            resource: resource.parse().ok()?,
            seed: seed.parse().ok()?,
            first_seq: first_seq.parse().ok()?,
            election: match workload.as_str() {
                "election" => true,
                "lock" => false,
                _ => return None,
            },
        })
    }

    pub(crate) fn to_args(&self) -> Vec<String> {
        vec![
            "worker".to_owned(),
            self.id.to_string(),
            self.url.clone(),
            self.key.clone(),
            self.resource.to_string(),
            self.seed.to_string(),
            self.first_seq.to_string(),
            if self.election { "election" } else { "lock" }.to_owned(),
        ]
    }
}

/// The worker's main loop; it ends only when the resource goes away (or the runner kills it).
pub(crate) async fn run(args: WorkerArgs) -> ExitCode {
    let config = DlockConfig::default()
        .with_backend(BackendSpec::Url(args.url.clone()))
        .with_ttl(TTL)
        .with_operation_timeout(OPERATION_TIMEOUT);
    let mut rng = StdRng::seed_from_u64(args.seed);
    let Ok(mut resource) = Resource::connect(args.resource, args.id).await else {
        return ExitCode::FAILURE;
    };
    let locker = loop {
        match Locker::connect(&config).await {
            Ok(locker) => break locker,
            Err(error) => {
                if resource.report_error("connect", &error).await.is_err() {
                    return ExitCode::FAILURE;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    let fenced = locker.capabilities().fencing != Fencing::None;
    let value = format!("worker-{}", args.id);
    for seq in args.first_seq.. {
        let granted = if args.election {
            // A leadership: a fenced grant underneath, its term the token.
            let campaign = locker.campaign(&args.key, value.as_str()).wait(WAIT);
            campaign.await.map(Held::Leader)
        } else {
            let lock = locker.lock(&args.key).fencing(fenced).wait(WAIT);
            lock.await.map(Held::Lock)
        };
        let held = match granted {
            Ok(held) => held,
            Err(error) => {
                if resource.report_error("acquire", &error).await.is_err() {
                    return ExitCode::SUCCESS;
                }
                // A server that refuses at once would otherwise be asked in a tight loop.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let guard = held.guard();
        let hold = Duration::from_millis(rng.random_range(1..=20));
        let outcome = guard.run(resource.critical_section(guard, seq, hold)).await;
        if matches!(outcome, Ok(Err(_))) {
            return ExitCode::SUCCESS; // the resource went away: the runner is done
        }
        if outcome.is_err() {
            // Cancelled mid-message, perhaps: a new connection keeps the protocol in step.
            let Ok(fresh) = Resource::connect(args.resource, args.id).await else {
                return ExitCode::SUCCESS;
            };
            resource = fresh;
        }
        let lost = outcome.is_err() || !guard.is_held();
        let released = held.release().await;
        let reported = async {
            if lost {
                resource.send(&format!("LOST {seq}\n")).await?;
            }
            resource.send(&format!("END {seq}\n")).await?;
            if let Err(error) = released {
                resource.report_error("release", &error).await?;
            }
            std::io::Result::Ok(())
        };
        if reported.await.is_err() {
            return ExitCode::SUCCESS; // the runner is done with this run
        }
    }
    unreachable!("a worker numbers fewer than 2^64 grants")
}

/// What a worker holds while in its section: a lock, or a leadership (a lock underneath).
enum Held {
    Lock(LockGuard),
    Leader(Leadership),
}

impl Held {
    fn guard(&self) -> &LockGuard {
        match self {
            Self::Lock(guard) => guard,
            Self::Leader(leadership) => leadership.guard(),
        }
    }

    /// Releases the lock, or resigns.
    async fn release(self) -> dlock_core::Result<()> {
        match self {
            Self::Lock(guard) => guard.release().await,
            Self::Leader(leadership) => leadership.resign().await,
        }
    }
}

/// A worker's connection to the resource.
struct Resource {
    input: BufReader<OwnedReadHalf>,
    output: OwnedWriteHalf,
    line: String,
}

impl Resource {
    /// Connects and says which worker this is.
    async fn connect(address: SocketAddr, worker: usize) -> std::io::Result<Self> {
        let (input, output) = TcpStream::connect(address).await?.into_split();
        let mut resource = Self {
            input: BufReader::new(input),
            output,
            line: String::new(),
        };
        resource.send(&format!("HELLO {worker}\n")).await?;
        Ok(resource)
    }

    /// Sends one message that needs no answer.
    async fn send(&mut self, message: &str) -> std::io::Result<()> {
        self.output.write_all(message.as_bytes()).await
    }

    /// Sends one message and reads its one-line answer.
    async fn ask(&mut self, message: &str) -> std::io::Result<&str> {
        self.send(message).await?;
        self.line.clear();
        if self.input.read_line(&mut self.line).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(self.line.trim_end())
    }

    /// Tells the resource an acquire or release failed, and how.
    async fn report_error(&mut self, what: &str, error: &dlock_core::Error) -> std::io::Result<()> {
        if std::env::var_os("DLOCK_FAULTS_TRACE").is_some() {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            eprintln!("worker {:.2}: {what}: {error}", now.as_secs_f64() % 60.0);
        }
        self.send(&format!("ERROR {what} {:?}\n", error.kind()))
            .await
    }

    /// Read, wait `hold`, write back one more: the work the lock protects. `held` is taken
    /// right before the write, as late as the worker can look.
    async fn critical_section(
        &mut self,
        guard: &LockGuard,
        seq: u64,
        hold: Duration,
    ) -> std::io::Result<()> {
        let token = guard
            .fencing_token()
            .map_or_else(|| "-".to_owned(), |token| token.to_string());
        let reply = self.ask(&format!("BEGIN {seq} {token}\n")).await?;
        let Some(read) = reply.strip_prefix("OK ") else {
            return Ok(()); // refused as stale: nothing to write
        };
        let read: u64 = read.parse().map_err(std::io::Error::other)?;
        tokio::time::sleep(hold).await;
        let held = guard.is_held();
        if !held {
            // The lease ran out during this very poll: give `run` the chance to drop the
            // work. A write that still goes out below is one `run` should have stopped.
            tokio::task::yield_now().await;
        }
        let held = u8::from(guard.is_held());
        self.ask(&format!("WRITE {seq} {token} {read} {held}\n"))
            .await
            .map(drop)
    }
}
