//! What the test binaries share, pulled in by each one the same way (`mod support;`): a
//! Locker connected as an application connects one, other programs run and signalled, a
//! condition waited for, and a fault-injecting decorator of the memory backend.

#![allow(dead_code, unreachable_pub, unused_imports)]

pub mod connect;
mod faulty;
pub mod processes;

pub use faulty::Faulty;
