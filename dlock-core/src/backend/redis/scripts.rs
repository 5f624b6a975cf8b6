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
    pub(super) fn new(code: &'static str) -> Self {
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

/// Lua: `arrival(time)`, the place in line of a writer joining it now — the server's time
/// in microseconds (`time` is `TIME`'s reply), but after everyone already in line (`KEYS[4]`),
/// so places are strictly increasing even within one microsecond or across a clock step.
macro_rules! arrival {
    () => {
        r"
local function arrival(time)
  local at = tonumber(time[1]) * 1000000 + tonumber(time[2])
  local last = redis.call('zrange', KEYS[4], -1, -1, 'WITHSCORES')
  if #last > 0 and tonumber(last[2]) >= at then at = tonumber(last[2]) + 1 end
  return at
end
"
    };
}

/// Lua: `hand_off(lock, line, expiries, shares_wait, message, now, window)`, run when the lock
/// `lock` has just become free while someone waited for it. Drops the writers in line
/// (`line`, by place; `expiries`, by when they expire) that expired, then gives the lock to
/// the first one left: reserves it (the value `~<owner>`, which no owner matches and every
/// `SET NX` fails on) for `window` ms, during which that writer must claim it or lose its
/// place, and tells it (`><owner>\n<next owner>` on the release channel; the other Lockers
/// ignore it). The writer after it asks again once the window has passed, if it still waits
/// then: a first writer that vanished holds the line up one window, not half a ttl. When
/// readers or permits wait too (the waited-for mark `shares_wait`), nothing is reserved: the
/// first writer is told, and the release is published for everyone (with `message`, unless it
/// is nil: a writer in line that found the lock free passes none, the readers having been
/// told already) — readers and that writer race, as they always did; the first writer still
/// loses its place if it does not ask within the window. Returns how many subscribers heard
/// the last message.
macro_rules! hand_off {
    () => {
        r"
local function hand_off(lock, line, expiries, shares_wait, message, now, window)
  local gone = redis.call('zrangebyscore', expiries, '-inf', now)
  for _, owner in ipairs(gone) do redis.call('zrem', line, owner) end
  if #gone > 0 then redis.call('zremrangebyscore', expiries, '-inf', now) end
  local firsts = redis.call('zrange', line, 0, 1)
  local first = firsts[1]
  local channel = lock .. ':released'
  if not first then
    if message then return redis.call('publish', channel, message) end
    return 0
  end
  local call = '>' .. first .. '\n' .. (firsts[2] or '')
  redis.call('zadd', expiries, 'XX', now + window, first)
  if redis.call('exists', shares_wait) == 1 then
    local heard = redis.call('publish', channel, call)
    if message then heard = redis.call('publish', channel, message) end
    return heard
  end
  redis.call('set', lock, '~' .. first, 'PX', window)
  return redis.call('publish', channel, call)
end
"
    };
}

/// Lua: `lead(token)`, run by the grant of a campaign (`ARGV[5]`, the candidate's value, is
/// set): records the leader in `KEYS[7]` as `<owner>\n<term>\n<value>` and tells observers
/// (`+` on the release channel, which waiters ignore). The grant also marks its own lock
/// waited for, so that its release publishes whether or not anyone waits.
macro_rules! lead {
    () => {
        r"
local function lead(token)
  redis.call('set', KEYS[7], ARGV[1] .. '\n' .. token .. '\n' .. ARGV[5])
  redis.call('publish', KEYS[1] .. ':released', '+')
end
"
    };
}

/// `KEYS`: lock, fence, semaphore limit, writers in line, their expiries, waited-for mark
/// (the keys of [`ACQUIRE_SHARED`], in its order), and for a campaign its leader record.
/// `ARGV`: owner, ttl ms, `1` for a queued waiter, `1` when the grant must carry a fencing
/// token, and for a campaign the candidate's value (see [`lead!`]). Returns an integer: when granted,
/// the fencing token (≥ 1), or 1 without fencing; `-1 - pttl` (≤ -1) when held with an
/// expiry; 0 when held without one. When readers or permits hold the lock and this queued
/// writer marked itself waiting, returns `{-1 - wait, 1}`, `wait` being when to try again at
/// the latest (the mark expires after the writer's ttl unless renewed by its next attempt).
/// When the lock or fence key holds another type, returns the string `lock <type>` /
/// `fence <type>`. The hot path is one or two commands (`SET NX PX`, and `INCR` when asked for
/// a token); types are only inspected when something is off.
///
/// This is the attempt of a caller that does not wait in the server's line: a `try_lock` or
/// a first attempt whose plain `SET NX` failed oddly, and every attempt on a RedLock master (whose waiters queue in their
/// Lockers: five masters' lines could disagree). A queued waiter (subscribed to the release
/// channel first) that finds the lock held by another writer marks it waited for: `|waited`
/// appended to the holder's value (`APPEND` keeps the expiry, and the mark goes with the
/// lock). One that finds readers or permits holding it drops the expired ones (taking the
/// lock if none is left), and otherwise adds itself to the writers in line — readers and
/// permits that come after it wait for it — and sets the waited-for mark, so their releases
/// publish. A queued waiter that is granted the lock leaves the line, and marks its own lock
/// when readers wait behind it. A lock held by this very owner is this request's own earlier
/// attempt that a frozen master applied late (RedLock retries with the same owner): it is
/// granted anew.
pub(super) static ACQUIRE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        arrival!(),
        lead!(),
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
  local mark = ARGV[5] ~= nil
  if ARGV[3] == '1' then
    redis.call('zrem', KEYS[4], ARGV[1])
    redis.call('zrem', KEYS[5], ARGV[1])
    if redis.call('exists', KEYS[6]) == 1 then mark = true end
  end
  if mark then redis.call('append', KEYS[1], '|waited') end
  if ARGV[5] then lead(token) end
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
if not redis.call('zscore', KEYS[4], ARGV[1]) then
  redis.call('zadd', KEYS[4], arrival(time), ARGV[1])
end
redis.call('zadd', KEYS[5], now + ttl, ARGV[1])
for i = 4, 5 do
  if redis.call('pttl', KEYS[i]) < ttl then redis.call('pexpire', KEYS[i], ttl) end
end
if redis.call('pttl', KEYS[6]) < ttl then redis.call('set', KEYS[6], '1', 'PX', ttl) end
local renew_by = math.floor(ttl / 2)
if wait < 0 or wait > renew_by then wait = renew_by end
return {-1 - wait, 1}
"
    ))
});

/// The attempt of a writer waiting in the server's line (single server and Cluster).
/// `KEYS`: those of [`ACQUIRE`]. `ARGV`: owner, ttl ms, `1` when the grant must carry a
/// fencing token, the claim window in ms (see [`hand_off!`]), and for a campaign the
/// candidate's value (see [`lead!`]). Returns the token (≥ 1, or 1
/// without fencing) when granted, `{-1 - wait, 1}` when the writer is (now) in line, `wait`
/// being when to try again at the latest, or `lock <type>` / `fence <type>`.
///
/// The line is `KEYS[4]` (owner by place) and `KEYS[5]` (owner by expiry: the writer's ttl
/// from its last attempt, renewed by the next one, which comes at half its ttl at the latest;
/// a writer that vanished leaves the line then). A writer is granted the lock when it was
/// handed to it (`~<owner>`), or when the lock is free and nobody is ahead of it in line; a
/// free lock with someone ahead is handed to that one. Otherwise the writer joins the line
/// (keeping its place if it had one) and marks the lock waited for, so that its release hands
/// it on. A writer granted while others are in line (or readers wait) marks its own lock.
pub(super) static ACQUIRE_FAIR: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        arrival!(),
        hand_off!(),
        lead!(),
        r"
local me, ttl, window = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[4])
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local function grant(marked)
  redis.call('set', KEYS[1], me, 'PX', ttl)
  local token = 1
  if ARGV[3] == '1' then
    token = redis.pcall('incr', KEYS[2])
    if type(token) == 'table' or token < 1 then
      redis.call('del', KEYS[1])
      return 'fence ' .. redis.call('type', KEYS[2])['ok']
    end
  end
  redis.call('zrem', KEYS[4], me)
  redis.call('zrem', KEYS[5], me)
  if marked or ARGV[5] or redis.call('zcard', KEYS[4]) > 0 or redis.call('exists', KEYS[6]) == 1 then
    redis.call('append', KEYS[1], '|waited')
  end
  if ARGV[5] then lead(token) end
  return token
end
local function wait_in_line(wait)
  if not redis.call('zscore', KEYS[4], me) then
    redis.call('zadd', KEYS[4], arrival(time), me)
  end
  redis.call('zadd', KEYS[5], now + ttl, me)
  for i = 4, 5 do
    if redis.call('pttl', KEYS[i]) < ttl then redis.call('pexpire', KEYS[i], ttl) end
  end
  local renew_by = math.floor(ttl / 2)
  if wait < 0 or wait > renew_by then wait = renew_by end
  return {-1 - wait, 1}
end
local holder = redis.pcall('get', KEYS[1])
if type(holder) == 'string' then
  local marked = string.sub(holder, -7) == '|waited'
  if marked then holder = string.sub(holder, 1, -8) end
  -- Handed to this writer; or its own earlier attempt, applied late: granted anew.
  if holder == '~' .. me or holder == me then return grant(marked) end
  if not marked then redis.call('append', KEYS[1], '|waited') end
  if string.sub(holder, 1, 1) == '~' then
    -- Handed to another. The writer after that one asks again when the window ends, in
    -- case it is not claimed (told so by the hand-off, or here if it joined just now).
    local reply = wait_in_line(-1)
    if redis.call('zrank', KEYS[4], me) == 1 then
      local left = redis.call('pttl', KEYS[1])
      if left >= 0 and left < math.floor(ttl / 2) then reply[1] = -1 - left end
    end
    return reply
  end
  return wait_in_line(redis.call('pttl', KEYS[1]))
end
if holder then
  -- Not a string: readers' or permits' sorted set, or another application's key.
  local kind = redis.call('type', KEYS[1])['ok']
  if kind ~= 'zset' then return 'lock ' .. kind end
  redis.call('zremrangebyscore', KEYS[1], '-inf', now)
  if redis.call('exists', KEYS[1]) == 1 then
    if redis.call('pttl', KEYS[6]) < ttl then redis.call('set', KEYS[6], '1', 'PX', ttl) end
    return wait_in_line(redis.call('pttl', KEYS[1]))
  end
  redis.call('del', KEYS[3])
end
-- Free: the first writer in line that has not expired takes it.
local gone = redis.call('zrangebyscore', KEYS[5], '-inf', now)
for _, owner in ipairs(gone) do redis.call('zrem', KEYS[4], owner) end
if #gone > 0 then redis.call('zremrangebyscore', KEYS[5], '-inf', now) end
local first = redis.call('zrange', KEYS[4], 0, 0)[1]
if not first or first == me then return grant(false) end
hand_off(KEYS[1], KEYS[4], KEYS[5], KEYS[6], nil, now, window)
return wait_in_line(window)
"
    ))
});

/// A lock set taken in one step, all or none. `KEYS`: per lock, its name and its fence's.
/// `ARGV`: per lock, owner, ttl ms, `1` when the grant must carry a fencing token. Returns
/// `{0, token...}` when every lock was free and is now taken (token 0 without fencing), or
/// `{i, pttl}` naming the first lock (1-based) that was not free — held by a writer, readers
/// or permits, or kept — with its remaining time (-1 without an expiry), having taken
/// nothing. A fence that is not a counter undoes the grants and returns `{-i, 'fence <type>'}`
/// naming its lock. A free
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
      return {-i, 'fence ' .. redis.call('type', KEYS[2 * i])['ok']}
    end
  end
  granted[i + 1] = token
end
return granted
",
    )
});

/// `KEYS`: lock, fence, semaphore limit, writers in line, their expiries, waited-for mark.
/// `ARGV`: owner, ttl ms, `1` for a queued waiter, `1` when the grant must carry a fencing
/// token, the semaphore's limit (`0` for a reader), when this caller first asked (server µs,
/// `0` on its first attempt).
///
/// Grants a share (a reader, or one of the semaphore's permits) when the lock is free or held
/// by shares of the same kind (and, for a permit, fewer than the limit), and no writer that
/// joined the line before this caller first asked waits for it. A share is a member of the sorted set at the lock's
/// name, scored by its expiry in server milliseconds: expired ones are dropped here, so a
/// vanished holder's share frees at its ttl; the set expires with its last member. A
/// semaphore's limit is stored beside it and expires with it.
///
/// Returns `{1, token, first asked}` when granted (token 0 without fencing); `{0, wait, first
/// asked}` when not, `wait` being when to try again at the latest (-1: unknown); `{2, stored
/// limit}` when the semaphore has another limit; `lock <type>` / `fence <type>` for a key of
/// another type. A queued waiter that finds the lock free but a writer in line before it
/// tells that writer (`><owner>`, as a hand-off does). A queued waiter that finds a writer holding the lock marks it waited for
/// (`|waited`, as writers do); one that waits for anything sets the waited-for mark
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
if arrival == 0 then arrival = tonumber(time[1]) * 1000000 + tonumber(time[2]) end
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
  -- Queued: sets the mark that it waits, and comes back to renew it before it expires.
  return held(redis.call('pttl', KEYS[1]))
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
  if count == 0 and queued then
    -- Free, and a writer in line first: make sure it heard (it may not be its Locker's first
    -- waiter, which a release that names nobody wakes).
    redis.call('publish', KEYS[1] .. ':released', '>' .. redis.call('zrange', KEYS[4], 0, 0)[1] .. '\n')
  end
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

/// `KEYS`: lock. `ARGV`: owner. The release of a lock on a RedLock master, whose waiters
/// queue in their Lockers: deletes the lock if `owner` holds it (marked waited for or not),
/// and publishes the release on `KEYS[1]:released`, with the owner as the message, only when
/// it was marked: an uncontended release is the raw compare-and-delete with the same key and
/// argument, and nothing more. Returns how many subscribers heard it (0 when not published),
/// or -1 if `owner` did not hold the lock.
pub(super) static RELEASE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        r"
local holder = redis.pcall('get', KEYS[1])
if holder == ARGV[1] then
  redis.call('del', KEYS[1])
  return 0
elseif holder ~= ARGV[1] .. '|waited' then
  return -1
end
redis.call('del', KEYS[1])
return redis.call('publish', KEYS[1] .. ':released', ARGV[1])
",
    )
});

/// `KEYS`: lock, writers in line, their expiries, waited-for mark. `ARGV`: owner, claim window
/// ms. The release of a lock on a single server or Cluster: deletes the lock if `owner`
/// holds it; when it was marked waited for, hands it to the first writer in line (see
/// [`hand_off!`]). An uncontended release is the raw compare-and-delete. Returns how many
/// subscribers heard the hand-off (0 when there was none), or -1 if `owner` did not hold the
/// lock.
pub(super) static RELEASE_FAIR: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        hand_off!(),
        r"
local holder = redis.pcall('get', KEYS[1])
if holder == ARGV[1] then
  redis.call('del', KEYS[1])
  return 0
elseif holder ~= ARGV[1] .. '|waited' then
  return -1
end
redis.call('del', KEYS[1])
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
return hand_off(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], now, tonumber(ARGV[2]))
"
    ))
});

/// A lock set's release: [`RELEASE_FAIR`] for every lock at once (single server). `KEYS`: per
/// lock, the four keys of [`RELEASE_FAIR`]. `ARGV`: the owners, then the claim window ms.
/// Returns, per lock, how many subscribers heard its hand-off (0 when there was none), or -1
/// if its owner did not hold it. One `MGET` (a lock that is not a string, readers' or
/// permits', reads as nil: not held) and one `DEL` of the locks held, then the locks waited
/// for are handed on.
pub(super) static RELEASE_ALL: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        hand_off!(),
        r"
local n = #KEYS / 4
local locks = {}
for i = 1, n do locks[i] = KEYS[4 * i - 3] end
local holders = redis.call('mget', unpack(locks))
local heard, held, handed = {}, {}, {}
for i = 1, n do
  heard[i] = -1
  if holders[i] == ARGV[i] then
    held[#held + 1] = locks[i]
    heard[i] = 0
  elseif holders[i] == ARGV[i] .. '|waited' then
    held[#held + 1] = locks[i]
    handed[#handed + 1] = i
  end
end
if #held > 0 then redis.call('del', unpack(held)) end
if #handed > 0 then
  local time = redis.call('time')
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  local window = tonumber(ARGV[n + 1])
  for _, i in ipairs(handed) do
    local k = 4 * i
    heard[i] = hand_off(KEYS[k - 3], KEYS[k - 2], KEYS[k - 1], KEYS[k], ARGV[i], now, window)
  end
end
return heard
"
    ))
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

/// `KEYS`: lock, writers in line, their expiries, waited-for mark. `ARGV`: owner, claim
/// window ms. A writer that gave up waiting (out of time, or cancelled) leaves the line; if
/// the lock had just been handed to it, hands it on (see [`hand_off!`]); otherwise, if it was
/// in line and readers or permits wait behind it, publishes on `KEYS[1]:released` so they try
/// again. Returns how many subscribers heard it.
pub(super) static WITHDRAW_WRITER: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        hand_off!(),
        r"
local removed = redis.call('zrem', KEYS[2], ARGV[1])
redis.call('zrem', KEYS[3], ARGV[1])
local holder = redis.pcall('get', KEYS[1])
if type(holder) == 'string' then
  if string.sub(holder, -7) == '|waited' then holder = string.sub(holder, 1, -8) end
  if holder == '~' .. ARGV[1] then
    redis.call('del', KEYS[1])
    local time = redis.call('time')
    local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
    return hand_off(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], now, tonumber(ARGV[2]))
  end
end
if removed == 1 and redis.call('exists', KEYS[4]) == 1 then
  return redis.call('publish', KEYS[1] .. ':released', ARGV[1])
end
return 0
"
    ))
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

/// `KEYS`: lock, leader record. `ARGV`: owner, value. An election's leader shows a new value:
/// if `owner` holds the lock (not merely handed it) and the record is its own, rewrites the
/// record's value (owner and term kept) and tells observers. Returns 1, or 0 when `owner`
/// does not lead.
pub(super) static PROCLAIM: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        r"
local holder = redis.pcall('get', KEYS[1])
if type(holder) ~= 'string' then return 0 end
if string.sub(holder, -7) == '|waited' then holder = string.sub(holder, 1, -8) end
if holder ~= ARGV[1] then return 0 end
local record = redis.pcall('get', KEYS[2])
if type(record) ~= 'string' then return 0 end
local owner, term = string.match(record, '^([^\n]*)\n([^\n]*)\n')
if owner ~= ARGV[1] then return 0 end
redis.call('set', KEYS[2], owner .. '\n' .. term .. '\n' .. ARGV[2])
redis.call('publish', KEYS[1] .. ':released', '+')
return 1
",
    )
});

/// `KEYS`: lock, semaphore limit, writers in line, their expiries, leader record. What holds the lock and
/// who waits in line, read in one atomic step for
/// [`inspect`](crate::backend::LockBackend::inspect): `{'lock', 0, {owner, pttl}, line}` for a
/// writer (the owner without its waited-for mark; a lock handed to a writer in line shows
/// that writer; pttl -1 without an expiry), `{'shares', limit, {owner, ms left, …}, line}` for
/// the readers or permits not yet expired (limit 0 for readers), `{'none', 0, {}, line}` when
/// free, and `{<type>, 0, {}, {}}` when the name holds another type. `line`: the writers in
/// line that have not expired, first first. A fifth element: for a writer that leads an
/// election (its own leader record), `<term>\n<value>`; otherwise empty.
pub(super) static INSPECT: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        r"
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local line = {}
for _, owner in ipairs(redis.call('zrange', KEYS[3], 0, -1)) do
  local expiry = redis.call('zscore', KEYS[4], owner)
  if expiry and tonumber(expiry) > now then line[#line + 1] = owner end
end
local kind = redis.call('type', KEYS[1])['ok']
if kind == 'string' then
  local owner = redis.call('get', KEYS[1])
  if string.sub(owner, -7) == '|waited' then owner = string.sub(owner, 1, -8) end
  local led = ''
  if string.sub(owner, 1, 1) == '~' then
    owner = string.sub(owner, 2)
  else
    local record = redis.pcall('get', KEYS[5])
    if type(record) == 'string' and string.sub(record, 1, #owner + 1) == owner .. '\n' then
      led = string.sub(record, #owner + 2)
    end
  end
  return {'lock', 0, {owner, redis.call('pttl', KEYS[1])}, line, led}
end
if kind == 'none' then return {'none', 0, {}, line, ''} end
if kind ~= 'zset' then return {kind, 0, {}, {}, ''} end
local grants = {}
local shares = redis.call('zrangebyscore', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')
for i = 1, #shares, 2 do
  grants[#grants + 1] = shares[i]
  grants[#grants + 1] = tonumber(shares[i + 1]) - now
end
return {'shares', tonumber(redis.call('get', KEYS[2]) or '0'), grants, line, ''}
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
            &ACQUIRE_FAIR,
            &ACQUIRE_SHARED,
            &RELEASE,
            &RELEASE_FAIR,
            &RELEASE_ALL,
            &WITHDRAW_WRITER,
            &RELEASE_KEEPING,
            &RENEW,
            &INSPECT,
            &PROCLAIM,
        ] {
            assert!(script.code.contains(&format!("'{mark}'")));
            assert!(!script.code.replace(mark, "").contains("waited"));
        }
    }

    #[test]
    fn channel_suffix_in_scripts_matches_the_key_layout() {
        for script in [
            &RELEASE,
            &RELEASE_SHARED,
            &WITHDRAW_WRITER,
            &FORCE_RELEASE,
            &PROCLAIM,
        ] {
            assert!(
                script
                    .code
                    .contains(&format!("KEYS[1] .. '{}'", super::super::keys::RELEASED))
            );
        }
        assert!(hand_off!().contains(&format!("lock .. '{}'", super::super::keys::RELEASED)));
        assert!(lead!().contains(&format!("KEYS[1] .. '{}'", super::super::keys::RELEASED)));
    }
}
