//! Shared strings built with a single allocation.
//!
//! Lock keys and owner ids are made once per lock and then shared by the lease, the
//! watchdog and the reentrancy table; `format!(..).into()` would allocate twice (the `String`,
//! then the `Arc<str>` it is copied into) and go through the formatter. Short texts are
//! concatenated on the stack instead.

use std::sync::Arc;

/// How long a text may be and still be put together on the stack.
const STACK_BYTES: usize = 256;

/// `pieces` one after the other, as an `Arc<str>`: one allocation up to 256 bytes, two
/// beyond.
pub(crate) fn shared_concat(pieces: &[&str]) -> Arc<str> {
    let len: usize = pieces.iter().map(|piece| piece.len()).sum();
    if len > STACK_BYTES {
        return Arc::from(pieces.concat());
    }
    let mut bytes = [0_u8; STACK_BYTES];
    let mut at = 0;
    for piece in pieces {
        bytes[at..at + piece.len()].copy_from_slice(piece.as_bytes());
        at += piece.len();
    }
    // Whole `&str`s laid end to end are valid UTF-8.
    Arc::from(std::str::from_utf8(&bytes[..len]).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_long_texts_come_out_whole() {
        assert_eq!(&*shared_concat(&["a", ":", "002a"]), "a:002a");
        assert_eq!(&*shared_concat(&[]), "");
        let long = "é".repeat(300);
        let built = shared_concat(&["p:", &long, ":7"]);
        assert_eq!(&*built, format!("p:{long}:7"));
        let edge = "k".repeat(STACK_BYTES - 2);
        assert_eq!(&*shared_concat(&["p:", &edge]), format!("p:{edge}"));
    }
}
