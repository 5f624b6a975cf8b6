//! Acquire: put-if-absent under the lock's range, then watch the predecessor.

use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{
    Compare, CompareOp, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
    TxnResponse,
};

use super::errors;
use super::keys::LockName;
use super::name_watch::{Deletion, Since};
use super::session::Session;
use super::{Delete, EtcdGrant, Inner, call};
use crate::lease::{AcquireOutcome, AcquireRequest, Lease};
use crate::{Error, LockMode, Result};

/// How long a waiter out of time deletes its queue key before it answers Busy: part of the
/// core's 250 ms wait slack ([`crate::WAIT_SLACK`]), the rest left for the answer to travel.
const DELETE_BEFORE_BUSY: Duration = Duration::from_millis(150);

/// A grant's `valid_from` is refreshed by a keepalive when the lease's last answered one is
/// older than this fraction of the ttl.
pub(super) const FRESHNESS: u32 = 10;

/// How a waiting turn ended.
enum Turn {
    Granted(Lease),
    Busy,
    /// The queued key vanished (its lease was lost, or it was deleted by an admin): queue
    /// again from the start.
    Requeue(&'static str),
}

/// What an acquire waits for, as the last read of its name showed.
enum Ahead {
    /// Nothing: the grant is ours.
    Nothing,
    /// The deletion of these keys: the newest ones created before ours that must go first —
    /// all of them if `all`, else the newest [`BLOCKERS_READ`].
    Keys { keys: Vec<Vec<u8>>, all: bool },
    /// Deletions among the permits: these permit keys (at least the semaphore's `limit`) are
    /// older than ours.
    Permits { older: Vec<Vec<u8>>, limit: usize },
}

/// What a waiter waits for, and what its own key is: keys its last read of the name listed.
///
/// Deletions come by key name alone (the name's watch does not ask for the deleted key's
/// previous state), and that is enough: each key listed existed at that read, so the first
/// deletion of its name after the read is its own. (A Locker may put a key of the same name
/// again later; that one can be deleted only after.) So a listed key is crossed off at the
/// first deletion of its name, and never counted twice.
struct Watched {
    what: Awaited,
    /// The waiter's own key: its deletion sends the waiter back to read (its lease ended:
    /// etcd #11456).
    own: Vec<u8>,
}

/// The deletions a waiter waits for.
#[derive(Debug)]
enum Awaited {
    /// These keys, until every one is deleted. If `all`, they are every key that must go
    /// before ours: once they are gone, the turn is ours.
    Keys { keys: Vec<Vec<u8>>, all: bool },
    /// These permit keys, older than ours, until fewer than `limit` of them are left. Nothing
    /// else is ahead: new keys are always younger than ours.
    Permits { older: Vec<Vec<u8>>, limit: usize },
}

/// What a deletion means to a waiter.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    /// Nothing yet.
    Waiting,
    /// Every key that had to go first is gone: the turn is ours, with no read to confirm it
    /// (the log that said so lists every deletion under the name since our last read, our
    /// own key's too).
    Turn,
    /// Read the name again: what it waited for went, but more may be ahead; or the log said
    /// too little.
    Recheck,
}

impl Watched {
    /// What `deletion` (of some key under the name) means. A writer behind several readers
    /// waits until the last of them went, not once per reader; permits count the deletions
    /// of older keys down, so a release wakes only the waiter it lets in, not every waiting
    /// permit.
    fn on(&mut self, deletion: &Deletion) -> Seen {
        if self.own == deletion.key {
            return Seen::Recheck;
        }
        match &mut self.what {
            Awaited::Keys { keys, all } => {
                keys.retain(|key| *key != deletion.key);
                match (keys.is_empty(), *all) {
                    (false, _) => Seen::Waiting,
                    (true, true) => Seen::Turn,
                    (true, false) => Seen::Recheck,
                }
            }
            Awaited::Permits { older, limit } => {
                older.retain(|key| *key != deletion.key);
                if older.len() < *limit {
                    Seen::Turn
                } else {
                    Seen::Waiting
                }
            }
        }
    }
}

/// What woke a waiter.
enum Wake {
    /// The watched key was deleted, the watch broke, or it is time for the periodic re-check.
    Recheck,
    /// The log showed every key ahead deleted, and ours not.
    Turn,
    Deadline,
    SessionLost,
}

/// An etcd key this acquire owns or may own. Dropping it (the acquire failed, gave up, or was
/// cancelled) deletes the key in the background.
pub(super) struct PendingKey {
    inner: Arc<Inner>,
    pub(super) key: String,
    session: Option<Arc<Session>>,
    pub(super) delete: Delete,
}

impl PendingKey {
    pub(super) fn session(&self) -> &Arc<Session> {
        self.session.as_ref().expect("present until handed over")
    }

    /// Deletes the key now (a waiter out of time); a delete that fails is left to the
    /// background, as on drop.
    async fn delete_now(mut self) {
        if let Delete::Exact(create_revision) = self.delete
            && self
                .inner
                .delete_exact(&self.key, create_revision)
                .await
                .is_ok()
        {
            self.delete = Delete::Nothing;
        }
    }

    /// The key is held now: the grant takes over key and session.
    fn hand_over(mut self) -> (String, Arc<Session>) {
        let session = self.session.take().expect("present until handed over");
        (std::mem::take(&mut self.key), session)
    }
}

impl Drop for PendingKey {
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            let delete = std::mem::replace(&mut self.delete, Delete::Nothing);
            self.inner
                .finish_key(std::mem::take(&mut self.key), session, delete);
        }
    }
}

fn get_ranges(response: &TxnResponse) -> Vec<Vec<etcd_client::KeyValue>> {
    response
        .op_responses()
        .into_iter()
        .filter_map(|op| match op {
            TxnOpResponse::Get(mut get) => Some(get.take_kvs()),
            _ => None,
        })
        .collect()
}

pub(super) fn revision(response: &TxnResponse) -> Result<i64> {
    response
        .header()
        .map(etcd_client::ResponseHeader::revision)
        .ok_or_else(|| Error::refused("etcd", "a transaction reply without header"))
}

/// How many of the keys a writer or reader waits behind one read lists: it waits for all of
/// them to go before it reads again (a writer behind a few readers reads once more, not once
/// per reader), at the price of a few more keys in the answer.
const BLOCKERS_READ: i64 = 16;

/// Keys only, newest first (by create revision), at most `limit` (the caller sets the range).
fn newest(limit: i64) -> GetOptions {
    GetOptions::new()
        .with_sort(SortTarget::Create, SortOrder::Descend)
        .with_limit(limit)
        .with_keys_only()
}

/// The reads that tell what an acquire of `mode` under `name` waits for, in one revision:
/// when `below` is given, only keys created before it (a re-check); otherwise the acquire's
/// own key may be among them (the reads that go with its put).
fn blocker_reads(name: &LockName, mode: LockMode, below: Option<i64>) -> Vec<TxnOp> {
    let older = |options: GetOptions| match below {
        Some(revision) => options.with_max_create_revision(revision - 1),
        None => options,
    };
    let own = i64::from(below.is_none()); // room for our own key in the answer
    match mode {
        LockMode::Exclusive | LockMode::Shared => {
            let end = name.blockers_end(mode == LockMode::Shared);
            vec![TxnOp::get(
                name.prefix(),
                Some(older(newest(BLOCKERS_READ + own).with_range(end))),
            )]
        }
        LockMode::Permit { .. } => {
            let range = |(start, end): (Vec<u8>, Vec<u8>), options: GetOptions| {
                TxnOp::get(start, Some(older(options.with_range(end))))
            };
            // Every one, to count them: a waiting permit is woken only when enough of them
            // were deleted for it to hold.
            let oldest = GetOptions::new()
                .with_sort(SortTarget::Create, SortOrder::Ascend)
                .with_keys_only();
            vec![
                range(name.writers(), newest(1)),
                range(name.readers(), newest(1)),
                range(name.permits(), oldest),
            ]
        }
    }
}

/// What the answers of [`blocker_reads`] say an acquire whose key has `create_revision`
/// waits for.
///
/// # Errors
///
/// [`Error::PermitLimitMismatch`] when the oldest permit key of the name was put with another
/// limit than `mode`'s.
fn ahead(
    req: &AcquireRequest,
    name: &LockName,
    reads: &[Vec<etcd_client::KeyValue>],
    create_revision: i64,
) -> Result<Ahead> {
    let newest_older = |kvs: &[etcd_client::KeyValue]| {
        kvs.iter()
            .filter(|kv| kv.create_revision() < create_revision)
            .max_by_key(|kv| kv.create_revision())
            .map(|kv| (kv.create_revision(), kv.key().to_vec()))
    };
    let LockMode::Permit { limit } = req.mode else {
        let first = reads.first().map_or(&[][..], Vec::as_slice);
        let keys: Vec<_> = first
            .iter()
            .filter(|kv| kv.create_revision() < create_revision)
            .map(|kv| kv.key().to_vec())
            .collect();
        // Fewer than the read could list: they are all there are.
        let all = keys.len() < usize::try_from(BLOCKERS_READ).unwrap_or(usize::MAX);
        return Ok(if keys.is_empty() {
            Ahead::Nothing
        } else {
            Ahead::Keys { keys, all }
        });
    };
    let [writers, readers, permits] = reads else {
        return Err(Error::refused(
            "etcd",
            "a transaction reply with missing reads",
        ));
    };
    if let Some(stored) = permits.first().and_then(|kv| name.permit_limit(kv.key()))
        && stored != limit
    {
        return Err(Error::PermitLimitMismatch {
            key: req.key.to_string(),
            stored,
            requested: limit,
        });
    }
    let other_kind = [newest_older(writers), newest_older(readers)]
        .into_iter()
        .flatten()
        .max_by_key(|(revision, _)| *revision);
    if let Some((_, key)) = other_kind {
        // Only the newest writer and reader were read.
        return Ok(Ahead::Keys {
            keys: vec![key],
            all: false,
        });
    }
    let older: Vec<_> = permits
        .iter()
        .filter(|kv| kv.create_revision() < create_revision)
        .map(|kv| kv.key().to_vec())
        .collect();
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    Ok(if older.len() >= limit {
        Ahead::Permits { older, limit }
    } else {
        Ahead::Nothing
    })
}

impl Inner {
    pub(super) async fn acquire(
        self: &Arc<Self>,
        req: &AcquireRequest,
        deadline: Option<Instant>,
    ) -> Result<AcquireOutcome> {
        match self.acquire_on_a_session(req, deadline).await {
            // The session's lease was gone on the server (it expired while this process was
            // paused, or was revoked): that session is now marked lost, and a fresh lease
            // serves the one retry.
            Err(error) if errors::is_lease_not_found(&error) => {
                tracing::debug!(key = %req.key, %error, "dlock: etcd lease gone; acquiring on a fresh one");
                self.acquire_on_a_session(req, deadline).await
            }
            other => other,
        }
    }

    async fn acquire_on_a_session(
        self: &Arc<Self>,
        req: &AcquireRequest,
        deadline: Option<Instant>,
    ) -> Result<AcquireOutcome> {
        let name = LockName::new(&self.namespace, &req.key);
        // A permit's one attempt queues and, unless granted at once, leaves again: whether
        // fewer than the limit hold cannot be a transaction's condition.
        let permit = matches!(req.mode, LockMode::Permit { .. });
        if !permit && deadline.is_some_and(|d| d <= Instant::now()) {
            return self.try_once(req, &name).await;
        }
        loop {
            match self.enqueue_and_wait(req, &name, deadline).await? {
                Turn::Granted(lease) => return Ok(AcquireOutcome::Acquired(lease)),
                Turn::Busy => return Ok(AcquireOutcome::Busy { retry_after: None }),
                Turn::Requeue(why) => {
                    tracing::debug!(key = %req.key, why, "dlock: etcd waiter queues again");
                    if deadline.is_some_and(|d| d <= Instant::now()) {
                        return Ok(AcquireOutcome::Busy { retry_after: None });
                    }
                }
            }
        }
    }

    /// Exactly one attempt: put our key only if the lock's range is empty, so a busy answer
    /// leaves nothing behind.
    async fn try_once(
        self: &Arc<Self>,
        req: &AcquireRequest,
        name: &LockName,
    ) -> Result<AcquireOutcome> {
        let shared = req.mode == LockMode::Shared;
        if self.sessions.live(req.ttl).is_none() {
            // Without a lease yet, look before granting one: a busy lock costs one read
            // instead of a lease grant and revoke.
            let end = name.blockers_end(shared);
            let found = call(self.timeout, "acquire", || {
                let mut kv = self.client.kv_client();
                let options = GetOptions::new().with_range(end.clone()).with_count_only();
                let prefix = name.prefix().to_owned();
                async move { kv.get(prefix, Some(options)).await }
            })
            .await?;
            if found.count() > 0 {
                return Ok(AcquireOutcome::Busy { retry_after: None });
            }
        }
        let mut pending = self.pending_key(req, name).await?;
        let session = Arc::clone(pending.session());
        let txn = Txn::new()
            .when(
                [Compare::create_revision(name.prefix(), CompareOp::Equal, 0)
                    .with_range(name.blockers_end(shared))],
            )
            .and_then([etcd_client::TxnOp::put(
                pending.key.as_str(),
                super::shown(req),
                Some(PutOptions::new().with_lease(session.id)),
            )]);
        let (reply, valid_from) = tokio::join!(
            self.txn("acquire", txn),
            session.fresh(session.ttl / FRESHNESS)
        );
        let reply = self.on_session(&session, reply)?;
        if !reply.succeeded() {
            pending.delete = Delete::Nothing;
            return Ok(AcquireOutcome::Busy { retry_after: None });
        }
        let create_revision = revision(&reply)?;
        pending.delete = Delete::Exact(create_revision);
        Ok(AcquireOutcome::Acquired(self.granted(
            req,
            pending,
            create_revision,
            valid_from,
        )))
    }

    /// `reply`, to a request that used `session`'s lease; if etcd says it has no such lease,
    /// the session is lost (every lock on it with it) and the error says so.
    fn on_session<T>(self: &Arc<Self>, session: &Arc<Session>, reply: Result<T>) -> Result<T> {
        if let Err(error) = &reply
            && errors::is_lease_not_found(error)
        {
            session.mark_lost(format!("etcd no longer has lease {:x}", session.id));
            self.session_lost(session);
        }
        reply
    }

    /// A session for the request's ttl and a reserved key on it.
    pub(super) async fn pending_key(
        self: &Arc<Self>,
        req: &AcquireRequest,
        name: &LockName,
    ) -> Result<PendingKey> {
        let session = self.checkout(req.ttl).await?;
        let key = self.reserve_key(name, &session, req.mode);
        Ok(PendingKey {
            inner: Arc::clone(self),
            key,
            session: Some(session),
            delete: Delete::Unknown(super::shown(req).to_owned()),
        })
    }

    /// Puts our key (queueing behind any existing ones) and waits for our turn.
    async fn enqueue_and_wait(
        self: &Arc<Self>,
        req: &AcquireRequest,
        name: &LockName,
        deadline: Option<Instant>,
    ) -> Result<Turn> {
        let mut pending = self.pending_key(req, name).await?;
        let session = Arc::clone(pending.session());
        let key = pending.key.clone();
        // Put-if-absent and, in the same revision, the reads that say what this request
        // waits behind (for a writer, the two newest keys of the name: ours, if it is in it,
        // and the one just before).
        let mut ops = vec![TxnOp::put(
            key.as_str(),
            super::shown(req),
            Some(PutOptions::new().with_lease(session.id)),
        )];
        ops.extend(blocker_reads(name, req.mode, None));
        let txn = Txn::new()
            .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
            .and_then(ops)
            .or_else([TxnOp::get(key.as_str(), None)]);
        // A recent keepalive, in parallel, in case the lock is free at once.
        let (reply, fresh) = tokio::join!(
            self.txn("acquire", txn),
            session.fresh(session.ttl / FRESHNESS)
        );
        let reply = self.on_session(&session, reply)?;
        let mut fresh = Some(fresh);
        if !reply.succeeded() {
            pending.delete = Delete::Nothing; // not ours: leave it alone
            return Err(Error::refused(
                "etcd",
                format!("etcd key `{key}` already exists although this backend does not use it"),
            ));
        }
        let create_revision = revision(&reply)?;
        pending.delete = Delete::Exact(create_revision);
        let mut seen = create_revision;
        let mut predecessor = ahead(req, name, &get_ranges(&reply), create_revision)?;
        let mut retry_in = Duration::from_millis(20);
        loop {
            let watched = match &predecessor {
                Ahead::Nothing => {
                    // Our turn: our key exists (just put, or seen by the re-check) and
                    // nothing that must go first is left.
                    let valid_from = match fresh.take() {
                        Some(valid_from) => valid_from,
                        None => session.fresh(session.ttl / FRESHNESS).await,
                    };
                    if session.is_lost() {
                        pending.delete = Delete::Nothing;
                        return Ok(Turn::Requeue("the lease was lost as the turn came"));
                    }
                    return Ok(Turn::Granted(self.granted(
                        req,
                        pending,
                        create_revision,
                        valid_from,
                    )));
                }
                Ahead::Keys { keys, all } => Awaited::Keys {
                    keys: keys.clone(),
                    all: *all,
                },
                Ahead::Permits { older, limit } => Awaited::Permits {
                    older: older.clone(),
                    limit: *limit,
                },
            };
            let watched = Watched {
                what: watched,
                own: key.as_bytes().to_vec(),
            };
            fresh = None; // stale by the time our turn comes
            match self
                .wait_deleted(name, watched, seen, &session, deadline)
                .await
            {
                Wake::Recheck => {}
                Wake::Turn => {
                    predecessor = Ahead::Nothing;
                    continue;
                }
                // Our queued key goes before the caller hears Busy: a process that exits
                // next must not leave it to block the lock until its lease runs out. (The
                // core answers within its wait slack anyway: a delete still running then is
                // finished in the background, as `pending` drops.)
                Wake::Deadline => {
                    // Within the core's wait slack, so the answer stays Busy on a slow server:
                    // a delete cut short here goes on in the background, as `pending` drops.
                    let _ = tokio::time::timeout(DELETE_BEFORE_BUSY, pending.delete_now()).await;
                    return Ok(Turn::Busy);
                }
                Wake::SessionLost => {
                    pending.delete = Delete::Nothing; // gone with the lease
                    return Ok(Turn::Requeue("the lease was lost while waiting"));
                }
            }
            // Our key still there (etcd #11456)? And what is ahead of it now?
            let mut ops = vec![TxnOp::get(
                key.as_str(),
                Some(GetOptions::new().with_keys_only()),
            )];
            ops.extend(blocker_reads(name, req.mode, Some(create_revision)));
            let reply = match self.txn("acquire", Txn::new().and_then(ops)).await {
                Ok(reply) => reply,
                Err(error) => {
                    tracing::debug!(key = %req.key, %error, "dlock: etcd waiter re-check failed; retrying");
                    if self.pause(retry_in, &session, deadline).await {
                        retry_in = (retry_in * 2).min(Duration::from_secs(1));
                    }
                    continue;
                }
            };
            retry_in = Duration::from_millis(20);
            seen = revision(&reply)?;
            let mut reads = get_ranges(&reply);
            let ours = if reads.is_empty() {
                Vec::new()
            } else {
                reads.remove(0)
            };
            if !ours
                .iter()
                .any(|kv| kv.create_revision() == create_revision)
            {
                pending.delete = Delete::Nothing;
                return Ok(Turn::Requeue("the queued key was deleted"));
            }
            predecessor = ahead(req, name, &reads, create_revision)?;
        }
    }

    /// Waits (bounded by the deadline, the session, and one ttl) until `watched` sees the
    /// deletion it waits for after revision `seen`, following the name's shared watch.
    async fn wait_deleted(
        &self,
        name: &LockName,
        mut watched: Watched,
        seen: i64,
        session: &Session,
        deadline: Option<Instant>,
    ) -> Wake {
        let until_deadline = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(until_deadline);
        let recheck = tokio::time::sleep(session.effective_ttl());
        tokio::pin!(recheck);
        let started = Instant::now();
        let followed = tokio::select! {
            () = session.lost() => return Wake::SessionLost,
            () = &mut until_deadline => return Wake::Deadline,
            followed = self.name_watches.follow(name) => followed,
        };
        let mut after = seen;
        if let Some(mut follower) = followed {
            loop {
                match follower.since(after) {
                    Since::Deletions(deletions) => {
                        // A turn holds only if our own key is not among the deletions seen
                        // with it: a lease's end or a range delete removes it in the same
                        // revision as the key ahead, possibly just after it (the log keeps
                        // each revision's deletions together).
                        let mut turn = false;
                        for deletion in &deletions {
                            after = after.max(deletion.revision);
                            match watched.on(deletion) {
                                Seen::Waiting => {}
                                Seen::Turn => turn = true,
                                Seen::Recheck => return Wake::Recheck,
                            }
                        }
                        if turn {
                            return Wake::Turn;
                        }
                    }
                    // The watch opened (or its log was trimmed) after our read: read again.
                    Since::Behind => return Wake::Recheck,
                    Since::Ended => break,
                }
                tokio::select! {
                    () = session.lost() => return Wake::SessionLost,
                    () = &mut until_deadline => return Wake::Deadline,
                    () = &mut recheck => return Wake::Recheck,
                    () = follower.changed() => {}
                }
            }
        }
        // The watch could not be opened, or it ended: re-check, but not in a tight loop if
        // watches keep failing.
        tracing::debug!("dlock: etcd name watch unavailable; re-checking");
        tokio::select! {
            () = session.lost() => Wake::SessionLost,
            () = &mut until_deadline => Wake::Deadline,
            () = tokio::time::sleep_until((started + Duration::from_millis(50)).into()) => Wake::Recheck,
        }
    }

    /// Sleeps `delay` unless the session is lost or the deadline comes first. Returns `true`
    /// if it slept the whole delay.
    async fn pause(&self, delay: Duration, session: &Session, deadline: Option<Instant>) -> bool {
        let until = deadline.map_or(Instant::now() + delay, |d| d.min(Instant::now() + delay));
        tokio::select! {
            () = session.lost() => false,
            () = tokio::time::sleep_until(until.into()) => true,
        }
    }

    /// Builds the lease of a grant, which carries its key and session from now on.
    pub(super) fn granted(
        self: &Arc<Self>,
        req: &AcquireRequest,
        pending: PendingKey,
        create_revision: i64,
        valid_from: Instant,
    ) -> Lease {
        let (key, session) = pending.hand_over();
        let ttl = session.effective_ttl();
        let token = u64::try_from(create_revision).unwrap_or_default();
        let mut lease = Lease::new(req, valid_from)
            .with_fencing_token(token)
            .with_extension(Arc::new(EtcdGrant::new(
                self,
                key,
                create_revision,
                session,
                req,
            )));
        lease.ttl = ttl;
        lease
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deleted(key: &str, revision: i64) -> Deletion {
        Deletion {
            key: key.as_bytes().to_vec(),
            revision,
        }
    }

    fn keys(names: &[&str]) -> Vec<Vec<u8>> {
        names.iter().map(|name| name.as_bytes().to_vec()).collect()
    }

    #[test]
    fn a_writer_behind_every_key_ahead_has_its_turn_when_the_last_goes() {
        let mut watched = Watched {
            what: Awaited::Keys {
                keys: keys(&["n/r/1", "n/r/2"]),
                all: true,
            },
            own: b"n/w/3".to_vec(),
        };
        assert_eq!(watched.on(&deleted("n/r/9", 10)), Seen::Waiting);
        assert_eq!(watched.on(&deleted("n/r/2", 11)), Seen::Waiting);
        // A key of that name put again and deleted: not one the read listed.
        assert_eq!(watched.on(&deleted("n/r/2", 13)), Seen::Waiting);
        assert_eq!(watched.on(&deleted("n/r/1", 14)), Seen::Turn);
    }

    #[test]
    fn a_waiter_behind_some_of_the_keys_ahead_reads_again_when_they_went() {
        let mut watched = Watched {
            what: Awaited::Keys {
                keys: keys(&["n/w/1"]),
                all: false,
            },
            own: b"n/w/3".to_vec(),
        };
        assert_eq!(watched.on(&deleted("n/w/1", 10)), Seen::Recheck);
    }

    #[test]
    fn a_waiter_whose_own_key_went_reads_again() {
        let mut watched = Watched {
            what: Awaited::Keys {
                keys: keys(&["n/w/1"]),
                all: true,
            },
            own: b"n/w/3".to_vec(),
        };
        assert_eq!(watched.on(&deleted("n/w/3", 10)), Seen::Recheck);
    }

    #[test]
    fn a_permit_counts_each_older_key_once_and_holds_when_fewer_than_the_limit_are_left() {
        let mut watched = Watched {
            what: Awaited::Permits {
                older: keys(&["n/p/1", "n/p/2", "n/p/3"]),
                limit: 2,
            },
            own: b"n/p/4".to_vec(),
        };
        // A younger permit leaving lets nobody older in.
        assert_eq!(watched.on(&deleted("n/p/5", 10)), Seen::Waiting);
        assert_eq!(watched.on(&deleted("n/p/2", 11)), Seen::Waiting);
        // The same name again (put again after the read, then deleted) is not counted twice.
        assert_eq!(watched.on(&deleted("n/p/2", 13)), Seen::Waiting);
        assert_eq!(watched.on(&deleted("n/p/3", 14)), Seen::Turn);
    }
}
