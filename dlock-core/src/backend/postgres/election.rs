//! Leader election on PostgreSQL: a campaign is a fenced exclusive advisory lock, and the
//! key's fence row records who leads it.
//!
//! * **The record.** Right after a campaign's grant, on the same session, one `UPDATE` of the
//!   key's fence row writes `leader` (the candidate's value), `leader_pid` (the session's
//!   backend pid), `leader_token` (the grant's token: the term) and `leader_ttl_ms`, but only
//!   if this session holds the key exclusively and the row's token is the grant's — and
//!   notifies the key's channel (`dlock_<key hex>`) on commit. A record is shown only while
//!   its token is the row's latest and its pid holds the key, so a leader that is gone
//!   (its session ended: the server freed the lock) shows as nobody.
//! * **Proclaim** rewrites the value with the same checks, plus the record's pid and token
//!   being the grant's, and notifies.
//! * **Release** unlocks and notifies in one statement. A session that ends without a word
//!   (a crash) notifies nobody: the record's ttl tells observers when to look again — a
//!   leader's session is ended by the server within its `idle_session_timeout` (the ttl).
//! * **Observers** each hold a plain connection of their own that `LISTEN`s on the channel;
//!   dropping the observer closes it (the server forgets the `LISTEN` with the session).
//!
//! Any SQL client can read the leader:
//!
//! ```sql
//! SELECT leader, leader_token FROM dlock_fence WHERE lock_key = <advisory key> AND leader_token = token;
//! ```

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio_postgres::AsyncMessage;
use tokio_postgres::types::Type;

use super::errors::{from_pg, timed};
use super::{Inner, PgGrant, keys};
use crate::backend::HolderChanges;
use crate::lease::{AcquireOutcome, AcquireRequest, Lease};
use crate::{Error, Result};

/// The leader recorded in a key's fence row.
#[derive(Debug, Clone)]
pub(super) struct RecordedLeader {
    pub(super) value: String,
    pub(super) pid: i32,
    pub(super) term: u64,
    pub(super) ttl: Duration,
}

impl Inner {
    /// Records the campaign `req`, just granted as `lease`, as the leader (and notifies its
    /// observers). A grant that cannot be shown is given back (the lease's drop unlocks it).
    pub(super) async fn show_leader(
        self: &Arc<Self>,
        req: &AcquireRequest,
        lease: Lease,
    ) -> Result<AcquireOutcome> {
        let value = req.value.as_deref().unwrap_or_default();
        // Retryable: the session behind the grant is gone, or went as it was recorded.
        let not_shown =
            || Error::unavailable("postgres", "a campaign's grant could not be recorded");
        let (Some(grant), Some(token)) = (lease.extension::<PgGrant>(), lease.fencing_token) else {
            return Err(not_shown());
        };
        let conn = grant.live_conn(self, &lease.owner).ok_or_else(not_shown)?;
        let key = keys::advisory_key(&req.key);
        let token = i64::try_from(token).map_err(|_| not_shown())?;
        let ttl = i64::try_from(req.ttl.as_millis()).unwrap_or(i64::MAX);
        let channel = keys::channel(&req.key);
        let rows = timed(
            self.timeout,
            "acquire",
            conn.client.query_typed(
                &self.sql.show_leader,
                &[
                    (&key, Type::INT8),
                    (&value, Type::TEXT),
                    (&token, Type::INT8),
                    (&ttl, Type::INT8),
                    (&channel, Type::TEXT),
                ],
            ),
        )
        .await?;
        if rows.is_empty() {
            return Err(not_shown());
        }
        Ok(AcquireOutcome::Acquired(lease))
    }

    /// Shows `value` as the leader's if `lease` still leads; whether it does.
    pub(super) async fn proclaim(self: &Arc<Self>, lease: &Lease, value: &str) -> Result<bool> {
        let (Some(grant), Some(token)) = (lease.extension::<PgGrant>(), lease.fencing_token) else {
            return Ok(false);
        };
        let Some(conn) = grant.live_conn(self, &lease.owner) else {
            return Ok(false);
        };
        let key = keys::advisory_key(&lease.key);
        let token = i64::try_from(token).unwrap_or(i64::MAX);
        let channel = keys::channel(&lease.key);
        let rows = timed(
            self.timeout,
            "proclaim",
            conn.client.query_typed(
                &self.sql.proclaim,
                &[
                    (&key, Type::INT8),
                    (&value, Type::TEXT),
                    (&token, Type::INT8),
                    (&channel, Type::TEXT),
                ],
            ),
        )
        .await?;
        Ok(!rows.is_empty())
    }

    /// The leader in a row of [`Statements::leader`](super::sql::Statements::leader).
    pub(super) fn recorded_leader(row: &tokio_postgres::Row) -> Option<RecordedLeader> {
        let (value, pid, term, ttl): (Option<String>, Option<i32>, Option<i64>, Option<i64>) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        Some(RecordedLeader {
            value: value?,
            pid: pid?,
            term: u64::try_from(term?).ok()?,
            ttl: Duration::from_millis(u64::try_from(ttl?).ok()?),
        })
    }

    /// A connection of its own, listening on the channel of the election `key`: yields once
    /// per notification; an error, then ends, when the connection fails. Dropping the stream
    /// closes the connection.
    pub(super) async fn listen(&self, key: &str) -> Result<HolderChanges> {
        // A dead path ends the connection after about three operation timeouts.
        let (client, mut connection) = self
            .conns
            .url()
            .open_listener(self.timeout * 3, self.timeout)
            .await?;
        // One pending change is enough: the observer reads the whole state after it.
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        // The connection's messages (notifications among them) come only by polling it.
        tokio::spawn(async move {
            loop {
                let message = tokio::select! {
                    message = std::future::poll_fn(|cx| connection.poll_message(cx)) => message,
                    () = tx.closed() => return, // the observer is gone: close the socket
                };
                match message {
                    Some(Ok(AsyncMessage::Notification(_))) => {
                        let _ = tx.try_send(Ok(()));
                    }
                    Some(Ok(_)) => {}
                    Some(Err(error)) => {
                        let _ = tx.send(Err(from_pg(error))).await;
                        return;
                    }
                    None => {
                        let closed =
                            Error::unavailable("postgres", "the observer's connection closed");
                        let _ = tx.send(Err(closed)).await;
                        return;
                    }
                }
            }
        });
        let listen = format!("LISTEN {}", keys::channel(key));
        timed(self.timeout, "observe", client.batch_execute(&listen)).await?;
        let changes = tokio_stream_of(rx).map(move |change| {
            let _ = &client; // the connection lives as long as the stream
            change
        });
        Ok(Box::pin(changes))
    }
}

/// `rx` as a stream.
fn tokio_stream_of<T: Send + 'static>(
    rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> + Send {
    futures_util::stream::unfold(rx, |mut rx| async move {
        let item = rx.recv().await?;
        Some((item, rx))
    })
}
