//! The RedLock backend: one lock over N independent Redis masters, taken on a majority.

mod config;
mod quorum;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::StreamExt;
use futures_util::future::join_all;
use futures_util::stream::FuturesUnordered;
use rand::Rng;
use tokio::task::JoinHandle;

pub(crate) use self::config::RedLockUrl;
use self::quorum::{Answer, Verdict, decide};
use crate::backend::background::Background;
use crate::backend::redis::{
    Attempt, Layout, LookAgain, Node, Waiters, certificates, channel_of, open_lazy,
};
use crate::backend::{BackendUrl, Capabilities, LockBackend};
use crate::error::within;
use crate::lease::{
    AcquireOutcome, AcquireRequest, Lease, ReleaseOutcome, RenewOutcome, drift_margin,
};
use crate::{Error, Kept, LockMode, Result};

/// Leases renewed in one script per master.
const RENEW_BATCH: usize = 100;

/// Locks on N independent Redis masters with the RedLock algorithm: a lock is held when a
/// majority of the masters hold it, within its validity.
///
/// Build it with [`RedLockBackend::connect`], or through
/// [`Locker::connect`](crate::Locker::connect) with a URL naming every master:
/// `redlock://[user:password@]h1:6379,[user:password@]h2:6379,h3:6379[/db][?node_timeout=5%]`.
/// Credentials belong to the master they precede (passwords are never shown); `/db` applies
/// to every master. At least three masters; five is the usual choice (two may fail).
/// `?layout=plain` writes node-redlock's layout on each master (the key itself holding the
/// owner's token), so node-redlock's `acquire([name])` and dlock exclude each other: no mark on
/// the holder's keys, so the head of the queue also looks again on its own (after 25 ms,
/// doubling to every 500 ms, never past the holders' expiry), and no `hold_at_least`.
///
/// # How a lock is held
///
/// * **Acquire**: `SET key owner NX PX ttl` on every master at once, each bounded by its own
///   `node_timeout` (default 5 % of the lock's ttl but at least 50 ms, at most the operation
///   timeout; `50ms` for a fixed bound), so one slow or frozen master cannot stall the
///   acquire — and the round stops waiting once a majority said yes. Granted when
///   a majority said yes and the round ended within the validity: the lease runs from when
///   the round was **sent**, and the Locker's local deadline is `ttl − (ttl/100 + 2 ms)`
///   after that — exactly RedLock's validity `ttl − elapsed − drift`. A round without a
///   majority gives back what it took, on every master at once.
/// * **Waiting** never polls: a Locker's waiters queue in arrival order, subscribed to the
///   lock's release channel on every master; the head's attempt marks the holder's keys
///   waited for, so their release publishes, and any master's message wakes it. A master's
///   message is heard only once it confirmed the subscription: when none of the masters
///   that answered "held" had, the head tries again at their first confirmation. It also
///   re-checks when enough holders' keys expire for a majority (a lost message costs that
///   much), with a little random delay when two clients split the vote.
/// * **Renewal**: `PEXPIRE` (owner-checked) on every master, up to 100 locks per script;
///   renewed only when a majority extended it. A lock a majority no longer holds is lost. A
///   failed extension never deletes the lock: the Locker's local deadline decides.
/// * **Release**: the owner-checked delete on every master at once, each master given half
///   the operation timeout (a release computes no validity), awaited until a majority
///   settled it.
///
/// # What RedLock does and does not guarantee
///
/// * **No fencing tokens.** Each master counts on its own, so no number grows across grants
///   of the lock; a lock that asks for one is [`Error::Unsupported`](crate::Error). Without a
///   token, a holder that pauses past its validity (a GC pause, a frozen VM) and then writes
///   cannot be refused by the resource. Martin Kleppmann's critique ("How to do distributed
///   locking", 2016) rests on this and on timing; antirez' reply ("Is Redlock safe?") argues
///   the timing assumptions are reasonable with monotonic clocks, which dlock uses.
/// * **Timing assumptions.** Safety needs the masters' clocks to advance at about the same
///   rate (the drift margin covers 1 %), and a master that restarts without persistence to
///   stay down for at least one ttl (or run with `appendfsync always`): otherwise it comes
///   back empty, and with a minority that still holds the lock a second client can get a
///   majority.
/// * Redisson deprecated its RedLock in favour of a single lock with `WAIT` and fenced locks.
///   Where correctness matters more than the latency of one Redis round trip, use the etcd,
///   ZooKeeper or PostgreSQL backends: they have a consensus (or a database) behind each
///   grant and a fencing token the resource can check.
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
/// use dlock_core::{DlockConfig, Locker};
/// let config = DlockConfig::from_toml_str(r#"
///     backend = "redlock://10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379,10.0.0.4:6379,10.0.0.5:6379"
/// "#)?;
/// let locker = Locker::connect(&config).await?;
/// let guard = locker.lock("nightly-report").await?;
/// assert_eq!(guard.fencing_token(), None); // RedLock has none
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct RedLockBackend {
    nodes: Vec<Node>,
    waiters: Arc<Waiters>,
    /// Give-backs of rounds lost or cancelled, which outlive their caller.
    background: Background,
    quorum: usize,
    node_timeout: config::NodeTimeout,
    timeout: Duration,
}

impl RedLockBackend {
    /// Connects to every master `url` names, with `timeout` bounding every request (and each
    /// connection). Masters that are down are connected to later, at their first request.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a URL that is not a valid `redlock://` URL;
    /// [`Error::Unavailable`] when fewer than a majority of the masters answer a `PING`
    /// within `timeout`.
    pub async fn connect(url: &BackendUrl, timeout: Duration) -> Result<Self> {
        let settings = url.redlock().ok_or_else(|| {
            Error::config(
                "backend",
                crate::backend::url_text::redact(url.as_str()),
                "not a `redlock://` URL",
            )
        })?;
        let mut nodes = Vec::with_capacity(settings.nodes.len());
        let mut subscribers = Vec::with_capacity(settings.nodes.len());
        let mut pushes = Vec::with_capacity(settings.nodes.len());
        let certs = certificates(&settings.nodes, url.tls())?;
        for info in &settings.nodes {
            let (pushes_tx, pushes_rx) = tokio::sync::mpsc::unbounded_channel();
            nodes.push(
                Node::master(open_lazy(info, certs.clone(), timeout, None)?, timeout)
                    .with_layout(settings.layout),
            );
            subscribers.push(open_lazy(info, certs.clone(), timeout, Some(pushes_tx))?);
            pushes.push(pushes_rx);
        }
        let backend = Self {
            nodes,
            waiters: Waiters::start(subscribers, pushes, timeout),
            background: Background::new(),
            quorum: settings.quorum(),
            node_timeout: settings.node_timeout,
            timeout,
        };
        backend.check_majority_answers().await?;
        Ok(backend)
    }

    /// `PING` on every master; an error unless a majority answers.
    async fn check_majority_answers(&self) -> Result<()> {
        let pings = Self::bounded_all(self.timeout, self.nodes.iter().map(Node::ping));
        let answers = pings
            .await
            .into_iter()
            .map(|reply| match reply {
                Ok(()) => Answer::Granted,
                Err(error) => Answer::Failed(error),
            })
            .collect();
        match decide(answers, self.quorum, true) {
            Verdict::Unreachable(error) => Err(error),
            _ => Ok(()),
        }
    }

    /// How long a master may take to answer a release or a forced release: half the
    /// operation timeout, so a frozen master cannot make the whole call time out.
    fn admin_bound(&self) -> Duration {
        self.timeout / 2
    }

    /// The requests (one per master, in order) at once, each bounded by `bound`.
    async fn bounded_all<T>(
        bound: Duration,
        requests: impl Iterator<Item = impl Future<Output = Result<T>>>,
    ) -> Vec<Result<T>> {
        Self::bounded_until(bound, requests, |_| false)
            .await
            .into_iter()
            .map(|reply| reply.expect("every request answered"))
            .collect()
    }

    /// `request` to one master, run in the background to its end: a release stops waiting once
    /// a majority settled it, and a request merely dropped then could stop half-way on its
    /// master — a first release there takes two round trips (`NOSCRIPT`, then the script) —
    /// and leave the key to its ttl.
    fn to_completion<T, F>(&self, request: F) -> impl Future<Output = Result<T>> + use<T, F>
    where
        T: Send + 'static,
        F: Future<Output = Result<T>> + Send + 'static,
    {
        let running = self.background.spawn_joinable(request);
        async move {
            match running {
                Some(running) => running
                    .await
                    .unwrap_or_else(|error| Err(Error::unavailable("redlock", error.to_string()))),
                None => Err(Error::unavailable("redlock", "no runtime to release on")),
            }
        }
    }

    /// A release sent to every master (`releases`, one per master, each answering how many
    /// heard it, or -1 when the owner did not hold the lock there), settled by a majority.
    async fn settle_release(
        &self,
        releases: impl Iterator<Item = impl Future<Output = Result<i64>>>,
    ) -> Result<ReleaseOutcome> {
        // No validity to compute, unlike an acquire: a master gets half the operation
        // timeout (a share of a short ttl, 50 ms, failed whole releases on a loaded machine),
        // and the replies stop being awaited once a majority settled it.
        let bound = self.admin_bound();
        let masters = self.nodes.len();
        let count = |replies: &[Option<Result<i64>>]| {
            let (mut deleted, mut not_held) = (0, 0);
            for reply in replies.iter().flatten() {
                match reply {
                    Ok(listeners) if *listeners >= 0 => deleted += 1,
                    Ok(_) => not_held += 1,
                    Err(_) => {}
                }
            }
            (deleted, not_held)
        };
        let decided = |replies: &[Option<Result<i64>>]| {
            let (deleted, not_held) = count(replies);
            deleted >= self.quorum || not_held > masters - self.quorum
        };
        let replies = Self::bounded_until(bound, releases, decided).await;
        // The lock was ours if a majority had our key: those that deleted it, plus those
        // that did not answer (in doubt). A second release finds at most the keys the first
        // left in flight, fewer than a majority: `NotHeld`, as the contract asks.
        let (deleted, not_held) = count(&replies);
        let in_doubt = masters - deleted - not_held;
        if deleted + in_doubt < self.quorum {
            return Ok(ReleaseOutcome::NotHeld);
        }
        if deleted > 0 {
            return Ok(ReleaseOutcome::Released);
        }
        let first_error = replies.into_iter().flatten().find_map(Result::err);
        Err(first_error.unwrap_or_else(|| Error::unavailable("redlock", "no master answered")))
    }

    /// Like [`bounded_all`](Self::bounded_all), but stops waiting once `decided` says the
    /// replies so far settle the question: the slowest masters (a frozen one) then cost
    /// nothing. The requests not answered by then are dropped (`None`); those already sent
    /// still run on their master, which is what RedLock expects of a master it stopped
    /// waiting for.
    async fn bounded_until<T>(
        bound: Duration,
        requests: impl Iterator<Item = impl Future<Output = Result<T>>>,
        decided: impl Fn(&[Option<Result<T>>]) -> bool,
    ) -> Vec<Option<Result<T>>> {
        let mut pending: FuturesUnordered<_> = requests
            .enumerate()
            .map(|(index, request)| async move {
                let reply = within("redlock", "a master's request", bound, request)
                    .await
                    .and_then(|reply| reply);
                (index, reply)
            })
            .collect();
        let mut replies: Vec<Option<Result<T>>> = (0..pending.len()).map(|_| None).collect();
        while let Some((index, reply)) = pending.next().await {
            replies[index] = Some(reply);
            if decided(&replies) {
                break;
            }
        }
        replies
    }

    /// One round: the attempt on every master at once, counted, waiting only until a
    /// majority granted or a majority is out of reach (the other attempts run on). A lost
    /// round gives back, before it returns, on every master that granted or did not answer
    /// (or was not waited for), after that master's attempt.
    /// `queued`: the head of this Locker's waiters, whose attempt marks the holders' keys
    /// waited for and learns their expiry. Returns the verdict, when the round was sent, and
    /// which masters answered that someone holds the lock (bit `i` for master `i`).
    async fn round(&self, req: &AcquireRequest, queued: bool) -> (Verdict, Instant, u64) {
        let bound = self.node_timeout.for_ttl(req.ttl, self.timeout);
        let masters = self.nodes.len();
        let sent = Instant::now();
        // Each master's attempt is a task of its own: the round stops waiting at a majority,
        // but the slower masters still get the key (a lock held on every master survives the
        // loss of any minority, not just of the masters that were not needed).
        let mut in_flight = InFlight {
            running: self
                .nodes
                .iter()
                .map(|node| {
                    let (node, req) = (node.clone(), req.clone());
                    tokio::spawn(async move {
                        if queued {
                            node.attempt_scripted(&req, true).await
                        } else {
                            node.attempt(&req).await
                        }
                    })
                })
                .collect(),
            nodes: self.nodes.clone(),
            req: req.clone(),
            bound,
            background: self.background.clone(),
        };
        let attempts = in_flight.running.iter_mut().map(|task| async move {
            task.await
                .unwrap_or_else(|error| Err(Error::unavailable("redlock", error.to_string())))
        });
        let decided = |replies: &[Option<Result<Attempt>>]| {
            let (mut granted, mut held) = (0, 0);
            for reply in replies.iter().flatten() {
                match reply {
                    Ok(Attempt::Granted(_)) => granted += 1,
                    Ok(_) => held += 1,
                    Err(_) => {}
                }
            }
            granted >= self.quorum || held > masters - self.quorum
        };
        let replies = Self::bounded_until(bound, attempts, decided).await;
        // No await from here until the give-back is in the background: a round dropped now
        // still has `in_flight` give the key back.
        let tasks = std::mem::take(&mut in_flight.running);
        let in_time = sent.elapsed() + drift_margin(req.ttl) < req.ttl;
        let mut give_back = Vec::new();
        let mut held_on = 0u64;
        let answers = replies
            .into_iter()
            .zip(self.nodes.iter().cloned().zip(tasks))
            .enumerate()
            .map(|(master, (reply, (node, task)))| match reply {
                Some(Ok(Attempt::Granted(_))) => {
                    give_back.push((node, None));
                    Answer::Granted
                }
                Some(Ok(Attempt::Held(left) | Attempt::WriterWaits(left))) => {
                    held_on |= 1 << master;
                    Answer::Held(left)
                }
                Some(Ok(Attempt::Taken)) => {
                    held_on |= 1 << master;
                    Answer::Held(None)
                }
                Some(Err(error)) => {
                    give_back.push((node, Some(task)));
                    Answer::Failed(error)
                }
                None => {
                    give_back.push((node, Some(task)));
                    Answer::Failed(Error::unavailable("redlock", "not waited for"))
                }
            })
            .collect();
        let verdict = decide(answers, self.quorum, in_time);
        if !matches!(verdict, Verdict::Won) {
            // Every give-back is awaited (bounded per master): one left running could land
            // after this request's next round on that master and delete its new key (the
            // owner is the same). A master that does not answer costs a lost round its bound.
            // It runs in the background, so a caller cancelled meanwhile does not cut it short.
            let giving_back = give_back_after_attempts(req.clone(), give_back, bound);
            if let Some(given_back) = self.background.spawn_joinable(giving_back) {
                let _ = given_back.await;
            }
        }
        (verdict, sent, held_on)
    }

    /// Queues locally (subscribed on every master), then tries whenever this waiter is the
    /// head and woken: by a release, by becoming head, or when enough holders expire.
    ///
    /// A release is heard only from a master that had confirmed the subscription before the
    /// attempt marked its key waited for. The subscription returns at the first master's
    /// confirmation, so when none of the masters that answered "held" had confirmed yet, the
    /// head also wakes at the next confirmation among them and tries again (their holder may
    /// have released in between, unheard).
    async fn wait_in_queue(
        &self,
        req: &AcquireRequest,
        deadline: Option<Instant>,
        mut retry: Retry,
    ) -> Result<AcquireOutcome> {
        let channel = channel_of(&req.key);
        let mut look_again = self.plain().then(LookAgain::new);
        let ticket = loop {
            // No master confirmed the subscription: as a round nobody answered.
            match self.waiters.enqueue(&channel).await {
                Ok(ticket) => break ticket,
                Err(error) => retry.after(Verdict::Unreachable(error), deadline)?,
            }
            let pause = Instant::now() + retry.retry_after.unwrap_or_default();
            tokio::time::sleep_until(deadline.map_or(pause, |d| d.min(pause)).into()).await;
        };
        loop {
            if ticket.is_head() {
                let heard_from = self.waiters.confirmed(&channel);
                let (verdict, sent, held_on) = self.round(req, true).await;
                if let Verdict::Won = verdict {
                    return Ok(AcquireOutcome::Acquired(Lease::new(req, sent)));
                }
                retry.after(verdict, deadline)?;
                if held_on != 0
                    && held_on & heard_from == 0
                    && !self.waiters.wake_on_confirmation(&channel, held_on)
                {
                    // One of them confirmed while the round ran: try again at once.
                    continue;
                }
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| d <= now) {
                return retry.out_of_time();
            }
            let retry_after = retry.retry_after;
            if ticket.is_head() && retry_after == Some(Duration::ZERO) {
                // A split vote: the other client's give-back may wake us at once, so wait out
                // the jitter whatever happens, or both retry together again.
                let pause = Instant::now() + Self::jitter(req.ttl);
                tokio::time::sleep_until(deadline.map_or(pause, |d| d.min(pause)).into()).await;
                continue;
            }
            // In the plain layout a foreign holder's release is not published: look sooner.
            let wait = match &mut look_again {
                Some(look_again) if ticket.is_head() => look_again.after(retry_after),
                _ => retry_after.unwrap_or(req.ttl),
            };
            let recheck = ticket.is_head().then(|| now + wait + Self::jitter(req.ttl));
            ticket.wait_until_sooner(recheck, deadline).await;
        }
    }

    /// Whether the masters hold locks in the plain layout (node-redlock's).
    fn plain(&self) -> bool {
        self.nodes.first().is_some_and(|node| node.plain)
    }

    /// A random delay of up to `most`.
    fn jitter_up_to(most: Duration) -> Duration {
        most.mul_f64(rand::rng().random::<f64>())
    }

    /// A random delay below 1 % of `ttl`, that bound kept between 1 and 10 ms, so that
    /// clients whose rounds split the vote do not collide again.
    fn jitter(ttl: Duration) -> Duration {
        Self::jitter_up_to(
            (ttl / 100)
                .min(Duration::from_millis(10))
                .max(Duration::from_millis(1)),
        )
    }
}

/// Gives `req`'s key back on each master, each after that master's attempt (if any) has
/// landed — never before it: a key set after its give-back would stay until the ttl. Each
/// master within `bound`.
async fn give_back_after_attempts(
    req: AcquireRequest,
    masters: Vec<(Node, Option<JoinHandle<Result<Attempt>>>)>,
    bound: Duration,
) {
    let req = &req;
    join_all(masters.into_iter().map(|(node, attempt)| async move {
        let given_back = tokio::time::timeout(bound, async {
            if let Some(attempt) = attempt
                && !attempt.is_finished()
            {
                let _ = attempt.await;
            }
            node.release_owned(req.owner.as_str(), &req.key).await
        })
        .await;
        if !matches!(given_back, Ok(Ok(_))) {
            tracing::debug!(key = %req.key, ?given_back, "dlock: redlock could not give back a round's key (it expires at its ttl)");
        }
    }))
    .await;
}

/// A round's attempts, still running on their masters (one task each). A round dropped before
/// its verdict — its caller was cancelled — gives the key back on every master in the
/// background, after that master's attempt: the core's own clean-up of a cancelled acquire
/// could reach a master before the attempt does, and leave the key there to its ttl.
struct InFlight {
    running: Vec<JoinHandle<Result<Attempt>>>,
    nodes: Vec<Node>,
    req: AcquireRequest,
    bound: Duration,
    background: Background,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.running.is_empty() {
            return; // settled by the round
        }
        let masters = self
            .nodes
            .drain(..)
            .zip(self.running.drain(..).map(Some))
            .collect();
        let giving_back = give_back_after_attempts(self.req.clone(), masters, self.bound);
        if !self.background.spawn(giving_back) {
            tracing::debug!(key = %self.req.key, "dlock: no runtime to give back a cancelled round's key; it expires at its ttl");
        }
    }
}

#[async_trait]
impl LockBackend for RedLockBackend {
    async fn acquire(
        &self,
        req: &AcquireRequest,
        deadline: Option<Instant>,
    ) -> Result<AcquireOutcome> {
        if req.mode != LockMode::Exclusive {
            // The core refuses these before calling (see `capabilities`).
            return Err(Error::Unsupported {
                backend: "redlock",
                operation: "read-write locks and semaphores",
            });
        }
        let mut retry = Retry::new(self.timeout);
        if self.waiters.may_try_at_once(&req.key) {
            let (verdict, sent, _) = self.round(req, false).await;
            if let Verdict::Won = verdict {
                return Ok(AcquireOutcome::Acquired(Lease::new(req, sent)));
            }
            retry.after(verdict, deadline)?;
            if deadline.is_some_and(|d| d <= Instant::now()) {
                return retry.out_of_time();
            }
        }
        Box::pin(self.wait_in_queue(req, deadline, retry)).await
    }

    async fn renew(&self, leases: &[Lease]) -> Result<Vec<RenewOutcome>> {
        let sent = Instant::now();
        let shortest = leases.iter().map(|l| l.ttl).min().unwrap_or(self.timeout);
        // A renewal is off the caller's path: each master may take up to a quarter of the
        // shortest ttl (within the operation timeout), which still leaves most of the
        // validity, so a busy machine does not turn a slow answer into a failed renewal.
        let bound = self
            .node_timeout
            .for_ttl(shortest, self.timeout)
            .max((shortest / 4).min(self.timeout));
        let batches: Vec<Vec<&Lease>> = leases
            .chunks(RENEW_BATCH)
            .map(|batch| batch.iter().collect())
            .collect();
        let renewals = self.nodes.iter().map(|node| {
            let batches = &batches;
            async move {
                let replies = join_all(batches.iter().map(|batch| node.renew_batch(batch))).await;
                let mut flags = Vec::with_capacity(leases.len());
                for reply in replies {
                    flags.extend(reply?);
                }
                Ok(flags)
            }
        });
        let replies = Self::bounded_all(bound, renewals).await;
        let masters = self.nodes.len();
        Ok((0..leases.len())
            .map(|i| {
                let mut extended = 0;
                let mut refused = 0;
                let mut first_error = None;
                for reply in &replies {
                    match reply {
                        Ok(flags) if flags.get(i) == Some(&1) => extended += 1,
                        Ok(_) => refused += 1,
                        Err(error) => {
                            first_error.get_or_insert_with(|| error.to_string());
                        }
                    }
                }
                if extended >= self.quorum {
                    RenewOutcome::Renewed { valid_from: sent }
                } else if refused > masters - self.quorum {
                    RenewOutcome::NotOwner
                } else {
                    RenewOutcome::Failed(Error::unavailable(
                        "redlock",
                        format!(
                            "{extended} of {masters} masters extended the lock (a majority is {}): {}",
                            self.quorum,
                            first_error.unwrap_or_default()
                        ),
                    ))
                }
            })
            .collect())
    }

    async fn release(&self, lease: &Lease) -> Result<ReleaseOutcome> {
        let releases = self.nodes.iter().cloned().map(|node| {
            let (owner, key) = (lease.owner.clone(), lease.key.clone());
            self.to_completion(async move { node.release_owned(owner.as_str(), &key).await })
        });
        self.settle_release(releases).await
    }

    /// On each master, as Redis does; the lock is kept while a majority keeps it.
    async fn release_keeping(
        &self,
        lease: &Lease,
        keep: Duration,
        kept: Kept,
    ) -> Result<ReleaseOutcome> {
        let releases = self.nodes.iter().cloned().map(|node| {
            let (owner, key) = (lease.owner.clone(), lease.key.clone());
            self.to_completion(async move {
                node.release_keeping(owner.as_str(), &key, keep, kept).await
            })
        });
        self.settle_release(releases).await
    }

    async fn force_release(&self, key: &str) -> Result<bool> {
        let removals = self.nodes.iter().map(|node| node.force_release(key));
        let replies = Self::bounded_all(self.admin_bound(), removals).await;
        let mut removed = false;
        let mut first_error = None;
        for reply in replies {
            match reply {
                Ok(existed) => removed |= existed,
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        match first_error {
            Some(error) if !removed => Err(error),
            _ => Ok(removed),
        }
    }

    /// The owners that hold the lock on a majority of the masters; each expires when fewer
    /// than a majority would still hold it (the quorum-th longest time left). No waiters:
    /// they queue in the clients.
    async fn inspect(&self, key: &str) -> Result<crate::LockInfo> {
        let views = self.nodes.iter().map(|node| node.inspect(key));
        let replies = Self::bounded_all(self.timeout / 2, views).await;
        let mut answered = 0;
        let mut first_error = None;
        let mut left_by_owner: Vec<((String, Option<Kept>), Vec<Option<Duration>>)> = Vec::new();
        for reply in replies {
            let info = match reply {
                Ok(info) => info,
                Err(error) => {
                    first_error.get_or_insert(error);
                    continue;
                }
            };
            answered += 1;
            for holder in info.holders {
                let grant = (holder.owner, holder.kept);
                match left_by_owner.iter_mut().find(|(held, _)| *held == grant) {
                    Some((_, lefts)) => lefts.push(holder.expires_in),
                    None => left_by_owner.push((grant, vec![holder.expires_in])),
                }
            }
        }
        if answered < self.quorum {
            return Err(first_error.unwrap_or_else(|| {
                Error::unavailable("redlock", "no majority of masters answered")
            }));
        }
        let holders = left_by_owner
            .into_iter()
            .filter(|(_, lefts)| lefts.len() >= self.quorum)
            .map(|((owner, kept), mut lefts)| {
                // No expiry (`None`) outlasts any time left.
                lefts.sort_unstable_by_key(|left| std::cmp::Reverse(left.unwrap_or(Duration::MAX)));
                crate::HolderInfo::new(owner, LockMode::Exclusive)
                    .with_expires_in(lefts[self.quorum - 1])
                    .with_kept(kept)
            })
            .collect();
        Ok(crate::LockInfo {
            holders,
            waiters: None,
        })
    }

    /// Awaits the work left running (unsubscribes, withdrawals of cancelled waiters,
    /// give-backs of lost or cancelled rounds), within the operation timeout.
    async fn shutdown(&self) -> Result<()> {
        self.waiters.settle().await;
        self.background.settle(self.timeout).await;
        Ok(())
    }

    fn capabilities(&self) -> Capabilities {
        let plain = self.plain();
        let layout = if plain { Layout::Plain } else { Layout::Dlock };
        // The plain layout writes nothing but each master's lock key: no kept record.
        Capabilities::new(layout.name("redlock"))
            .max_renew_batch(usize::MAX)
            .keeps(!plain)
    }
}

/// What an acquire learned from its lost rounds: when to try again, and whether the last
/// round failed for want of answers. A round without a majority because masters did not
/// answer is retried like one lost to other holders — within the caller's wait, or for an
/// acquire that waits without end, within the operation timeout of unanswered rounds — as
/// Redisson does; the error is the answer only once that time is spent.
#[derive(Debug)]
struct Retry {
    /// When the holders' keys expire, at the latest (from the last round that was answered),
    /// or how long to pause after an unanswered one.
    retry_after: Option<Duration>,
    /// The last round's error, while rounds go unanswered.
    unreachable: Option<Error>,
    /// Since when rounds go unanswered.
    unreachable_since: Option<Instant>,
    /// The pause after the next unanswered round (doubling, from 20 ms to 500 ms).
    pause: Duration,
    operation_timeout: Duration,
}

impl Retry {
    const FIRST_PAUSE: Duration = Duration::from_millis(20);
    const MOST_PAUSE: Duration = Duration::from_millis(500);

    const fn new(operation_timeout: Duration) -> Self {
        Self {
            retry_after: None,
            unreachable: None,
            unreachable_since: None,
            pause: Self::FIRST_PAUSE,
            operation_timeout,
        }
    }

    /// Takes in a lost round's verdict.
    ///
    /// # Errors
    ///
    /// The round's error when masters did not answer and there is no time to try again.
    fn after(&mut self, verdict: Verdict, deadline: Option<Instant>) -> Result<()> {
        match verdict {
            Verdict::Won => {}
            Verdict::Lost { retry_after } => {
                self.retry_after = retry_after;
                self.unreachable = None;
                self.unreachable_since = None;
                self.pause = Self::FIRST_PAUSE;
            }
            Verdict::Unreachable(error) => {
                let now = Instant::now();
                let since = *self.unreachable_since.get_or_insert(now);
                let out_of_time = match deadline {
                    Some(deadline) => deadline <= now,
                    None => now.duration_since(since) >= self.operation_timeout,
                };
                if out_of_time {
                    return Err(error);
                }
                tracing::debug!(%error, "dlock: redlock round without a majority of answers; trying again");
                // Some jitter, so that clients cut off together do not come back together.
                self.retry_after =
                    Some(self.pause / 2 + RedLockBackend::jitter_up_to(self.pause / 2));
                self.pause = (self.pause * 2).min(Self::MOST_PAUSE);
                self.unreachable = Some(error);
            }
        }
        Ok(())
    }

    /// The answer when the wait ran out: busy, or the error of rounds nobody answered.
    fn out_of_time(self) -> Result<AcquireOutcome> {
        match self.unreachable {
            Some(error) => Err(error),
            None => Ok(AcquireOutcome::Busy {
                retry_after: self.retry_after,
            }),
        }
    }
}
