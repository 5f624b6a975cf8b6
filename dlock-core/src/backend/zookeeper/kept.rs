//! A lock kept after its release: a persistent record node that outlives the session, read
//! by every acquire that reaches the head of the lock's queue, and judged by the server's
//! clock (node `mtime`s, which the leader stamps).
//!
//! The record of lock path `/K` is `/_dlock_kept/<K, '%' and '/' escaped>`, outside `/K`
//! (Curator counts every child of `/K` as a contender), all in one directory so that expired
//! records of keys nobody locks again (a once-per-fire key after its retention) can be swept.
//! Its data is `<owner>|<why>|<milliseconds kept>`; it expires at its `mtime` plus those
//! milliseconds. TTL nodes would expire it on their own, but need `extendedTypesEnabled`,
//! which ZooKeeper leaves off by default.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use zookeeper_client::{
    Acls, CreateMode, Error as ZkError, MultiReadResult, MultiWriteError, Stat,
};

use super::Inner;
use super::ZkGrant;
use super::errors::{from_zk, timed, timed_raw, timed_resent};
use super::keys::KEPT_DIR;
use super::release::InUse;
use super::session::Session;
use crate::backend::cleanup::Releasing;
use crate::error::within;
use crate::lease::{Lease, ReleaseOutcome};
use crate::{HolderInfo, Kept, LockMode, Result};

/// How many records one sweep reads at most.
const SWEEP_BATCH: usize = 32;
/// The least time between two sweeps of one backend: a sweep lists every record.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Lets a sweep start at most every [`SWEEP_EVERY`], and says where it goes on: sweeps take
/// the records in name order, each after the last one the one before read, so every record is
/// read in turn however many there are.
#[derive(Debug, Default)]
pub(super) struct SweepGate(std::sync::Mutex<Sweeps>);

#[derive(Debug, Default)]
struct Sweeps {
    next_at: Option<Instant>,
    /// The last record name the last sweep read.
    after: String,
}

impl SweepGate {
    /// Whether a sweep may start now (then the next may start [`SWEEP_EVERY`] later).
    fn open(&self) -> bool {
        let mut sweeps = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        if sweeps.next_at.is_some_and(|next| now < next) {
            return false;
        }
        sweeps.next_at = Some(now + SWEEP_EVERY);
        true
    }

    /// Up to [`SWEEP_BATCH`] of `children` (record names), other than `own`, in name order
    /// after the last sweep's, wrapping around.
    fn next_batch(&self, mut children: Vec<String>, own: &str) -> Vec<String> {
        children.retain(|child| child != own);
        children.sort_unstable();
        let mut sweeps = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let start = children.partition_point(|child| *child <= sweeps.after);
        let batch: Vec<String> = children[start..]
            .iter()
            .chain(&children[..start])
            .take(SWEEP_BATCH)
            .cloned()
            .collect();
        sweeps.after = batch.last().cloned().unwrap_or_default();
        batch
    }
}

/// The record node of lock path `path` (`/K`).
pub(super) fn record_path(path: &str) -> String {
    let relative = path.strip_prefix('/').unwrap_or(path);
    let escaped = relative.replace('%', "%25").replace('/', "%2F");
    format!("{KEPT_DIR}/{escaped}")
}

/// A record as read: who kept the key, why, and its expiry (server milliseconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Record {
    owner: String,
    why: Kept,
    /// How long the keep was for: no record has more left.
    kept_for: Duration,
    expires_ms: i64,
    version: i32,
}

impl Record {
    /// The record in a node's data and stat, if dlock wrote it.
    pub(super) fn read(data: &[u8], stat: &Stat) -> Option<Self> {
        let text = std::str::from_utf8(data).ok()?;
        let (rest, millis) = text.rsplit_once('|')?;
        let (owner, why) = rest.rsplit_once('|')?;
        let millis: u64 = millis.parse().ok()?;
        Some(Self {
            owner: owner.to_owned(),
            why: why.parse().ok()?,
            kept_for: Duration::from_millis(millis),
            expires_ms: stat.mtime.checked_add(i64::try_from(millis).ok()?)?,
            version: stat.version,
        })
    }

    fn data(owner: &str, why: Kept, keep: Duration) -> Vec<u8> {
        // Rounded up: the key is never kept less than asked.
        let millis = keep.as_micros().div_ceil(1000);
        format!("{owner}|{why}|{millis}").into_bytes()
    }

    /// Time left after the server time `now_ms`, if any (never more than the keep was for:
    /// `now_ms` may be from before the record was written).
    fn left_after(&self, now_ms: i64) -> Option<Duration> {
        let left = self.expires_ms.checked_sub(now_ms)?;
        u64::try_from(left)
            .ok()
            .filter(|&left| left > 0)
            .map(|left| Duration::from_millis(left).min(self.kept_for))
    }
}

/// How a holder's wait for a kept record ended.
pub(super) enum WaitedOut {
    /// No live record: the grant holds, valid from this instant.
    Free(Instant),
    /// The deadline came first; the record has this much left.
    Busy(Duration),
}

impl Inner {
    /// Releases `lease`'s exclusive lock, leaving its record: in one multi, the lock node's
    /// data is set (see [`keep`](Self::keep)), the record created (or, when one is there,
    /// overwritten: it has expired, as this grant holds the lock) and the lock node deleted —
    /// which fails, changing nothing, if the node is gone (its session expired). Then expired
    /// records are swept in the background.
    pub(super) async fn release_keeping(
        self: &Arc<Self>,
        lease: &Lease,
        keep: Duration,
        why: Kept,
    ) -> Result<ReleaseOutcome> {
        let Some(grant) = lease.extension::<ZkGrant>() else {
            return Ok(ReleaseOutcome::NotHeld);
        };
        if lease.mode != LockMode::Exclusive || grant.live_session(self, &lease.owner).is_none() {
            return Ok(ReleaseOutcome::NotHeld);
        }
        let Some(session) = grant.give_up() else {
            return Ok(ReleaseOutcome::NotHeld);
        };
        // Until the multi is answered, the node is deleted in the background (unkept) if this
        // future is dropped or the multi fails.
        let (inner, in_use) = (Arc::clone(self), Arc::clone(&session));
        let mut pending = Releasing::new(grant.path.clone(), move |left: Option<String>| {
            inner.finish_nodes(in_use, left.into_iter().collect(), Vec::new(), true);
        });
        if session.is_lost() {
            pending.confirmed();
            return Ok(ReleaseOutcome::NotHeld);
        }
        let dir = grant.path.rsplit_once('/').map_or("", |(dir, _)| dir);
        let record = record_path(dir);
        let data = Record::data(lease.owner.as_str(), why, keep);
        let kept = self.keep(&session, &grant.path, &record, &data).await?;
        pending.confirmed();
        if !kept {
            return Ok(ReleaseOutcome::NotHeld);
        }
        self.sweep_kept(lease.ttl, record);
        Ok(ReleaseOutcome::Released)
    }

    /// The multi of [`release_keeping`](Self::release_keeping), retried while the record's
    /// directory is missing or the record appears or vanishes in between: whether it was
    /// kept (`false`: the lock node was gone).
    ///
    /// The node's data is set first, in the same transaction: a waiter watching the node
    /// (a data watch, fired once) is told `NodeDataChanged`, not `NodeDeleted`, and reads the
    /// record before it holds. A waiter told its only blocker was deleted, whose last
    /// listing read no record, holds at once when its connection held since it set the
    /// watch (`Inner::wait_turn`): a record is written only by such a transaction of a node
    /// in the way, so none came in between.
    async fn keep(&self, session: &Session, node: &str, record: &str, data: &[u8]) -> Result<bool> {
        let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
        let container = CreateMode::Container.with_acls(Acls::anyone_all());
        let give_up = Instant::now() + self.timeout;
        let mut overwrite = false;
        loop {
            let left = give_up.saturating_duration_since(Instant::now());
            let mut multi = session.client.new_multi_writer();
            multi.add_set_data(node, data, None).map_err(from_zk)?;
            if overwrite {
                multi.add_set_data(record, data, None).map_err(from_zk)?;
            } else {
                multi
                    .add_create(record, data, &persistent)
                    .map_err(from_zk)?;
            }
            multi.add_delete(node, None).map_err(from_zk)?;
            match within("zookeeper", "release", left, multi.commit()).await? {
                Ok(_) => return Ok(true),
                Err(MultiWriteError::OperationFailed {
                    index: 0 | 2,
                    source,
                }) => {
                    return match source {
                        ZkError::NoNode => Ok(false),
                        error => Err(from_zk(error)),
                    };
                }
                Err(MultiWriteError::OperationFailed { index: 1, source }) => match source {
                    ZkError::NodeExists => overwrite = true,
                    ZkError::NoNode if overwrite => overwrite = false,
                    ZkError::NoNode => {
                        timed(left, "release", session.client.mkdir(KEPT_DIR, &container)).await?;
                    }
                    error => return Err(from_zk(error)),
                },
                Err(error) => return Err(from_zk(error.into())),
            }
            if Instant::now() >= give_up {
                return Err(crate::Error::timeout("zookeeper", "release", self.timeout));
            }
        }
    }

    /// After `node` (created at server time `ctime_ms`) reached the head of its queue, with
    /// `record` read in the same multi-read: holds if there is no live record; otherwise waits
    /// the record out, until `deadline`. Whether a record is live is the server's call: when
    /// it may be, the holder touches its own node, whose new `mtime` is the server's time now.
    /// An expired record is left in place.
    pub(super) async fn wait_out_kept(
        &self,
        session: &Session,
        (record_path, mut record): (&str, Option<Record>),
        (node, owner, ctime_ms): (&str, &[u8], i64),
        mut valid_from: Instant,
        deadline: Option<Instant>,
    ) -> Result<WaitedOut> {
        // A time the server stamped no later than now (`None`: ask it again).
        let mut server_now = Some(ctime_ms);
        loop {
            let Some(kept) = &record else {
                return Ok(WaitedOut::Free(valid_from));
            };
            if server_now.is_some_and(|now_ms| kept.left_after(now_ms).is_none()) {
                // Expired: left for the next keep to overwrite or a sweep to delete (a delete
                // here, at a version, could meet a new record of the same version).
                return Ok(WaitedOut::Free(valid_from));
            }
            // Live at the server time known (the node's creation, when the lock was held by
            // the record or by the node the record replaced): a try is busy.
            if deadline.is_some_and(|deadline| deadline <= Instant::now())
                && let Some(left) = server_now.and_then(|now_ms| kept.left_after(now_ms))
            {
                return Ok(WaitedOut::Busy(left));
            }
            // It may be live: ask the server for its time.
            let sent = Instant::now();
            let touch = || session.client.set_data(node, owner, None);
            let touched = timed_resent(self.timeout, "set data", touch)
                .await?
                .map_err(from_zk)?;
            valid_from = sent;
            let Some(left) = kept.left_after(touched.mtime) else {
                server_now = Some(touched.mtime);
                continue; // expired: hold
            };
            let expires = Instant::now() + left;
            let wake = deadline.map_or(expires, |deadline| deadline.min(expires));
            tokio::select! {
                () = tokio::time::sleep_until(wake.into()) => {}
                () = session.lost() => return Err(super::acquire::session_gone(session)),
            }
            if wake < expires {
                return Ok(WaitedOut::Busy(expires - wake));
            }
            // The record may have been rewritten (or deleted) meanwhile: read it again.
            let sent = Instant::now();
            let read = || session.client.get_data(record_path);
            record = match timed_resent(self.timeout, "get data", read).await? {
                Ok((data, stat)) => Record::read(&data, &stat),
                Err(ZkError::NoNode) => None,
                Err(error) => return Err(from_zk(error)),
            };
            valid_from = sent;
            server_now = None;
        }
    }

    /// Deletes, in the background, records that expired before the record just written,
    /// `own`, was (its `mtime` is the server's time then): up to [`SWEEP_BATCH`] read in one
    /// multi-read with `own`, deleted at the versions read; at most one sweep a second, each
    /// going on where the last stopped. A once-per-fire key is not locked
    /// again after its retention, so nothing else would delete its record.
    fn sweep_kept(self: &Arc<Self>, ttl: Duration, own: String) {
        if !self.next_sweep.open() {
            return;
        }
        let inner = Arc::clone(self);
        self.background.spawn(async move {
            let Ok(session) = inner.checkout(ttl).await else {
                return;
            };
            let _in_use = InUse(&inner, &session);
            let Ok(children) = inner.children(&session, KEPT_DIR).await else {
                return;
            };
            let own_name = own.rsplit_once('/').map_or("", |(_, name)| name);
            let others: Vec<String> = inner
                .next_sweep
                .next_batch(children, own_name)
                .into_iter()
                .map(|child| format!("{KEPT_DIR}/{child}"))
                .collect();
            let mut reader = session.client.new_multi_reader();
            for path in std::iter::once(&own).chain(&others) {
                if reader.add_get_data(path).is_err() {
                    return;
                }
            }
            let Ok(Ok(results)) = timed_raw(inner.timeout, "get data", reader.commit()).await
            else {
                return;
            };
            let mut results = results.into_iter();
            let Some(MultiReadResult::Data { stat: own, .. }) = results.next() else {
                return;
            };
            let deletes = others.iter().zip(results).filter_map(|(path, result)| {
                let MultiReadResult::Data { data, stat } = result else {
                    return None;
                };
                let record = Record::read(&data, &stat)?;
                record
                    .left_after(own.mtime)
                    .is_none()
                    .then(|| session.client.delete(path, Some(record.version)))
            });
            let _ =
                tokio::time::timeout(inner.timeout, futures_util::future::join_all(deletes)).await;
        });
    }
}

/// `record` (of a lock read by `inspect`) as a holder: its time left is estimated with this
/// host's clock (a display; no decision uses it), and a record that looks expired by it is
/// not shown.
pub(super) fn kept_holder(record: Option<Record>) -> Option<HolderInfo> {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .ok()
        .and_then(|now| i64::try_from(now.as_millis()).ok())
        .unwrap_or(0);
    let record = record?;
    let left = record.left_after(now_ms)?;
    Some(
        HolderInfo::new(record.owner, LockMode::Exclusive)
            .with_kept(Some(record.why))
            .with_expires_in(Some(left)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_paths_are_flat_and_escaped() {
        assert_eq!(record_path("/order:42"), "/_dlock_kept/order:42");
        assert_eq!(record_path("/locks/a%b"), "/_dlock_kept/locks%2Fa%25b");
    }

    #[test]
    fn sweeps_take_every_record_in_turn() {
        let gate = SweepGate::default();
        let names: Vec<String> = (0..70).map(|i| format!("k{i:03}")).collect();
        let first = gate.next_batch(names.clone(), "k000");
        assert_eq!(first.first().map(String::as_str), Some("k001"));
        assert_eq!(first.len(), SWEEP_BATCH);
        let second = gate.next_batch(names.clone(), "k000");
        assert_eq!(second.first(), Some(&format!("k{:03}", SWEEP_BATCH + 1)));
        let third = gate.next_batch(names, "k000");
        // 69 names besides `own`: the third batch wraps around to the first names.
        assert!(third.contains(&"k069".to_owned()) && third.contains(&"k001".to_owned()));
    }

    #[test]
    fn records_read_back_and_expire_by_the_servers_time() {
        let data = Record::data("app|1", Kept::Done, Duration::from_micros(1_500));
        assert_eq!(data, b"app|1|done|2");
        let stat = Stat {
            czxid: 1,
            mzxid: 2,
            pzxid: 1,
            ctime: 500,
            mtime: 1_000,
            version: 3,
            cversion: 0,
            aversion: 0,
            ephemeral_owner: 0,
            data_length: 12,
            num_children: 0,
        };
        let record = Record::read(&data, &stat).expect("a record");
        assert_eq!(record.owner, "app|1");
        assert_eq!(record.why, Kept::Done);
        assert_eq!(record.left_after(1_000), Some(Duration::from_millis(2)));
        assert_eq!(record.left_after(1_002), None);
        assert_eq!(Record::read(b"not a record", &stat), None);
    }
}
