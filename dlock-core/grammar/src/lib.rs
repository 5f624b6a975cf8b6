//! The key-template and duration grammars of dlock: one parser for each, shared by
//! `dlock-core` (config, environment, the `dlock` command line, dlock-tower's `path_key`) and
//! the `#[distributed_lock]` attribute (which checks its literals at compile time).
//!
//! **Not API-stable**: depend on `dlock-core`, which re-exports what users need. `std` only,
//! because a proc-macro crate compiles it too.
//!
//! ```
//! use std::time::Duration;
//! use dlock_grammar::duration;
//! assert_eq!(duration::parse("1m 30s"), Ok(Duration::from_secs(90)));
//! assert_eq!(duration::parse_wait("forever"), Ok(None));
//! let bare = duration::parse("10").unwrap_err();
//! assert!(bare.to_string().contains("`10` has no unit"), "{bare}");
//! ```

#![cfg_attr(dlock_nightly_doc, feature(doc_cfg))]

pub mod duration;
pub mod key_template;
