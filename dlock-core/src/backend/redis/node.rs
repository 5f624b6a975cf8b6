//! One Redis server or Cluster as the lock protocol sees it: a command connection, the
//! operation timeout, and the exclusive lock's round trips (the attempt, the owner-checked
//! release, the batched renewal). The Redis backend is one node and its waiters; RedLock is
//! several nodes and one queue of waiters.

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, FromRedisValue, ServerErrorKind, Value};

use super::conn::{self, Conn};
use super::errors;
use super::keys::{self, RedisName};
use super::millis;
use super::scripts::{self, Lua};
use crate::error::within;
use crate::lease::{AcquireRequest, Lease};
use crate::{Error, HolderInfo, Kept, LockInfo, LockMode, Result, WaiterInfo};

/// What one acquire attempt found.
pub(crate) enum Attempt {
    /// Granted, with the fencing token when the request asked for one.
    Granted(Option<u64>),
    /// Held, with the holder's remaining ttl if it has one.
    Held(Option<Duration>),
    /// Held; the fast path does not ask for how long.
    Taken,
    /// Held, and this queued writer is in the server's line (or, on a RedLock master, marked
    /// waiting for readers or permits): try again by then at the latest.
    WriterWaits(Option<Duration>),
}

/// What one attempt at a whole lock set came to.
#[derive(Debug)]
pub(crate) enum AllAttempt {
    /// Every lock taken: one fencing token per request that asked for one.
    Granted(Vec<Option<u64>>),
    /// Nothing taken: the request at this index found its lock held, for this much longer
    /// if it has an expiry.
    Held(usize, Option<Duration>),
}

/// A command connection and the operation timeout bounding each of its round trips.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub(super) conn: Conn,
    pub(super) timeout: Duration,
    /// Writers wait in a line on the server, served first come first served (a single server
    /// or Cluster); `false` on a RedLock master, whose waiters queue in their Lockers.
    fair: bool,
    /// The plain layout (the `plain` module): the exclusive lock's round trips are its own.
    pub(crate) plain: bool,
}

/// How long a writer handed the lock from the line has to claim it before it loses its place
/// (a vanished waiter holds the line up this long; the writer after it asks again then).
pub(crate) const CLAIM_WINDOW: Duration = Duration::from_secs(1);

impl Node {
    /// A single server or Cluster: writers wait in the server's line.
    pub(crate) const fn new(conn: Conn, timeout: Duration) -> Self {
        Self {
            conn,
            timeout,
            fair: true,
            plain: false,
        }
    }

    /// A RedLock master: its waiters queue in their Locker (the masters' lines could
    /// disagree on who is first).
    #[cfg(feature = "redlock")]
    pub(crate) const fn master(conn: Conn, timeout: Duration) -> Self {
        Self {
            conn,
            timeout,
            fair: false,
            plain: false,
        }
    }

    /// This node in `layout`.
    pub(crate) const fn with_layout(mut self, layout: super::Layout) -> Self {
        self.plain = matches!(layout, super::Layout::Plain);
        self
    }

    /// Bounds `round_trip` by the operation timeout, leaving its Redis error to the caller.
    ///
    /// A single server's connection bounds every request itself (its response timeout, and
    /// one reconnect attempt bounded by the connect timeout — both the operation timeout), so
    /// only Cluster connections, which retry on their own, get a timer here: one timer less
    /// per lock operation on the common path.
    pub(crate) async fn within_timeout<T>(
        &self,
        operation: &'static str,
        round_trip: impl std::future::Future<Output = T>,
    ) -> Result<T> {
        if self.conn.bounds_itself() {
            return Ok(round_trip.await);
        }
        // Boxed: the timer would make every call's future larger, single server too.
        Box::pin(within("redis", operation, self.timeout, round_trip)).await
    }

    /// What the plain layout cannot do (its capabilities say so: the core never asks).
    const fn refuse_in_plain(&self, operation: &'static str) -> Result<()> {
        if self.plain {
            return Err(Error::Unsupported {
                backend: "redis (layout=plain)",
                operation,
            });
        }
        Ok(())
    }

    pub(crate) fn timed_out(&self, operation: &'static str) -> Error {
        Error::timeout("redis", operation, self.timeout)
    }

    /// A Redis error as dlock's: the client's own timeouts become [`Error::Timeout`].
    pub(crate) fn failed(&self, operation: &'static str, error: redis::RedisError) -> Error {
        if error.is_timeout() {
            self.timed_out(operation)
        } else {
            errors::from_redis(error)
        }
    }

    /// Runs `lua` with the keys and arguments `fill` appends (the first `numkeys` of them
    /// keys): `EVALSHA`, then `EVAL` if the server does not know the script (a restarted or
    /// new server). Each round trip is bounded by the operation timeout.
    pub(super) async fn run<T: FromRedisValue>(
        &self,
        operation: &'static str,
        lua: &Lua,
        numkeys: usize,
        fill: impl Fn(&mut Cmd),
    ) -> Result<T> {
        let mut conn = self.conn.clone();
        let mut cmd = lua.evalsha(numkeys);
        fill(&mut cmd);
        let reply = match self
            .within_timeout(operation, cmd.query_async(&mut conn))
            .await?
        {
            Err(error) if error.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                // Boxed: once per script and server, and it would make every call's
                // future larger.
                let mut cmd = lua.eval(numkeys);
                fill(&mut cmd);
                Box::pin(self.within_timeout(operation, cmd.query_async(&mut conn))).await?
            }
            reply => reply,
        };
        reply.map_err(|e| self.failed(operation, e))
    }

    /// One acquire attempt: `SET NX PX`, and when the request asks for a fencing token,
    /// `INCR` of the fence pipelined with it in the same round trip — native commands, less
    /// than half the server time of the same work in Lua. When the lock is taken it does not
    /// ask for how long: a waiter's next attempt is the script, which does.
    ///
    /// Not a transaction, and it need not be: the two run back to back on one connection,
    /// and a grant can only go to someone else between our `SET` and our `INCR` if our lock
    /// expired in between — then our reply comes more than a ttl after we sent the request,
    /// past the local deadline, and the core drops the grant without using its token. A failed
    /// attempt burns a token, which keeps tokens strictly increasing per grant. Anything
    /// unusual (a fence that is not a counter) is settled by the script.
    pub(crate) async fn attempt(&self, req: &AcquireRequest) -> Result<Attempt> {
        if self.plain {
            return self.attempt_plain(req).await;
        }
        if req.value.is_some() {
            // A campaign: the script also records the leader and tells observers.
            return self.attempt_scripted(req, false).await;
        }
        let key = &*req.key;
        let owner = req.owner.as_str();
        let mut set = conn::command("SET");
        set.arg(RedisName::lock(key))
            .arg(owner)
            .arg("NX")
            .arg("PX")
            .arg(millis(req.ttl));
        let mut conn = self.conn.clone();
        let granted = if req.fencing {
            let mut incr = conn::command("INCR");
            incr.arg(RedisName::fence(key));
            let mut pipeline = redis::Pipeline::new();
            pipeline.add_command(set).add_command(incr);
            // The replies as they come (`Pipeline::query_async` would first copy them into
            // a vector of its own to look for errors, then convert them).
            let reply = self
                .within_timeout("acquire", conn.req_packed_commands(&pipeline, 0, 2))
                .await?;
            let replies = match reply {
                Ok(replies) => replies,
                Err(error) if error.is_io_error() || error.is_timeout() => {
                    return Err(self.failed("acquire", error));
                }
                Err(_) => Vec::new(),
            };
            match replies.as_slice() {
                [Value::Okay, Value::Int(token)] if *token >= 1 => Some(Some(token.unsigned_abs())),
                [Value::Nil, Value::Int(_)] => return Ok(Attempt::Taken),
                _ => None,
            }
        } else {
            let reply = self
                .within_timeout("acquire", conn.req_packed_command(&set))
                .await?;
            match reply {
                Ok(Value::Okay) => Some(None),
                Ok(Value::Nil) => return Ok(Attempt::Taken),
                Err(error) if error.is_io_error() || error.is_timeout() => {
                    return Err(self.failed("acquire", error));
                }
                _ => None,
            }
        };
        match granted {
            Some(token) => Ok(Attempt::Granted(token)),
            None => {
                // Granted with a fence that is not a positive counter, or a server error
                // (e.g. the fence key holds another type): undo our SET if it happened, and
                // let the script explain.
                // Boxed, like the script: this rare branch would double the size of
                // every acquire's future otherwise.
                Box::pin(self.release_owned(owner, key)).await?;
                self.attempt_scripted(req, false).await
            }
        }
    }

    /// One acquire attempt as one script (`SET NX PX`, plus `INCR` of the fence when the
    /// request asks for a token, or the holder's `PTTL`), which also tells what is wrong with keys of another type. A queued waiter
    /// (subscribed to the release channel) that finds the lock held marks it waited for, so
    /// its release is published. Boxed: only waiters and odd cases come here.
    pub(crate) fn attempt_scripted<'a>(
        &'a self,
        req: &'a AcquireRequest,
        queued: bool,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Attempt>> + Send + 'a>> {
        Box::pin(self.attempt_scripted_inline(req, queued))
    }

    pub(crate) async fn attempt_scripted_inline(
        &self,
        req: &AcquireRequest,
        queued: bool,
    ) -> Result<Attempt> {
        if self.plain {
            return self.attempt_plain(req).await;
        }
        let key = &*req.key;
        let flag = |on: bool| if on { "1" } else { "0" };
        // A campaign's grant also writes the leader record (the seventh key, the fifth
        // argument: the candidate's value).
        let numkeys = if req.value.is_some() { 7 } else { 6 };
        let campaign = |cmd: &mut Cmd| {
            if let Some(value) = &req.value {
                cmd.arg(&**value);
            }
        };
        let reply: Value = if queued && self.fair {
            self.run("acquire", &scripts::ACQUIRE_FAIR, numkeys, |cmd| {
                keys::acquire_keys(cmd, key);
                if req.value.is_some() {
                    cmd.arg(RedisName::leader(key));
                }
                cmd.arg(req.owner.as_str())
                    .arg(millis(req.ttl))
                    .arg(flag(req.fencing))
                    .arg(millis(CLAIM_WINDOW));
                campaign(cmd);
            })
            .await?
        } else {
            self.run("acquire", &scripts::ACQUIRE, numkeys, |cmd| {
                keys::acquire_keys(cmd, key);
                if req.value.is_some() {
                    cmd.arg(RedisName::leader(key));
                }
                cmd.arg(req.owner.as_str())
                    .arg(millis(req.ttl))
                    .arg(flag(queued))
                    .arg(flag(req.fencing));
                campaign(cmd);
            })
            .await?
        };
        let held_for = |negative: i64| Some(Duration::from_millis((negative + 1).unsigned_abs()));
        match reply {
            Value::Int(token) if token >= 1 => Ok(Attempt::Granted(
                req.fencing.then_some(token.unsigned_abs()),
            )),
            Value::Int(0) => Ok(Attempt::Held(None)),
            Value::Int(negative) => Ok(Attempt::Held(held_for(negative))),
            Value::Array(items) => match items.as_slice() {
                [Value::Int(negative), Value::Int(1)] if *negative < 0 => {
                    Ok(Attempt::WriterWaits(held_for(*negative)))
                }
                _ => Err(Error::refused(
                    "redis",
                    "the acquire script returned an unexpected reply",
                )),
            },
            other => Err(errors::foreign_key(key, other)),
        }
    }

    /// One attempt at every lock of `requests` together ([`scripts::ACQUIRE_ALL`]): all
    /// taken, or none. The locks' names must share a slot (always, on a single server).
    pub(crate) async fn attempt_all(&self, requests: &[AcquireRequest]) -> Result<AllAttempt> {
        self.refuse_in_plain("lock_all in one step")?;
        let flag = |on: bool| if on { "1" } else { "0" };
        let reply: Value = self
            .run(
                "acquire",
                &scripts::ACQUIRE_ALL,
                2 * requests.len(),
                |cmd| {
                    for req in requests {
                        cmd.arg(RedisName::lock(&req.key))
                            .arg(RedisName::fence(&req.key));
                    }
                    for req in requests {
                        cmd.arg(req.owner.as_str())
                            .arg(millis(req.ttl))
                            .arg(flag(req.fencing));
                    }
                },
            )
            .await?;
        let unexpected =
            || Error::refused("redis", "the lock set script returned an unexpected reply");
        match reply {
            Value::Array(items) => match items.as_slice() {
                [Value::Int(0), tokens @ ..] if tokens.len() == requests.len() => tokens
                    .iter()
                    .zip(requests)
                    .map(|(token, req)| match token {
                        Value::Int(token) => Ok(req.fencing.then_some(token.unsigned_abs())),
                        _ => Err(unexpected()),
                    })
                    .collect::<Result<_>>()
                    .map(AllAttempt::Granted),
                [Value::Int(at), Value::Int(pttl)] if *at >= 1 => {
                    let index = usize::try_from(*at - 1).map_err(|_| unexpected())?;
                    let left = u64::try_from(*pttl).ok().map(Duration::from_millis);
                    Ok(AllAttempt::Held(index, left))
                }
                // The fence of the `at`th lock holds another type: named by that lock.
                [Value::Int(at), found] if *at <= -1 => {
                    let index = usize::try_from(-1 - *at).map_err(|_| unexpected())?;
                    let req = requests.get(index).ok_or_else(unexpected)?;
                    Err(errors::foreign_key(&req.key, found.clone()))
                }
                _ => Err(unexpected()),
            },
            other => Err(errors::foreign_key(&requests[0].key, other)),
        }
    }

    /// Owner-checked deletes of every lease's lock in one script ([`scripts::RELEASE_ALL`]),
    /// each lock waited for handed to the first writer in its line: per lease, how many
    /// subscribers heard its hand-off, or -1 if it was not held. A single server only.
    pub(crate) async fn release_all(&self, leases: &[Lease]) -> Result<Vec<i64>> {
        self.refuse_in_plain("release of a lock set in one step")?;
        self.run("release", &scripts::RELEASE_ALL, 4 * leases.len(), |cmd| {
            for lease in leases {
                keys::line_keys(cmd, &lease.key);
            }
            for lease in leases {
                cmd.arg(lease.owner.as_str());
            }
            cmd.arg(millis(CLAIM_WINDOW));
        })
        .await
    }

    /// Owner-checked delete; a lock waited for is handed to the first writer in line (a
    /// RedLock master: its release is published). How many subscribers heard it, or -1 if
    /// `owner` did not hold the lock. An uncontended release gets what the raw
    /// compare-and-delete gets.
    pub(crate) async fn release_owned(&self, owner: &str, key: &str) -> Result<i64> {
        if self.plain {
            self.release_plain(owner, key).await
        } else if self.fair {
            self.run("release", &scripts::RELEASE_FAIR, 4, |cmd| {
                keys::line_keys(cmd, key);
                cmd.arg(owner).arg(millis(CLAIM_WINDOW));
            })
            .await
        } else {
            self.run("release", &scripts::RELEASE, 1, |cmd| {
                cmd.arg(RedisName::lock(key)).arg(owner);
            })
            .await
        }
    }

    /// Owner-checked: replaces `owner`'s grant of `key` by a record that keeps the lock for
    /// `keep` (expiring by the server's clock), marked `kept`; 0, or -1 if `owner` did not
    /// hold the lock.
    pub(crate) async fn release_keeping(
        &self,
        owner: &str,
        key: &str,
        keep: Duration,
        kept: Kept,
    ) -> Result<i64> {
        self.refuse_in_plain("hold_at_least")?;
        self.run("release", &scripts::RELEASE_KEEPING, 1, |cmd| {
            cmd.arg(RedisName::lock(key))
                .arg(owner)
                .arg(millis(keep))
                .arg(kept.as_str());
        })
        .await
    }

    /// One renewal script over the writers' locks `leases` (in one slot on Cluster: called
    /// with one); 1 or 0 per lease.
    pub(crate) async fn renew_batch(&self, leases: &[&Lease]) -> Result<Vec<i64>> {
        if self.plain {
            return self.renew_plain(leases).await;
        }
        self.run("renew", &scripts::RENEW, leases.len(), |cmd| {
            for lease in leases {
                cmd.arg(RedisName::lock(&lease.key));
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

    /// Deletes the lock of `key` (and a semaphore's limit) whoever holds it; whether it
    /// existed.
    pub(crate) async fn force_release(&self, key: &str) -> Result<bool> {
        if self.plain {
            return self.force_release_plain(key).await;
        }
        let removed: i64 = self
            .run("force_release", &scripts::FORCE_RELEASE, 2, |cmd| {
                cmd.arg(RedisName::lock(key)).arg(RedisName::limit(key));
            })
            .await?;
        Ok(removed > 0)
    }

    /// Shows `value` as the leader's of the election `key` if `owner` leads it; whether it
    /// does.
    pub(crate) async fn proclaim(&self, owner: &str, key: &str, value: &str) -> Result<bool> {
        self.refuse_in_plain("proclaim")?;
        let proclaimed: i64 = self
            .run("proclaim", &scripts::PROCLAIM, 2, |cmd| {
                cmd.arg(RedisName::lock(key))
                    .arg(RedisName::leader(key))
                    .arg(owner)
                    .arg(value);
            })
            .await?;
        Ok(proclaimed == 1)
    }

    /// Who holds the lock of `key`, read in one script: a writer, or the readers or permits
    /// that have not expired, and the writers in line (listed on a single server or Cluster;
    /// a RedLock master's waiters queue in their Lockers).
    ///
    /// # Errors
    ///
    /// [`Error::Refused`] when the lock's name holds another application's value.
    pub(crate) async fn inspect(&self, key: &str) -> Result<LockInfo> {
        if self.plain {
            return self.inspect_plain(key).await;
        }
        let reply: Vec<Value> = self
            .run("inspect", &scripts::INSPECT, 5, |cmd| {
                cmd.arg(RedisName::lock(key))
                    .arg(RedisName::limit(key))
                    .arg(RedisName::writers(key))
                    .arg(RedisName::writers_expiry(key))
                    .arg(RedisName::leader(key));
            })
            .await?;
        let parse = |error: redis::ParsingError| {
            Error::refused("redis", format!("inspect of `{key}`: {error}"))
        };
        let (kind, limit, grants, line, led): (String, u32, Vec<Value>, Vec<String>, String) =
            FromRedisValue::from_redis_value(Value::Array(reply)).map_err(parse)?;
        // An election's leader: `<term>\n<value>` from its own leader record.
        let led = led
            .split_once('\n')
            .and_then(|(term, value)| Some((term.parse::<u64>().ok()?, value.to_owned())));
        let grants = grants
            .chunks(2)
            .map(|pair| match pair {
                [owner, left] => Ok((
                    String::from_redis_value(owner.clone()).map_err(parse)?,
                    i64::from_redis_value(left.clone()).map_err(parse)?,
                )),
                _ => Err(Error::refused(
                    "redis",
                    format!("inspect of `{key}`: odd reply"),
                )),
            })
            .collect::<Result<Vec<_>>>()?;
        let waiters = self.fair.then(|| {
            line.into_iter()
                .map(|owner| WaiterInfo::new(Some(owner), LockMode::Exclusive))
                .collect()
        });
        let mode = match (kind.as_str(), limit) {
            ("none", _) => {
                return Ok(LockInfo {
                    holders: Vec::new(),
                    waiters,
                });
            }
            ("lock", _) => LockMode::Exclusive,
            ("shares", 0) => LockMode::Shared,
            ("shares", limit) => LockMode::Permit { limit },
            (other, _) => {
                return Err(errors::foreign_key(
                    key,
                    Value::SimpleString(format!("lock {other}")),
                ));
            }
        };
        let holders = grants
            .into_iter()
            .map(|(owner, left_ms)| {
                let left = u64::try_from(left_ms).ok().map(Duration::from_millis);
                // A kept record: `<owner>|<why>` (see RELEASE_KEEPING).
                let (owner, kept) = match owner.rsplit_once('|') {
                    Some((grant, why)) if mode == LockMode::Exclusive => match why.parse() {
                        Ok(kept) => (grant.to_owned(), Some(kept)),
                        Err(_) => (owner, None),
                    },
                    _ => (owner, None),
                };
                let holder = HolderInfo::new(owner, mode)
                    .with_expires_in(left)
                    .with_kept(kept);
                match &led {
                    Some((term, value)) if kept.is_none() => holder
                        .with_fencing_token(Some(*term))
                        .with_value(Some(value.clone())),
                    _ => holder,
                }
            })
            .collect();
        Ok(LockInfo { holders, waiters })
    }

    /// `PING`: whether the server answers.
    #[cfg(feature = "redlock")]
    pub(crate) async fn ping(&self) -> Result<()> {
        let mut conn = self.conn.clone();
        let reply = self
            .within_timeout("ping", conn.req_packed_command(&conn::command("PING")))
            .await?;
        reply.map(drop).map_err(|error| self.failed("ping", error))
    }
}
