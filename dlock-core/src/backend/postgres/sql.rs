//! The statements dlock sends, written once. `{t}` is the fence table's quoted name.

use std::fmt::Write as _;

/// The statements of one backend, with its fence table filled in.
#[derive(Debug)]
pub(super) struct Statements {
    /// `$1` key → one row (`token`) once the exclusive lock is granted.
    pub(super) lock_fenced: String,
    /// As `lock_fenced`, shared.
    pub(super) lock_shared_fenced: String,
    /// `$1` key → one row (`token`) if the exclusive lock was free, none otherwise.
    pub(super) try_fenced: String,
    /// As `try_fenced`, shared.
    pub(super) try_shared_fenced: String,
    /// `$1` key → a new token for a lock granted already.
    pub(super) bump: String,
    /// `$1` semaphore key → its stored limit, if any.
    pub(super) stored_limit: String,
    /// `$1` semaphore key, `$2` candidate slot keys, `$3` limit, `$4` limit key, `$5` queue
    /// key → one row (`token`, `slot`) if a slot was free: the slot held, the limit key held
    /// shared, the queue key unlocked and the limit stored; none otherwise.
    pub(super) take_slot: String,
    /// `$1` key, `$2` seconds to keep (`float8`), `$3` why ([`Kept::as_str`](crate::Kept)),
    /// `$4` owner, `$5`/`$6` the key's halves → one row if this session holds the key
    /// exclusively: its record says it stays held until `$2` seconds from now by the server's
    /// clock. The caller unlocks the key after this commits.
    pub(super) keep: String,
    /// `$1` key → one row (`kept`, `kept_by`, seconds left as `float8`) while the key's kept
    /// record is live.
    pub(super) kept: String,
    /// As `kept`, and when there is a live record, unlocks `$1` (shared when `$2`; halves
    /// `$3`/`$4`) if this session holds it: what an acquire sends right after the statement
    /// that took the lock, so that a grant of a kept key is given back in the same round
    /// trip. A statement of its own, as a statement's snapshot is taken when it starts: one
    /// that also took the lock could miss a record committed just before the keeper unlocked.
    pub(super) kept_give_back: String,
    /// Deletes up to 64 records that have expired on keys that never had a fencing token (a
    /// once-per-fire key is not locked again after its retention, so nothing else would). The
    /// outer condition is checked again on a row a concurrent keep has just renewed. `now()`
    /// (the statement's start), not `clock_timestamp()`: a volatile function cannot use the
    /// partial index on `kept_until`, and a sweep scanned the whole table. Rows another
    /// statement has locked are skipped: a sweep never waits (it shares the release's round
    /// trip and its time bound).
    pub(super) sweep_kept: String,
    /// `$1` sorted keys (`int8[]`), `$2` whether each is shared (`bool[]`) → one row: whether
    /// every key was taken, and if not the first busy one (1-based) after the keys taken
    /// before it were unlocked again. Tries stop at the first busy key.
    pub(super) try_all: String,
    /// As `try_all`, and when every key was taken, each key's fence row bumped: the tokens,
    /// in the keys' order, as a third column.
    pub(super) try_all_fenced: String,
    /// `$1` keys, `$2` shared flags → one row (the longest time left, seconds; the first key
    /// kept, 1-based) if any key has a live kept record, having unlocked every key of `$1`
    /// this session holds: sent
    /// after `try_all` in the same round trip, as `kept_give_back` after a single try.
    pub(super) kept_give_back_all: String,
    /// `$1` key, `$2` value, `$3` the grant's token, `$4` its ttl in ms, `$5` the channel →
    /// one row if this session holds `$1` exclusively with that token: it leads the election
    /// `$1` with `$2` (recorded in the key's row, observers notified on commit).
    pub(super) show_leader: String,
    /// `$1` key, `$2` value, `$3` the grant's token, `$4` the channel → one row if the
    /// leader recorded is this session with that token and still holds `$1`: its new value.
    pub(super) proclaim: String,
    /// `$1` key → one row (`leader`, `leader_pid`, `leader_token`, `leader_ttl_ms`) when the
    /// key's row records the leader of its current token.
    pub(super) leader: String,
    /// Unlocks the exclusive lock `$1` of an election's leader, clears the key's leader
    /// record if it is this session's, and tells the observers (channel `$2`): `false` if this
    /// session did not hold the lock.
    pub(super) unlock_leader: String,
}

/// `pg_locks` has this session's exclusive grant of the `bigint` key `$1`.
const HOLDS_EXCLUSIVE: &str = "EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' \
     AND pid = pg_backend_pid() AND granted AND mode = 'ExclusiveLock' \
     AND classid::int8 = ($1 >> 32) & 4294967295 AND objid::int8 = $1 & 4294967295 \
     AND objsubid = 1)";

/// Unlocks every key `$1` (`int8[]`), shared where `$2` (`bool[]`) says: what an interrupted
/// set attempt leaves to undo (a key this session does not hold only draws a warning).
pub(super) const UNLOCK_ALL: &str = "SELECT count(CASE WHEN s THEN pg_advisory_unlock_shared(k) \
     ELSE pg_advisory_unlock(k) END) FROM unnest($1::int8[], $2::bool[]) AS u(k, s)";

/// Unlocks every key `$1` (`int8[]`), shared where `$2` (`bool[]`) says: one row per key, in
/// order, `false` where this session did not hold it.
pub(super) const UNLOCK_EACH: &str = "SELECT CASE WHEN s THEN pg_advisory_unlock_shared(k) \
     ELSE pg_advisory_unlock(k) END FROM unnest($1::int8[], $2::bool[]) WITH ORDINALITY \
     AS u(k, s, n) ORDER BY n";

/// The recursive try of a set's keys, and the verdict (see [`Statements::try_all`]).
const TRY_ALL: &str = "WITH RECURSIVE t(i, got) AS ( \
       SELECT 1, CASE WHEN ($2::bool[])[1] THEN pg_try_advisory_lock_shared(($1::int8[])[1]) \
         ELSE pg_try_advisory_lock(($1::int8[])[1]) END \
       UNION ALL \
       SELECT i + 1, CASE WHEN ($2::bool[])[i + 1] \
         THEN pg_try_advisory_lock_shared(($1::int8[])[i + 1]) \
         ELSE pg_try_advisory_lock(($1::int8[])[i + 1]) END \
       FROM t WHERE got AND i < cardinality($1::int8[]) \
     ), v AS (SELECT bool_and(got) AS taken, min(i) FILTER (WHERE NOT got) AS busy FROM t)";

/// The undo of the keys taken before a busy one, as a column of the verdict's row.
const UNDO_PARTIAL: &str = "(SELECT count(CASE WHEN ($2::bool[])[t.i] \
       THEN pg_advisory_unlock_shared(($1::int8[])[t.i]) \
       ELSE pg_advisory_unlock(($1::int8[])[t.i]) END) FROM t WHERE t.got AND NOT v.taken)";

/// Takes the exclusive lock `$1`, waiting.
pub(super) const LOCK: &str = "SELECT pg_advisory_lock($1)";
/// Takes the shared lock `$1`, waiting.
pub(super) const LOCK_SHARED: &str = "SELECT pg_advisory_lock_shared($1)";
/// Tries the exclusive lock `$1`: `true` if granted.
pub(super) const TRY: &str = "SELECT pg_try_advisory_lock($1)";
/// Tries the shared lock `$1`: `true` if granted.
pub(super) const TRY_SHARED: &str = "SELECT pg_try_advisory_lock_shared($1)";
/// Unlocks the exclusive lock `$1`: `false` if this session did not hold it.
pub(super) const UNLOCK: &str = "SELECT pg_advisory_unlock($1)";
/// Unlocks the shared lock `$1`.
pub(super) const UNLOCK_SHARED: &str = "SELECT pg_advisory_unlock_shared($1)";
/// Gives a permit back: its slot `$1`, its limit key `$2` (shared), and wakes the head of the
/// semaphore's queue listening on channel `$3`.
pub(super) const UNLOCK_PERMIT: &str =
    "SELECT pg_advisory_unlock($1), pg_advisory_unlock_shared($2), pg_notify($3, '')";
/// Sleeps `$1` seconds (`float8`) on the server: the session is busy, not idle.
pub(super) const SLEEP: &str = "SELECT pg_sleep($1)";
/// Bounds the next waits of this session: `$1` milliseconds as text (`0` = no bound).
pub(super) const SET_LOCK_TIMEOUT: &str = "SELECT set_config('lock_timeout', $1, false)";
/// Whether this session holds the advisory lock with halves `$1` (`classid`), `$2` (`objid`).
pub(super) const IS_GRANTED: &str = "SELECT EXISTS (SELECT 1 FROM pg_locks \
     WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted \
     AND classid::int8 = $1 AND objid::int8 = $2 AND objsubid = 1)";
/// A round trip that proves the session alive (and restarts its `idle_session_timeout`).
/// Nothing reads `pg_locks` here: that view copies the server's whole lock table, so a read
/// per renewal batch cost O(locks held) each and O(N²) per cadence for N held locks.
pub(super) const ALIVE: &str = "SELECT 1";

/// Every advisory lock of this database on one of the `bigint` keys `$1`, the grants first,
/// then the waits in the order they began: key, pid, mode, granted, the session's
/// `application_name`.
pub(super) const INSPECT: &str = "SELECT (l.classid::int8 << 32) | l.objid::int8, l.pid, \
     l.mode, l.granted, coalesce(a.application_name, '') \
     FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid \
     WHERE l.locktype = 'advisory' AND l.objsubid = 1 \
     AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
     AND ((l.classid::int8 << 32) | l.objid::int8) = ANY($1::int8[]) \
     ORDER BY l.granted DESC, l.waitstart NULLS LAST, l.pid";

impl Statements {
    pub(super) fn new(table: &str) -> Self {
        let upsert = |from: &str| {
            let mut sql = String::new();
            let _ = write!(
                sql,
                "INSERT INTO {table} AS f (lock_key, token) SELECT $1, 1 {from} \
                 ON CONFLICT (lock_key) DO UPDATE SET token = f.token + 1 RETURNING f.token"
            );
            sql
        };
        Self {
            lock_fenced: upsert("FROM (SELECT pg_advisory_lock($1)) AS l"),
            lock_shared_fenced: upsert("FROM (SELECT pg_advisory_lock_shared($1)) AS l"),
            try_fenced: upsert("WHERE pg_try_advisory_lock($1)"),
            try_shared_fenced: upsert("WHERE pg_try_advisory_lock_shared($1)"),
            bump: upsert(""),
            stored_limit: format!("SELECT permits FROM {table} WHERE lock_key = $1"),
            keep: format!(
                "INSERT INTO {table} AS f (lock_key, token, kept_until, kept, kept_by) \
                 SELECT $1, 0, clock_timestamp() + make_interval(secs => $2), $3, $4 \
                 WHERE EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' \
                   AND pid = pg_backend_pid() AND granted AND mode = 'ExclusiveLock' \
                   AND classid::int8 = $5 AND objid::int8 = $6 AND objsubid = 1) \
                 ON CONFLICT (lock_key) DO UPDATE SET kept_until = EXCLUDED.kept_until, \
                   kept = EXCLUDED.kept, kept_by = EXCLUDED.kept_by \
                 RETURNING true"
            ),
            kept: format!(
                "SELECT kept, kept_by, extract(epoch FROM kept_until - clock_timestamp())::float8 \
                 FROM {table} WHERE lock_key = $1 AND kept_until > clock_timestamp()"
            ),
            kept_give_back: format!(
                "SELECT kept, kept_by, extract(epoch FROM kept_until - clock_timestamp())::float8, \
                 CASE WHEN NOT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' \
                   AND pid = pg_backend_pid() AND granted AND classid::int8 = $3 \
                   AND objid::int8 = $4 AND objsubid = 1) THEN false \
                 WHEN $2 THEN pg_advisory_unlock_shared($1) ELSE pg_advisory_unlock($1) END \
                 FROM {table} WHERE lock_key = $1 AND kept_until > clock_timestamp()"
            ),
            sweep_kept: format!(
                "DELETE FROM {table} WHERE token = 0 AND kept_until <= now() \
                 AND lock_key IN (SELECT lock_key FROM {table} \
                   WHERE token = 0 AND kept_until <= now() LIMIT 64 FOR UPDATE SKIP LOCKED)"
            ),
            try_all: format!("{TRY_ALL} SELECT v.taken, v.busy, {UNDO_PARTIAL} FROM v"),
            try_all_fenced: format!(
                "{TRY_ALL}, b AS (INSERT INTO {table} AS f (lock_key, token) \
                   SELECT k, 1 FROM unnest($1::int8[]) AS k, v WHERE v.taken \
                   ON CONFLICT (lock_key) DO UPDATE SET token = f.token + 1 \
                   RETURNING f.lock_key, f.token) \
                 SELECT v.taken, v.busy, {UNDO_PARTIAL}, \
                   array(SELECT b.token FROM unnest($1::int8[]) WITH ORDINALITY AS u(k, n) \
                     JOIN b ON b.lock_key = u.k ORDER BY u.n) FROM v"
            ),
            kept_give_back_all: format!(
                "WITH live AS (SELECT lock_key, \
                   extract(epoch FROM kept_until - clock_timestamp())::float8 AS left_s \
                   FROM {table} \
                   WHERE lock_key = ANY($1::int8[]) AND kept_until > clock_timestamp()) \
                 SELECT max(left_s), (SELECT min(u.n)::int4 \
                     FROM unnest($1::int8[]) WITH ORDINALITY AS u(k, n) \
                     JOIN live l ON l.lock_key = u.k), \
                   (SELECT count(CASE WHEN s THEN pg_advisory_unlock_shared(k) \
                     ELSE pg_advisory_unlock(k) END) \
                   FROM unnest($1::int8[], $2::bool[]) AS u(k, s) \
                   WHERE EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' \
                     AND pid = pg_backend_pid() AND granted \
                     AND classid::int8 = (u.k >> 32) & 4294967295 \
                     AND objid::int8 = u.k & 4294967295 AND objsubid = 1)) \
                 FROM live HAVING count(*) > 0"
            ),
            show_leader: format!(
                "UPDATE {table} SET leader = $2, leader_pid = pg_backend_pid(), \
                 leader_token = $3, leader_ttl_ms = $4 \
                 WHERE lock_key = $1 AND token = $3 AND {HOLDS_EXCLUSIVE} \
                 RETURNING pg_notify($5, '') IS NULL"
            ),
            proclaim: format!(
                "UPDATE {table} SET leader = $2 WHERE lock_key = $1 AND token = $3 \
                 AND leader_token = $3 AND leader_pid = pg_backend_pid() AND {HOLDS_EXCLUSIVE} \
                 RETURNING pg_notify($4, '') IS NULL"
            ),
            leader: format!(
                "SELECT leader, leader_pid, leader_token, leader_ttl_ms FROM {table} \
                 WHERE lock_key = $1 AND leader_token = token"
            ),
            unlock_leader: format!(
                "WITH cleared AS (UPDATE {table} SET leader_token = NULL \
                   WHERE lock_key = $1 AND leader_pid = pg_backend_pid() RETURNING 1) \
                 SELECT pg_advisory_unlock($1) FROM pg_notify($2, '')"
            ),
            // The recursive CTE tries the candidate slots one by one and stops at the first it
            // gets (a plain `LIMIT` may evaluate the lock function on more rows than it
            // returns). The `RETURNING` list runs once per inserted row: only with a slot.
            take_slot: format!(
                "WITH RECURSIVE s(i, got) AS ( \
                   SELECT 1, pg_try_advisory_lock(($2::int8[])[1]) \
                   UNION ALL \
                   SELECT i + 1, pg_try_advisory_lock(($2::int8[])[i + 1]) FROM s \
                   WHERE NOT got AND i < cardinality($2::int8[]) \
                 ) \
                 INSERT INTO {table} AS f (lock_key, token, permits) \
                 SELECT $1, 1, $3 FROM s WHERE got \
                 ON CONFLICT (lock_key) DO UPDATE SET token = f.token + 1, permits = EXCLUDED.permits \
                 RETURNING f.token, (SELECT ($2::int8[])[i] FROM s WHERE got), \
                   pg_advisory_lock_shared($4), pg_advisory_unlock($5)"
            ),
        }
    }
}
