//! Who holds and who waits for a lock, read from `pg_locks` (for operators).

use std::time::Duration;

use super::errors::timed;
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
        let stored = timed(self.timeout, "inspect", async {
            let statement = conn.prepared(&self.sql.stored_limit).await?;
            conn.client.query_opt(&statement, &[&key]).await
        })
        .await?
        .and_then(|row| row.get::<_, Option<i32>>(0))
        .and_then(|limit| u32::try_from(limit).ok());
        let queue = keys::queue_key(full_key);
        let slots = stored.map_or_else(Vec::new, |limit| keys::slot_keys(full_key, limit));
        let wanted: Vec<i64> = [key, queue]
            .into_iter()
            .chain(slots.iter().copied())
            .collect();
        let rows = timed(self.timeout, "inspect", async {
            let statement = conn.prepared(sql::INSPECT).await?;
            conn.client.query(&statement, &[&wanted]).await
        })
        .await?;
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
                holders.push(HolderInfo::new(owner, mode));
            } else if on != queue || stored.is_some() {
                waiters.push(WaiterInfo::new(Some(owner), mode));
            }
        }
        let kept = timed(self.timeout, "inspect", async {
            let statement = conn.prepared(&self.sql.kept).await?;
            conn.client.query_opt(&statement, &[&key]).await
        })
        .await?;
        if let Some(row) = kept {
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
