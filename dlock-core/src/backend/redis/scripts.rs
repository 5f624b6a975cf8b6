//! The Lua scripts: each lock operation is one atomic round trip.
//!
//! Commands are built by hand ([`Lua::evalsha`]) rather than through `redis::Script`, whose
//! invocation copies every key and argument into a vector of its own first: on the hot path
//! that was a third of the allocations of a lock + unlock.

use std::sync::LazyLock;

use redis::Cmd;

/// A script and its SHA-1, called with `EVALSHA` and sent whole (`EVAL`) when the server
/// does not know it yet.
#[derive(Debug)]
pub(super) struct Lua {
    code: &'static str,
    hash: String,
}

impl Lua {
    fn new(code: &'static str) -> Self {
        Self {
            code,
            hash: redis::Script::new(code).get_hash().to_owned(),
        }
    }

    /// `EVALSHA <sha1> <numkeys>`.
    pub(super) fn evalsha(&self, numkeys: usize) -> Cmd {
        let mut cmd = super::conn::command("EVALSHA");
        cmd.arg(&self.hash).arg(numkeys);
        cmd
    }

    /// `EVAL <code> <numkeys>` (which also caches the script on the server).
    pub(super) fn eval(&self, numkeys: usize) -> Cmd {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(self.code).arg(numkeys);
        cmd
    }
}

/// `KEYS`: lock, fence, semaphore limit, waiting writers, their expiries, waited-for mark
/// (the keys of [`ACQUIRE_SHARED`], in its order), hand-over mark. `ARGV`: owner, ttl ms, `1` for a queued waiter, `1` when the grant must
/// carry a fencing token. Returns an integer: when granted, the fencing token (≥ 1), or 1
/// without fencing; `-1 - pttl` (≤ -1) when held with an expiry; 0 when held without one.
/// When readers or permits hold the lock and this queued writer marked itself waiting,
/// returns `{-1 - wait, 1}`, `wait` being when to try again at the latest (the mark expires
/// after the writer's ttl unless renewed by its next attempt). When the lock or fence key
/// holds another type, returns the string `lock <type>` / `fence <type>`. The hot path is
/// one or two commands (`SET NX PX`, and `INCR` when asked for a token); types are only
/// inspected when something is off.
///
/// A queued waiter (subscribed to the release channel first) that finds the lock held by
/// another writer marks it waited for: `|waited` appended to the holder's value (`APPEND`
/// keeps the expiry, and the mark goes with the lock). One that finds readers or permits
/// holding it drops the expired ones (taking the lock if none is left), and otherwise adds
/// itself to the waiting writers — readers and permits that come after it wait for it — and
/// sets the waited-for mark, so their releases publish. A queued waiter that is granted the
/// lock leaves the waiting writers, and takes over the hand-over mark a releaser left for its
/// own barred waiters, or the waited-for mark of readers who wait behind it, by marking its
/// own lock. A lock held by this very owner is this request's own earlier attempt that a
/// frozen master applied late (RedLock retries with the same owner): it is granted anew.
pub(super) static ACQUIRE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        r"
local function grant()
  if not redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return nil end
  local token = 1
  if ARGV[4] == '1' then
    token = redis.pcall('incr', KEYS[2])
    if type(token) == 'table' or token < 1 then
      redis.call('del', KEYS[1])
      return 'fence ' .. redis.call('type', KEYS[2])['ok']
    end
  end
  if ARGV[3] == '1' then
    redis.call('zrem', KEYS[4], ARGV[1])
    redis.call('zrem', KEYS[5], ARGV[1])
    if redis.call('del', KEYS[7]) == 1 or redis.call('exists', KEYS[6]) == 1 then
      redis.call('append', KEYS[1], '|waited')
    end
  end
  return token
end
local granted = grant()
if granted then return granted end
local holder = redis.pcall('get', KEYS[1])
if holder == ARGV[1] or holder == ARGV[1] .. '|waited' then
  -- This request's own earlier attempt, applied late (its master was frozen): granted anew,
  -- for a full ttl from now and with a new token.
  redis.call('del', KEYS[1])
  return grant()
end
if type(holder) == 'string' then
  if ARGV[3] == '1' and string.sub(holder, -7) ~= '|waited' then
    redis.call('append', KEYS[1], '|waited')
  end
  local pttl = redis.call('pttl', KEYS[1])
  if pttl >= 0 then return -1 - pttl end
  return 0
end
local kind = redis.call('type', KEYS[1])['ok']
if kind ~= 'zset' then return 'lock ' .. kind end
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call('zremrangebyscore', KEYS[1], '-inf', now)
if redis.call('exists', KEYS[1]) == 0 then
  redis.call('del', KEYS[3])
  return grant()
end
local wait = redis.call('pttl', KEYS[1])
if ARGV[3] ~= '1' then
  if wait >= 0 then return -1 - wait end
  return 0
end
local ttl = tonumber(ARGV[2])
redis.call('zadd', KEYS[4], 'NX', now, ARGV[1])
redis.call('zadd', KEYS[5], now + ttl, ARGV[1])
for i = 4, 5 do
  if redis.call('pttl', KEYS[i]) < ttl then redis.call('pexpire', KEYS[i], ttl) end
end
if redis.call('pttl', KEYS[6]) < ttl then redis.call('set', KEYS[6], '1', 'PX', ttl) end
local renew_by = math.floor(ttl / 2)
if wait < 0 or wait > renew_by then wait = renew_by end
return {-1 - wait, 1}
",
    )
});

/// A lock set taken in one step, all or none. `KEYS`: per lock, its name and its fence's.
/// `ARGV`: per lock, owner, ttl ms, `1` when the grant must carry a fencing token. Returns
/// `{0, token...}` when every lock was free and is now taken (token 0 without fencing), or
/// `{i, pttl}` naming the first lock (1-based) that was not free — held by a writer, readers
/// or permits, or kept — with its remaining time (-1 without an expiry), having taken
/// nothing. A fence that is not a counter undoes the grants and returns `fence <type>`. A free
/// set costs one `EXISTS` of every lock, then a `SET` each (at most [`MAX_TOGETHER`](super::MAX_TOGETHER)
/// locks: `unpack` has a limit).
pub(super) static ACQUIRE_ALL: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        r"
local n = #KEYS / 2
local locks = {}
for i = 1, n do locks[i] = KEYS[2 * i - 1] end
if redis.call('exists', unpack(locks)) > 0 then
  for i = 1, n do
    if redis.call('exists', locks[i]) == 1 then
      return {i, redis.call('pttl', locks[i])}
    end
  end
end
local granted = {0}
for i = 1, n do
  redis.call('set', KEYS[2 * i - 1], ARGV[3 * i - 2], 'PX', ARGV[3 * i - 1])
  local token = 0
  if ARGV[3 * i] == '1' then
    token = redis.pcall('incr', KEYS[2 * i])
    if type(token) == 'table' or token < 1 then
      for j = 1, i do redis.call('del', KEYS[2 * j - 1]) end
      return 'fence ' .. redis.call('type', KEYS[2 * i])['ok']
    end
  end
  granted[i + 1] = token
end
return granted
",
    )
});

/// `KEYS`: lock, fence, semaphore limit, waiting writers, their expiries, waited-for mark.
/// `ARGV`: owner, ttl ms, `1` for a queued waiter, `1` when the grant must carry a fencing
/// token, the semaphore's limit (`0` for a reader), when this caller first asked (server ms,
/// `0` on its first attempt).
///
/// Grants a share (a reader, or one of the semaphore's permits) when the lock is free or held
/// by shares of the same kind (and, for a permit, fewer than the limit), and no writer that
/// asked before this caller — or in the same server millisecond: a writer marked in the
/// caller's first millisecond was there before the caller's first script ran — waits for it. A share is a member of the sorted set at the lock's
/// name, scored by its expiry in server milliseconds: expired ones are dropped here, so a
/// vanished holder's share frees at its ttl; the set expires with its last member. A
/// semaphore's limit is stored beside it and expires with it.
///
/// Returns `{1, token, first asked}` when granted (token 0 without fencing); `{0, wait, first
/// asked}` when not, `wait` being when to try again at the latest (-1: unknown); `{2, stored
/// limit}` when the semaphore has another limit; `lock <type>` / `fence <type>` for a key of
/// another type. A queued waiter that finds a writer holding the lock marks it waited for
/// (`|waited`, as writers do); one that waits for shares or writers sets the waited-for mark
/// for its ttl (never shortening it: another waiter may need it longer), so their releases
/// publish.
pub(super) static ACQUIRE_SHARED: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        r"
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local ttl = tonumber(ARGV[2])
local queued = ARGV[3] == '1'
local limit = tonumber(ARGV[5])
local arrival = tonumber(ARGV[6])
if arrival == 0 then arrival = now end
local function held(wait)
  if not queued then return {0, wait, arrival} end
  if redis.call('pttl', KEYS[6]) < ttl then redis.call('set', KEYS[6], '1', 'PX', ttl) end
  local renew_by = math.floor(ttl / 2)
  if wait < 0 or wait > renew_by then wait = renew_by end
  return {0, wait, arrival}
end
local kind = redis.call('type', KEYS[1])['ok']
if kind == 'string' then
  if queued then
    local holder = redis.call('get', KEYS[1])
    if string.sub(holder, -7) ~= '|waited' then redis.call('append', KEYS[1], '|waited') end
  end
  return {0, redis.call('pttl', KEYS[1]), arrival}
end
if kind ~= 'zset' and kind ~= 'none' then return 'lock ' .. kind end
local count = 0
if kind == 'zset' then
  redis.call('zremrangebyscore', KEYS[1], '-inf', now)
  count = redis.call('zcard', KEYS[1])
end
if count == 0 then
  redis.call('del', KEYS[3])
else
  local stored = redis.call('get', KEYS[3])
  if limit > 0 and stored and tonumber(stored) ~= limit then return {2, tonumber(stored)} end
  if (limit > 0) ~= (stored ~= false) then return held(redis.call('pttl', KEYS[1])) end
  if limit > 0 and count >= limit then
    local first = redis.call('zrange', KEYS[1], 0, 0, 'WITHSCORES')
    return held(tonumber(first[2]) - now)
  end
end
local stale = redis.call('zrangebyscore', KEYS[5], '-inf', now)
for _, writer in ipairs(stale) do redis.call('zrem', KEYS[4], writer) end
if #stale > 0 then redis.call('zremrangebyscore', KEYS[5], '-inf', now) end
if redis.call('zcount', KEYS[4], '-inf', arrival) > 0 then
  local first = redis.call('zrange', KEYS[5], 0, 0, 'WITHSCORES')
  return held(tonumber(first[2]) - now)
end
local token = 0
if ARGV[4] == '1' then
  token = redis.pcall('incr', KEYS[2])
  if type(token) == 'table' or token < 1 then
    return 'fence ' .. redis.call('type', KEYS[2])['ok']
  end
end
redis.call('zadd', KEYS[1], now + ttl, ARGV[1])
local pttl = redis.call('pttl', KEYS[1])
if pttl < ttl then
  redis.call('pexpire', KEYS[1], ttl)
  pttl = ttl
end
if limit > 0 then redis.call('set', KEYS[3], limit, 'PX', pttl) end
return {1, token, arrival}
",
    )
});

/// `KEYS`: lock, and the hand-over mark only when the releaser has waiters of its own.
/// `ARGV`: owner, then (with the hand-over mark) the message (the releasing Locker's id) and
/// how long to keep the mark, in ms.
///
/// Deletes the lock if `owner` holds it (marked waited for or not). Publishes the release on
/// `KEYS[1]:released` only when it was marked: an uncontended release is the raw
/// compare-and-delete with the same key and argument, and nothing more. A releaser with
/// waiters of its own (which it bars for a moment) publishes anyway, with its id, and leaves
/// the hand-over mark, which the waiter granted next moves into its own lock so that its
/// release wakes them. Returns how many subscribers heard it (0 when not published; the
/// releasing Locker bars itself when others did), or -1 if `owner` did not hold the lock.
pub(super) static RELEASE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        r"
local holder = redis.pcall('get', KEYS[1])
if holder == ARGV[1] then
  redis.call('del', KEYS[1])
  if not KEYS[2] then return 0 end
elseif holder == ARGV[1] .. '|waited' then
  redis.call('del', KEYS[1])
else
  return -1
end
if KEYS[2] then redis.call('set', KEYS[2], '1', 'PX', ARGV[3]) end
return redis.call('publish', KEYS[1] .. ':released', ARGV[2] or ARGV[1])
",
    )
});

/// A lock set's release: [`RELEASE`] without a hand-over mark, for every lock at once.
/// `KEYS`: the locks. `ARGV`: their owners. Returns, per lock, how many subscribers heard its
/// release (0 when not published), or -1 if its owner did not hold it. One `MGET` (a lock
/// that is not a string, readers' or permits', reads as nil: not held) and one `DEL` of the
/// locks held, then the releases waited for are published.
pub(super) static RELEASE_ALL: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        r"
local holders = redis.call('mget', unpack(KEYS))
local heard, held, waited = {}, {}, {}
for i = 1, #KEYS do
  heard[i] = -1
  if holders[i] == ARGV[i] then
    held[#held + 1] = KEYS[i]
    heard[i] = 0
  elseif holders[i] == ARGV[i] .. '|waited' then
    held[#held + 1] = KEYS[i]
    waited[#waited + 1] = i
  end
end
if #held > 0 then redis.call('del', unpack(held)) end
for _, i in ipairs(waited) do
  heard[i] = redis.call('publish', KEYS[i] .. ':released', ARGV[i])
end
return heard
",
    )
});

/// `KEYS`: lock. `ARGV`: owner, how long to keep the lock in ms, why (`at_least`, `done`).
///
/// If `owner` holds the lock (marked waited for or not), replaces its grant by a record that
/// keeps the lock for the time given: the value `<owner>|<why>` (with the waited-for mark
/// kept), which no owner matches, so nothing renews, releases or keeps it again; it expires
/// with `PX`, by the server's clock. Nothing is published: waiters try again at the expiry
/// the acquire script tells them. Returns 0, or -1 if `owner` did not hold the lock.
pub(super) static RELEASE_KEEPING: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        r"
local holder = redis.pcall('get', KEYS[1])
local record = ARGV[1] .. '|' .. ARGV[3]
if holder == ARGV[1] .. '|waited' then
  record = record .. '|waited'
elseif holder ~= ARGV[1] then
  return -1
end
redis.call('set', KEYS[1], record, 'PX', ARGV[2])
return 0
",
    )
});

/// `KEYS`: lock, semaphore limit, waited-for mark. `ARGV`: owner.
///
/// Removes `owner`'s share (reader or permit) and the expired ones; the set (and the limit)
/// then expires with its newest member. Publishes on `KEYS[1]:released`, with the owner as
/// the message, when someone marked the lock waited for and the release can let them in (the
/// last reader left, or a permit freed). Returns how many subscribers heard it (0 when not
/// published), or -1 if `owner` did not hold a share (any more).
pub(super) static RELEASE_SHARED: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        r"
if redis.call('type', KEYS[1])['ok'] ~= 'zset' then return -1 end
local expiry = redis.call('zscore', KEYS[1], ARGV[1])
if not expiry then return -1 end
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call('zrem', KEYS[1], ARGV[1])
redis.call('zremrangebyscore', KEYS[1], '-inf', now)
local newest = redis.call('zrange', KEYS[1], -1, -1, 'WITHSCORES')
local semaphore = redis.call('exists', KEYS[2]) == 1
if #newest == 0 then
  redis.call('del', KEYS[2])
else
  local left = math.max(1, tonumber(newest[2]) - now)
  redis.call('pexpire', KEYS[1], left)
  redis.call('pexpire', KEYS[2], left)
end
local listeners = 0
if (#newest == 0 or semaphore) and redis.call('exists', KEYS[3]) == 1 then
  listeners = redis.call('publish', KEYS[1] .. ':released', ARGV[1])
end
if tonumber(expiry) <= now then return -1 end
return listeners
",
    )
});

/// `KEYS`: the lock keys of a batch. `ARGV`: their owners, then their ttls in ms.
/// Extends each lock still held by its owner (marked waited for or not); returns 1 or 0 per
/// key. A key of the wrong type counts as not held (`pcall`), so one bad key cannot fail the
/// whole batch.
pub(super) static RENEW: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        r"
local n = #KEYS
local renewed = {}
for i = 1, n do
  local holder = redis.pcall('get', KEYS[i])
  if holder == ARGV[i] or holder == ARGV[i] .. '|waited' then
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

/// `KEYS`: the lock keys of a batch of shares (readers or permits), then their semaphore
/// limits. `ARGV`: their owners, then their ttls in ms. Extends each share still held by its
/// owner (not expired) to its ttl from now, and the set and limit with it; returns 1 or 0 per
/// share.
pub(super) static RENEW_SHARED: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        r"
local n = #ARGV / 2
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local renewed = {}
for i = 1, n do
  renewed[i] = 0
  if redis.call('type', KEYS[i])['ok'] == 'zset' then
    local expiry = redis.call('zscore', KEYS[i], ARGV[i])
    local ttl = tonumber(ARGV[n + i])
    if expiry and tonumber(expiry) > now then
      redis.call('zadd', KEYS[i], 'XX', now + ttl, ARGV[i])
      if redis.call('pttl', KEYS[i]) < ttl then
        redis.call('pexpire', KEYS[i], ttl)
        redis.call('pexpire', KEYS[n + i], ttl)
      end
      renewed[i] = 1
    end
  end
end
return renewed
",
    )
});

/// `KEYS`: lock, waiting writers, their expiries, waited-for mark. `ARGV`: owner.
/// A writer that gave up waiting (out of time, or cancelled) leaves the waiting writers; if
/// it was one and someone waits behind it, publishes on `KEYS[1]:released` so they try
/// again. Returns how many subscribers heard it.
pub(super) static WITHDRAW_WRITER: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        r"
local removed = redis.call('zrem', KEYS[2], ARGV[1])
redis.call('zrem', KEYS[3], ARGV[1])
if removed == 1 and redis.call('exists', KEYS[4]) == 1 then
  return redis.call('publish', KEYS[1] .. ':released', ARGV[1])
end
return 0
",
    )
});

/// `KEYS`: lock, semaphore limit. Deletes the lock (a writer's, or every share) whoever holds
/// it, and publishes the release on `KEYS[1]:released` (always: this is rare). Returns 1 if a
/// holder was removed.
pub(super) static FORCE_RELEASE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        r"
local removed = redis.call('del', KEYS[1])
redis.call('del', KEYS[2])
if removed > 0 then redis.call('publish', KEYS[1] .. ':released', 'released') end
return removed
",
    )
});

/// `KEYS`: lock, semaphore limit. What holds the lock, read in one atomic step for
/// [`inspect`](crate::backend::LockBackend::inspect): `{'lock', 0, owner, pttl}` for a writer
/// (the owner without its waited-for mark; pttl -1 without an expiry), `{'shares', limit,
/// owner, ms left, …}` for the readers or permits not yet expired (limit 0 for readers),
/// `{'none', 0}` when free, and `{<type>, 0}` when the name holds another type.
pub(super) static INSPECT: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        r"
local kind = redis.call('type', KEYS[1])['ok']
if kind == 'string' then
  local owner = redis.call('get', KEYS[1])
  if string.sub(owner, -7) == '|waited' then owner = string.sub(owner, 1, -8) end
  return {'lock', 0, owner, redis.call('pttl', KEYS[1])}
end
if kind ~= 'zset' then return {kind, 0} end
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local reply = {'shares', tonumber(redis.call('get', KEYS[2]) or '0')}
local shares = redis.call('zrangebyscore', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')
for i = 1, #shares, 2 do
  reply[#reply + 1] = shares[i]
  reply[#reply + 1] = tonumber(shares[i + 1]) - now
end
return reply
",
    )
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waited_mark_in_scripts_matches_the_key_layout() {
        let mark = super::super::keys::WAITED;
        assert_eq!(
            mark.len(),
            7,
            "the acquire script compares the last 7 bytes"
        );
        for script in [
            &ACQUIRE,
            &ACQUIRE_SHARED,
            &RELEASE,
            &RELEASE_KEEPING,
            &RENEW,
            &INSPECT,
        ] {
            assert!(script.code.contains(&format!("'{mark}'")));
            assert!(!script.code.replace(mark, "").contains("waited"));
        }
    }

    #[test]
    fn channel_suffix_in_scripts_matches_the_key_layout() {
        for script in [&RELEASE, &RELEASE_SHARED, &WITHDRAW_WRITER, &FORCE_RELEASE] {
            assert!(
                script
                    .code
                    .contains(&format!("KEYS[1] .. '{}'", super::super::keys::RELEASED))
            );
        }
    }
}
