//! The trybuild suite: `ui/fail/*.rs` must fail to compile with exactly the `.stderr` next to
//! them (one file per diagnostic of `#[distributed_lock]`), `ui/pass/*.rs` must compile and run.
//!
//! The `.stderr` files are rustc's output on the toolchain this repo builds with; after a
//! deliberate change to a message (or a new rustc that words its own notes differently),
//! regenerate them with `TRYBUILD=overwrite cargo test -p dlock-macros --test ui` and read the
//! diff: every error must stay spanned on the offending token.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
}
