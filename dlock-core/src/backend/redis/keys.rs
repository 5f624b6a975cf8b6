//! Where a lock lives in Redis.
//!
//! Every Redis key and the channel of one lock share one hash tag, so the scripts touch a
//! single slot and never fail with `CROSSSLOT` on Redis Cluster:
//!
//! | what | Redis name (full lock key `K`) |
//! |---|---|
//! | the lock: a string holding the owner id (plus `\|waited` once a waiter marked it), with a PX expiry; `~<owner>` while it is handed to the first writer in line | `{K}` |
//! | the fencing counter (`INCR`ed by each grant; kept forever) | `{K}:fence` |
//! | readers or permits, instead of the string: a sorted set, member = owner id, score = that grant's expiry (server ms); the key expires with its last member | `{K}` |
//! | the limit of the semaphore whose permits `{K}` holds (expires with them) | `{K}:limit` |
//! | the writers in line (on a RedLock master: writers waiting for readers or permits to leave): member = owner id, score = its place (server µs when it joined, strictly increasing) | `{K}:writers` |
//! | the same writers, scored by when their place expires unless renewed by their next attempt | `{K}:writers:expiry` |
//! | "readers or permits wait": their releases publish, and a writer's release lets them race the line, while it lives | `{K}:waited` |
//! | an election's leader: `<owner>\n<term>\n<value>`, written by the grant of a campaign and by a proclaim, shown only while that owner holds `{K}` (kept forever, one per election name, like the fence) | `{K}:leader` |
//! | the release notification channel (an election's grants and proclaims publish `+` on it too) | `{K}:released` |
//!
//! Braces and `%` inside `K` are percent-escaped, so the tag is always the whole key.
//!
//! The names are written straight into the command being built ([`RedisName`] is a
//! [`ToRedisArgs`]).

use std::io::Write as _;

use redis::{RedisWrite, ToRedisArgs};

/// Suffix of the fencing counter's name.
pub(super) const FENCE: &str = ":fence";
/// Suffix of the semaphore limit's name.
pub(super) const LIMIT: &str = ":limit";
/// Suffix of the waiting writers' arrival set.
pub(super) const WRITERS: &str = ":writers";
/// Suffix of the waiting writers' expiry set.
pub(super) const WRITERS_EXPIRY: &str = ":writers:expiry";
/// Suffix of the mark that readers' and permits' releases must publish.
pub(super) const WAITED_FOR: &str = ":waited";
/// Appended to a lock's value by a waiter that found it held: its release must publish.
/// (The scripts spell it out; a test checks that they agree.)
#[cfg(test)]
pub(super) const WAITED: &str = "|waited";
/// Suffix of an election's leader record.
pub(super) const LEADER: &str = ":leader";
/// Suffix of the release channel's name (the scripts append it to `KEYS[1]` themselves).
pub(super) const RELEASED: &str = ":released";

/// One Redis name of the lock with full key `key`: `{key}` plus `suffix`, escaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RedisName<'a> {
    key: &'a str,
    suffix: &'static str,
}

impl<'a> RedisName<'a> {
    /// The lock itself: `{K}`.
    pub(super) const fn lock(key: &'a str) -> Self {
        Self { key, suffix: "" }
    }

    /// The fencing counter: `{K}:fence`.
    pub(super) const fn fence(key: &'a str) -> Self {
        Self { key, suffix: FENCE }
    }

    /// The limit of a semaphore: `{K}:limit`.
    pub(super) const fn limit(key: &'a str) -> Self {
        Self { key, suffix: LIMIT }
    }

    /// The writers in line, by place: `{K}:writers` (on a RedLock master: the writers waiting
    /// for readers or permits).
    pub(super) const fn writers(key: &'a str) -> Self {
        Self {
            key,
            suffix: WRITERS,
        }
    }

    /// The same writers, by when their place expires unless renewed: `{K}:writers:expiry`.
    pub(super) const fn writers_expiry(key: &'a str) -> Self {
        Self {
            key,
            suffix: WRITERS_EXPIRY,
        }
    }

    /// The mark that someone waits for the readers or permits of `{K}`: `{K}:waited`.
    pub(super) const fn waited_for(key: &'a str) -> Self {
        Self {
            key,
            suffix: WAITED_FOR,
        }
    }

    /// An election's leader record: `{K}:leader`.
    pub(super) const fn leader(key: &'a str) -> Self {
        Self {
            key,
            suffix: LEADER,
        }
    }

    /// The release channel: `{K}:released`.
    pub(super) const fn channel(key: &'a str) -> Self {
        Self {
            key,
            suffix: RELEASED,
        }
    }

    /// Hands the name to `emit` piece by piece, escapes included.
    fn write_pieces<E>(&self, mut emit: impl FnMut(&str) -> Result<(), E>) -> Result<(), E> {
        emit("{")?;
        let mut rest = self.key;
        // The three are ASCII, so they never occur inside a multi-byte character.
        while let Some(at) = rest.bytes().position(is_escaped) {
            emit(&rest[..at])?;
            emit(match rest.as_bytes()[at] {
                b'%' => "%25",
                b'{' => "%7B",
                _ => "%7D",
            })?;
            rest = &rest[at + 1..];
        }
        emit(rest)?;
        emit("}")?;
        emit(self.suffix)
    }
}

/// Appends the keys of a script that hands the lock on (a release, a withdrawal), for the
/// lock with full key `key`: lock, writers in line, their expiries, waited-for mark.
pub(super) fn line_keys(cmd: &mut redis::Cmd, key: &str) {
    cmd.arg(RedisName::lock(key))
        .arg(RedisName::writers(key))
        .arg(RedisName::writers_expiry(key))
        .arg(RedisName::waited_for(key));
}

/// Appends the keys every acquire script starts with, for the lock with full key `key`:
/// lock, fence, semaphore limit, writers in line, their expiries, waited-for mark.
pub(super) fn acquire_keys(cmd: &mut redis::Cmd, key: &str) {
    cmd.arg(RedisName::lock(key))
        .arg(RedisName::fence(key))
        .arg(RedisName::limit(key))
        .arg(RedisName::writers(key))
        .arg(RedisName::writers_expiry(key))
        .arg(RedisName::waited_for(key));
}

const fn is_escaped(byte: u8) -> bool {
    matches!(byte, b'%' | b'{' | b'}')
}

impl std::fmt::Display for RedisName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.write_pieces(|piece| f.write_str(piece))
    }
}

impl ToRedisArgs for RedisName<'_> {
    fn write_redis_args<W>(&self, out: &mut W)
    where
        W: ?Sized + RedisWrite,
    {
        let mut arg = out.writer_for_next_arg();
        // Writing into the command's own buffer cannot fail.
        let _ = self.write_pieces(|piece| arg.write_all(piece.as_bytes()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(name: RedisName<'_>) -> Vec<u8> {
        let mut written = name.to_redis_args();
        assert_eq!(written.len(), 1, "one argument");
        written.remove(0)
    }

    #[test]
    fn every_name_carries_the_whole_key_as_its_hash_tag() {
        assert_eq!(
            RedisName::lock("dlock:order:42").to_string(),
            "{dlock:order:42}"
        );
        assert_eq!(
            RedisName::fence("dlock:order:42").to_string(),
            "{dlock:order:42}:fence"
        );
        assert_eq!(
            RedisName::channel("dlock:order:42").to_string(),
            "{dlock:order:42}:released"
        );
        assert_eq!(args(RedisName::fence("a:b")), b"{a:b}:fence");
        assert_eq!(RedisName::limit("s").to_string(), "{s}:limit");
        assert_eq!(RedisName::writers("s").to_string(), "{s}:writers");
        assert_eq!(
            RedisName::writers_expiry("s").to_string(),
            "{s}:writers:expiry"
        );
        assert_eq!(RedisName::waited_for("s").to_string(), "{s}:waited");
    }

    #[test]
    fn a_special_byte_is_escaped_at_every_position() {
        for len in [1, 2, 17, 33] {
            let plain = "k".repeat(len);
            for at in 0..len {
                for (special, escaped) in [('%', "%25"), ('{', "%7B"), ('}', "%7D")] {
                    let mut key = plain.clone();
                    key.replace_range(at..=at, &special.to_string());
                    let expected = format!("{{{}{escaped}{}}}", &plain[..at], &plain[at + 1..]);
                    assert_eq!(RedisName::lock(&key).to_string(), expected);
                    assert_eq!(args(RedisName::lock(&key)), expected.as_bytes());
                }
            }
        }
    }

    #[test]
    fn braces_in_keys_cannot_split_the_tag() {
        assert_eq!(RedisName::lock("a}b{c%").to_string(), "{a%7Db%7Bc%25}");
        assert_eq!(args(RedisName::lock("a}b{c%")), b"{a%7Db%7Bc%25}");
        assert_ne!(
            RedisName::lock("a%7D").to_string(),
            RedisName::lock("a}").to_string()
        );
    }

    /// Every name of a lock, for the properties below.
    fn all_names(key: &str) -> Vec<String> {
        [
            RedisName::lock(key),
            RedisName::fence(key),
            RedisName::limit(key),
            RedisName::writers(key),
            RedisName::writers_expiry(key),
            RedisName::waited_for(key),
            RedisName::leader(key),
            RedisName::channel(key),
        ]
        .iter()
        .map(ToString::to_string)
        .collect()
    }

    /// The hash tag Redis Cluster hashes: what lies between the first `{` and the first `}`
    /// after it, unless that is empty (then Redis hashes the whole name).
    fn hash_tag(name: &str) -> Option<&str> {
        let open = name.find('{')?;
        let close = name[open + 1..].find('}')? + open + 1;
        Some(&name[open + 1..close]).filter(|tag| !tag.is_empty())
    }

    proptest::proptest! {
        #![proptest_config(crate::properties::config(2048))]

        /// However a key uses braces, `%` and the suffixes' own text, every name of its lock
        /// hashes on the whole (escaped) key, and no name of one lock is a name of another.
        #[test]
        fn a_key_never_reaches_another_locks_names_or_slot(
            a in "([{}%:|a]|:fence|:released|%7B|%7D|%25){1,8}",
            b in "([{}%:|a]|:fence|:released|%7B|%7D|%25){1,8}",
        ) {
            let (names_a, names_b) = (all_names(&a), all_names(&b));
            let tag = hash_tag(&names_a[0]).unwrap().to_owned();
            for name in &names_a {
                proptest::prop_assert_eq!(hash_tag(name), Some(tag.as_str()), "{}", name);
            }
            if a != b {
                for name in &names_a {
                    proptest::prop_assert!(!names_b.contains(name), "{} is a name of {:?} and {:?}", name, a, b);
                }
                proptest::prop_assert_ne!(hash_tag(&names_b[0]), Some(tag.as_str()));
            }
        }
    }
}
