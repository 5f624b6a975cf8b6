//! Readers and semaphore permits ("shares") of a Redis lock, and the writers waiting for them.
//!
//! A share is a member of a sorted set at the lock's own name, scored by its expiry in server
//! milliseconds: every share has its own ttl, so a crashed reader frees its share at its ttl
//! even while other readers renew theirs, and the set expires with its newest member. A
//! semaphore's limit is stored beside its set (`{K}:limit`) and checked by every acquire.
//! Because the set lives at the lock's name, a writer's `SET NX` fails while shares hold the
//! lock: the exclusive lock keeps its one-command protocol.
//!
//! No starvation: a writer that waits — for shares or for another writer — is in the writers'
//! line (`{K}:writers`, scored by its place, server µs when it joined; on a RedLock master
//! only writers waiting for shares are), and a reader or permit that first asked after it
//! waits for it. Its place lives for the writer's ttl and is renewed by each of its attempts,
//! so the writer tries again at half its ttl at the latest; a writer that gives up or is
//! cancelled withdraws it (the place of a crashed one expires).
//!
//! No polling: a waiter for shares sets the waited-for mark (`{K}:waited`), and while it lives
//! the release of the last reader, or of any permit, publishes on the lock's release channel.
//! A share that waits for a writer marks the writer's lock as waited for, as a waiting writer
//! does. Renewals of many shares go in one script, like writers'.

use std::time::Duration;

use redis::Value;

use super::errors;
use super::keys::{self, RedisName};
use super::scripts;
use super::{Attempt, RedisBackend, millis};
use crate::lease::{AcquireRequest, Lease};
use crate::{Error, LockMode, Result};

impl RedisBackend {
    /// One attempt to take a share for `req` (a reader or a permit). `first_asked` is when
    /// this caller first asked, in server microseconds: 0 before its first attempt, which
    /// sets it; writers that joined the line before it go first.
    ///
    /// # Errors
    ///
    /// [`Error::PermitLimitMismatch`] when the semaphore holds permits of another limit;
    /// [`Error::Refused`] when the lock's keys hold values of another application.
    pub(super) async fn attempt_share(
        &self,
        req: &AcquireRequest,
        queued: bool,
        first_asked: &mut u64,
    ) -> Result<Attempt> {
        let key = &*req.key;
        let limit = match req.mode {
            LockMode::Permit { limit } => limit,
            _ => 0,
        };
        let flag = |on: bool| if on { "1" } else { "0" };
        let reply: Value = self
            .node
            .run("acquire", &scripts::ACQUIRE_SHARED, 6, |cmd| {
                keys::acquire_keys(cmd, key);
                cmd.arg(req.owner.as_str())
                    .arg(millis(req.ttl))
                    .arg(flag(queued))
                    .arg(flag(req.fencing))
                    .arg(limit)
                    .arg(*first_asked);
            })
            .await?;
        let Value::Array(items) = reply else {
            return Err(errors::foreign_key(key, reply));
        };
        match items.as_slice() {
            [Value::Int(1), Value::Int(token), Value::Int(asked)] => {
                *first_asked = asked.unsigned_abs();
                Ok(Attempt::Granted(
                    req.fencing.then_some(token.unsigned_abs()),
                ))
            }
            [Value::Int(0), Value::Int(wait), Value::Int(asked)] => {
                *first_asked = asked.unsigned_abs();
                Ok(Attempt::Held(
                    u64::try_from(*wait).ok().map(Duration::from_millis),
                ))
            }
            [Value::Int(2), Value::Int(stored)] => Err(Error::PermitLimitMismatch {
                key: key.to_owned(),
                stored: u32::try_from(*stored).unwrap_or(u32::MAX),
                requested: limit,
            }),
            _ => Err(Error::refused(
                "redis",
                "the read/permit acquire script returned an unexpected reply",
            )),
        }
    }

    /// Gives up `lease`'s share, publishing the release if someone waits for it; how many
    /// subscribers heard it, or -1 if the share was not held (any more).
    pub(super) async fn release_share(&self, lease: &Lease) -> Result<i64> {
        let key = &*lease.key;
        self.node
            .run("release", &scripts::RELEASE_SHARED, 3, |cmd| {
                cmd.arg(RedisName::lock(key))
                    .arg(RedisName::limit(key))
                    .arg(RedisName::waited_for(key))
                    .arg(lease.owner.as_str());
            })
            .await
    }

    /// One renewal script over the shares `leases` (in one slot on Cluster: called with one).
    pub(super) async fn renew_shares(&self, leases: &[&Lease]) -> Result<Vec<i64>> {
        self.node
            .run("renew", &scripts::RENEW_SHARED, leases.len() * 2, |cmd| {
                for lease in leases {
                    cmd.arg(RedisName::lock(&lease.key));
                }
                for lease in leases {
                    cmd.arg(RedisName::limit(&lease.key));
                }
                for lease in leases {
                    cmd.arg(lease.owner.as_str());
                }
                for lease in leases {
                    cmd.arg(millis(lease.ttl));
                }
            })
            .await
    }

    /// Takes the writer `owner` out of the writers waiting for the shares of `key`.
    pub(super) async fn withdraw_writer(&self, key: &str, owner: &str) -> Result<()> {
        let _listeners: i64 = self
            .node
            .run("withdraw", &scripts::WITHDRAW_WRITER, 4, |cmd| {
                fill_withdraw(cmd, key, owner);
            })
            .await?;
        Ok(())
    }
}

fn fill_withdraw(cmd: &mut redis::Cmd, key: &str, owner: &str) {
    keys::line_keys(cmd, key);
    cmd.arg(owner).arg(millis(super::node::CLAIM_WINDOW));
}

/// A writer's place in the server's line (or, on a RedLock master, among the writers waiting
/// for shares), while it waits: withdrawn when the writer gives up, and in the background when its acquire is dropped (cancelled, or failed
/// with an error — also after an attempt whose answer never came, which may have marked it). Readers and permits behind it then need not wait for its mark to expire.
pub(super) struct WriterMark<'a> {
    backend: &'a RedisBackend,
    req: &'a AcquireRequest,
    marked: bool,
}

impl<'a> WriterMark<'a> {
    /// Not marked yet.
    pub(super) const fn new(backend: &'a RedisBackend, req: &'a AcquireRequest) -> Self {
        Self {
            backend,
            req,
            marked: false,
        }
    }

    /// Sends a queued attempt of the writer, which may mark it waiting: until its answer says
    /// otherwise the mark counts as made (a reply that never comes may follow a mark that was).
    pub(super) async fn attempt(&mut self) -> Result<Attempt> {
        let marked_before = self.marked;
        self.marked = true;
        let attempt = self.backend.node.attempt_scripted(self.req, true).await?;
        self.marked = match attempt {
            Attempt::Granted(_) => false, // the grant removed the mark
            Attempt::WriterWaits(_) => true,
            Attempt::Held(_) | Attempt::Taken => marked_before,
        };
        Ok(attempt)
    }

    /// The writer gives up: withdraws its mark now, if it left one. A failure is only
    /// traced: the mark expires at the writer's ttl anyway. (If this future is dropped
    /// midway, the drop withdraws again: withdrawing is idempotent.)
    pub(super) async fn withdraw(&mut self) {
        if self.marked {
            let outcome = self
                .backend
                .withdraw_writer(&self.req.key, self.req.owner.as_str())
                .await;
            self.marked = false;
            if let Err(error) = outcome {
                tracing::debug!(key = %self.req.key, %error, "dlock: redis could not withdraw a waiting writer");
            }
        }
    }
}

impl Drop for WriterMark<'_> {
    fn drop(&mut self) {
        if !self.marked {
            return;
        }
        let mut conn = self.backend.node.conn.clone();
        let timeout = self.backend.node.timeout;
        let key = self.req.key.clone();
        let owner = self.req.owner.as_str().to_owned();
        self.backend.waiters.spawn(async move {
            // EVAL: cancellation is rare, and this task cannot retry on NOSCRIPT cheaply.
            let mut cmd = scripts::WITHDRAW_WRITER.eval(4);
            fill_withdraw(&mut cmd, &key, &owner);
            let outcome = tokio::time::timeout(timeout, cmd.query_async::<i64>(&mut conn)).await;
            tracing::trace!(%key, ?outcome, "dlock: redis withdrew a cancelled waiting writer");
        });
    }
}
