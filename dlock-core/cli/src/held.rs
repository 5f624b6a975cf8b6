//! What `dlock run` holds — one lock, or a lock set (`--and`) — or `dlock elect` won: its keys
//! for messages and the command's environment, its lease, its release.

use std::future::Future;
use std::pin::Pin;
use std::time::Instant;

use dlock_core::{Leadership, LockGuard, LockSetGuard, LostReason};

/// The lock `dlock run` took, or the leadership `dlock elect` won.
#[derive(Debug)]
pub(crate) enum Held {
    One(LockGuard),
    /// KEY and every `--and` key, taken together.
    Set(LockSetGuard),
    /// A leadership: a lock underneath, its term the token.
    Leader(Leadership),
}

impl Held {
    /// The key, or the set's keys in the order they were taken, for messages.
    pub(crate) fn key(&self) -> String {
        match self {
            Self::One(guard) => guard.key().to_owned(),
            Self::Set(set) => set.keys().collect::<Vec<_>>().join("`, `"),
            Self::Leader(leadership) => leadership.name().to_owned(),
        }
    }

    /// What the command gets in its environment besides `DLOCK_BACKEND`: `DLOCK_KEY` (KEY)
    /// and its `DLOCK_FENCING_TOKEN`; for a set also `DLOCK_KEYS` and `DLOCK_FENCING_TOKENS`:
    /// every key, and its token, in the order they were taken, separated by spaces.
    pub(crate) fn env(&self, key: &str) -> Vec<(&'static str, String)> {
        let mut env = vec![("DLOCK_KEY", key.to_owned())];
        let token = match self {
            Self::One(guard) => guard.fencing_token(),
            Self::Set(set) => set.fencing_token(key),
            Self::Leader(leadership) => Some(leadership.term()),
        };
        if let Some(token) = token {
            env.push(("DLOCK_FENCING_TOKEN", token.to_string()));
        }
        if let Self::Leader(leadership) = self {
            env.push(("DLOCK_TERM", leadership.term().to_string()));
            env.push(("DLOCK_LEADER", leadership.value().to_owned()));
        }
        if let Self::Set(set) = self {
            env.push(("DLOCK_KEYS", set.keys().collect::<Vec<_>>().join(" ")));
            let tokens: Vec<String> = set
                .guards()
                .iter()
                .map(|guard| {
                    guard
                        .fencing_token()
                        .map_or_else(String::new, |t| t.to_string())
                })
                .collect();
            env.push(("DLOCK_FENCING_TOKENS", tokens.join(" ")));
        }
        env
    }

    /// Resolves when the lease (any of the set's) is lost.
    pub(crate) fn lost(&self) -> Pin<Box<dyn Future<Output = LostReason> + Send>> {
        match self {
            Self::One(guard) => Box::pin(guard.lost()),
            Self::Set(set) => Box::pin(set.lost()),
            Self::Leader(leadership) => Box::pin(leadership.lost()),
        }
    }

    /// When the lease (the first of the set's) runs out unless renewed.
    pub(crate) fn expires_at(&self) -> Instant {
        match self {
            Self::One(guard) => guard.expires_at(),
            Self::Leader(leadership) => leadership.guard().expires_at(),
            Self::Set(set) => set
                .guards()
                .iter()
                .map(LockGuard::expires_at)
                .min()
                .unwrap_or_else(Instant::now),
        }
    }

    pub(crate) fn is_held(&self) -> bool {
        match self {
            Self::One(guard) => guard.is_held(),
            Self::Set(set) => set.is_held(),
            Self::Leader(leadership) => leadership.is_leader(),
        }
    }

    /// Releases the lock (every key of the set).
    pub(crate) async fn release(self) -> dlock_core::Result<()> {
        match self {
            Self::One(guard) => guard.release().await,
            Self::Set(set) => set.release().await,
            Self::Leader(leadership) => leadership.resign().await,
        }
    }
}
