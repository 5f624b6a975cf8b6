//! Acquire: one non-blocking try on a shared connection, then — if the caller waits — a wait
//! on the server, on a connection of its own, bounded by `lock_timeout`. A semaphore's
//! permit queues on the semaphore's queue key; the head of the queue takes a free slot.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_postgres::Row;
use tokio_postgres::types::{ToSql, Type};

use super::errors::{from_pg, is_lock_timeout, timed, timed_raw};
use super::session::{Conn, ConnUse};
use super::{Inner, PgGrant, PgHold, keys, sql};
use crate::lease::{AcquireOutcome, AcquireRequest, Lease};
use crate::{Error, LockMode, Result};

/// What an attempt got: the grant's hold and token, and when its lease starts.
struct Got {
    hold: PgHold,
    token: Option<i64>,
    valid_from: Instant,
}

/// What one attempt at a lock came to.
enum Answer {
    Granted(Got),
    /// Held by another session (`None`), or free but kept after its release for `Some(left)`
    /// more by the server's clock.
    Busy(Option<Duration>),
}

impl From<Option<Got>> for Answer {
    fn from(got: Option<Got>) -> Self {
        got.map_or(Self::Busy(None), Self::Granted)
    }
}

/// How many times an acquire starts over on a fresh connection after the one it used turned
/// out closed (by the server's `idle_session_timeout` after a pause, a restart, or
/// `pg_terminate_backend`).
const FRESH_CONNECTION_RETRIES: u32 = 2;

impl Inner {
    /// Acquires as [`attempt`](Self::attempt) does; an attempt that failed on a connection
    /// found closed starts over on a fresh one while the caller's wait and the operation
    /// timeout allow. A failure to open a connection is not retried: the server is down.
    pub(super) async fn acquire(
        self: &Arc<Self>,
        req: &AcquireRequest,
        deadline: Option<Instant>,
    ) -> Result<AcquireOutcome> {
        let give_up = Instant::now() + self.timeout;
        let mut retries = FRESH_CONNECTION_RETRIES;
        loop {
            let connect_failures = self.conns.connect_failures();
            match self.attempt(req, deadline).await {
                Err(error @ Error::Unavailable { .. })
                    if retries > 0
                        && self.conns.connect_failures() == connect_failures
                        && Instant::now() < give_up
                        && deadline.is_none_or(|d| Instant::now() < d) =>
                {
                    retries -= 1;
                    tracing::debug!(key = %req.key, %error, "dlock: PostgreSQL connection found closed; acquiring on a fresh one");
                    // The connection's task sees its end first.
                    tokio::task::yield_now().await;
                    self.conns.forget_closed();
                }
                Ok(AcquireOutcome::Acquired(lease)) if req.value.is_some() => {
                    // A campaign's grant leads once its value is shown (boxed: campaigns
                    // only).
                    return Box::pin(self.show_leader(req, lease)).await;
                }
                outcome => return outcome,
            }
        }
    }

    /// One acquire on the connections open now (or a new one).
    async fn attempt(
        self: &Arc<Self>,
        req: &AcquireRequest,
        deadline: Option<Instant>,
    ) -> Result<AcquireOutcome> {
        let retry_after = match self.try_once(req).await? {
            AcquireOutcome::Busy { retry_after } => retry_after,
            granted => return Ok(granted),
        };
        if deadline.is_some_and(|d| d <= Instant::now()) {
            return Ok(AcquireOutcome::Busy { retry_after });
        }
        let mut conn_use = self.conns.for_wait(req.ttl, first_key(req)).await?;
        let answer = match req.mode {
            LockMode::Permit { limit } => self
                .wait_permit(&mut conn_use, req, limit, deadline)
                .await?
                .into(),
            mode => {
                self.wait_lock(&conn_use.conn, req, mode == LockMode::Shared, deadline)
                    .await?
            }
        };
        Ok(match answer {
            Answer::Granted(got) => self.granted(req, conn_use, got),
            Answer::Busy(retry_after) => {
                conn_use.finish();
                AcquireOutcome::Busy { retry_after }
            }
        })
    }

    /// One attempt that does not wait, on a connection shared with other locks. An attempt
    /// dropped mid-statement must not leave a grant nobody receives, nor close a connection
    /// other locks depend on: a lock's attempt, dropped, unlocks its key in the background
    /// (after the try, on the same connection); a permit's attempt (several statements) runs
    /// in a task of its own, whose grant, if nobody receives it, is released by its lease's
    /// drop.
    async fn try_once(self: &Arc<Self>, req: &AcquireRequest) -> Result<AcquireOutcome> {
        let mut conn_use = self.conns.for_try(req.ttl, first_key(req)).await?;
        if let LockMode::Permit { limit } = req.mode {
            let (inner, req) = (Arc::clone(self), req.clone());
            let attempt = tokio::spawn(async move {
                let got = inner.try_permit(&mut conn_use, &req, limit).await;
                let answer = got.map(|got| got.map(Answer::from));
                inner.attempted(&req, conn_use, answer)
            });
            return attempt
                .await
                .map_err(|error| Error::unavailable("postgres", error.to_string()))?;
        }
        let shared = req.mode == LockMode::Shared;
        let (key, timeout) = (keys::advisory_key(&req.key), self.timeout);
        conn_use.undo_on_drop(Box::new(move |conn, reserved| {
            Box::pin(async move {
                let unlock = if shared {
                    sql::UNLOCK_SHARED
                } else {
                    sql::UNLOCK
                };
                match tokio::time::timeout(timeout, query(&conn, unlock, &[key])).await {
                    Ok(Ok(_)) => ConnUse::give_back(&conn, &reserved),
                    _ => conn.abandon("an interrupted attempt could not be undone"),
                }
            })
        }));
        let got = self.try_lock(&conn_use.conn, req, shared).await;
        self.attempted(req, conn_use, got)
    }

    /// The end of an attempt: granted, busy, or refused with the connection as it was; an
    /// error (`?`) leaves the connection in doubt, and dropping `conn_use` closes it or undoes
    /// the attempt.
    fn attempted(
        self: &Arc<Self>,
        req: &AcquireRequest,
        conn_use: ConnUse,
        answer: Result<Result<Answer>>,
    ) -> Result<AcquireOutcome> {
        match answer? {
            Ok(Answer::Granted(got)) => Ok(self.granted(req, conn_use, got)),
            Ok(Answer::Busy(retry_after)) => {
                conn_use.finish();
                Ok(AcquireOutcome::Busy { retry_after })
            }
            Err(refused) => {
                conn_use.finish();
                Err(refused)
            }
        }
    }

    /// The lease of a grant: the connection keeps its keys, the grant is recorded on it.
    fn granted(
        self: &Arc<Self>,
        req: &AcquireRequest,
        conn_use: ConnUse,
        got: Got,
    ) -> AcquireOutcome {
        let conn = conn_use.granted(&req.owner, got.hold.limit_key());
        let hold = match got.hold {
            PgHold::Lock { key, shared: false } if req.value.is_some() => PgHold::Leader {
                key,
                channel: keys::channel(&req.key),
            },
            hold => hold,
        };
        let mut lease = Lease::new(req, got.valid_from);
        if let Some(token) = got.token.and_then(|t| u64::try_from(t).ok()) {
            lease = lease.with_fencing_token(token);
        }
        let grant = PgGrant::new(self, conn, hold, req.owner.clone());
        AcquireOutcome::Acquired(lease.with_extension(Arc::new(grant)))
    }

    /// Tries an exclusive or shared lock, with its token in the same statement if asked, and
    /// reads the key's kept record in the statement after it (the same round trip), which
    /// gives back a grant of a key kept after its release: busy for the record's time left.
    /// The inner error is a refusal that left the connection as it was.
    async fn try_lock(
        &self,
        conn: &Conn,
        req: &AcquireRequest,
        shared: bool,
    ) -> Result<Result<Answer>> {
        let key = keys::advisory_key(&req.key);
        let statement = match (req.fencing, shared) {
            (true, false) => self.sql.try_fenced.as_str(),
            (true, true) => self.sql.try_shared_fenced.as_str(),
            (false, false) => sql::TRY,
            (false, true) => sql::TRY_SHARED,
        };
        let (high, low) = keys::to_halves(key);
        let sent = Instant::now();
        let answers = timed_raw(
            self.timeout,
            "acquire",
            pipelined(
                conn,
                [
                    (statement, &[&key]),
                    (&self.sql.kept_give_back, &[&key, &shared, &high, &low]),
                ],
            ),
        )
        .await?;
        let answers = answers.and_then(|[taken, kept]| {
            let taken = taken?;
            let granted = if req.fencing {
                taken.first().map(|row| Some(row.get::<_, i64>(0)))
            } else {
                taken
                    .first()
                    .and_then(|row| row.get::<_, bool>(0).then_some(None))
            };
            Ok((granted, kept?))
        });
        match answers {
            Ok((None, kept)) => Ok(Ok(Answer::Busy(kept_left(&kept)))),
            Ok((Some(token), kept)) => match kept_left(&kept) {
                None => Ok(Ok(Answer::Granted(Got {
                    hold: PgHold::Lock { key, shared },
                    token,
                    valid_from: sent,
                }))),
                Some(left) => Ok(Ok(Answer::Busy(Some(left)))), // given back
            },
            Err(error) => {
                // The lock may have been granted before a statement failed (the token's row,
                // the kept record's read): give it back before the key goes back.
                self.unlock_key(conn, key, shared).await?;
                Ok(Err(from_pg(error)))
            }
        }
    }

    /// Gives back `key`, taken on `conn` by an attempt that does not keep it.
    async fn unlock_key(&self, conn: &Conn, key: i64, shared: bool) -> Result<()> {
        let unlock = if shared {
            sql::UNLOCK_SHARED
        } else {
            sql::UNLOCK
        };
        timed(self.timeout, "acquire", query(conn, unlock, &[key])).await?;
        Ok(())
    }

    /// Waits on the server for an exclusive or shared lock until `deadline` (PostgreSQL's own
    /// queue: first come, first served, readers behind a waiting writer). `lock_timeout`
    /// travels in the same round trip, and the key's kept record is read after the grant in
    /// it too; when `lock_timeout` runs out, `pg_locks` says whether the grant won the race.
    /// A grant of a key kept after its release is given back by that read, and the wait goes
    /// on when the record expires (the server says when, and the session sleeps on the server
    /// until then): no polling.
    async fn wait_lock(
        &self,
        conn: &Conn,
        req: &AcquireRequest,
        shared: bool,
        deadline: Option<Instant>,
    ) -> Result<Answer> {
        let key = keys::advisory_key(&req.key);
        let statement = match (req.fencing, shared) {
            (true, false) => self.sql.lock_fenced.as_str(),
            (true, true) => self.sql.lock_shared_fenced.as_str(),
            (false, false) => sql::LOCK,
            (false, true) => sql::LOCK_SHARED,
        };
        let (high, low) = keys::to_halves(key);
        loop {
            let steps = [
                (statement, &[&key as &(dyn ToSql + Sync)][..]),
                (&self.sql.kept_give_back, &[&key, &shared, &high, &low]),
            ];
            let answers = self
                .bounded_wait(conn, deadline, pipelined(conn, steps))
                .await?;
            let valid_from = Instant::now();
            let [taken, kept] = answers.map_err(from_pg)?;
            let token = match taken {
                Ok(rows) if req.fencing => rows.first().map(|row| row.get::<_, i64>(0)),
                Ok(_) => None,
                Err(error) if is_lock_timeout(&error) => {
                    if !self.holds(conn, key).await? {
                        return Ok(Answer::Busy(None));
                    }
                    // Granted just as the timeout fired: the statement failed, the session
                    // lock stayed (session locks outlive the aborted statement).
                    if req.fencing {
                        Some(self.bump(conn, key).await?)
                    } else {
                        None
                    }
                }
                Err(error) => return Err(from_pg(error)),
            };
            let Some(left) = kept_left(&kept.map_err(from_pg)?) else {
                return Ok(Answer::Granted(Got {
                    hold: PgHold::Lock { key, shared },
                    token,
                    valid_from,
                }));
            };
            // Given back already; sleep on the server (an idle session would end at its
            // `idle_session_timeout`).
            let expires = Instant::now() + left;
            let wake = deadline.map_or(expires, |deadline| deadline.min(expires));
            let nap = wake.saturating_duration_since(Instant::now());
            let secs = nap.as_secs_f64();
            let params: [&(dyn ToSql + Sync); 1] = [&secs];
            let slept = pipelined(conn, [(sql::SLEEP, &params[..])]);
            let [slept] = timed(nap + self.timeout, "acquire", slept).await?;
            slept.map_err(from_pg)?;
            if wake < expires {
                return Ok(Answer::Busy(Some(expires - wake)));
            }
        }
    }

    /// Runs `wait` — a statement that blocks on the server — with `lock_timeout` set to what
    /// is left until `deadline` (none without one), both in one round trip. The client's
    /// own bound is the deadline plus the operation timeout.
    async fn bounded_wait<T>(
        &self,
        conn: &Conn,
        deadline: Option<Instant>,
        wait: impl Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<Result<T, tokio_postgres::Error>> {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let millis = left.map_or(0, |left| left.as_millis().max(1));
        let millis = millis.to_string();
        let params: [(&(dyn ToSql + Sync), Type); 1] = [(&millis, Type::TEXT)];
        let set = conn.client.query_typed(sql::SET_LOCK_TIMEOUT, &params);
        let both = async {
            let (set, waited) = tokio::join!(set, wait);
            set?;
            Ok(waited)
        };
        let answer = match left {
            Some(left) => timed_raw(left + self.timeout, "acquire", both).await?,
            None => both.await,
        };
        answer.map_err(from_pg)
    }

    /// Whether this connection's session holds `key` (after a `lock_timeout`).
    async fn holds(&self, conn: &Conn, key: i64) -> Result<bool> {
        let (high, low) = keys::to_halves(key);
        let rows = timed(
            self.timeout,
            "acquire",
            query(conn, sql::IS_GRANTED, &[high, low]),
        )
        .await?;
        Ok(rows.first().is_some_and(|row| row.get::<_, bool>(0)))
    }

    /// A new token for `key`, held already.
    async fn bump(&self, conn: &Conn, key: i64) -> Result<i64> {
        let rows = timed(self.timeout, "acquire", query(conn, &self.sql.bump, &[key])).await?;
        rows.first()
            .map(|row| row.get::<_, i64>(0))
            .ok_or_else(|| Error::refused("postgres", "the fence table returned no token"))
    }

    /// One attempt at a permit without waiting: the queue key if free, then a free slot. The
    /// inner error is a refusal (another limit) that left the connection as it was.
    async fn try_permit(
        &self,
        conn_use: &mut ConnUse,
        req: &AcquireRequest,
        limit: u32,
    ) -> Result<Result<Option<Got>>> {
        let queue = keys::queue_key(&req.key);
        let semaphore = keys::advisory_key(&req.key);
        let conn = Arc::clone(&conn_use.conn);
        let (head, stored) = tokio::join!(
            timed(self.timeout, "acquire", query(&conn, sql::TRY, &[queue])),
            timed(
                self.timeout,
                "acquire",
                query(&conn, &self.sql.stored_limit, &[semaphore])
            ),
        );
        if !head?.first().is_some_and(|row| row.get::<_, bool>(0)) {
            return Ok(Ok(None));
        }
        let stored = stored?.first().and_then(|row| row.get::<_, Option<i32>>(0));
        match self.take_slot(conn_use, req, limit, stored).await {
            Ok(Some(got)) => Ok(Ok(Some(got))),
            Ok(None) => {
                self.leave_queue(conn_use, queue).await?;
                Ok(Ok(None))
            }
            Err(mismatch @ Error::PermitLimitMismatch { .. }) => {
                self.leave_queue(conn_use, queue).await?;
                Ok(Err(mismatch))
            }
            Err(error) => Err(error),
        }
    }

    /// Waits for a permit until `deadline`: first in the semaphore's queue (PostgreSQL's FIFO
    /// queue on the queue key, so permits go in arrival order), then, as its head, for a free
    /// slot — woken by the `NOTIFY` of a release, or after half a ttl (a holder that crashed
    /// frees its slot without notifying).
    async fn wait_permit(
        &self,
        conn_use: &mut ConnUse,
        req: &AcquireRequest,
        limit: u32,
        deadline: Option<Instant>,
    ) -> Result<Option<Got>> {
        let queue = keys::queue_key(&req.key);
        let semaphore = keys::advisory_key(&req.key);
        let conn = Arc::clone(&conn_use.conn);
        let listen = format!("LISTEN {}", keys::channel(&req.key));
        let (listened, head) = tokio::join!(
            timed(self.timeout, "acquire", conn.client.batch_execute(&listen)),
            self.bounded_wait(&conn, deadline, query(&conn, sql::LOCK, &[queue])),
        );
        listened?;
        match head? {
            Ok(_) => {}
            Err(error) if is_lock_timeout(&error) => {
                if !self.holds(&conn, queue).await? {
                    return Ok(None);
                }
            }
            Err(error) => return Err(from_pg(error)),
        }
        let got = loop {
            let stored = timed(
                self.timeout,
                "acquire",
                query(&conn, &self.sql.stored_limit, &[semaphore]),
            )
            .await?
            .first()
            .and_then(|row| row.get::<_, Option<i32>>(0));
            if let Some(got) = self.take_slot(conn_use, req, limit, stored).await? {
                break Some(got);
            }
            let recheck = req.ttl / 2;
            let wake = match deadline {
                Some(deadline) if deadline <= Instant::now() => break None,
                Some(deadline) => recheck.min(deadline - Instant::now()),
                None => recheck,
            };
            tokio::select! {
                () = conn.notified.notified() => {}
                () = tokio::time::sleep(wake) => {}
                () = conn.lost() => return Err(Error::unavailable("postgres", conn.lost_reason())),
            }
        };
        if got.is_none() {
            self.leave_queue(conn_use, queue).await?;
        }
        timed(
            self.timeout,
            "acquire",
            conn.client.batch_execute("UNLISTEN *"),
        )
        .await?;
        Ok(got)
    }

    /// As the head of the semaphore's queue: checks the stored limit, then takes the first
    /// free slot not held on this connection already, in one statement that also holds the
    /// limit key shared, stores the limit, bumps the token and leaves the queue.
    async fn take_slot(
        &self,
        conn_use: &mut ConnUse,
        req: &AcquireRequest,
        limit: u32,
        stored: Option<i32>,
    ) -> Result<Option<Got>> {
        let conn = Arc::clone(&conn_use.conn);
        if let Some(stored) = stored.and_then(|s| u32::try_from(s).ok())
            && stored != limit
            && self.has_holders(&conn, &req.key, stored).await?
        {
            return Err(Error::PermitLimitMismatch {
                key: req.key.to_string(),
                stored,
                requested: limit,
            });
        }
        let candidates: Vec<i64> = keys::slot_keys(&req.key, limit)
            .into_iter()
            .filter(|slot| !conn.has(*slot))
            .collect();
        if candidates.is_empty() {
            return Ok(None);
        }
        let semaphore = keys::advisory_key(&req.key);
        let (queue, limit_key) = (keys::queue_key(&req.key), keys::limit_key(&req.key, limit));
        let limit_i32 = i32::try_from(limit).unwrap_or(i32::MAX);
        let sent = Instant::now();
        let rows = timed(
            self.timeout,
            "acquire",
            conn.client.query_typed(
                &self.sql.take_slot,
                &[
                    (&semaphore as &(dyn ToSql + Sync), Type::INT8),
                    (&candidates, Type::INT8_ARRAY),
                    (&limit_i32, Type::INT4),
                    (&limit_key, Type::INT8),
                    (&queue, Type::INT8),
                ],
            ),
        )
        .await?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let slot: i64 = row.get(1);
        conn_use.unreserve(queue); // unlocked by the statement
        conn_use.reserve(slot);
        Ok(Some(Got {
            hold: PgHold::Permit {
                slot,
                limit_key,
                channel: keys::channel(&req.key),
            },
            token: Some(row.get(0)),
            valid_from: sent,
        }))
    }

    /// Whether any permit of semaphore `key` with limit `stored` is held: each holds its
    /// limit key shared, so an exclusive try fails while one does.
    async fn has_holders(&self, conn: &Conn, key: &str, stored: u32) -> Result<bool> {
        let limit_key = keys::limit_key(key, stored);
        if conn.has(limit_key) {
            return Ok(true); // held here, by another permit of this Locker
        }
        let rows = timed(self.timeout, "acquire", query(conn, sql::TRY, &[limit_key])).await?;
        if !rows.first().is_some_and(|row| row.get::<_, bool>(0)) {
            return Ok(true);
        }
        timed(
            self.timeout,
            "acquire",
            query(conn, sql::UNLOCK, &[limit_key]),
        )
        .await?;
        Ok(false)
    }

    /// Gives the queue key back (the head leaves without a permit).
    async fn leave_queue(&self, conn_use: &mut ConnUse, queue: i64) -> Result<()> {
        timed(
            self.timeout,
            "acquire",
            query(&conn_use.conn, sql::UNLOCK, &[queue]),
        )
        .await?;
        conn_use.unreserve(queue);
        Ok(())
    }
}

/// The key an acquire reserves first on its connection: the lock's, or a semaphore's queue.
fn first_key(req: &AcquireRequest) -> i64 {
    match req.mode {
        LockMode::Permit { .. } => keys::queue_key(&req.key),
        _ => keys::advisory_key(&req.key),
    }
}

/// One statement and its parameters.
pub(super) type Step<'a> = (&'a str, &'a [&'a (dyn ToSql + Sync)]);

/// Sends `steps` in one round trip, in this order: the server runs each (and commits it, as
/// its own transaction) before it starts the next, and each answers for itself. All are
/// prepared first (each at its first use on the connection), so one not prepared yet cannot
/// let a later one overtake it. The outer error is a preparation's: nothing was sent.
pub(super) async fn pipelined<const N: usize>(
    conn: &Conn,
    steps: [Step<'_>; N],
) -> Result<[Result<Vec<Row>, tokio_postgres::Error>; N], tokio_postgres::Error> {
    let mut prepared = Vec::with_capacity(N);
    for (statement, _) in &steps {
        prepared.push(conn.prepared(statement).await?);
    }
    // `join_all` polls in order, and a query is sent at its first poll.
    let answers = futures_util::future::join_all(
        prepared
            .iter()
            .zip(&steps)
            .map(|(statement, (_, params))| conn.client.query(statement, params)),
    )
    .await;
    Ok(answers
        .try_into()
        .unwrap_or_else(|_| unreachable!("one answer per step")))
}

/// The time left on a key's kept record, from the rows of [`Statements::kept`](sql::Statements)
/// (none: no live record).
fn kept_left(rows: &[Row]) -> Option<Duration> {
    rows.first()
        .map(|row| Duration::try_from_secs_f64(row.get::<_, f64>(2)).unwrap_or_default())
}

/// Sends `statement` with `bigint` parameters: one round trip, as a statement the connection
/// prepared at its first use (the first use pays one more).
pub(super) fn query<'a>(
    conn: &'a Conn,
    statement: &'a str,
    keys: &[i64],
) -> impl Future<Output = Result<Vec<tokio_postgres::Row>, tokio_postgres::Error>> + Send + 'a {
    let keys = keys.to_vec();
    async move {
        let prepared = conn.prepared(statement).await?;
        let params: Vec<&(dyn ToSql + Sync)> =
            keys.iter().map(|key| key as &(dyn ToSql + Sync)).collect();
        conn.client.query(&prepared, &params).await
    }
}
