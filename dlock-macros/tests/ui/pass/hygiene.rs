//! The expansion uses absolute paths and `__dlock_` names only: user items named like std's
//! (`Option`, `Result` aliases, `Box`, `Cow`, `Duration`, `format`) and parameters named like
//! the expansion's arguments (`locker`, `key`, `options`, `body`, `run`) change nothing.
#![allow(dead_code, non_camel_case_types)]

use dlock_core::{Error, Locker, distributed_lock};

struct Option;
struct Some;
struct None;
struct Box;
struct Cow;
struct Duration;
struct Wait;
struct Options;
struct std;
struct core;
macro_rules! format {
    ($($t:tt)*) => {
        compile_error!("the user's format! was called")
    };
}

type Result<T> = ::core::result::Result<T, Error>;

#[distributed_lock(key = "order:<key>:<options>:<body>:<run>", ttl = "10s", wait = "1s", locker = locker)]
async fn shadows(locker: &Locker, key: u8, options: u8, body: u8, run: u8) -> Result<u8> {
    Ok(key + options + body + run)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    assert_eq!(shadows(&Locker::memory(), 1, 2, 3, 4).await.unwrap(), 10);
}
