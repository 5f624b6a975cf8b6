//! The plain layout (`?layout=plain` on a `redis://`, `redis+cluster://`, `redis+sentinel://`
//! or `redlock://` URL): the layout the most used Redis locks outside Java write, so that they
//! and dlock exclude each other — redis-py's `Lock(name)` and node-redlock's `acquire([name])`,
//! both tested against the real clients:
//!
//! * the lock of full key `K` is the Redis string `K` itself (no hash tag), holding the owner
//!   token, with a PX expiry;
//! * acquire: `SET K token NX PX ttl` (a script that also answers the holder's `PTTL`);
//! * release: owner-checked `DEL` (`GET` equals the token), which also publishes on dlock's
//!   release channel `{K}:released` so dlock's waiters wake at once;
//! * renew: owner-checked `PEXPIRE`.
//!
//! Every Locker that shares a lock must use the same layout: one with `?layout=plain` and one
//! without lock different keys (`K` and `{K}`) and do not exclude each other — switch a fleet
//! over all at once, not in a rolling change.
//!
//! Nothing else is written: no fencing counter, no line of writers, no waited-for mark (which
//! would change the value a foreign client compares). So only the mutex is offered; read-write
//! locks, semaphores, fencing tokens, elections, lock sets in one script and keeping a lock
//! after its release are [`Error::Unsupported`](crate::Error::Unsupported), before any round
//! trip. dlock's waiters queue in their Locker (FIFO within it, not across Lockers) and are
//! woken at once by a dlock release's message. A foreign client's release publishes nothing,
//! so the head of the queue also looks again on its own ([`LookAgain`]): after 25 ms, then
//! twice as long each time up to every 500 ms, and never later than the holder's `PTTL` — what
//! redis-py (every 100 ms) and node-redlock (every 200 ms) do while they wait, without their
//! fixed interval.

use std::borrow::Cow;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use redis::{FromRedisValue, Value};

use super::node::{Attempt, Node};
use super::scripts::Lua;
use super::{RedisBackend, channel_of, millis};
use crate::lease::{AcquireOutcome, AcquireRequest, Lease};
use crate::{Error, HolderInfo, LockInfo, LockMode, Result};

/// Where a Redis backend keeps its locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Layout {
    /// dlock's own (the `keys` module): every mode, fair waiting, fencing tokens.
    #[default]
    Dlock,
    /// The plain layout of other languages' locks (this module): the mutex only.
    Plain,
}

impl Layout {
    /// The backend's name in errors: `redis (layout=plain)` for the plain layout.
    pub(crate) const fn name(self, backend: &'static str) -> &'static str {
        match (self, backend.as_bytes()) {
            (Self::Dlock, _) => backend,
            (Self::Plain, b"redlock") => "redlock (layout=plain)",
            (Self::Plain, _) => "redis (layout=plain)",
        }
    }

    /// The layout a URL's `layout=` names.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming `backend.layout` for another value.
    pub(crate) fn parse(value: &str) -> Result<Self> {
        match value {
            "dlock" => Ok(Self::Dlock),
            "plain" => Ok(Self::Plain),
            _ => Err(Error::config(
                "backend.layout",
                value,
                "`plain` (the key as it is, the owner token as its value: redis-py's, \
                 node-redlock's and go-redsync's layout; the mutex only) or `dlock` (the default)",
            )),
        }
    }

    /// Takes `layout=…` out of `url`'s query: the layout, and the URL without it.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming `backend.layout` for a value that is neither `plain` nor
    /// `dlock`.
    pub(crate) fn take_from_query(url: &str) -> Result<(Self, Cow<'_, str>)> {
        let Some((base, query)) = url.split_once('?') else {
            return Ok((Self::Dlock, Cow::Borrowed(url)));
        };
        let mut layout = Self::Dlock;
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            match pair.split_once('=') {
                Some(("layout", value)) => layout = Self::parse(value)?,
                _ => kept.push(pair),
            }
        }
        if layout == Self::Dlock && !query.contains("layout=") {
            return Ok((layout, Cow::Borrowed(url)));
        }
        Ok((
            layout,
            Cow::Owned(if kept.is_empty() {
                base.to_owned()
            } else {
                format!("{base}?{}", kept.join("&"))
            }),
        ))
    }
}

/// When the head of a queue in the plain layout looks at the lock again: a foreign holder's
/// release is not published. The pause starts short (a release is likely soon after a wait
/// begins), doubles to a most, and never passes the holder's expiry.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LookAgain {
    next: Duration,
}

impl LookAgain {
    const FIRST: Duration = Duration::from_millis(25);
    const MOST: Duration = Duration::from_millis(500);

    pub(crate) const fn new() -> Self {
        Self { next: Self::FIRST }
    }

    /// How long to wait after a look that found the lock held for `holder_left` more (`None`:
    /// no expiry, or unknown).
    pub(crate) fn after(&mut self, holder_left: Option<Duration>) -> Duration {
        let pause = self.next;
        self.next = (self.next * 2).min(Self::MOST);
        holder_left.map_or(pause, |left| left.min(pause))
    }
}

/// `KEYS`: the lock. `ARGV`: owner, ttl ms. `SET NX PX`; -3 when granted, else the holder's
/// `PTTL` (-1: no expiry; -2: gone since). A key that already holds `owner` is granted again
/// with a new ttl: an owner is one grant's, so it is this acquire's own key from an earlier
/// attempt (a RedLock round that gave up waiting for a slow master before its `SET` landed),
/// which would otherwise refuse every later attempt until it expires.
static ATTEMPT: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        r"
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return -3 end
if redis.pcall('get', KEYS[1]) == ARGV[1] then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return -3
end
return redis.call('pttl', KEYS[1])
",
    )
});

/// `KEYS`: the lock. `ARGV`: owner, release channel. Owner-checked `DEL`, published; how many
/// subscribers heard it, or -1 when `owner` did not hold the lock.
static RELEASE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        r"
if redis.pcall('get', KEYS[1]) ~= ARGV[1] then return -1 end
redis.call('del', KEYS[1])
return redis.call('publish', ARGV[2], 'released')
",
    )
});

/// `KEYS`: locks. `ARGV`: their owners, then their ttls in ms. Owner-checked `PEXPIRE`; 1 or
/// 0 per lock.
static RENEW: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        r"
local n = #KEYS
local renewed = {}
for i = 1, n do
  if redis.pcall('get', KEYS[i]) == ARGV[i] then
    redis.call('pexpire', KEYS[i], ARGV[n + i])
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed
",
    )
});

/// `KEYS`: the lock. `ARGV`: release channel. Deletes a string lock, whoever holds it, and
/// publishes; 1 if there was one, 0 if not, -1 if the key holds another type.
static FORCE_RELEASE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        r"
local kind = redis.call('type', KEYS[1]).ok
if kind == 'none' then return 0 end
if kind ~= 'string' then return -1 end
redis.call('del', KEYS[1])
redis.call('publish', ARGV[1], 'released')
return 1
",
    )
});

/// `KEYS`: the lock. `{type}`, and for a string `{'string', value, pttl}`.
static INSPECT: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        r"
local kind = redis.call('type', KEYS[1]).ok
if kind ~= 'string' then return {kind} end
return {kind, redis.call('get', KEYS[1]), redis.call('pttl', KEYS[1])}
",
    )
});

/// A key of another type where a plain lock should be: not a lock this layout shares.
fn other_type(key: &str, kind: &str) -> Error {
    Error::refused(
        "redis",
        format!(
            "`{key}` holds a Redis {kind}, not a plain lock (a string with the owner's token): \
             another application's key, or a lock of dlock's own layout"
        ),
    )
}

impl Node {
    /// One attempt: granted, or held with the holder's remaining ttl.
    pub(super) async fn attempt_plain(&self, req: &AcquireRequest) -> Result<Attempt> {
        let pttl: i64 = self
            .run("acquire", &ATTEMPT, 1, |cmd| {
                cmd.arg(&*req.key)
                    .arg(req.owner.as_str())
                    .arg(millis(req.ttl));
            })
            .await?;
        Ok(match pttl {
            -3 => Attempt::Granted(None),
            -2 => Attempt::Held(Some(Duration::ZERO)),
            left => Attempt::Held(u64::try_from(left).ok().map(Duration::from_millis)),
        })
    }

    /// Owner-checked delete, published on the release channel: how many heard it, or -1.
    pub(super) async fn release_plain(&self, owner: &str, key: &str) -> Result<i64> {
        self.run("release", &RELEASE, 1, |cmd| {
            cmd.arg(key).arg(owner).arg(channel_of(key));
        })
        .await
    }

    /// Owner-checked renewal of `leases` (one slot on Cluster: called with one); 1 or 0 each.
    pub(super) async fn renew_plain(&self, leases: &[&Lease]) -> Result<Vec<i64>> {
        self.run("renew", &RENEW, leases.len(), |cmd| {
            for lease in leases {
                cmd.arg(&*lease.key);
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

    /// Deletes the lock of `key` whoever holds it; whether there was one.
    pub(super) async fn force_release_plain(&self, key: &str) -> Result<bool> {
        let removed: i64 = self
            .run("force_release", &FORCE_RELEASE, 1, |cmd| {
                cmd.arg(key).arg(channel_of(key));
            })
            .await?;
        if removed < 0 {
            return Err(other_type(key, "value of another type"));
        }
        Ok(removed > 0)
    }

    /// The holder of `key` (its token as the owner, its time left); no waiters are listed (they
    /// queue in their Lockers).
    pub(super) async fn inspect_plain(&self, key: &str) -> Result<LockInfo> {
        let reply: Vec<Value> = self
            .run("inspect", &INSPECT, 1, |cmd| {
                cmd.arg(key);
            })
            .await?;
        let parse = |error: redis::ParsingError| {
            Error::refused("redis", format!("inspect of `{key}`: {error}"))
        };
        let mut reply = reply.into_iter();
        let kind = String::from_redis_value(reply.next().unwrap_or(Value::Nil)).map_err(parse)?;
        let holders = match kind.as_str() {
            "none" => Vec::new(),
            "string" => {
                let owner =
                    String::from_redis_value(reply.next().unwrap_or(Value::Nil)).map_err(parse)?;
                let left =
                    i64::from_redis_value(reply.next().unwrap_or(Value::Nil)).map_err(parse)?;
                let left = u64::try_from(left).ok().map(Duration::from_millis);
                vec![HolderInfo::new(owner, LockMode::Exclusive).with_expires_in(left)]
            }
            other => return Err(other_type(key, other)),
        };
        Ok(LockInfo {
            holders,
            waiters: None,
        })
    }
}

impl RedisBackend {
    /// A mutex in the plain layout: one attempt at once unless this Locker already queues for
    /// the key, then the queue (woken by dlock's releases and at the holder's expiry).
    pub(super) async fn acquire_plain(
        &self,
        req: &AcquireRequest,
        deadline: Option<Instant>,
    ) -> Result<AcquireOutcome> {
        if req.mode != LockMode::Exclusive {
            // The core asks only for what the capabilities claim: the mutex.
            return Err(Error::Unsupported {
                backend: Layout::Plain.name("redis"),
                operation: "a read lock or permit",
            });
        }
        let mut retry_after = None;
        if self.waiters.may_try_at_once(&req.key) {
            let sent = Instant::now();
            match self.node.attempt_plain(req).await? {
                Attempt::Granted(_) => return Ok(Self::lease(req, sent, None)),
                Attempt::Held(wait) | Attempt::WriterWaits(wait) => retry_after = wait,
                Attempt::Taken => {}
            }
            if deadline.is_some_and(|d| d <= Instant::now()) {
                return Ok(AcquireOutcome::Busy { retry_after });
            }
        }
        let look_again = LookAgain::new();
        self.wait_in_queue(req, deadline, retry_after, super::Queued::Plain(look_again))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_is_taken_out_of_the_query() {
        let (layout, url) = Layout::take_from_query("redis://h:1/0?layout=plain").unwrap();
        assert_eq!((layout, url.as_ref()), (Layout::Plain, "redis://h:1/0"));
        let (layout, url) =
            Layout::take_from_query("redis://h:1/0?protocol=resp3&layout=plain&x=1").unwrap();
        assert_eq!(
            (layout, url.as_ref()),
            (Layout::Plain, "redis://h:1/0?protocol=resp3&x=1")
        );
        let (layout, url) = Layout::take_from_query("redis://h:1/0?x=1").unwrap();
        assert_eq!((layout, url.as_ref()), (Layout::Dlock, "redis://h:1/0?x=1"));
        let (layout, url) = Layout::take_from_query("redis://h:1?layout=dlock").unwrap();
        assert_eq!((layout, url.as_ref()), (Layout::Dlock, "redis://h:1"));
        let error = Layout::take_from_query("redis://h:1?layout=flat").unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains("backend.layout") && text.contains("flat"),
            "{text}"
        );
        assert_eq!(Layout::Plain.name("redis"), "redis (layout=plain)");
        assert_eq!(Layout::Plain.name("redlock"), "redlock (layout=plain)");
        assert_eq!(Layout::Dlock.name("redis"), "redis");
    }

    #[test]
    fn a_plain_waiter_looks_again_sooner_and_sooner_then_at_most_every_half_second() {
        let mut look = LookAgain::new();
        let ms = Duration::from_millis;
        let pauses: Vec<Duration> = (0..7).map(|_| look.after(None)).collect();
        assert_eq!(
            pauses,
            [ms(25), ms(50), ms(100), ms(200), ms(400), ms(500), ms(500)]
        );
        assert_eq!(look.after(Some(ms(30))), ms(30), "never past the expiry");
    }
}
