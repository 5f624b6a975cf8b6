//! Leader election: one candidate of many leads a name at a time, with a term that fences
//! its writes and work that stops when it stops leading.
//!
//! The rule, on every backend whose [`Capabilities::election`] is set:
//!
//! * A **campaign** ([`Locker::campaign`]) is an exclusive, fenced grant of the name's key
//!   whose grant shows the candidate's **value** to everyone ([`Locker::leader`]). Candidates
//!   wait in the backend's fair queue; the one granted leads. Its **term** is the grant's
//!   fencing token: strictly greater than every earlier leader's, so a resource that keeps the
//!   highest term it saw refuses a deposed leader's late write.
//! * The [`Leadership`] is a [`LockGuard`] underneath: the watchdog keeps it, [`lost`]
//!   resolves when it is lost (its renewal refused, its session ended, its local deadline
//!   passed — measured from when the request was sent, never the server's clock), and
//!   [`run`](Leadership::run) cancels the leader's work then. A candidate never reports a
//!   leadership it does not hold: the campaign answers only once the server granted it, and
//!   a session lost while campaigning fails the campaign ([`Locker::lead`] campaigns again).
//! * [`Locker::observe`] follows the leader through the backend's notifications
//!   ([`LockBackend::holder_changes`]), re-reading the holder after each, and once more when
//!   the leader's lease would run out (a leader that vanished without a word) — no polling at
//!   a fixed interval. It ends when its Locker is shut down.
//!   It yields snapshots in the order the backend serves them — terms only ever grow — and
//!   sees every leader that holds for at least one notification's round trip.
//!
//! [`Capabilities::election`]: crate::backend::Capabilities::election
//! [`LockBackend::holder_changes`]: crate::backend::LockBackend::holder_changes
//! [`lost`]: Leadership::lost

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::Duration;

use futures_util::{Stream, StreamExt};

use crate::backend::HolderChanges;
use crate::{Error, LockGuard, LockMode, Locker, LostReason, Result};

/// Who leads a name: the value its leader campaigned with (or proclaimed since), and its
/// term.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
/// let locker = dlock_core::Locker::memory();
/// let leading = locker.campaign("scheduler", "node-a").await?;
/// let leader = locker.leader("scheduler").await?.expect("a leader");
/// assert_eq!((leader.value.as_str(), leader.term), ("node-a", leading.term()));
/// # drop(leading); Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The leader's value: what it campaigned with, or proclaimed since. For a leader that
    /// is not a dlock candidate (`etcdctl lock`, say), what its grant shows.
    pub value: String,
    /// The leader's term: its grant's fencing token, greater than every earlier leader's.
    pub term: u64,
}

impl Locker {
    /// Campaigns for the leadership of `name` with `value` (what others see of this
    /// candidate: an address, a host name); `.await` it to wait until this candidate leads.
    /// Candidates are served in the order they came (the backend's fair queue). Waits until
    /// elected unless [`wait`](CampaignRequest::wait) says otherwise.
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`] on a backend without leader election; [`Error::Busy`] when a
    /// [`wait`](CampaignRequest::wait) ran out; [`Error::InvalidKey`] for a bad name;
    /// [`Error::Config`] for a value that is empty, longer than 1024 bytes, or holds `|` or a
    /// control character; the backend's errors (a session lost while campaigning among them).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let locker = dlock_core::Locker::memory();
    /// let leading = locker.campaign("compactor", "node-a").await?;
    /// let stamped = leading.run(async { /* compact, writes fenced by */ leading.term() }).await?;
    /// assert_eq!(stamped, leading.term());
    /// leading.resign().await?;
    /// # Ok(()) }
    /// ```
    pub fn campaign(&self, name: &str, value: impl Into<String>) -> CampaignRequest<'_> {
        CampaignRequest {
            locker: self,
            name: name.to_owned(),
            value: value.into(),
            ttl: None,
            wait: None,
        }
    }

    /// Who leads `name` now, or `None` when nobody does.
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`] on a backend without leader election; [`Error::InvalidKey`] for
    /// a bad name; [`Error::Timeout`] / [`Error::Unavailable`] when the server does not
    /// answer within the operation timeout.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let locker = dlock_core::Locker::memory();
    /// assert_eq!(locker.leader("scheduler").await?, None);
    /// # Ok(()) }
    /// ```
    pub async fn leader(&self, name: &str) -> Result<Option<Leader>> {
        Ok(self.leader_with_expiry(name).await?.0)
    }

    /// The leader of `name`, and how long until its lease runs out unless renewed.
    async fn leader_with_expiry(&self, name: &str) -> Result<(Option<Leader>, Option<Duration>)> {
        self.check_election()?;
        let info = self.inspect(name).await?;
        let holder = info
            .holders
            .into_iter()
            // A grant without a term is no leadership yet (on Redis: a lock handed to the
            // next candidate in line, not claimed yet).
            .find(|holder| {
                holder.mode == LockMode::Exclusive
                    && holder.kept.is_none()
                    && holder.fencing_token.is_some()
            });
        Ok(holder.map_or((None, None), |holder| {
            let leader = Leader {
                value: holder.value.unwrap_or(holder.owner),
                term: holder.fencing_token.unwrap_or_default(), // `Some`: see above
            };
            (Some(leader), holder.expires_in)
        }))
    }

    /// The leaders of `name` as they change: the current one (or `None`) first, then each
    /// change, in order, driven by the backend's notifications. The stream ends only when
    /// dropped; an error (the server unreachable) is an item, after which it goes on.
    ///
    /// # Errors
    ///
    /// As items: [`Error::Unsupported`] on a backend without leader election (then the stream
    /// ends), [`Error::InvalidKey`] for a bad name (then it ends), the backend's errors.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// use futures_util::StreamExt;
    /// let locker = dlock_core::Locker::memory();
    /// let mut leaders = Box::pin(locker.observe("scheduler"));
    /// assert_eq!(leaders.next().await.unwrap()?, None);
    /// let leading = locker.campaign("scheduler", "node-a").await?;
    /// let seen = leaders.next().await.unwrap()?.expect("a leader");
    /// assert_eq!((seen.value.as_str(), seen.term), ("node-a", leading.term()));
    /// # drop(leading); Ok(()) }
    /// ```
    pub fn observe(
        &self,
        name: &str,
    ) -> impl Stream<Item = Result<Option<Leader>>> + Send + 'static {
        let observer = Observer {
            locker: self.clone(),
            name: name.to_owned(),
            changes: None,
            last: None,
            ended: false,
            failed: false,
        };
        futures_util::stream::unfold(observer, |mut observer| async move {
            let item = observer.next().await?;
            Some((item, observer))
        })
    }

    /// Leads `name` whenever it can, until the Locker is shut down: campaigns with `value`,
    /// runs `work` while leading — cancelled when the leadership is lost, within the lease's
    /// renew deadline — then resigns if still leading and campaigns again. A campaign that
    /// fails for a transient reason (the server unreachable, a session lost while waiting) is
    /// retried after a pause of a third of the ttl at most; nothing is reported as leadership
    /// that the server did not grant.
    ///
    /// # Errors
    ///
    /// The first error that retrying cannot mend: [`Error::Unsupported`],
    /// [`Error::InvalidKey`], [`Error::Config`], [`Error::Refused`]. `Ok(())` once the Locker
    /// is shut down.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let locker = dlock_core::Locker::memory();
    /// let leading = locker.clone();
    /// let service = tokio::spawn(async move {
    ///     leading
    ///         .lead("scheduler", "node-a", |leader| async move {
    ///             // the scheduler's loop, writes fenced by leader.term
    ///             std::future::pending::<()>().await
    ///         })
    ///         .await
    /// });
    /// while locker.leader("scheduler").await?.is_none() {
    ///     tokio::task::yield_now().await;
    /// }
    /// locker.shutdown().await?;
    /// service.await.unwrap()?;
    /// # Ok(()) }
    /// ```
    pub async fn lead<F, Fut>(&self, name: &str, value: &str, mut work: F) -> Result<()>
    where
        F: FnMut(Leader) -> Fut + Send,
        Fut: Future<Output = ()> + Send,
    {
        let pause = self.config().ttl / 3;
        loop {
            let leadership = match self.campaign(name, value).await {
                Ok(leadership) => leadership,
                Err(Error::ShutDown) => return Ok(()),
                Err(error) if error.is_retryable() || matches!(error, Error::LeaseLost { .. }) => {
                    tracing::warn!(%error, name, "dlock: campaign failed; campaigning again");
                    tokio::time::sleep(pause.min(Duration::from_secs(1))).await;
                    continue;
                }
                Err(error) => return Err(error),
            };
            let leader = Leader {
                value: value.to_owned(),
                term: leadership.term(),
            };
            tracing::info!(name, term = leader.term, "dlock: leading");
            match leadership.run(work(leader)).await {
                Ok(()) => {
                    if let Err(error) = leadership.resign().await {
                        tracing::debug!(%error, name, "dlock: resigning after the work ended");
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, name, "dlock: leadership lost; its work was cancelled");
                }
            }
        }
    }

    fn check_election(&self) -> Result<()> {
        let capabilities = self.capabilities();
        if capabilities.election {
            Ok(())
        } else {
            Err(Error::Unsupported {
                backend: capabilities.name,
                operation: "leader election",
            })
        }
    }
}

/// A campaign being configured; `.await` it to wait until elected.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
/// use std::time::Duration;
/// let locker = dlock_core::Locker::memory();
/// let leading = locker
///     .campaign("scheduler", "node-a")
///     .ttl(Duration::from_secs(10))
///     .wait(Duration::from_secs(1))
///     .await?;
/// # drop(leading); Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "a campaign does nothing until it is `.await`ed"]
pub struct CampaignRequest<'a> {
    locker: &'a Locker,
    name: String,
    value: String,
    ttl: Option<Duration>,
    wait: Option<Duration>,
}

impl CampaignRequest<'_> {
    /// The leadership's lease length (renewed by the watchdog): how long a crashed leader
    /// keeps the others waiting. Defaults to the Locker's ttl.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// use std::time::Duration;
    /// let locker = dlock_core::Locker::memory();
    /// let leading = locker.campaign("scheduler", "a").ttl(Duration::from_secs(5)).await?;
    /// # drop(leading); Ok(()) }
    /// ```
    pub const fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Gives up with [`Error::Busy`] when not elected within `wait` (withdrawing the
    /// candidacy); `Duration::ZERO` leads only if nobody does. Waits until elected unless set.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// use std::time::Duration;
    /// let locker = dlock_core::Locker::memory();
    /// let leading = locker.campaign("scheduler", "a").await?;
    /// let other = locker.clone();
    /// let lost = tokio::spawn(async move {
    ///     other.campaign("scheduler", "b").wait(Duration::ZERO).await.map(drop)
    /// });
    /// assert!(matches!(lost.await.unwrap(), Err(dlock_core::Error::Busy { .. })));
    /// # drop(leading); Ok(()) }
    /// ```
    pub const fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }
}

impl<'a> IntoFuture for CampaignRequest<'a> {
    type Output = Result<Leadership>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<Leadership>> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            self.locker.check_election()?;
            check_value(&self.value)?;
            let mut request = self
                .locker
                .lock(&self.name)
                .value(&self.value)
                .fencing(true)
                // A second campaign of this task is a second candidate, not a nested one.
                .reentrant(false);
            if let Some(ttl) = self.ttl {
                request = request.ttl(ttl);
            }
            request = match self.wait {
                Some(wait) => request.wait(wait),
                None => request.wait_forever(),
            };
            let guard = request.await?;
            let term = guard.fencing_token().ok_or_else(|| {
                Error::refused(
                    self.locker.capabilities().name,
                    "a leadership was granted without a term (fencing token)",
                )
            })?;
            Ok(Leadership {
                guard,
                locker: self.locker.clone(),
                value: self.value,
                term,
            })
        })
    }
}

/// This candidate leads its name. A [`LockGuard`] underneath: renewed by the watchdog,
/// [`lost`](Self::lost) when the lease is lost, resigned when dropped (in the background) or
/// by [`resign`](Self::resign).
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
/// let locker = dlock_core::Locker::memory();
/// let mut leading = locker.campaign("scheduler", "node-a").await?;
/// assert!(leading.is_leader());
/// leading.proclaim("node-a (draining)").await?;
/// assert_eq!(locker.leader("scheduler").await?.unwrap().value, "node-a (draining)");
/// leading.resign().await?;
/// assert_eq!(locker.leader("scheduler").await?, None);
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "dropping a Leadership resigns at once"]
pub struct Leadership {
    guard: LockGuard,
    locker: Locker,
    value: String,
    term: u64,
}

impl Leadership {
    /// The term: this leadership's fencing token, greater than every earlier leader's of the
    /// name. A resource that remembers the highest term it saw refuses a deposed leader.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let locker = dlock_core::Locker::memory();
    /// let first = locker.campaign("scheduler", "a").await?;
    /// let first_term = first.term();
    /// first.resign().await?;
    /// let second = locker.campaign("scheduler", "b").await?;
    /// assert!(second.term() > first_term);
    /// # drop(second);
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub const fn term(&self) -> u64 {
        self.term
    }

    /// The name led.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let locker = dlock_core::Locker::memory();
    /// let leading = locker.campaign("scheduler", "a").await?;
    /// assert_eq!(leading.name(), "scheduler");
    /// # drop(leading);
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn name(&self) -> &str {
        self.guard.key()
    }

    /// The value others see ([`Locker::leader`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let locker = dlock_core::Locker::memory();
    /// let leading = locker.campaign("scheduler", "node-a").await?;
    /// assert_eq!(leading.value(), "node-a");
    /// # drop(leading);
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn value(&self) -> &str {
        &self.value
    }

    /// Whether this candidate still leads, as far as it knows (see [`LockGuard::is_held`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let locker = dlock_core::Locker::memory();
    /// let leading = locker.campaign("scheduler", "a").await?;
    /// assert!(leading.is_leader());
    /// # drop(leading);
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn is_leader(&self) -> bool {
        self.guard.is_held()
    }

    /// Resolves when the leadership is lost (see [`LockGuard::lost`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let locker = dlock_core::Locker::memory();
    /// let leading = locker.campaign("scheduler", "a").await?;
    /// let lost = leading.lost();
    /// locker.force_release("scheduler").await?; // an operator breaks it
    /// # let _ = lost;
    /// # drop(leading);
    /// # Ok(()) }
    /// ```
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        self.guard.lost()
    }

    /// Runs `work` while leading: cancelled, with [`Error::LeaseLost`], when the leadership
    /// is lost (see [`LockGuard::run`]).
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] when the leadership was lost before or during the work.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let locker = dlock_core::Locker::memory();
    /// let leading = locker.campaign("scheduler", "a").await?;
    /// let done = leading.run(async { "scheduled" }).await?;
    /// assert_eq!(done, "scheduled");
    /// # drop(leading);
    /// # Ok(()) }
    /// ```
    pub async fn run<F: Future>(&self, work: F) -> Result<F::Output> {
        self.guard.run(work).await
    }

    /// The lock guard underneath, for what a guard offers that a leadership does not repeat
    /// (`protect`, `hand_off`, `expires_at`).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let locker = dlock_core::Locker::memory();
    /// let leading = locker.campaign("scheduler", "a").await?;
    /// assert_eq!(leading.guard().fencing_token(), Some(leading.term()));
    /// # drop(leading);
    /// # Ok(()) }
    /// ```
    pub const fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// Shows `value` to others as this leader's from now on, checked on the server against
    /// this leadership's grant (etcd's `Proclaim`).
    ///
    /// # Errors
    ///
    /// [`Error::NotHolder`] when this candidate does not lead any more (nothing changed);
    /// [`Error::Config`] for a value a campaign would refuse; the backend's errors, within the
    /// operation timeout.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let locker = dlock_core::Locker::memory();
    /// let mut leading = locker.campaign("scheduler", "node-a").await?;
    /// leading.proclaim("node-a, draining").await?;
    /// assert_eq!(locker.leader("scheduler").await?.unwrap().value, "node-a, draining");
    /// # drop(leading);
    /// # Ok(()) }
    /// ```
    pub async fn proclaim(&mut self, value: impl Into<String>) -> Result<()> {
        let value = value.into();
        check_value(&value)?;
        let not_leader = || Error::NotHolder {
            key: self.guard.key().to_owned(),
        };
        if !self.guard.is_held() {
            return Err(not_leader());
        }
        let lease = self.guard.lease();
        let keeper = &self.locker.state().keeper;
        let proclaimed = keeper
            .bounded("proclaim", keeper.backend().proclaim(lease, &value))
            .await?;
        if !proclaimed {
            return Err(not_leader());
        }
        self.value = value;
        Ok(())
    }

    /// Gives the leadership up now: the next candidate in line leads.
    ///
    /// # Errors
    ///
    /// As [`LockGuard::release`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
    /// let locker = dlock_core::Locker::memory();
    /// let leading = locker.campaign("scheduler", "a").await?;
    /// leading.resign().await?;
    /// assert_eq!(locker.leader("scheduler").await?, None);
    /// # Ok(()) }
    /// ```
    pub async fn resign(self) -> Result<()> {
        self.guard.release().await
    }
}

/// The state of one [`Locker::observe`] stream.
struct Observer {
    locker: Locker,
    name: String,
    changes: Option<HolderChanges>,
    /// The last snapshot yielded; `None` before the first.
    last: Option<Option<Leader>>,
    ended: bool,
    /// An error was just yielded: pause before asking the server again.
    failed: bool,
}

impl Observer {
    /// The next change of leader (or error); `None` once the stream has ended.
    async fn next(&mut self) -> Option<Result<Option<Leader>>> {
        if self.ended {
            return None;
        }
        if self
            .locker
            .state()
            .shut_down
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            self.end();
            return Some(Err(Error::ShutDown));
        }
        if std::mem::take(&mut self.failed) {
            let pause = (self.locker.config().ttl / 3).min(Duration::from_secs(1));
            tokio::time::sleep(pause).await;
        }
        loop {
            if self.changes.is_none() {
                match subscribe(&self.locker, &self.name).await {
                    Ok(changes) => self.changes = Some(changes),
                    Err(error) => return Some(Err(self.fail(error))),
                }
            }
            let (leader, expires_in) = match self.locker.leader_with_expiry(&self.name).await {
                Ok(read) => read,
                Err(error) => return Some(Err(self.fail(error))),
            };
            let older = matches!(
                (&self.last, &leader),
                (Some(Some(last)), Some(now)) if now.term < last.term
            );
            if self.last.as_ref() != Some(&leader) && !older {
                self.last = Some(leader.clone());
                return Some(Ok(leader));
            }
            // Nothing new: wait for a change, or for the leader's lease to run out (a leader
            // that vanished without a word is noticed at its expiry). A lease past its end
            // that the service has not removed yet (etcd revokes within its own check
            // interval, and says so by a notification) is looked at again after a pause.
            let expiry = async {
                match expires_in {
                    Some(left) if left.is_zero() => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Some(left) => tokio::time::sleep(left + Duration::from_millis(1)).await,
                    None => std::future::pending().await,
                }
            };
            let changes = self.changes.as_mut()?;
            let stopping = self.locker.state().stopping.clone();
            tokio::select! {
                () = stopping.cancelled() => {
                    self.end();
                    return Some(Err(Error::ShutDown));
                }
                change = changes.next() => match change {
                    Some(Ok(())) => {}
                    Some(Err(error)) => {
                        self.changes = None;
                        self.failed = true;
                        return Some(Err(error));
                    }
                    // The backend's stream ended (its connection dropped, say): subscribe
                    // again at once, and look.
                    None => self.changes = None,
                },
                () = expiry => {}
            }
        }
    }

    /// Ends the stream after `error` when nothing would mend it; else pauses before the next
    /// attempt.
    fn fail(&mut self, error: Error) -> Error {
        self.failed = true;
        if matches!(
            error,
            Error::Unsupported { .. } | Error::InvalidKey { .. } | Error::ShutDown
        ) {
            self.end();
        }
        error
    }

    /// The stream has ended: what it subscribed to (a watch, a connection) goes now, not
    /// when the stream is dropped.
    fn end(&mut self) {
        self.ended = true;
        self.changes = None;
    }
}

/// The longest value a candidate may show.
const MAX_VALUE: usize = 1024;

/// A candidate's value: 1 to [`MAX_VALUE`] bytes, without `|` (the separator of a kept record
/// in the key's value on etcd) or control characters.
///
/// # Errors
///
/// [`Error::Config`] naming the value.
fn check_value(value: &str) -> Result<()> {
    if value.is_empty()
        || value.len() > MAX_VALUE
        || value.contains('|')
        || value.chars().any(char::is_control)
    {
        return Err(Error::config(
            "value",
            value,
            "a candidate's value is 1 to 1024 bytes, without `|` or control characters",
        ));
    }
    Ok(())
}

/// Subscribes to the changes of `name`'s holders.
async fn subscribe(locker: &Locker, name: &str) -> Result<HolderChanges> {
    locker.check_election()?;
    let full_key = crate::key::full_key(&locker.config().key_prefix, name)?;
    let keeper = &locker.state().keeper;
    keeper
        .bounded("observe", keeper.backend().holder_changes(&full_key))
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_value_that_would_not_read_back_is_refused_before_any_request() {
        let locker = Locker::memory();
        for value in ["", "a|done", "line\nbreak"] {
            let refused = locker.campaign("scheduler", value).await;
            assert!(
                matches!(refused, Err(Error::Config { .. })),
                "{value:?}: {refused:?}"
            );
        }
        let mut leading = locker.campaign("scheduler", "node-a").await.unwrap();
        let refused = leading.proclaim(&*"x".repeat(MAX_VALUE + 1)).await;
        assert!(matches!(refused, Err(Error::Config { .. })), "{refused:?}");
        assert_eq!(
            locker.leader("scheduler").await.unwrap().unwrap().value,
            "node-a"
        );
        drop(leading);
    }

    #[tokio::test]
    async fn an_observer_ends_when_its_locker_is_shut_down() {
        let locker = Locker::memory();
        let mut leaders = Box::pin(locker.observe("scheduler"));
        assert_eq!(leaders.next().await.unwrap().unwrap(), None);
        let waiting = tokio::spawn(async move {
            let last = leaders.next().await;
            (last, leaders.next().await.is_none())
        });
        tokio::task::yield_now().await;
        locker.shutdown().await.unwrap();
        let (last, ended) = waiting.await.unwrap();
        assert!(matches!(last, Some(Err(Error::ShutDown))), "{last:?}");
        assert!(ended, "the observer went on after its Locker's shutdown");
    }
}
