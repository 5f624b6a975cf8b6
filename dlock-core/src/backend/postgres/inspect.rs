//! Who holds and who waits for a lock, read from `pg_locks` (for operators).

use std::time::Duration;

use tokio_postgres::types::ToSql;

use super::acquire::pipelined;
use super::errors::{from_pg, timed};
use super::{Inner, keys, sql};
use crate::{HolderInfo, Kept, LockInfo, LockMode, Result, WaiterInfo};

impl Inner {
    /// The advisory locks on `full_key`'s key — and, for a semaphore whose limit is stored,
    /// on its slots (a permit each) and its queue (waiting permits) — as `pg_locks` shows
    /// them, whoever took them (dlock, `psql`, any SQL client). An owner is the session's
    /// `application_name` and backend pid; no fencing token or expiry (a lock lasts as long
    /// as its session). A live kept record of the key (a released lock held on) shows as one
    /// more holder, with its owner, why it is kept and the time left by the server's clock.
    pub(super) async fn inspect(&self, full_key: &str) -> Result<LockInfo> {
        let key = keys::advisory_key(full_key);
        let read = self.conns.for_read(self.timeout).await?;
        let conn = &read.conn;
        let queue = keys::queue_key(full_key);
        // The stored limit, the key's and queue's locks and the kept record in one round
        // trip; a semaphore's slots (known from its limit) in a second.
        let key_and_queue = vec![key, queue];
        let steps = [
            (
                self.sql.stored_limit.as_str(),
                &[&key as &(dyn ToSql + Sync)][..],
            ),
            (sql::INSPECT, &[&key_and_queue]),
            (self.sql.kept.as_str(), &[&key]),
            (self.sql.leader.as_str(), &[&key]),
        ];
        let [stored, rows, kept, leader] = timed(self.timeout, "inspect", pipelined(conn, steps))
            .await?
            .map(|answer| answer.map_err(from_pg));
        let stored = stored?
            .first()
            .and_then(|row| row.get::<_, Option<i32>>(0))
            .and_then(|limit| u32::try_from(limit).ok());
        let mut rows = rows?;
        let leader = leader?.first().and_then(Self::recorded_leader);
        if let Some(limit) = stored {
            let slots = keys::slot_keys(full_key, limit);
            let [slot_rows] = timed(
                self.timeout,
                "inspect",
                pipelined(conn, [(sql::INSPECT, &[&slots as &(dyn ToSql + Sync)][..])]),
            )
            .await?;
            rows.extend(slot_rows.map_err(from_pg)?);
        }
        let permit = LockMode::Permit {
            limit: stored.unwrap_or(0),
        };
        let (mut holders, mut waiters) = (Vec::new(), Vec::new());
        for row in rows {
            let (on, pid, mode, granted, application): (i64, i32, &str, bool, &str) =
                (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
            let owner = if application.is_empty() {
                format!("pid {pid}")
            } else {
                format!("{application} pid {pid}")
            };
            let mode = if on == key {
                if mode == "ShareLock" {
                    LockMode::Shared
                } else {
                    LockMode::Exclusive
                }
            } else {
                permit
            };
            // The head of a semaphore's queue holds the queue key while it looks for a slot.
            if granted && on != queue {
                let holder = HolderInfo::new(owner, mode);
                holders.push(match &leader {
                    // An election's leader: its value, term, and when to look again (its
                    // session ends within its ttl once its client is gone).
                    Some(led) if led.pid == pid && mode == LockMode::Exclusive => holder
                        .with_value(Some(led.value.clone()))
                        .with_fencing_token(Some(led.term))
                        .with_expires_in(Some(led.ttl)),
                    _ => holder,
                });
            } else if on != queue || stored.is_some() {
                waiters.push(WaiterInfo::new(Some(owner), mode));
            }
        }
        let kept = kept?;
        if let Some(row) = kept.first() {
            // A record is no session: it shows as a holder whose `kept` says why.
            let (why, by, left): (Option<&str>, Option<&str>, f64) =
                (row.get(0), row.get(1), row.get(2));
            holders.push(
                HolderInfo::new(by.unwrap_or_default(), LockMode::Exclusive)
                    .with_kept(why.and_then(|why| why.parse::<Kept>().ok()))
                    .with_expires_in(Duration::try_from_secs_f64(left).ok()),
            );
        }
        read.finish();
        Ok(LockInfo {
            holders,
            waiters: Some(waiters),
        })
    }
}
