//! RedLock's floor and its peer, on the same masters as dlock: the algorithm's commands sent
//! raw (`SET NX PX` on every master at once, a majority wins, the owner-checked delete on
//! every master at once), and `rslock`, the RedLock crate a Rust user finds today.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use redis::aio::ConnectionManager;

use crate::redis_raw;
use crate::stats::Samples;

/// One connection per master, and rslock's manager over the same masters.
#[derive(Clone)]
pub(crate) struct RedLockRaw {
    masters: Vec<ConnectionManager>,
    /// The masters' `redis://` URLs, for rslock's managers.
    urls: Vec<String>,
    peer: rslock::LockManager,
}

impl RedLockRaw {
    /// Connects to every master of `redlock://h1:p1,h2:p2,...`.
    pub(crate) async fn connect(url: &str) -> Result<Self, String> {
        let hosts = url
            .trim_start_matches("redlock://")
            .split(['/', '?'])
            .next()
            .unwrap_or_default();
        let urls: Vec<String> = hosts.split(',').map(|h| format!("redis://{h}")).collect();
        let mut masters = Vec::with_capacity(urls.len());
        for url in &urls {
            let client = redis::Client::open(url.as_str()).map_err(|e| e.to_string())?;
            masters.push(
                ConnectionManager::new(client)
                    .await
                    .map_err(|e| e.to_string())?,
            );
        }
        Ok(Self {
            masters,
            peer: rslock::LockManager::new(urls.clone()),
            urls,
        })
    }

    fn quorum(&self) -> usize {
        self.masters.len() / 2 + 1
    }

    /// One round of the algorithm: `true` if a majority granted (else it gives back).
    pub(crate) async fn acquire(&self, key: &str, owner: &str, ttl: Duration) -> bool {
        let sets = self.masters.iter().map(|master| {
            let mut master = master.clone();
            async move { redis_raw::set_nx_px(&mut master, key, owner, ttl).await }
        });
        let granted = join_all(sets).await.into_iter().filter(|ok| *ok).count();
        if granted >= self.quorum() {
            return true;
        }
        self.release(key, owner).await;
        false
    }

    /// The owner-checked delete on every master at once.
    pub(crate) async fn release(&self, key: &str, owner: &str) {
        join_all(self.masters.iter().map(|master| {
            let mut master = master.clone();
            async move { redis_raw::compare_and_delete(&mut master, key, owner).await }
        }))
        .await;
    }

    /// `PING` to the first master.
    pub(crate) async fn ping(&self) {
        let mut master = self.masters[0].clone();
        let _: String = redis::cmd("PING")
            .query_async(&mut master)
            .await
            .expect("PING");
    }

    /// One lock + unlock with rslock.
    pub(crate) async fn peer_cycle(&self, key: &str, ttl: Duration) {
        let lock = self
            .peer
            .lock(key.as_bytes(), ttl)
            .await
            .expect("rslock grants a free key");
        self.peer.unlock(&lock).await;
    }

    /// The contended load with rslock: `tasks` tasks over two managers take `key` `rounds`
    /// times each (`acquire`: its own retry loop, 3 tries with 0–200 ms random sleeps, again
    /// and again), holding it `hold`. Returns the waits (request → grant) and the wall time.
    pub(crate) async fn peer_contended(
        &self,
        key: &str,
        tasks: usize,
        rounds: usize,
        hold: Duration,
    ) -> Samples {
        let managers = [
            rslock::LockManager::new(self.urls.clone()),
            rslock::LockManager::new(self.urls.clone()),
        ];
        let waits = Arc::new(Mutex::new(Vec::with_capacity(tasks * rounds)));
        let started = Instant::now();
        let running: Vec<_> = (0..tasks)
            .map(|t| {
                let (peer, waits, key) = (managers[t % 2].clone(), waits.clone(), key.to_owned());
                tokio::spawn(async move {
                    for _ in 0..rounds {
                        let asked = Instant::now();
                        let guard = peer
                            .acquire(key.as_bytes(), Duration::from_secs(30))
                            .await
                            .expect("rslock acquires");
                        waits.lock().unwrap().push(asked.elapsed());
                        tokio::time::sleep(hold).await;
                        guard.release().await;
                    }
                })
            })
            .collect();
        for task in running {
            task.await.expect("rslock task");
        }
        let latencies = std::mem::take(&mut *waits.lock().unwrap());
        Samples {
            latencies,
            elapsed: started.elapsed(),
            ..Samples::default()
        }
    }
}
