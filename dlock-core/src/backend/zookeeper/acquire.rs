//! Acquire: create a protected ephemeral-sequential node, then wait by Curator's rules for the
//! node before it (a data watch), or — for a permit — for room under the semaphore's `leases`;
//! at the head, wait out a record that keeps the lock after its last release.

use std::sync::Arc;
use std::time::Instant;

use futures_util::FutureExt;
use futures_util::future::{join, try_join};

use zookeeper_client::{
    Acls, CreateMode, Error as ZkError, EventType, MultiReadResult, MultiReader, MultiWriteResult,
    Stat, StateWatcher,
};

use super::errors::{from_zk, reply_lost, timed_raw, timed_resent};
use super::kept::{self, Record, WaitedOut};
use super::keys::{self, NodeKind, Standing};
use super::session::Session;
use super::{Inner, ZkGrant};
use crate::error::within;
use crate::lease::{AcquireOutcome, AcquireRequest, Lease};
use crate::{Error, LockMode, Result};

/// A node granted: its path, `czxid`, and when the request that last proved the session
/// alive (and the node there) was sent.
struct Granted {
    path: String,
    czxid: i64,
    valid_from: Instant,
}

/// A lock directory's children and, when asked, its kept record.
type Listing = (Vec<String>, Option<Record>);

/// What a create tells of the node it made: its `czxid` (the fencing token) and `ctime`
/// (server milliseconds).
struct Made {
    czxid: i64,
    ctime: i64,
}

impl From<&Stat> for Made {
    fn from(stat: &Stat) -> Self {
        Self {
            czxid: stat.czxid,
            ctime: stat.ctime,
        }
    }
}

impl Inner {
    pub(super) async fn acquire(
        self: &Arc<Self>,
        req: &AcquireRequest,
        deadline: Option<Instant>,
    ) -> Result<AcquireOutcome> {
        let path = keys::lock_path(&req.key)?;
        let session = self.checkout(req.ttl).await?;
        let mut nodes = Nodes::new(self, &session);
        let mut retry_after = None;
        let granted = match req.mode {
            LockMode::Permit { limit } => {
                match self
                    .acquire_permit(req, &path, limit, deadline, &mut nodes)
                    .await
                {
                    Ok(granted) => granted,
                    Err(error @ Error::PermitLimitMismatch { .. }) => {
                        // The service is fine: give the mutex and the lease back now, so
                        // that the next caller does not find them.
                        nodes.delete_now().await;
                        return Err(error);
                    }
                    Err(error) => return Err(error),
                }
            }
            _ => {
                let kind = NodeKind::of(req, self.latch);
                // A candidate's node shows its value (Curator's participant id).
                let data = req
                    .value
                    .as_deref()
                    .unwrap_or(req.owner.as_str())
                    .as_bytes();
                let record = kept::record_path(&path);
                // The listing is sent right behind the create (`join` polls in order), and
                // served after it: a session's requests are served in order.
                let sent = Instant::now();
                let (node, listed) = join(
                    self.create(&session, &path, kind, data, &mut nodes),
                    self.list_with_record(&session, &path, Some(&record)),
                )
                .await;
                let node = node?;
                let early = listed.ok().map(|listing| (sent, listing));
                let reader = kind == NodeKind::Read;
                let node_path = format!("{path}/{}", node.0);
                let turn = self
                    .wait_turn(
                        &session,
                        &path,
                        &node.0,
                        reader,
                        deadline,
                        Some(&record),
                        early,
                    )
                    .await?;
                match turn {
                    None => None,
                    Some((sent, kept)) => {
                        let waited = self
                            .wait_out_kept(
                                &session,
                                (&record, kept),
                                (&node_path, data, node.1.ctime),
                                sent,
                                deadline,
                            )
                            .await?;
                        match waited {
                            WaitedOut::Free(valid_from) => Some(Granted {
                                path: node_path,
                                czxid: node.1.czxid,
                                valid_from,
                            }),
                            WaitedOut::Busy(left) => {
                                retry_after = Some(left);
                                None
                            }
                        }
                    }
                }
            }
        };
        let Some(granted) = granted else {
            nodes.delete_now().await;
            return Ok(AcquireOutcome::Busy { retry_after });
        };
        nodes.hand_over(&granted.path);
        session.add_grant(&req.owner);
        let token = u64::try_from(granted.czxid).unwrap_or(0);
        let mut lease = Lease::new(req, granted.valid_from)
            .with_fencing_token(token)
            .with_extension(Arc::new(ZkGrant::new(
                self,
                granted.path,
                granted.czxid,
                Arc::clone(&session),
                req,
            )));
        lease.ttl = session.effective_ttl();
        if session.is_lost() {
            return Err(session_gone(&session));
        }
        Ok(AcquireOutcome::Acquired(lease))
    }

    /// A permit, as `InterProcessSemaphoreV2` takes one: the semaphore's mutex `K/locks`, then
    /// a lease node `K/leases/_c_<uuid>-lease-<seq>`, held once `K/leases` has at most `limit`
    /// children (waiting on a children watch meanwhile: only the mutex holder waits, so no
    /// herd); the mutex is given back either way. Three round trips when there is room: the
    /// limit check (a read of the other leases) travels beside the wait and the mutex's
    /// giving back, not before them. A hand-off lists nothing: the room is the event of
    /// `leases`, and the next waiter holds the mutex at its predecessor's deletion
    /// ([`Self::wait_turn`]).
    async fn acquire_permit(
        self: &Arc<Self>,
        req: &AcquireRequest,
        path: &str,
        limit: u32,
        deadline: Option<Instant>,
        nodes: &mut Nodes,
    ) -> Result<Option<Granted>> {
        let session = Arc::clone(&nodes.session);
        let locks = format!("{path}/{}", keys::SEMAPHORE_LOCKS);
        let leases = format!("{path}/{}", keys::SEMAPHORE_LEASES);
        let sent = Instant::now();
        let (mutex, listed) = join(
            self.create(
                &session,
                &locks,
                NodeKind::Mutex,
                req.owner.as_str().as_bytes(),
                nodes,
            ),
            self.list_with_record(&session, &locks, None),
        )
        .await;
        let (mutex, _) = mutex?;
        let early = listed.ok().map(|listing| (sent, listing));
        if self
            .wait_turn(&session, &locks, &mutex, false, deadline, None, early)
            .await?
            .is_none()
        {
            return Ok(None);
        }
        // Lazy: the listing is sent when first polled, behind the lease's create.
        let watch_leases = || async {
            let listing = || session.client.get_and_watch_children(&leases);
            timed_resent(self.timeout, "get children", listing)
                .await?
                .map_err(from_zk)
        };
        // The listing is sent right behind the create (`join` polls in order), and served
        // after it: a session's requests are served in order.
        let sent = Instant::now();
        let (lease, listed) = join(
            self.create(
                &session,
                &leases,
                NodeKind::Lease,
                &keys::permit_data(limit),
                nodes,
            ),
            watch_leases(),
        )
        .await;
        let (lease, made) = lease?;
        let (sent, (children, _, watcher)) = match listed
            .ok()
            .filter(|(children, _, _)| children.contains(&lease))
        {
            Some(listing) => (sent, listing),
            None => (Instant::now(), watch_leases().await?),
        };
        if !children.contains(&lease) {
            return Err(session_gone(&session));
        }
        // Another limit than the one stored is refused. The check reads while the wait goes
        // on, and beside the mutex's giving back when there is room at once: it costs no
        // round trip of its own on the way to the grant.
        let others = (children.len() > 1).then(|| children.clone());
        let check = async {
            match &others {
                Some(children) => {
                    self.check_limit(&session, &leases, children, &lease, limit, &req.key)
                        .await
                }
                None => Ok(()),
            }
        };
        let mutex_path = format!("{locks}/{mutex}");
        let room_then_mutex_back = async {
            let mut listing = Some((sent, children, watcher));
            let valid_from = loop {
                let (sent, children, watcher) = match listing.take() {
                    Some(listing) => listing,
                    None => {
                        let sent = Instant::now();
                        let (children, _, watcher) = watch_leases().await?;
                        (sent, children, watcher)
                    }
                };
                if !children.contains(&lease) {
                    return Err(session_gone(&session));
                }
                if children.len() <= limit as usize {
                    break Some(sent);
                }
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    break None;
                }
                tokio::select! {
                    event = watcher.changed() => {
                        // Only the mutex holder makes a lease (Curator's rule too): while
                        // this one holds it, a change of `leases` is a deletion. One too
                        // many, one gone: room, without listing again. (A force release
                        // deletes every lease, this one's too: its grant is then found
                        // gone at its first renewal, not here.)
                        if event.event_type == EventType::NodeChildrenChanged
                            && children.len() == limit as usize + 1
                            && fresh(&session, sent)
                        {
                            break Some(sent);
                        }
                    }
                    () = until(deadline) => break None,
                    () = session.lost() => return Err(session_gone(&session)),
                }
            };
            self.give_back(&session, &mutex_path).await?;
            Ok(valid_from)
        };
        let ((), valid_from) = try_join(check, room_then_mutex_back).await?;
        nodes.keep(&mutex_path); // deleted: nothing left to clean up
        Ok(valid_from.map(|valid_from| Granted {
            path: format!("{leases}/{lease}"),
            czxid: made.czxid,
            valid_from,
        }))
    }

    /// Refuses a permit whose limit differs from the one stored by the oldest dlock lease of
    /// the semaphore (one multi-read of the other leases' data).
    async fn check_limit(
        &self,
        session: &Session,
        leases: &str,
        children: &[String],
        ours: &str,
        limit: u32,
        key: &str,
    ) -> Result<()> {
        let others: Vec<&str> = keys::leases_in_order(children)
            .into_iter()
            .filter(|child| *child != ours)
            .collect();
        let paths: Vec<String> = others
            .iter()
            .map(|child| format!("{leases}/{child}"))
            .collect();
        let results = self
            .multi_read(session, "get data", |reader| {
                paths.iter().try_for_each(|path| reader.add_get_data(path))
            })
            .await?;
        let stored = results.iter().find_map(|result| match result {
            MultiReadResult::Data { data, .. } => keys::limit_of(data),
            _ => None,
        });
        match stored {
            Some(stored) if stored != limit => Err(Error::PermitLimitMismatch {
                key: key.to_owned(),
                stored,
                requested: limit,
            }),
            _ => Ok(()),
        }
    }

    /// Creates `dir/_c_<uuid>-<lock name><seq>` (ephemeral, sequential), making `dir` (a
    /// container) with it in one multi when this backend did not see `dir` lately
    /// ([`KnownDirs`](super::known_dirs::KnownDirs)), and `dir`'s parents as containers when
    /// they are missing too. A create whose reply is lost is looked for by its uuid (after a
    /// `sync`, so the server has applied it if the ensemble did) before it is sent again.
    /// Returns the node's name, `czxid` and `ctime`.
    async fn create(
        &self,
        session: &Session,
        dir: &str,
        kind: NodeKind,
        data: &[u8],
        nodes: &mut Nodes,
    ) -> Result<(String, Made)> {
        let prefix = keys::node_prefix(&nodes.uuid, kind);
        let path = format!("{dir}/{prefix}");
        let give_up = Instant::now() + self.timeout;
        let node = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
        let container = CreateMode::Container.with_acls(Acls::anyone_all());
        let mut with_dir = !self.known_dirs.contains(dir);
        loop {
            let left = give_up.saturating_duration_since(Instant::now());
            nodes.maybe_in(dir);
            let created = if with_dir {
                self.create_with_dir(session, dir, &path, data, left)
                    .await?
            } else {
                timed_raw(left, "create", session.client.create(&path, data, &node))
                    .await?
                    .map(|(stat, sequence)| (format!("{prefix}{sequence}"), Made::from(&stat)))
            };
            match created {
                Ok((name, made)) => {
                    self.known_dirs.saw(dir);
                    nodes.created(dir, &name);
                    return Ok((name, made));
                }
                // The directory exists after all: a plain create.
                Err(ZkError::NodeExists) if with_dir => {
                    self.known_dirs.saw(dir);
                    with_dir = false;
                }
                // Its parent is missing too: make them all, then a plain create.
                Err(ZkError::NoNode) if with_dir => {
                    // Made again after a lost reply: the client takes `NodeExists` as made.
                    let mkdir = || session.client.mkdir(dir, &container);
                    timed_resent(left, "create", mkdir)
                        .await?
                        .map_err(from_zk)?;
                    with_dir = false;
                }
                // The directory is gone (an empty container is reaped): make it with the node.
                Err(ZkError::NoNode) => with_dir = true,
                Err(error) if reply_lost(&error) => {
                    if let Some(found) = self.find_own(session, dir, &nodes.uuid, give_up).await? {
                        nodes.created(dir, &found.0);
                        return Ok(found);
                    }
                }
                Err(error) => return Err(from_zk(error)),
            }
        }
    }

    /// One multi: `dir` as a container, the node `path` (ephemeral, sequential) in it, and an
    /// empty `setData` of `dir`. ZooKeeper 3.8 answers a create inside a multi without its
    /// stat (see zookeeper-client's `MultiWriteResult::Create`); the `setData`'s stat, of the
    /// same transaction, carries its zxid and time: the node's `czxid` and `ctime`. Fails
    /// whole with `NodeExists` when `dir` exists, `NoNode` when its parent does not.
    async fn create_with_dir(
        &self,
        session: &Session,
        dir: &str,
        path: &str,
        data: &[u8],
        left: std::time::Duration,
    ) -> Result<Result<(String, Made), ZkError>> {
        let container = CreateMode::Container.with_acls(Acls::anyone_all());
        let node = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
        let mut multi = session.client.new_multi_writer();
        multi.add_create(dir, &[], &container).map_err(from_zk)?;
        multi.add_create(path, data, &node).map_err(from_zk)?;
        multi.add_set_data(dir, &[], None).map_err(from_zk)?;
        let results = match within("zookeeper", "create", left, multi.commit()).await? {
            Ok(results) => results,
            Err(error) => return Ok(Err(error.into())),
        };
        Ok(match results.as_slice() {
            [
                _,
                MultiWriteResult::Create { path, .. },
                MultiWriteResult::SetData { stat },
            ] => {
                let name = path.rsplit('/').next().unwrap_or_default().to_owned();
                let made = Made {
                    czxid: stat.mzxid,
                    ctime: stat.mtime,
                };
                Ok((name, made))
            }
            _ => Err(ZkError::UnexpectedError(
                "a multi answered out of shape".into(),
            )),
        })
    }

    /// The node of this acquire (`_c_<uuid>-…`) under `dir`, if a create of it was applied.
    async fn find_own(
        &self,
        session: &Session,
        dir: &str,
        uuid: &str,
        give_up: Instant,
    ) -> Result<Option<(String, Made)>> {
        loop {
            let left = give_up.saturating_duration_since(Instant::now());
            let listed = async {
                session.client.sync(dir).await?;
                session.client.list_children(dir).await
            };
            let children = match timed_raw(left, "create", listed).await? {
                Ok(children) => children,
                Err(error) if reply_lost(&error) => continue,
                Err(ZkError::NoNode) => return Ok(None),
                Err(error) => return Err(from_zk(error)),
            };
            let Some(name) = children.into_iter().find(|c| keys::is_node_of(c, uuid)) else {
                return Ok(None);
            };
            match timed_raw(
                left,
                "create",
                session.client.get_data(&format!("{dir}/{name}")),
            )
            .await?
            {
                Ok((_, stat)) if stat.ephemeral_owner == session.id => {
                    return Ok(Some((name, Made::from(&stat))));
                }
                Ok(_) | Err(ZkError::NoNode) => return Ok(None),
                Err(error) if reply_lost(&error) => {}
                Err(error) => return Err(from_zk(error)),
            }
        }
    }

    /// Waits until `node` (a child of `dir`) holds by Curator's rules, watching only the node
    /// it waits for. Returns when the listing that found it holding was sent — with the kept
    /// record at `record`, read in the same multi-read as that listing — or `None` at
    /// `deadline`. `early` is a listing sent right behind the node's create, used first when
    /// it shows the node (it is then as good as one sent after the create was answered: a
    /// session's requests are served in order). When the listing read no record, the
    /// deletion of the only node in the way is the turn itself, with no listing after it: a
    /// record is only written in the transaction that deletes a node in the way, and that
    /// transaction sets the node's data first, which fires the watch as `NodeDataChanged`
    /// (the release that keeps a lock, in `kept`) — on the connection the watch was set
    /// on. After a reconnection, it lists again.
    #[allow(clippy::too_many_arguments)]
    async fn wait_turn(
        self: &Arc<Self>,
        session: &Session,
        dir: &str,
        node: &str,
        reader: bool,
        deadline: Option<Instant>,
        record: Option<&str>,
        early: Option<(Instant, Listing)>,
    ) -> Result<Option<(Instant, Option<Record>)>> {
        let mut early = early.filter(|(_, (children, _))| children.iter().any(|c| c == node));
        loop {
            let (sent, (children, kept)) = match early.take() {
                Some(listing) => listing,
                None => (
                    Instant::now(),
                    self.list_with_record(session, dir, record).await?,
                ),
            };
            let (watch, last) = match keys::standing(&children, node, reader) {
                Standing::Holds => return Ok(Some((sent, kept))),
                Standing::Gone => return Err(session_gone(session)),
                Standing::Waits { watch, last } => (watch, last),
            };
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
            let mut connection = session.client.state_watcher();
            let watch_sent = Instant::now();
            let watched = timed_raw(
                self.timeout,
                "get data",
                session.client.get_and_watch_data(&format!("{dir}/{watch}")),
            )
            .await?;
            let watcher = match watched {
                Ok((_, _, watcher)) => watcher,
                // Gone already, or the reply lost with its connection: look again.
                Err(ZkError::NoNode) => continue,
                Err(error) if reply_lost(&error) => continue,
                Err(error) => return Err(from_zk(error)),
            };
            tokio::select! {
                event = watcher.changed() => {
                    // The only node in the way is gone, and none made since sorts before
                    // this one: it holds, without listing again — unless a record was there
                    // to be judged (a keep fires `NodeDataChanged` instead), or the
                    // connection was lost meanwhile: a watch set again on a new connection
                    // reports a node gone meanwhile as deleted, even one whose data a keep
                    // set first.
                    if last
                        && kept.is_none()
                        && event.event_type == EventType::NodeDeleted
                        && fresh(session, watch_sent)
                        && !reconnected(&mut connection)
                    {
                        return Ok(Some((watch_sent, None)));
                    }
                }
                () = until(deadline) => return Ok(None),
                () = session.lost() => return Err(session_gone(session)),
            }
        }
    }

    /// The children of `dir` and, when asked, the kept record at `record`, in one request.
    pub(super) async fn list_with_record(
        &self,
        session: &Session,
        dir: &str,
        record: Option<&str>,
    ) -> Result<Listing> {
        let Some(record) = record else {
            let listing = || session.client.list_children(dir);
            let children = timed_resent(self.timeout, "get children", listing)
                .await?
                .map_err(from_zk)?;
            return Ok((children, None));
        };
        let results = self
            .multi_read(session, "get children", |reader| {
                reader.add_get_children(dir)?;
                reader.add_get_data(record)
            })
            .await?;
        let mut results = results.into_iter();
        let children = match results.next() {
            Some(MultiReadResult::Children { children }) => children,
            Some(MultiReadResult::Error {
                err: ZkError::NoNode,
            }) => Vec::new(),
            Some(MultiReadResult::Error { err }) => return Err(from_zk(err)),
            _ => {
                return Err(Error::unavailable(
                    "zookeeper",
                    "a multi-read answered out of shape",
                ));
            }
        };
        let kept = match results.next() {
            Some(MultiReadResult::Data { data, stat }) => Record::read(&data, &stat),
            Some(MultiReadResult::Error {
                err: ZkError::NoNode,
            }) => None,
            Some(MultiReadResult::Error { err }) => return Err(from_zk(err)),
            _ => {
                return Err(Error::unavailable(
                    "zookeeper",
                    "a multi-read answered out of shape",
                ));
            }
        };
        Ok((children, kept))
    }

    /// The multi-read that `add` builds, made again while its reply is lost.
    async fn multi_read(
        &self,
        session: &Session,
        operation: &'static str,
        add: impl Fn(&mut MultiReader<'_>) -> std::result::Result<(), ZkError> + Sync,
    ) -> Result<Vec<MultiReadResult>> {
        let read = || {
            let mut reader = session.client.new_multi_reader();
            let added = add(&mut reader);
            async move {
                added?;
                reader.commit().await
            }
        };
        timed_resent(self.timeout, operation, read)
            .await?
            .map_err(from_zk)
    }

    /// Deletes the node at `path`; a node already gone is fine.
    pub(super) async fn delete(&self, session: &Session, path: &str) -> Result<bool> {
        match timed_raw(self.timeout, "delete", session.client.delete(path, None)).await? {
            Ok(()) => Ok(true),
            Err(ZkError::NoNode) => Ok(false),
            Err(error) => Err(from_zk(error)),
        }
    }

    /// Gives back a node of this acquire's own, made again when its reply is lost: its name
    /// holds the acquire's uuid, so no other node can have it; gone already is done.
    async fn give_back(&self, session: &Session, path: &str) -> Result<()> {
        let delete = || session.client.delete(path, None);
        match timed_resent(self.timeout, "delete", delete).await? {
            Ok(()) | Err(ZkError::NoNode) => Ok(()),
            Err(error) => Err(from_zk(error)),
        }
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline.into()).await,
        None => std::future::pending().await,
    }
}

/// The error for a node that vanished while its acquire waited: its session ended (closed
/// by a shutdown of the Locker: [`Error::ShutDown`]).
pub(super) fn session_gone(session: &Session) -> Error {
    if session.ended_by_shutdown() {
        return Error::ShutDown;
    }
    Error::unavailable(
        "zookeeper",
        format!(
            "the lock node is gone: {}",
            if session.is_lost() {
                session.lost_reason()
            } else {
                format!(
                    "ZooKeeper session {:#x} lost it (deleted by an admin?)",
                    session.id
                )
            }
        ),
    )
}

/// The nodes one acquire created (or may have created), deleted when it does not end in a
/// grant: at once when it gives up busy ([`delete_now`](Self::delete_now)), else in the
/// background when dropped — a cancelled or failed acquire leaves nothing behind. Deletes of
/// nodes whose create was sent but not answered look them up by uuid first; being later on
/// the same session, they run after the create.
pub(super) struct Nodes {
    inner: Arc<Inner>,
    session: Arc<Session>,
    /// The uuid of this acquire's node names.
    uuid: String,
    /// Full paths of nodes known to exist.
    created: Vec<String>,
    /// Parents where a create was sent and its node is not known yet.
    unsure: Vec<String>,
    /// The acquire ended in a grant, which keeps the session in use.
    granted: bool,
}

impl Nodes {
    fn new(inner: &Arc<Inner>, session: &Arc<Session>) -> Self {
        Self {
            inner: Arc::clone(inner),
            session: Arc::clone(session),
            uuid: uuid::Uuid::new_v4().to_string(),
            created: Vec::new(),
            unsure: Vec::new(),
            granted: false,
        }
    }

    fn maybe_in(&mut self, dir: &str) {
        if !self.unsure.iter().any(|d| d == dir) {
            self.unsure.push(dir.to_owned());
        }
    }

    fn created(&mut self, dir: &str, name: &str) {
        self.unsure.retain(|d| d != dir);
        self.created.push(format!("{dir}/{name}"));
    }

    /// `path` is not to be deleted (granted, or deleted already).
    fn keep(&mut self, path: &str) {
        self.created.retain(|p| p != path);
    }

    /// The acquire is granted `path`: its session use goes to the grant.
    fn hand_over(mut self, path: &str) {
        self.keep(path);
        self.granted = true;
    }

    /// Deletes every node now (a busy acquire), newest first — a permit's lease before the
    /// semaphore's mutex, as Curator gives them back — or leaves what fails, or what a drop
    /// of this future interrupts, to the background.
    async fn delete_now(mut self) {
        while let Some(path) = self.created.last().cloned() {
            if self.inner.delete(&self.session, &path).await.is_err() {
                return; // the rest goes in the background, on drop
            }
            self.created.pop();
        }
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        let (created, unsure) = (
            std::mem::take(&mut self.created),
            std::mem::take(&mut self.unsure),
        );
        let unsure = unsure
            .into_iter()
            .map(|dir| (dir, self.uuid.clone()))
            .collect();
        self.inner
            .finish_nodes(Arc::clone(&self.session), created, unsure, !self.granted);
    }
}

/// Whether the session's connection changed state (was lost, and perhaps made again) since
/// `states` was taken. The client publishes a state change before it serves anything on a
/// new connection, so the event of a watch set again after a reconnection finds it changed.
fn reconnected(states: &mut StateWatcher) -> bool {
    states.changed().now_or_never().is_some()
}

/// Whether a grant may count from `sent`, the send time of an answered request that set
/// the watch which just fired, rather than from a new listing: when `sent` is no older
/// than a renewal would accept a confirmation of the session to be (a long wait looks
/// again, which also bounds how far a node's sequence counter can move meanwhile; see
/// `keys::standing`).
fn fresh(session: &Session, sent: Instant) -> bool {
    sent.elapsed() <= session.effective_ttl() / super::release::CONFIRMATION_AGE_DIVISOR
}
