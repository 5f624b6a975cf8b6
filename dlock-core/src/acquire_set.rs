//! How a Locker takes a lock set: the keys in one canonical order (their full backend keys,
//! sorted, each once), all or none, under one deadline for the set — in one step where the
//! backend can take the set together, else one key after another.
//!
//! Why no set can deadlock another: every set takes its keys in the same order, so a set
//! that waits for key `k` holds only keys sorting before `k`, and the holder it waits for
//! never waits for one of them. The one way around that is a task that already holds a key
//! and then asks for a set with keys sorting *before* it; such a set may take those keys only
//! if they are free at once, and is refused with [`Error::LockOrder`] instead of waiting.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::acquire::{AcquireOptions, Checked, Unconfirmed};
use crate::guard::LockGuard;
use crate::lease::{AcquireAllOutcome, AcquireRequest, OwnerId};
use crate::lock_set::{SetMember, SetOptions};
use crate::mode::LockKind;
use crate::reentrancy::HolderId;
use crate::set_guard::LockSetGuard;
use crate::state::LockerState;
use crate::{Error, LockMode, Result};

/// A member of the set, checked and placed.
struct Member<'a> {
    options: AcquireOptions<'a>,
    checked: Checked,
}

impl LockerState {
    /// Takes every key of `options` as one set: see the module's docs.
    pub(crate) async fn acquire_set(&self, options: SetOptions<'_>) -> Result<LockSetGuard> {
        if self.shut_down.load(Ordering::SeqCst) {
            return Err(Error::ShutDown);
        }
        let started = Instant::now();
        let wait = options.wait.unwrap_or(self.config.wait);
        let members = self.canonical(&options, wait)?;
        let holder = HolderId::current();
        if self.capabilities.together
            && let Some(guards) = self.take_together(&members, holder, wait, started).await?
        {
            return Ok(LockSetGuard::new(guards));
        }
        let deadline = wait.map(|wait| started + wait);
        self.take_in_order(members, holder, deadline, started)
            .await
            .map(LockSetGuard::new)
    }

    /// The members in canonical order (by full key), each key once — a key named twice
    /// is held in the stronger mode — every one checked before any round trip.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for an empty set or a key named in two modes that do not merge
    /// (a permit and a lock); every member's [`check`](Self::check) error.
    fn canonical<'a>(
        &self,
        options: &'a SetOptions<'a>,
        wait: Option<Duration>,
    ) -> Result<Vec<Member<'a>>> {
        if options.members.is_empty() {
            return Err(Error::config(
                "keys",
                "[]",
                "a lock set needs at least one key",
            ));
        }
        let mut members = options
            .members
            .iter()
            .map(|member| {
                let options = member_options(options, member, Some(wait));
                let checked = self.check(&options)?;
                Ok(Member { options, checked })
            })
            .collect::<Result<Vec<_>>>()?;
        members.sort_by(|a, b| a.checked.full_key.cmp(&b.checked.full_key));
        let mut merged: Vec<Member<'a>> = Vec::with_capacity(members.len());
        for member in members {
            match merged.last_mut() {
                Some(last) if last.checked.full_key == member.checked.full_key => {
                    merge_modes(&mut last.options, &member.options)?;
                }
                _ => merged.push(member),
            }
        }
        Ok(merged)
    }

    /// The whole set in one step when the backend can: the keys this task holds re-enter,
    /// the others are asked together. `None` when the backend cannot take this set together,
    /// or it was busy and the caller waits (then the ordered path takes it).
    ///
    /// # Errors
    ///
    /// [`Error::Busy`] when the set is busy and the caller makes one attempt; the backend's
    /// errors; a re-entry's errors.
    async fn take_together(
        &self,
        members: &[Member<'_>],
        holder: HolderId,
        wait: Option<Duration>,
        started: Instant,
    ) -> Result<Option<Vec<LockGuard>>> {
        let held = |member: &Member<'_>| {
            !matches!(member.options.mode, LockMode::Permit { .. })
                && self
                    .reentrancy
                    .find(holder, &member.checked.full_key)
                    .is_some()
        };
        let asked: Vec<&Member<'_>> = members.iter().filter(|member| !held(member)).collect();
        if asked.len() < 2 {
            return Ok(None); // one key or none to take: the ordered path is as short
        }
        let requests: Vec<AcquireRequest> =
            asked.iter().map(|member| self.request(member)).collect();
        let mut in_flight: Vec<Unconfirmed<'_>> = requests
            .iter()
            .map(|request| Unconfirmed::of(&self.keeper, request))
            .collect();
        let together = self.keeper.backend().acquire_together(&requests);
        let outcome = match tokio::time::timeout(self.keeper.operation_timeout(), together).await {
            Ok(outcome) => outcome,
            Err(_) => return Err(self.keeper.timeout("acquire")),
        };
        for request in &mut in_flight {
            request.answered_with(&outcome);
        }
        match outcome? {
            None => Ok(None),
            Some(AcquireAllOutcome::Busy { index, retry_after }) => {
                if wait != Some(Duration::ZERO) {
                    return Ok(None);
                }
                Err(Error::Busy {
                    key: asked[index].options.key.to_owned(),
                    waited: started.elapsed(),
                    retry_after,
                    by_this_locker: self.reentrancy.is_held(&asked[index].checked.full_key),
                })
            }
            Some(AcquireAllOutcome::Acquired(leases)) => {
                let mut leases = leases.into_iter();
                let mut taken = Taken::default();
                for member in members {
                    let guard = if held(member) {
                        self.reenter(&member.options, &member.checked, holder)?
                            .ok_or_else(|| held_then_gone(member))?
                    } else {
                        let lease = leases.next().ok_or_else(|| short_answer(self))?;
                        let meter = self.meter(&member.options);
                        meter.acquired("acquired", started.elapsed());
                        self.keep(&member.options, lease, holder, meter, started)?
                    };
                    taken.0.push(guard);
                }
                Ok(Some(taken.into_guards()))
            }
        }
    }

    /// The set one key after another, in canonical order, each waiting only for what is left
    /// of the set's deadline; a key sorting before one this task held already is only tried.
    /// On any failure the keys taken so far are released, last first.
    ///
    /// # Errors
    ///
    /// [`Error::Busy`] naming the key still busy at the deadline; [`Error::LockOrder`] for a
    /// busy key this task may not wait for; any acquire's errors.
    async fn take_in_order(
        &self,
        members: Vec<Member<'_>>,
        holder: HolderId,
        deadline: Option<Instant>,
        started: Instant,
    ) -> Result<Vec<LockGuard>> {
        let greatest_held = self.reentrancy.greatest_held_by(holder);
        let mut taken = Taken::default();
        for Member {
            mut options,
            checked,
        } in members
        {
            let re_enters = !matches!(options.mode, LockMode::Permit { .. })
                && self.reentrancy.find(holder, &checked.full_key).is_some();
            let behind = greatest_held
                .as_deref()
                .filter(|&greatest| !re_enters && *checked.full_key < *greatest);
            options.wait = Some(match (behind, deadline) {
                (Some(_), _) => Some(Duration::ZERO),
                // At least a moment: a wait, answered within the wait's slack.
                (None, Some(deadline)) if options.wait != Some(Some(Duration::ZERO)) => Some(
                    deadline
                        .saturating_duration_since(Instant::now())
                        .max(Duration::from_millis(1)),
                ),
                (None, Some(_)) => Some(Duration::ZERO),
                (None, None) => None,
            });
            match self.acquire(options).await {
                Ok(guard) => taken.0.push(guard),
                Err(error) => {
                    taken.release_last_first().await;
                    return Err(match (error, behind) {
                        (Error::Busy { key, .. }, Some(greatest)) => Error::LockOrder {
                            key,
                            held: greatest
                                .get(self.config.key_prefix.len()..)
                                .unwrap_or(greatest)
                                .to_owned(),
                        },
                        (
                            Error::Busy {
                                key,
                                retry_after,
                                by_this_locker,
                                ..
                            },
                            None,
                        ) => Error::Busy {
                            key,
                            waited: started.elapsed(),
                            retry_after,
                            by_this_locker,
                        },
                        (other, _) => other,
                    });
                }
            }
        }
        Ok(taken.into_guards())
    }

    /// The backend request of a member, under a fresh owner.
    fn request(&self, member: &Member<'_>) -> AcquireRequest {
        let grant = self.grants.fetch_add(1, Ordering::Relaxed) + 1;
        AcquireRequest::new(
            Arc::clone(&member.checked.full_key),
            OwnerId::numbered(&self.id, grant),
            member.checked.ttl,
        )
        .with_fencing(member.checked.fencing)
        .with_mode(member.options.mode)
        .with_kind(member.options.kind)
    }
}

/// A member's acquire options: the set's settings, the member's key and mode.
fn member_options<'a>(
    set: &'a SetOptions<'a>,
    member: &'a SetMember,
    wait: Option<Option<Duration>>,
) -> AcquireOptions<'a> {
    AcquireOptions {
        key: &member.key,
        ttl: set.ttl,
        wait,
        watchdog: set.watchdog,
        reentrant: true,
        fencing: set.fencing,
        max_hold: set.max_hold,
        hold_at_least: None,
        mode: member.mode,
        kind: member.kind,
        key_template: set.key_template,
    }
}

/// Merges a second naming of a key into the first: a read and a write lock make a write
/// lock; the same mode twice is one.
///
/// # Errors
///
/// [`Error::Config`] for a permit named next to a lock, or two permit limits.
fn merge_modes(kept: &mut AcquireOptions<'_>, again: &AcquireOptions<'_>) -> Result<()> {
    match (kept.mode, again.mode) {
        (a, b) if a == b => Ok(()),
        (LockMode::Shared, LockMode::Exclusive) | (LockMode::Exclusive, LockMode::Shared) => {
            kept.mode = LockMode::Exclusive;
            kept.kind = LockKind::ReadWrite;
            Ok(())
        }
        (a, b) => Err(Error::config(
            "keys",
            kept.key,
            format!("named twice in one lock set, as {a} and as {b}: name it once"),
        )),
    }
}

fn held_then_gone(member: &Member<'_>) -> Error {
    Error::LeaseLost {
        key: member.options.key.to_owned(),
        reason: crate::LostReason::NotOwner,
    }
}

fn short_answer(state: &LockerState) -> Error {
    Error::refused(
        state.capabilities.name,
        "acquire_together granted fewer leases than it was asked for",
    )
}

/// The guards taken so far; dropped (the acquire cancelled), they are released in the
/// background, last first.
#[derive(Default)]
struct Taken(Vec<LockGuard>);

impl Taken {
    /// Releases every guard now, last first (errors are traced by the release: the leases
    /// then end at their ttl).
    async fn release_last_first(&mut self) {
        while let Some(guard) = self.0.pop() {
            let key = guard.key().to_owned();
            if let Err(error) = guard.release().await {
                tracing::debug!(key, %error, "dlock: releasing part of a lock set that was not taken");
            }
        }
    }

    fn into_guards(mut self) -> Vec<LockGuard> {
        std::mem::take(&mut self.0)
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        while let Some(guard) = self.0.pop() {
            drop(guard);
        }
    }
}
