//! Renew (one round trip per connection: is the session still there?) and release (an owner-checked unlock on the grant's connection, which may first leave a kept
//! record in the fence table).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::acquire::{pipelined, query};
use super::errors::{describe, from_pg, timed_raw};
use super::session::Conn;
use super::{Inner, PgGrant, PgHold, keys, sql};
use crate::lease::{Lease, OwnerId, ReleaseOutcome, RenewOutcome};
use crate::{Kept, Result};
use tokio_postgres::Row;
use tokio_postgres::types::{ToSql, Type};

impl Inner {
    /// Confirms every lease's connection with one round trip per connection (the
    /// connections' round trips run side by side). A lease counts from when its connection's
    /// round trip was sent; the round trip also restarts the session's `idle_session_timeout`.
    ///
    /// A live session still holds every advisory lock it was granted: PostgreSQL ends one
    /// only by the session's own unlock (which this backend sends only when it releases the
    /// grant) or with the session (`pg_terminate_backend`, a restart, the network), which the
    /// connection reports as the loss of every lock on it.
    pub(super) async fn renew(self: &Arc<Self>, leases: &[Lease]) -> Result<Vec<RenewOutcome>> {
        let mut outcomes: Vec<Option<RenewOutcome>> = leases.iter().map(|_| None).collect();
        let mut by_conn: Vec<(Arc<Conn>, Vec<usize>)> = Vec::new();
        for (at, lease) in leases.iter().enumerate() {
            let conn = lease
                .extension::<PgGrant>()
                .and_then(|grant| grant.live_conn(self, &lease.owner))
                .filter(|conn| !conn.is_lost());
            let Some(conn) = conn else {
                outcomes[at] = Some(RenewOutcome::NotOwner);
                continue;
            };
            match by_conn.iter_mut().find(|(c, _)| Arc::ptr_eq(c, &conn)) {
                Some((_, ats)) => ats.push(at),
                None => by_conn.push((conn, vec![at])),
            }
        }
        let pings = by_conn.iter().map(|(conn, _)| async {
            let sent = Instant::now();
            let alive = timed_raw(self.timeout, "renew", query(conn, sql::ALIVE, &[])).await;
            (sent, alive)
        });
        let pings = futures_util::future::join_all(pings).await;
        for ((conn, ats), (sent, alive)) in by_conn.iter().zip(pings) {
            let alive = match alive {
                Ok(Ok(_)) => Ok(!conn.is_lost()),
                Ok(Err(error)) => Err(from_pg(error)),
                // A ping changes nothing: its late answer is dropped, the connection stays.
                Err(timeout) => Err(timeout),
            };
            for &at in ats {
                outcomes[at] = Some(match &alive {
                    Ok(true) => RenewOutcome::Renewed { valid_from: sent },
                    // Ended meanwhile: the connection reports each of its locks lost.
                    Ok(false) => RenewOutcome::NotOwner,
                    Err(error) => RenewOutcome::Failed(error.copy_for_batch("postgres")),
                });
            }
        }
        Ok(outcomes
            .into_iter()
            .map(|outcome| outcome.expect("every lease has an outcome"))
            .collect())
    }

    pub(super) async fn release(self: &Arc<Self>, lease: &Lease) -> Result<ReleaseOutcome> {
        let Some(grant) = lease.extension::<PgGrant>() else {
            return Ok(ReleaseOutcome::NotHeld);
        };
        if grant.live_conn(self, &lease.owner).is_none() {
            return Ok(ReleaseOutcome::NotHeld);
        }
        let Some((conn, owner)) = grant.give_up() else {
            return Ok(ReleaseOutcome::NotHeld);
        };
        self.unlock(&conn, &owner, &grant.hold).await
    }

    /// Unlocks a lock set's grants in one statement when they are locks (not permits) on one
    /// live connection; `None`, having changed nothing, otherwise.
    pub(super) async fn release_together(
        self: &Arc<Self>,
        leases: &[Lease],
    ) -> Result<Option<Vec<ReleaseOutcome>>> {
        let mut conn: Option<Arc<Conn>> = None;
        for lease in leases {
            let Some(grant) = lease.extension::<PgGrant>() else {
                return Ok(None);
            };
            let Some(live) = grant.live_conn(self, &lease.owner) else {
                return Ok(None);
            };
            let same = conn.as_ref().is_none_or(|conn| Arc::ptr_eq(conn, &live));
            if !same || live.is_lost() || !matches!(grant.hold, PgHold::Lock { .. }) {
                return Ok(None);
            }
            conn = Some(live);
        }
        let Some(conn) = conn else {
            return Ok(None);
        };
        // Given up together: a grant given up meanwhile (by its lease's drop) is not ours.
        let mut given: Vec<(usize, OwnerId)> = Vec::with_capacity(leases.len());
        let (mut keys, mut shared) = (Vec::new(), Vec::new());
        for (at, lease) in leases.iter().enumerate() {
            let grant = lease.extension::<PgGrant>().expect("checked above");
            if let (
                PgHold::Lock {
                    key,
                    shared: reader,
                },
                Some((_, owner)),
            ) = (&grant.hold, grant.give_up())
            {
                given.push((at, owner));
                keys.push(*key);
                shared.push(*reader);
            }
        }
        // Dropped before the answer (the caller gave up), the connection's state is in doubt:
        // it is closed, which frees its locks, and the grants are forgotten.
        let mut settling = Settling::new(
            self,
            &conn,
            given
                .iter()
                .zip(&keys)
                .map(|((_, owner), key)| (owner, vec![*key]))
                .collect(),
        );
        let params: [&(dyn ToSql + Sync); 2] = [&keys, &shared];
        let answer = timed_raw(
            self.timeout,
            "release",
            pipelined(&conn, [(sql::UNLOCK_EACH, &params[..])]),
        )
        .await;
        settling.settled = true;
        let mut outcomes = vec![ReleaseOutcome::NotHeld; leases.len()];
        let unlocked: Result<Vec<bool>> = match answer {
            Ok(Ok([Ok(rows)])) => Ok(rows.iter().map(|row| row.get::<_, bool>(0)).collect()),
            Ok(Ok([Err(error)])) | Ok(Err(error)) => {
                if conn.is_lost() {
                    Ok(vec![false; given.len()])
                } else {
                    conn.abandon("a release failed");
                    Err(from_pg(error))
                }
            }
            Err(timeout) => {
                conn.abandon("a release did not answer in time");
                Err(timeout)
            }
        };
        for ((_, owner), key) in given.iter().zip(&keys) {
            conn.remove_grant(owner, &[*key]);
            self.conns.ungranted(&conn);
        }
        for ((at, _), unlocked) in given.iter().zip(unlocked?) {
            if unlocked {
                outcomes[*at] = ReleaseOutcome::Released;
            }
        }
        Ok(Some(outcomes))
    }

    /// Releases `lease`'s exclusive lock, leaving a record that keeps the key held for `keep`
    /// more by the server's clock: written (if the session still holds the key) and committed
    /// before the unlock, both in one round trip with a sweep of expired records. Every
    /// acquire reads the record after its grant (see `try_lock`), so nobody is granted the key
    /// until the record expires.
    pub(super) async fn release_keeping(
        self: &Arc<Self>,
        lease: &Lease,
        keep: Duration,
        kept: Kept,
    ) -> Result<ReleaseOutcome> {
        let Some(grant) = lease.extension::<PgGrant>() else {
            return Ok(ReleaseOutcome::NotHeld);
        };
        let (key, channel) = match &grant.hold {
            PgHold::Lock { key, shared: false } => (*key, None),
            PgHold::Leader { key, channel } => (*key, Some(channel)),
            _ => return Ok(ReleaseOutcome::NotHeld), // the core keeps only exclusive locks
        };
        if grant.live_conn(self, &lease.owner).is_none() {
            return Ok(ReleaseOutcome::NotHeld);
        }
        let Some((conn, owner)) = grant.give_up() else {
            return Ok(ReleaseOutcome::NotHeld);
        };
        if conn.is_lost() {
            return self.unlock(&conn, &owner, &grant.hold).await;
        }
        let (high, low) = keys::to_halves(key);
        let (secs, why, by) = (keep.as_secs_f64(), kept.as_str(), owner.as_str());
        let keep_params: [&(dyn ToSql + Sync); 6] = [&key, &secs, &why, &by, &high, &low];
        let unlock_params: [&(dyn ToSql + Sync); 2] = [&key, &channel];
        let unlock = match channel {
            // A leadership: its record cleared and its observers told, as by a resign.
            Some(_) => (self.sql.unlock_leader.as_str(), &unlock_params[..]),
            None => (sql::UNLOCK, &unlock_params[..1]),
        };
        let steps = [
            (self.sql.keep.as_str(), &keep_params[..]),
            unlock,
            (self.sql.sweep_kept.as_str(), &[]),
        ];
        let mut settling = Settling::new(self, &conn, vec![(&owner, vec![key])]);
        let answers = timed_raw(self.timeout, "release", pipelined(&conn, steps)).await;
        settling.settled = true;
        let (kept_error, unlocked) = match answers {
            Ok(Ok([kept, unlocked, swept])) => {
                if let Err(error) = swept {
                    tracing::debug!(error = %describe(&error), "dlock: sweeping expired kept records failed");
                }
                (kept.err(), Ok(unlocked))
            }
            Ok(Err(error)) => (None, Ok(Err(error))),
            Err(timeout) => (None, Err(timeout)),
        };
        let outcome = self.settle_unlock(&conn, &owner, &grant.hold, unlocked)?;
        match kept_error {
            // Unlocked, not kept: say so rather than let the caller think the key is kept.
            Some(error) => Err(from_pg(error)),
            None => Ok(outcome),
        }
    }

    /// Unlocks what `owner` holds on `conn`. An unlock whose answer does not come leaves the
    /// connection's state in doubt: it is closed (which frees everything on it).
    pub(super) async fn unlock(
        &self,
        conn: &Arc<Conn>,
        owner: &OwnerId,
        hold: &PgHold,
    ) -> Result<ReleaseOutcome> {
        let keys = hold.keys();
        if conn.is_lost() {
            conn.remove_grant(owner, &keys);
            self.conns.ungranted(conn);
            return Ok(ReleaseOutcome::NotHeld);
        }
        let unlock = async {
            match hold {
                PgHold::Lock { key, shared: false } => query(conn, sql::UNLOCK, &[*key]).await,
                PgHold::Leader { key, channel } => {
                    conn.client
                        .query_typed(
                            &self.sql.unlock_leader,
                            &[(key, Type::INT8), (channel, Type::TEXT)],
                        )
                        .await
                }
                PgHold::Lock { key, shared: true } => {
                    query(conn, sql::UNLOCK_SHARED, &[*key]).await
                }
                PgHold::Permit {
                    slot,
                    limit_key,
                    channel,
                } => {
                    conn.client
                        .query_typed(
                            sql::UNLOCK_PERMIT,
                            &[
                                (slot, Type::INT8),
                                (limit_key, Type::INT8),
                                (channel, Type::TEXT),
                            ],
                        )
                        .await
                }
            }
        };
        let mut settling = Settling::new(self, conn, vec![(owner, keys)]);
        let answer = timed_raw(self.timeout, "release", unlock).await;
        settling.settled = true;
        self.settle_unlock(conn, owner, hold, answer)
    }

    /// The end of an unlock of `hold` on `conn`: the grant forgotten, and the unlock's
    /// `answer` as the release's outcome. An unlock that failed or did not answer leaves the
    /// connection's state in doubt: it is closed.
    fn settle_unlock(
        &self,
        conn: &Arc<Conn>,
        owner: &OwnerId,
        hold: &PgHold,
        answer: Result<Result<Vec<Row>, tokio_postgres::Error>>,
    ) -> Result<ReleaseOutcome> {
        conn.remove_grant(owner, &hold.keys());
        self.conns.ungranted(conn);
        match answer {
            Ok(Ok(rows)) => Ok(if rows.first().is_some_and(|row| row.get::<_, bool>(0)) {
                ReleaseOutcome::Released
            } else {
                ReleaseOutcome::NotHeld
            }),
            Ok(Err(_)) if conn.is_lost() => Ok(ReleaseOutcome::NotHeld),
            Ok(Err(error)) => {
                conn.abandon("a release failed");
                Err(from_pg(error))
            }
            Err(timeout) => {
                conn.abandon("a release did not answer in time");
                Err(timeout)
            }
        }
    }
}

/// The grants a release gave up, until the release settles them; dropped unsettled (the
/// release was cancelled mid-statement), it closes the connection — which frees every lock on
/// it — and forgets them, so neither a lock nor a use of the connection is left.
struct Settling<'a> {
    inner: &'a Inner,
    conn: &'a Arc<Conn>,
    /// Each grant given up: its owner and the advisory keys it reserved on the connection.
    grants: Vec<(&'a OwnerId, Vec<i64>)>,
    settled: bool,
}

impl<'a> Settling<'a> {
    const fn new(
        inner: &'a Inner,
        conn: &'a Arc<Conn>,
        grants: Vec<(&'a OwnerId, Vec<i64>)>,
    ) -> Self {
        Self {
            inner,
            conn,
            grants,
            settled: false,
        }
    }
}

impl Drop for Settling<'_> {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        self.conn.abandon("a release was interrupted");
        for (owner, keys) in &self.grants {
            self.conn.remove_grant(owner, keys);
            self.inner.conns.ungranted(self.conn);
        }
    }
}
