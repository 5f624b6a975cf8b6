//! The Lua scripts: each lock operation is one atomic round trip.

use std::sync::LazyLock;

use redis::Script;

/// `KEYS`: lock, fence. `ARGV`: owner, ttl ms.
/// Returns `{1, token}` when granted, `{0, pttl}` when held, `{-1, type}` when the lock key
/// holds another type, `{-2, type}` when the fence key does. The hot path is two commands
/// (SET NX PX, INCR); types are only inspected when something is off.
pub(super) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local token = redis.pcall('incr', KEYS[2])
  if type(token) == 'table' then
    redis.call('del', KEYS[1])
    return {-2, redis.call('type', KEYS[2])['ok']}
  end
  return {1, token}
end
local pttl = redis.call('pttl', KEYS[1])
if pttl == -1 then
  local kind = redis.call('type', KEYS[1])['ok']
  if kind ~= 'string' then return {-1, kind} end
end
return {0, pttl}
",
    )
});

/// `KEYS`: lock. `ARGV`: owner, channel, message (the releasing Locker's id).
/// Deletes the lock if `owner` holds it and publishes the release. Returns how many
/// subscribers heard it (the releasing Locker bars itself when others did), or -1 if `owner`
/// did not hold the lock.
pub(super) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.pcall('get', KEYS[1]) ~= ARGV[1] then return -1 end
redis.call('del', KEYS[1])
return redis.call('publish', ARGV[2], ARGV[3])
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
