//! [`LockInfo`]: what a lock service says about one lock, for operators.

use std::time::Duration;

use crate::{Kept, LockMode};

/// Who holds one lock, and who waits for it, as the lock service saw it at one moment
/// ([`Locker::inspect`](crate::Locker::inspect)).
///
/// A view for operators — dashboards, a CLI, an incident — **never for check-then-act**: by
/// the time it is read the lock may have changed hands. To act only when a lock is free, try
/// to take it ([`Locker::try_lock`](crate::Locker::try_lock)).
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> dlock_core::Result<()> {
/// let locker = dlock_core::Locker::memory();
/// let guard = locker.lock("order:42").await?;
/// let info = locker.inspect("order:42").await?;
/// assert_eq!(info.holders.len(), 1);
/// assert_eq!(info.holders[0].mode, dlock_core::LockMode::Exclusive);
/// # drop(guard);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The grants in force: one for a mutex or writer, one per reader or permit.
    pub holders: Vec<HolderInfo>,
    /// The waiters the service queues, in the order they will be served; `None` where
    /// waiters queue in each client rather than on the service (RedLock). Redis lists the
    /// writers in its line; its readers and permits wait in their Lockers and are not listed.
    pub waiters: Option<Vec<WaiterInfo>>,
}

impl LockInfo {
    /// Whether nobody holds the lock (at the moment it was read).
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(dlock_core::LockInfo::default().is_free());
    /// ```
    #[must_use]
    pub fn is_free(&self) -> bool {
        self.holders.is_empty()
    }
}

/// One grant of a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HolderInfo {
    /// The owner as the service stores it: a dlock owner id (`<locker id>:<grant number>`),
    /// or what a foreign client wrote (an `etcdctl lock` lease, a Curator node, a PostgreSQL
    /// backend's process id).
    pub owner: String,
    /// Exclusive, shared (a reader) or one permit of a semaphore.
    pub mode: LockMode,
    /// The grant's fencing token, where the service keeps one.
    pub fencing_token: Option<u64>,
    /// How long until the grant expires unless renewed; `None` where the service does not
    /// expire it by time (a PostgreSQL session's lock lasts as long as the session).
    pub expires_in: Option<Duration>,
    /// Set when this is no live grant but a record that keeps the key held after its holder
    /// let go ([`Kept`]): until [`expires_in`](Self::expires_in), by the server's clock.
    pub kept: Option<Kept>,
    /// The value the grant shows apart from its owner: an election candidate's
    /// ([`Locker::campaign`](crate::Locker::campaign)), where the service stores both (memory).
    /// etcd and ZooKeeper store one value per grant: a candidate's shows as
    /// [`owner`](Self::owner) there, and this is `None`.
    pub value: Option<String>,
}

impl HolderInfo {
    /// A grant; for backends' [`inspect`](crate::backend::LockBackend::inspect).
    ///
    /// # Examples
    ///
    /// ```
    /// use dlock_core::{HolderInfo, LockMode};
    /// let holder = HolderInfo::new("locker:ab12:1", LockMode::Shared);
    /// assert_eq!(holder.fencing_token, None);
    /// ```
    #[must_use]
    pub fn new(owner: impl Into<String>, mode: LockMode) -> Self {
        Self {
            owner: owner.into(),
            mode,
            fencing_token: None,
            expires_in: None,
            kept: None,
            value: None,
        }
    }

    /// With the value the grant shows (an election candidate's).
    ///
    /// # Examples
    ///
    /// ```
    /// use dlock_core::{HolderInfo, LockMode};
    /// let leader = HolderInfo::new("l:1", LockMode::Exclusive).with_value(Some("node-a".into()));
    /// assert_eq!(leader.value.as_deref(), Some("node-a"));
    /// ```
    #[must_use]
    pub fn with_value(mut self, value: Option<String>) -> Self {
        self.value = value;
        self
    }

    /// With a fencing token.
    #[must_use]
    pub const fn with_fencing_token(mut self, token: Option<u64>) -> Self {
        self.fencing_token = token;
        self
    }

    /// With the time left before it expires.
    #[must_use]
    pub const fn with_expires_in(mut self, left: Option<Duration>) -> Self {
        self.expires_in = left;
        self
    }

    /// Marks this holder as a record kept after its grant ended.
    ///
    /// # Examples
    ///
    /// ```
    /// use dlock_core::{HolderInfo, Kept, LockMode};
    /// let record = HolderInfo::new("l:1", LockMode::Exclusive).with_kept(Some(Kept::Done));
    /// assert_eq!(record.kept, Some(Kept::Done));
    /// ```
    #[must_use]
    pub const fn with_kept(mut self, kept: Option<Kept>) -> Self {
        self.kept = kept;
        self
    }
}

/// One queued request for a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WaiterInfo {
    /// The owner the grant will carry, where the service records it.
    pub owner: Option<String>,
    /// What it waits for.
    pub mode: LockMode,
}

impl WaiterInfo {
    /// A waiter; for backends' [`inspect`](crate::backend::LockBackend::inspect).
    ///
    /// # Examples
    ///
    /// ```
    /// use dlock_core::{LockMode, WaiterInfo};
    /// let waiter = WaiterInfo::new(Some("locker:ab12:2".into()), LockMode::Exclusive);
    /// assert_eq!(waiter.mode, LockMode::Exclusive);
    /// ```
    #[must_use]
    pub const fn new(owner: Option<String>, mode: LockMode) -> Self {
        Self { owner, mode }
    }
}
