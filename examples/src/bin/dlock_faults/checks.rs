//! The checkers: what one run's [`History`] says about safety and liveness.

use std::time::{Duration, Instant};

use crate::resource::{FaultWindow, History};

/// A kind of violation the checkers find.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Violation {
    /// Accepted critical sections (read to accepted write) of two workers overlapped.
    Overlaps,
    /// An accepted write's read was no longer the counter's value.
    LostUpdates,
    /// A grant showed a token another grant had already shown.
    DuplicateTokens,
    /// A write was sent while the worker's guard already said the lease was gone.
    WritesAfterLoss,
    /// The lock made no progress for longer than the liveness bound.
    Stalls,
}

impl Violation {
    pub(crate) const ALL: [Self; 5] = [
        Self::Overlaps,
        Self::LostUpdates,
        Self::DuplicateTokens,
        Self::WritesAfterLoss,
        Self::Stalls,
    ];

    pub(crate) const fn name(self) -> &'static str {
        match self {
            Self::Overlaps => "overlaps",
            Self::LostUpdates => "lost updates",
            Self::DuplicateTokens => "duplicate tokens",
            Self::WritesAfterLoss => "writes after loss",
            Self::Stalls => "stalls",
        }
    }
}

/// What one run did, and every violation with when the resource saw it.
#[derive(Debug, Clone)]
pub(crate) struct Findings {
    /// Grants that reached the resource (accepted or refused by the fence).
    pub(crate) acquisitions: usize,
    /// The faults injected, each with its window.
    pub(crate) faults: Vec<FaultWindow>,
    pub(crate) stale_rejected: u64,
    pub(crate) losses: u64,
    pub(crate) errors: u64,
    /// The longest time without progress, not counting time inside faults.
    pub(crate) longest_idle: Duration,
    pub(crate) violations: Vec<(Violation, Instant)>,
    /// When the run ended.
    pub(crate) finished: Instant,
}

impl Findings {
    /// How many violations of `kind` were found.
    pub(crate) fn count(&self, kind: Violation) -> usize {
        self.violations.iter().filter(|(v, _)| *v == kind).count()
    }
}

/// Runs every checker over `history`, recorded from `started` to `finished`; a stretch
/// without progress longer than `liveness_bound` is a stall.
pub(crate) fn check(
    history: &History,
    started: Instant,
    finished: Instant,
    liveness_bound: Duration,
) -> Findings {
    let (longest_idle, stalls) = idle_stretches(history, started, finished, liveness_bound);
    let timed = |kind: Violation, times: &[Instant]| {
        times.iter().map(move |&at| (kind, at)).collect::<Vec<_>>()
    };
    let mut violations = timed(Violation::Overlaps, &overlaps(history));
    violations.extend(timed(Violation::LostUpdates, &history.lost_updates));
    violations.extend(timed(Violation::DuplicateTokens, &history.duplicate_tokens));
    violations.extend(timed(
        Violation::WritesAfterLoss,
        &history.writes_after_loss,
    ));
    violations.extend(timed(Violation::Stalls, &stalls));
    Findings {
        acquisitions: history.sections.len(),
        faults: history.faults.clone(),
        stale_rejected: history.stale_rejected,
        losses: history.losses,
        errors: history.errors.values().sum(),
        longest_idle,
        violations,
        finished,
    }
}

/// When each accepted section (from the read to the accepted write) began while another
/// worker's accepted section was still going: O(n log n), by start.
fn overlaps(history: &History) -> Vec<Instant> {
    let mut accepted: Vec<(Instant, Instant, usize)> = history
        .sections
        .iter()
        .filter(|section| section.begin_accepted)
        .filter_map(|section| Some((section.begin, section.written?, section.worker)))
        .collect();
    accepted.sort_by_key(|&(begin, _, _)| begin);
    let mut found = Vec::new();
    // The furthest end so far and whose it is, and the furthest end of anyone else's.
    let mut furthest: Option<(Instant, usize)> = None;
    let mut furthest_other: Option<Instant> = None;
    for (begin, end, worker) in accepted {
        let others_end = match furthest {
            Some((end, owner)) if owner != worker => Some(end),
            _ => furthest_other,
        };
        if others_end.is_some_and(|others_end| begin < others_end) {
            found.push(begin);
        }
        match furthest {
            Some((latest, owner)) if end <= latest => {
                if owner != worker {
                    furthest_other = furthest_other.max(Some(end));
                }
            }
            Some((latest, owner)) => {
                if owner != worker {
                    furthest_other = furthest_other.max(Some(latest));
                }
                furthest = Some((end, worker));
            }
            None => furthest = Some((end, worker)),
        }
    }
    found
}

/// The longest stretch without progress (a new accepted section) and when each stretch
/// longer than `bound` ended. A stretch starts when the previous sections were last heard of
/// (the lock was busy until then) and does not count time inside a fault's window.
fn idle_stretches(
    history: &History,
    started: Instant,
    finished: Instant,
    bound: Duration,
) -> (Duration, Vec<Instant>) {
    let mut sections: Vec<(Instant, Instant)> = history
        .sections
        .iter()
        .map(|section| (section.begin, section.last_seen()))
        .collect();
    sections.sort_by_key(|&(begin, _)| begin);
    let mut progress: Vec<Instant> = history
        .sections
        .iter()
        .filter(|section| section.begin_accepted)
        .map(|section| section.begin)
        .collect();
    progress.push(finished);
    progress.sort();

    let (mut longest, mut stalls) = (Duration::ZERO, Vec::new());
    let mut busy_until = started;
    let mut pending = sections.into_iter().peekable();
    for next in progress {
        while let Some(&(begin, last_seen)) = pending.peek() {
            if begin >= next {
                break;
            }
            busy_until = busy_until.max(last_seen);
            pending.next();
        }
        let idle = without_faults(busy_until, next, &history.faults);
        longest = longest.max(idle);
        if idle > bound {
            stalls.push(next);
        }
    }
    (longest, stalls)
}

/// The time from `from` to `to` that lies outside every fault window.
fn without_faults(from: Instant, to: Instant, faults: &[FaultWindow]) -> Duration {
    let total = to.saturating_duration_since(from);
    let mut windows: Vec<(Instant, Instant)> = faults
        .iter()
        .map(|window| (window.start.max(from), window.healed.min(to)))
        .filter(|(start, end)| start < end)
        .collect();
    windows.sort();
    let mut covered = Duration::ZERO;
    let mut reached = from;
    for (start, end) in windows {
        let start = start.max(reached);
        if end > start {
            covered += end - start;
            reached = end;
        }
    }
    total.saturating_sub(covered)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::Fault;
    use crate::resource::Section;

    fn section(worker: usize, begin: Instant, written: Option<Instant>) -> Section {
        Section {
            worker,
            begin,
            begin_accepted: true,
            written,
            end: written,
        }
    }

    fn at(base: Instant, ms: u64) -> Instant {
        base + Duration::from_millis(ms)
    }

    #[test]
    fn finds_an_overlap_of_two_workers_and_none_within_one() {
        let t = Instant::now();
        let mut history = History::default();
        history.sections = vec![
            section(0, at(t, 0), Some(at(t, 10))),
            section(0, at(t, 10), Some(at(t, 20))),
            section(1, at(t, 30), Some(at(t, 40))),
        ];
        assert!(overlaps(&history).is_empty());
        history
            .sections
            .push(section(2, at(t, 35), Some(at(t, 36))));
        assert_eq!(
            overlaps(&history),
            vec![at(t, 35)],
            "worker 2 read while 1 was in"
        );
        // A section whose write was refused is not an accepted section.
        history.sections.push(section(3, at(t, 37), None));
        assert_eq!(overlaps(&history).len(), 1);
    }

    #[test]
    fn an_overlap_hidden_behind_the_same_workers_longer_section_is_found() {
        let t = Instant::now();
        let mut history = History::default();
        history.sections = vec![
            section(0, at(t, 0), Some(at(t, 50))),
            section(1, at(t, 1), Some(at(t, 100))),
            section(1, at(t, 40), Some(at(t, 45))), // overlaps worker 0's, which ends at 50
        ];
        assert_eq!(overlaps(&history), vec![at(t, 1), at(t, 40)]);
    }

    #[test]
    fn idle_time_counts_from_the_last_activity_and_skips_faults() {
        let t = Instant::now();
        let mut history = History::default();
        history.sections = vec![
            section(0, at(t, 0), Some(at(t, 100))),
            section(1, at(t, 2_000), Some(at(t, 2_100))),
        ];
        let bound = Duration::from_millis(1_000);
        let (longest, stalls) = idle_stretches(&history, t, at(t, 2_200), bound);
        assert_eq!(longest, Duration::from_millis(1_900));
        assert_eq!(stalls, vec![at(t, 2_000)]);
        // A fault from 0.5 s to 1.5 s: its second does not count.
        history.faults.push(FaultWindow {
            fault: Fault::KillServer,
            start: at(t, 500),
            healed: at(t, 1_500),
        });
        let (longest, stalls) = idle_stretches(&history, t, at(t, 2_200), bound);
        assert_eq!(longest, Duration::from_millis(900));
        assert!(stalls.is_empty());
    }

    #[test]
    fn faults_one_after_another_do_not_hide_a_stall_between_them() {
        let t = Instant::now();
        let mut history = History::default();
        history.sections = vec![section(0, at(t, 0), Some(at(t, 10)))];
        for start in [1_000, 3_000, 5_000] {
            history.faults.push(FaultWindow {
                fault: Fault::PauseServer,
                start: at(t, start),
                healed: at(t, start + 500),
            });
        }
        let (longest, stalls) = idle_stretches(&history, t, at(t, 6_010), Duration::from_secs(4));
        assert_eq!(
            longest,
            Duration::from_millis(4_500),
            "6 s less 1.5 s of faults"
        );
        assert_eq!(stalls, vec![at(t, 6_010)]);
    }
}
