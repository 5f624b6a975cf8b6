//! Free loopback ports, each handed out at most once per process.

use std::collections::BTreeSet;
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::Mutex;

/// Ports are picked below this bound so that a Redis Cluster bus port (`port + 10000`) is valid.
const MAX_PORT: u16 = 55_000;
/// The offset of a Redis Cluster node's bus port from its client port.
const CLUSTER_BUS_OFFSET: u16 = 10_000;
/// How many kernel-assigned ports are tried before giving up.
const ATTEMPTS: usize = 500;

/// Every port handed out so far in this process.
static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// A free port on 127.0.0.1 that this process has not handed out before.
pub(crate) fn free_port() -> io::Result<u16> {
    pick(|_| true)
}

/// Like [`free_port`], but `port + 10000` (a Redis Cluster node's bus port) is free too.
pub(crate) fn free_cluster_port() -> io::Result<u16> {
    pick(|port| is_free(port + CLUSTER_BUS_OFFSET) && reserve(port + CLUSTER_BUS_OFFSET))
}

/// Whether `port` can be bound on 127.0.0.1 right now.
pub(crate) fn is_free(port: u16) -> bool {
    TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
}

/// Asks the kernel for free ports until one is below [`MAX_PORT`], unused by this process and
/// accepted by `also`.
fn pick(also: impl Fn(u16) -> bool) -> io::Result<u16> {
    for _ in 0..ATTEMPTS {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
            .local_addr()?
            .port();
        if port < MAX_PORT && !is_reserved(port) && also(port) && reserve(port) {
            return Ok(port);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrNotAvailable,
        "no free loopback port below 55000",
    ))
}

fn is_reserved(port: u16) -> bool {
    HANDED_OUT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .contains(&port)
}

/// Marks `port` as handed out; false if it already was.
fn reserve(port: u16) -> bool {
    HANDED_OUT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(port)
}
