//! Shared strings built with a single allocation.
//!
//! Lock keys and owner ids are made once per lock and then shared by the lease, the
//! watchdog and the reentrancy table; `format!(..).into()` would allocate twice (the `String`,
//! then the `Arc<str>` it is copied into). Short texts are formatted on the stack instead.

use std::fmt::{self, Write as _};
use std::sync::Arc;

/// How long a text may be and still be formatted on the stack.
const STACK_BYTES: usize = 256;

/// Formats `args` into an `Arc<str>`: one allocation up to 256 bytes, two beyond.
pub(crate) fn shared_str(args: fmt::Arguments<'_>) -> Arc<str> {
    let mut text = StackText {
        bytes: [0; STACK_BYTES],
        len: 0,
        spilled: None,
    };
    // Writing to a StackText never fails.
    let _ = text.write_fmt(args);
    match text.spilled {
        Some(long) => Arc::from(long),
        // Only whole `&str` pieces are copied in, so the bytes are valid UTF-8.
        None => Arc::from(std::str::from_utf8(&text.bytes[..text.len]).unwrap_or_default()),
    }
}

/// A fixed buffer that moves to the heap when it runs out.
struct StackText {
    bytes: [u8; STACK_BYTES],
    len: usize,
    spilled: Option<String>,
}

impl fmt::Write for StackText {
    fn write_str(&mut self, piece: &str) -> fmt::Result {
        if let Some(long) = &mut self.spilled {
            long.push_str(piece);
        } else if let Some(room) = self.bytes.get_mut(self.len..self.len + piece.len()) {
            room.copy_from_slice(piece.as_bytes());
            self.len += piece.len();
        } else {
            let so_far = std::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default();
            let mut long = String::with_capacity(self.len + piece.len() + 64);
            long.push_str(so_far);
            long.push_str(piece);
            self.spilled = Some(long);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_long_texts_come_out_whole() {
        assert_eq!(&*shared_str(format_args!("{}:{:04x}", "a", 42)), "a:002a");
        let long = "é".repeat(300);
        let built = shared_str(format_args!("p:{long}:{}", 7));
        assert_eq!(&*built, format!("p:{long}:7"));
    }
}
