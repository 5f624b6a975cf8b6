//! [`LockMode`]: the kinds of lock one key can be taken in.

use std::fmt;

/// How a lock is held: alone (a mutex, or the write side of a read-write lock), side by side
/// with other readers, or as one of a semaphore's permits.
///
/// Every mode gives the same [`LockGuard`](crate::LockGuard): each reader and each permit is a
/// grant of its own, with its own lease, watchdog renewal and fencing token.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
/// use dlock_core::{LockMode, Locker};
/// let locker = Locker::memory();
/// let reader = locker.read_lock("report").await?;
/// assert_eq!(reader.mode(), LockMode::Shared);
/// let permit = locker.semaphore("exports", 3).await?;
/// assert_eq!(permit.mode(), LockMode::Permit { limit: 3 });
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum LockMode {
    /// Held by one grant at a time: a mutex ([`Locker::lock`](crate::Locker::lock)) or the
    /// write side of a read-write lock ([`Locker::write_lock`](crate::Locker::write_lock)).
    #[default]
    Exclusive,
    /// Held side by side with other shared grants and never with an exclusive one: the read
    /// side of a read-write lock ([`Locker::read_lock`](crate::Locker::read_lock)).
    Shared,
    /// One of at most `limit` grants held at once: a semaphore's permit
    /// ([`Locker::semaphore`](crate::Locker::semaphore)). Every caller of one semaphore must
    /// name the same limit.
    Permit {
        /// How many permits the semaphore has (at least 1).
        limit: u32,
    },
}

impl LockMode {
    /// The lock kind, as errors and traces name it: `"exclusive"`, `"shared"` or `"permit"`.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(dlock_core::LockMode::Shared.name(), "shared");
    /// ```
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Exclusive => "exclusive",
            Self::Shared => "shared",
            Self::Permit { .. } => "permit",
        }
    }
}

impl fmt::Display for LockMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Permit { limit } => write!(f, "permit of {limit}"),
            other => f.write_str(other.name()),
        }
    }
}

/// Which lock recipe a grant belongs to: what a backend whose peers lay the recipes out
/// differently matches on to share their layout (ZooKeeper: Curator's `InterProcessMutex`
/// writes `lock-` nodes, its `InterProcessReadWriteLock` `__READ__` and `__WRIT__` nodes, its
/// `InterProcessSemaphoreV2` `lease-` nodes). Every backend makes a mutex and a write lock of
/// one key exclude each other whatever their layout; a backend with one layout ignores it.
///
/// The kind follows the [`LockMode`] unless set: a shared grant belongs to a read-write lock,
/// a permit to a semaphore, an exclusive grant to a mutex unless it is the write side of a
/// read-write lock ([`Locker::write_lock`](crate::Locker::write_lock)).
///
/// # Examples
///
/// ```
/// use dlock_core::LockMode;
/// use dlock_core::backend::LockKind;
/// assert_eq!(LockKind::of(LockMode::Shared), LockKind::ReadWrite);
/// assert_eq!(LockKind::of(LockMode::Exclusive), LockKind::Mutex);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum LockKind {
    /// A mutex ([`Locker::lock`](crate::Locker::lock)): exclusive grants only.
    #[default]
    Mutex,
    /// A read-write lock: shared grants (readers) and exclusive ones (the writer).
    ReadWrite,
    /// A counting semaphore: permits.
    Semaphore,
}

impl LockKind {
    /// The kind a grant in `mode` belongs to unless told otherwise: exclusive → mutex,
    /// shared → read-write lock, permit → semaphore.
    ///
    /// # Examples
    ///
    /// ```
    /// use dlock_core::LockMode;
    /// use dlock_core::backend::LockKind;
    /// assert_eq!(LockKind::of(LockMode::Permit { limit: 2 }), LockKind::Semaphore);
    /// ```
    #[must_use]
    pub const fn of(mode: LockMode) -> Self {
        match mode {
            LockMode::Exclusive => Self::Mutex,
            LockMode::Shared => Self::ReadWrite,
            LockMode::Permit { .. } => Self::Semaphore,
        }
    }
}
