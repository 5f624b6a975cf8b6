//! Keys: the documented 64-bit advisory-lock key of a lock name, the keys a semaphore derives
//! from it, and the fence table's quoted name. Pure functions, unit-tested.

use sha2::{Digest, Sha256};

/// The advisory-lock key of `full_key`: the first 8 bytes of the SHA-256 of its UTF-8 bytes,
/// read as a big-endian signed 64-bit integer (PostgreSQL's `bigint`).
///
/// The SQL that computes the same number (PostgreSQL 11 and later):
///
/// ```sql
/// SELECT ('x' || encode(substr(sha256(convert_to('dlock:order:42', 'UTF8')), 1, 8), 'hex'))::bit(64)::bigint;
/// ```
pub(crate) fn advisory_key(full_key: &str) -> i64 {
    let digest = Sha256::digest(full_key.as_bytes());
    let mut first = [0_u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

/// The key the waiters of semaphore `full_key` queue on (its holder is the head of the queue,
/// the one that takes a free slot). `\n` cannot occur in a user's key, so derived keys never
/// meet a user's.
pub(super) fn queue_key(full_key: &str) -> i64 {
    advisory_key(&format!("{full_key}\n#queue"))
}

/// The keys of semaphore `full_key`'s first `limit` slots: a permit holds one of them.
pub(super) fn slot_keys(full_key: &str, limit: u32) -> Vec<i64> {
    (0..limit)
        .map(|slot| advisory_key(&format!("{full_key}\n#slot\n{slot}")))
        .collect()
}

/// The key every holder of semaphore `full_key` with limit `limit` holds shared, so that a
/// caller with another limit can see whether any holder is left (an exclusive try succeeds
/// only when none is).
pub(super) fn limit_key(full_key: &str, limit: u32) -> i64 {
    advisory_key(&format!("{full_key}\n#limit\n{limit}"))
}

/// The `LISTEN` channel a semaphore's releases notify: an identifier of 22 characters.
pub(super) fn channel(full_key: &str) -> String {
    format!("dlock_{:016x}", advisory_key(full_key).cast_unsigned())
}

/// `key` split as `pg_locks` shows a `bigint` advisory lock: `classid` the high 32 bits,
/// `objid` the low 32 bits (with `objsubid = 1`).
pub(super) fn to_halves(key: i64) -> (i64, i64) {
    let bits = key.cast_unsigned();
    (i64::from((bits >> 32) as u32), i64::from(bits as u32))
}

/// A table name as written in SQL: `schema.table` or `table`, each part double-quoted.
///
/// # Errors
///
/// The reason, when `name` is empty, has more than two parts, or a part is empty or longer
/// than PostgreSQL's 63-byte identifiers.
pub(super) fn quoted_table(name: &str) -> Result<String, String> {
    let parts: Vec<&str> = name.split('.').collect();
    if parts.len() > 2 {
        return Err("expected `table` or `schema.table`".to_owned());
    }
    let mut quoted = Vec::new();
    for part in parts {
        if part.is_empty() || part.len() > 63 || part.contains('\0') {
            return Err(format!(
                "`{part}` is not a PostgreSQL identifier (1 to 63 bytes)"
            ));
        }
        quoted.push(format!("\"{}\"", part.replace('"', "\"\"")));
    }
    Ok(quoted.join("."))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values computed by PostgreSQL 15 with the SQL in [`advisory_key`]'s docs (the harness
    /// test `hash_matches_sql` checks more against a live server).
    #[test]
    fn advisory_keys_are_the_first_eight_bytes_of_sha256() {
        // sha256("") = e3b0c442 98fc1c14 ...
        assert_eq!(advisory_key(""), 0xe3b0_c442_98fc_1c14_u64.cast_signed());
        // sha256("abc") = ba7816bf 8f01cfea ...
        assert_eq!(advisory_key("abc"), 0xba78_16bf_8f01_cfea_u64.cast_signed());
        assert!(
            advisory_key("abc") < 0,
            "the high bit makes a negative bigint"
        );
    }

    #[test]
    fn derived_keys_differ_from_each_other_and_from_the_lock() {
        let key = "dlock:jobs";
        let mut all = vec![advisory_key(key), queue_key(key), limit_key(key, 3)];
        all.extend(slot_keys(key, 3));
        let mut unique = all.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), all.len());
        assert_eq!(slot_keys(key, 2), slot_keys(key, 3)[..2]);
        assert_ne!(limit_key(key, 2), limit_key(key, 3));
    }

    /// The key of `pg_locks`' halves: [`to_halves`]' inverse.
    fn from_halves(classid: i64, objid: i64) -> i64 {
        #[expect(
            clippy::cast_sign_loss,
            clippy::cast_possible_truncation,
            reason = "oids are 32-bit unsigned; the halves are bit patterns"
        )]
        let (high, low) = (classid as u32, objid as u32);
        ((u64::from(high) << 32) | u64::from(low)).cast_signed()
    }

    #[test]
    fn halves_join_back_into_the_key() {
        for key in [0_i64, 1, -1, i64::MIN, i64::MAX, advisory_key("abc")] {
            let (high, low) = to_halves(key);
            assert!((0..=i64::from(u32::MAX)).contains(&high), "{high}");
            assert_eq!(from_halves(high, low), key);
        }
    }

    #[test]
    fn channels_are_short_identifiers() {
        let channel = channel("dlock:jobs");
        assert_eq!(channel.len(), 22);
        assert!(
            channel
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        );
    }

    #[test]
    fn table_names_are_quoted_and_checked() {
        assert_eq!(quoted_table("dlock_fence").unwrap(), "\"dlock_fence\"");
        assert_eq!(quoted_table("ops.Fence").unwrap(), "\"ops\".\"Fence\"");
        assert_eq!(quoted_table("a\"b").unwrap(), "\"a\"\"b\"");
        assert!(quoted_table("").is_err());
        assert!(quoted_table("a.b.c").is_err());
        assert!(quoted_table(".t").is_err());
        assert!(quoted_table(&"x".repeat(64)).is_err());
    }

    /// Every advisory key lock `key` may take or wait on.
    fn all_keys(key: &str) -> Vec<i64> {
        let mut keys = vec![advisory_key(key), queue_key(key)];
        for limit in 1..4 {
            keys.extend(slot_keys(key, limit));
            keys.push(limit_key(key, limit));
        }
        keys
    }

    proptest::proptest! {
        #![proptest_config(crate::properties::config(1024))]

        /// No advisory key of one lock (its own, or its semaphore's queue, slots and limits) is
        /// an advisory key of another: derived keys hash text with a `\n`, which no user key
        /// holds, so a key spelled like a derived one (`k\n#queue` is refused) cannot reach it.
        #[test]
        fn a_key_never_takes_another_locks_advisory_keys(
            a in "([a-z:]|#queue|#slot|#limit|[0-9]){1,6}",
            b in "([a-z:]|#queue|#slot|#limit|[0-9]){1,6}",
        ) {
            proptest::prop_assume!(a != b);
            let spelled_like_a_queue = format!("{}\n#queue", a);
            proptest::prop_assert!(crate::key::validate_key(&spelled_like_a_queue).is_err());
            let theirs = all_keys(&b);
            for key in all_keys(&a) {
                proptest::prop_assert!(!theirs.contains(&key), "{} meets {:?}", key, b);
            }
        }
    }
}
