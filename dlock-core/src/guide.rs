//! Guides: what the README summarises, in depth — running in production, the command line,
//! each backend's layout and limits, and the measured performance and reliability. Nothing
//! here is code to call.

#[doc = include_str!("guide/production.md")]
pub mod production {}

#[doc = include_str!("guide/scheduled_jobs.md")]
pub mod scheduled_jobs {}

#[doc = include_str!("guide/command_line.md")]
pub mod command_line {}

#[doc = include_str!("guide/backends.md")]
pub mod backends {}

#[doc = include_str!("guide/performance.md")]
pub mod performance {}

#[doc = include_str!("guide/reliability.md")]
pub mod reliability {}
