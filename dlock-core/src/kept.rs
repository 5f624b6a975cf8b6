//! [`Kept`]: why a key stays held on the server after the grant that held it ended.

use std::fmt;

/// Why a key stays held after its holder let go: a record on the server, expiring by the
/// server's clock, that no process keeps alive (the holder may have exited). Every acquire of
/// the key is refused until it expires; [`LockInfo`](crate::LockInfo) shows it as a holder
/// whose [`kept`](crate::HolderInfo::kept) is set.
///
/// # Examples
///
/// ```
/// use dlock_core::Kept;
/// assert_eq!(Kept::Done.to_string(), "done");
/// assert_eq!("at_least".parse::<Kept>(), Ok(Kept::AtLeast));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Kept {
    /// The grant asked to hold the lock at least a while after it was granted
    /// ([`LockRequest::hold_at_least`](crate::LockRequest::hold_at_least), ShedLock's
    /// `lockAtLeastFor`) and its work ended sooner.
    AtLeast,
    /// A job ran to success for this fire ([`Locker::once`](crate::Locker::once)); the record
    /// says so for the retention, and later fires of the same id skip.
    Done,
}

impl Kept {
    /// The name stored on the server and shown by operators' tools: `at_least` or `done`.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(dlock_core::Kept::AtLeast.as_str(), "at_least");
    /// ```
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::AtLeast => "at_least",
            Self::Done => "done",
        }
    }
}

impl fmt::Display for Kept {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Kept {
    type Err = UnknownKept;

    /// Parses [`Kept::as_str`]'s names.
    ///
    /// # Errors
    ///
    /// [`UnknownKept`] for any other text (a record written by something else).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "at_least" => Ok(Self::AtLeast),
            "done" => Ok(Self::Done),
            _ => Err(UnknownKept),
        }
    }
}

/// A name that is not one of [`Kept`]'s.
///
/// # Examples
///
/// ```
/// assert!("later".parse::<dlock_core::Kept>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnknownKept;

impl fmt::Display for UnknownKept {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not `at_least` or `done`")
    }
}

impl std::error::Error for UnknownKept {}
