//! Lock key validation and prefixing.

use std::sync::Arc;

use crate::{Error, Result};

/// The longest user key accepted, in bytes. Every backend can store a key this long (plus a
/// prefix) as a Redis key, an etcd key, a ZooKeeper node name or a PostgreSQL text value.
pub const MAX_KEY_LEN: usize = 512;

/// Checks a user key: non-empty, at most [`MAX_KEY_LEN`] bytes, no control characters.
///
/// # Errors
///
/// [`Error::InvalidKey`] naming the key and the rule it breaks.
///
/// # Examples
///
/// ```
/// assert!(dlock_core::backend::validate_key("order:42").is_ok());
/// assert!(dlock_core::backend::validate_key("").is_err());
/// assert!(dlock_core::backend::validate_key("a\nb").is_err());
/// ```
pub fn validate_key(key: &str) -> Result<()> {
    let reason = if key.is_empty() {
        "a lock key must not be empty"
    } else if key.len() > MAX_KEY_LEN {
        "a lock key must be at most 512 bytes"
    } else if key.chars().any(char::is_control) {
        "a lock key must not contain control characters"
    } else {
        return Ok(());
    };
    Err(Error::InvalidKey {
        key: shorten(key),
        reason,
    })
}

/// `key` as an error shows it: escaped (control and invisible characters spelled out), and
/// cut to 64 bytes of that with the key's length added, so a log line stays short.
fn shorten(key: &str) -> String {
    const SHOWN: usize = 64;
    let escaped = key.escape_debug().to_string();
    if escaped.len() <= SHOWN {
        return escaped;
    }
    let mut end = SHOWN;
    while !escaped.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &escaped[..end], key.len())
}

/// Checks a Locker's key prefix: at most 128 bytes, no control characters (it may be empty).
pub(crate) fn validate_prefix(prefix: &str) -> std::result::Result<(), &'static str> {
    if prefix.len() > 128 {
        Err("a key prefix must be at most 128 bytes")
    } else if prefix.chars().any(char::is_control) {
        Err("a key prefix must not contain control characters")
    } else {
        Ok(())
    }
}

/// The key a backend sees: the Locker's prefix followed by the user key.
pub(crate) fn full_key(prefix: &str, key: &str) -> Result<Arc<str>> {
    validate_key(key)?;
    Ok([prefix, key].concat().into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_oversized_keys_with_a_short_message() {
        let long = "k".repeat(MAX_KEY_LEN + 1);
        let err = validate_key(&long).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("at most 512 bytes"), "{text}");
        assert!(
            text.len() < 200,
            "message should not echo the whole key: {text}"
        );
    }

    #[test]
    fn accepts_the_longest_key_and_adds_the_prefix() {
        let longest = "k".repeat(MAX_KEY_LEN);
        assert_eq!(full_key("p:", &longest).unwrap().len(), MAX_KEY_LEN + 2);
    }

    #[test]
    fn control_characters_are_found_wherever_they_are_and_others_pass() {
        for bad in ["a\u{0}b", "tab\there", "del\u{7f}", "c1\u{85}x", "\u{9f}"] {
            assert!(validate_key(bad).is_err(), "{bad:?} passed");
        }
        for good in ["order:42", "café:ñ", "¢£¥:€", "日本:鍵", "a{b}%c"] {
            assert!(validate_key(good).is_ok(), "{good:?} refused");
        }
    }
}
