//! The Lua scripts: each lock operation is one atomic round trip.

use std::sync::LazyLock;

use redis::Script;

/// `KEYS`: lock, fence, barred. `ARGV`: owner, ttl ms, locker id.
/// Returns `{1, token}` when granted, `{0, pttl}` when held (pttl of the holder, or of the
/// releaser's bar when this Locker just released and others wait), `{-1, type}` when the lock
/// key holds another type, `{-2, type}` when the fence key does.
pub(super) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local lock_type = redis.call('type', KEYS[1])['ok']
if lock_type ~= 'none' and lock_type ~= 'string' then return {-1, lock_type} end
local fence_type = redis.call('type', KEYS[2])['ok']
if fence_type ~= 'none' and fence_type ~= 'string' then return {-2, fence_type} end
if redis.call('get', KEYS[3]) == ARGV[3] then
  return {0, math.max(redis.call('pttl', KEYS[3]), redis.call('pttl', KEYS[1]))}
end
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, redis.call('incr', KEYS[2])}
end
return {0, redis.call('pttl', KEYS[1])}
",
    )
});

/// `KEYS`: lock, barred. `ARGV`: owner, channel, locker id, bar ms (0: never bar).
/// Deletes the lock if `owner` holds it and publishes the release; if someone heard it, bars
/// this Locker from re-taking the lock for `bar ms` so the waiters get their turn.
/// Returns 1 if released, 0 if `owner` did not hold it.
pub(super) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.pcall('get', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('del', KEYS[1])
local listeners = redis.call('publish', ARGV[2], 'released')
if listeners > 0 and tonumber(ARGV[4]) > 0 then
  redis.call('set', KEYS[2], ARGV[3], 'PX', ARGV[4])
end
return 1
",
    )
});

/// `KEYS`: the lock keys of a batch. `ARGV`: their owners, then their ttls in ms.
/// Extends each lock still held by its owner; returns 1 or 0 per key. A key of the wrong type
/// counts as not held (`pcall`), so one bad key cannot fail the whole batch.
pub(super) static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
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

/// `KEYS`: lock. `ARGV`: channel. Deletes the lock whoever holds it and publishes the release.
/// Returns 1 if a holder was removed.
pub(super) static FORCE_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local removed = redis.call('del', KEYS[1])
if removed > 0 then redis.call('publish', ARGV[1], 'released') end
return removed
",
    )
});
