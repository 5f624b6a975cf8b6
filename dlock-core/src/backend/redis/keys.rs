//! Where a lock lives in Redis.
//!
//! Every Redis key and the channel of one lock share one hash tag, so the scripts touch a
//! single slot and never fail with `CROSSSLOT` on Redis Cluster:
//!
//! | what | Redis name (full lock key `K`) |
//! |---|---|
//! | the lock: a string holding the owner id, with a PX expiry | `{K}` |
//! | the fencing counter (`INCR`ed by each grant; kept forever) | `{K}:fence` |
//! | the release notification channel | `{K}:released` |
//!
//! Braces and `%` inside `K` are percent-escaped, so the tag is always the whole key.

/// The Redis names of one lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct LockKeys {
    pub(super) lock: String,
    pub(super) fence: String,
    pub(super) channel: String,
}

impl LockKeys {
    pub(super) fn new(full_key: &str) -> Self {
        let lock = if full_key.contains(['%', '{', '}']) {
            let tag = full_key
                .replace('%', "%25")
                .replace('{', "%7B")
                .replace('}', "%7D");
            format!("{{{tag}}}")
        } else {
            format!("{{{full_key}}}")
        };
        Self {
            fence: format!("{lock}:fence"),
            channel: format!("{lock}:released"),
            lock,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_carries_the_whole_key_as_its_hash_tag() {
        let keys = LockKeys::new("dlock:order:42");
        assert_eq!(keys.lock, "{dlock:order:42}");
        assert_eq!(keys.fence, "{dlock:order:42}:fence");
        assert_eq!(keys.channel, "{dlock:order:42}:released");
    }

    #[test]
    fn braces_in_keys_cannot_split_the_tag() {
        let keys = LockKeys::new("a}b{c%");
        assert_eq!(keys.lock, "{a%7Db%7Bc%25}");
        assert_ne!(LockKeys::new("a%7D").lock, LockKeys::new("a}").lock);
    }
}
