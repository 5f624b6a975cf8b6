//! A lock set in one round trip: one statement tries the set's keys in order on one
//! connection, stops at the first busy key and unlocks what it took before it (fencing rows
//! bumped only when every key was taken); the statement after it, in the same round trip,
//! gives the whole set back if any key has a live kept record.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_postgres::types::ToSql;

use super::acquire::pipelined;
use super::errors::{from_pg, timed, timed_raw};
use super::session::ConnUse;
use super::{Inner, PgGrant, PgHold, keys, sql};
use crate::lease::{AcquireAllOutcome, AcquireRequest, Lease};
use crate::{Error, LockMode, Result};

impl Inner {
    /// Takes every request's key on one connection in one statement, or none; `None` for a
    /// set this path does not take (permits, mixed ttls or fencing).
    pub(super) async fn acquire_together(
        self: &Arc<Self>,
        requests: &[AcquireRequest],
    ) -> Result<Option<AcquireAllOutcome>> {
        let Some(first) = requests.first() else {
            return Ok(None);
        };
        let alike = requests.iter().all(|req| {
            !matches!(req.mode, LockMode::Permit { .. })
                && req.ttl == first.ttl
                && req.fencing == first.fencing
        });
        if !alike {
            return Ok(None);
        }
        let keys: Vec<i64> = requests
            .iter()
            .map(|req| keys::advisory_key(&req.key))
            .collect();
        let shared: Vec<bool> = requests
            .iter()
            .map(|req| req.mode == LockMode::Shared)
            .collect();
        let mut conn_use = self.conns.for_try_all(first.ttl, &keys).await?;
        let (undo_keys, undo_shared, timeout) = (keys.clone(), shared.clone(), self.timeout);
        conn_use.undo_on_drop(Box::new(move |conn, reserved| {
            Box::pin(async move {
                let params: [&(dyn ToSql + Sync); 2] = [&undo_keys, &undo_shared];
                let undone = pipelined(&conn, [(sql::UNLOCK_ALL, &params[..])]);
                match tokio::time::timeout(timeout, undone).await {
                    Ok(Ok([Ok(_)])) => ConnUse::give_back(&conn, &reserved),
                    _ => conn.abandon("an interrupted set attempt could not be undone"),
                }
            })
        }));
        let statement = if first.fencing {
            self.sql.try_all_fenced.as_str()
        } else {
            self.sql.try_all.as_str()
        };
        let params: [&(dyn ToSql + Sync); 2] = [&keys, &shared];
        let sent = Instant::now();
        let answers = timed_raw(
            self.timeout,
            "acquire",
            pipelined(
                &conn_use.conn,
                [
                    (statement, &params[..]),
                    (&self.sql.kept_give_back_all, &params[..]),
                ],
            ),
        )
        .await?;
        let read = answers.and_then(|[taken, kept]| {
            let taken = taken?;
            let kept = kept?;
            Ok((taken, kept))
        });
        let (taken, kept) = match read {
            Ok(rows) => rows,
            Err(error) => {
                // Keys may be held after a statement failed: give every one back first.
                let unlocked = pipelined(&conn_use.conn, [(sql::UNLOCK_ALL, &params[..])]);
                let [unlocked] = timed(self.timeout, "acquire", unlocked).await?;
                unlocked.map_err(from_pg)?;
                conn_use.finish();
                return Err(from_pg(error));
            }
        };
        let row = taken.first();
        let all_taken = row.is_some_and(|row| row.get::<_, Option<bool>>(0) == Some(true));
        let kept_left = kept.first().map(|row| {
            Duration::try_from_secs_f64(row.get::<_, Option<f64>>(0).unwrap_or_default())
                .unwrap_or_default()
        });
        if !all_taken || kept_left.is_some() {
            conn_use.finish();
            let busy = match kept.first() {
                Some(kept) => kept.get::<_, Option<i32>>(1),
                None => row.and_then(|row| row.get::<_, Option<i32>>(1)),
            };
            let index = busy
                .and_then(|busy| usize::try_from(busy - 1).ok())
                .unwrap_or(0);
            return Ok(Some(AcquireAllOutcome::Busy {
                index,
                retry_after: kept_left,
            }));
        }
        let tokens: Vec<i64> = if first.fencing {
            row.map(|row| row.get::<_, Vec<i64>>(3)).unwrap_or_default()
        } else {
            Vec::new()
        };
        if first.fencing && tokens.len() != requests.len() {
            let unlocked = pipelined(&conn_use.conn, [(sql::UNLOCK_ALL, &params[..])]);
            let [unlocked] = timed(self.timeout, "acquire", unlocked).await?;
            unlocked.map_err(from_pg)?;
            conn_use.finish();
            return Err(Error::refused(
                "postgres",
                "the lock set statement returned fewer fencing tokens than keys",
            ));
        }
        let owners: Vec<_> = requests.iter().map(|req| &req.owner).collect();
        let conn = conn_use.granted_all(&owners);
        let leases = requests
            .iter()
            .zip(keys.iter().zip(&shared))
            .enumerate()
            .map(|(at, (req, (&key, &shared)))| {
                let mut lease = Lease::new(req, sent);
                if let Some(token) = tokens.get(at).and_then(|t| u64::try_from(*t).ok()) {
                    lease = lease.with_fencing_token(token);
                }
                let hold = PgHold::Lock { key, shared };
                let grant = PgGrant::new(self, Arc::clone(&conn), hold, req.owner.clone());
                lease.with_extension(Arc::new(grant))
            })
            .collect();
        Ok(Some(AcquireAllOutcome::Acquired(leases)))
    }
}
