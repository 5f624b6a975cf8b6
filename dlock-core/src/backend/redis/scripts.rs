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

/// `KEYS`: lock, fence, hand-over mark. `ARGV`: owner, ttl ms, `1` for a queued waiter, `1`
/// when the grant must carry a fencing token. Returns an integer: when granted, the fencing
/// token (≥ 1), or 1 without fencing; `-1 - pttl` (≤ -1) when held with an expiry; 0 when
/// held without one. When the lock or fence key holds another type, returns the string
/// `lock <type>` / `fence <type>`. The hot path is one or two commands (`SET NX PX`, and
/// `INCR` when asked for a token); types are only inspected when something is off.
///
/// A queued waiter (subscribed to the release channel first) that finds the lock held marks
/// it waited for: `|waited` appended to the holder's value (`APPEND` keeps the expiry, and
/// the mark goes with the lock). A queued waiter that is granted the lock takes over the
/// hand-over mark a releaser left for its own barred waiters, marking its own lock.
pub(super) static ACQUIRE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        r"
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local token = 1
  if ARGV[4] == '1' then
    token = redis.pcall('incr', KEYS[2])
    if type(token) == 'table' or token < 1 then
      redis.call('del', KEYS[1])
      return 'fence ' .. redis.call('type', KEYS[2])['ok']
    end
  end
  if ARGV[3] == '1' and redis.call('del', KEYS[3]) == 1 then
    redis.call('append', KEYS[1], '|waited')
  end
  return token
end
local pttl = redis.call('pttl', KEYS[1])
if pttl < 0 then
  local kind = redis.call('type', KEYS[1])['ok']
  if kind ~= 'string' then return 'lock ' .. kind end
end
if ARGV[3] == '1' then
  local holder = redis.pcall('get', KEYS[1])
  if type(holder) == 'string' and string.sub(holder, -7) ~= '|waited' then
    redis.call('append', KEYS[1], '|waited')
  end
end
if pttl >= 0 then return -1 - pttl end
return 0
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

/// `KEYS`: lock. Deletes the lock whoever holds it and publishes the release on
/// `KEYS[1]:released` (always: this is rare). Returns 1 if a holder was removed.
pub(super) static FORCE_RELEASE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        r"
local removed = redis.call('del', KEYS[1])
if removed > 0 then redis.call('publish', KEYS[1] .. ':released', 'released') end
return removed
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
        for script in [&ACQUIRE, &RELEASE, &RENEW] {
            assert!(script.code.contains(&format!("'{mark}'")));
            assert!(!script.code.replace(mark, "").contains("waited"));
        }
    }

    #[test]
    fn channel_suffix_in_scripts_matches_the_key_layout() {
        for script in [&RELEASE, &FORCE_RELEASE] {
            assert!(
                script
                    .code
                    .contains(&format!("KEYS[1] .. '{}'", super::super::keys::RELEASED))
            );
        }
    }
}
