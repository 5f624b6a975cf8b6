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

use crate::acquire::{AcquireOptions, Checked, Unconfirmed, WAIT_SLACK};
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
        // The keys this task holds re-enter now, before anything is sent: a re-entry that
        // fails (an upgrade, a lost hold) fails the set with nothing asked of the server, and
        // what the task holds cannot change under the request.
        let mut nested: Vec<Option<LockGuard>> = Vec::with_capacity(members.len());
        for member in members {
            let held = !matches!(member.options.mode, LockMode::Permit { .. })
                && self
                    .reentrancy
                    .find(holder, &member.checked.full_key)
                    .is_some();
            nested.push(if held {
                self.reenter(&member.options, &member.checked, holder)?
            } else {
                None
            });
        }
        let asked: Vec<&Member<'_>> = members
            .iter()
            .zip(&nested)
            .filter_map(|(member, nested)| nested.is_none().then_some(member))
            .collect();
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
        let bound = match wait {
            // A wait's answer is due at its end plus the slack, the together attempt included.
            Some(wait) if !wait.is_zero() => (started + wait + WAIT_SLACK)
                .saturating_duration_since(Instant::now())
                .min(self.keeper.operation_timeout()),
            _ => self.keeper.operation_timeout(),
        };
        let outcome = match tokio::time::timeout(bound, together).await {
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
                if leases.len() != asked.len() {
                    for lease in leases {
                        self.keeper.release_once_answered(lease);
                    }
                    return Err(short_answer(self));
                }
                // Every lease becomes a guard (or, come too late, is released by its drop)
                // before any failure is looked at: none is left behind.
                let mut fresh: Vec<Result<LockGuard>> = asked
                    .iter()
                    .zip(leases)
                    .map(|(member, lease)| {
                        let meter = self.meter(&member.options);
                        meter.acquired("acquired", started.elapsed());
                        self.keep(&member.options, lease, holder, meter, started)
                    })
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                let mut taken = Taken::default();
                for nested in nested {
                    let guard = match nested {
                        Some(guard) => guard,
                        None => match fresh.pop() {
                            Some(Ok(guard)) => guard,
                            Some(Err(error)) => return Err(error), // the rest drop: released
                            None => unreachable!("one lease per member asked"),
                        },
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
        let waits = deadline != Some(started);
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
                    // Within what is left of the answer's slack; what does not finish by then
                    // goes on in the background.
                    let answer_by = deadline.map(|deadline| deadline + WAIT_SLACK);
                    taken.release_all(answer_by).await;
                    return Err(match (error, behind) {
                        // Only a set that would have waited is refused for its order.
                        (Error::Busy { key, .. }, Some(greatest)) if waits => Error::LockOrder {
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
        value: None,
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
    /// Releases every guard now, all at once (by the backend's one-step release where it
    /// has one); at `answer_by` the caller stops waiting and the rest goes on in the
    /// background (errors are traced by the release: the leases then end at their ttl).
    async fn release_all(&mut self, answer_by: Option<Instant>) {
        let set = LockSetGuard::new(std::mem::take(&mut self.0));
        let released = async {
            if let Err(error) = set.release().await {
                tracing::debug!(%error, "dlock: releasing part of a lock set that was not taken");
            }
        };
        match answer_by {
            Some(answer_by) => {
                let _ = tokio::time::timeout_at(answer_by.into(), released).await;
            }
            None => released.await,
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
