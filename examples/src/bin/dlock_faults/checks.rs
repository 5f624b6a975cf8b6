//! The checkers: what one run's [`History`] says about safety and liveness.

use std::time::{Duration, Instant};

use crate::resource::History;

/// What went wrong, by kind, in one run (and what it did).
#[derive(Debug, Clone, Default)]
pub(crate) struct Findings {
    /// Grants that reached the resource (accepted or refused by the fence).
    pub(crate) acquisitions: usize,
    pub(crate) faults: usize,
    pub(crate) stale_rejected: u64,
    /// Accepted critical sections (read to accepted write) that overlapped another worker's.
    pub(crate) overlaps: u64,
    pub(crate) lost_updates: u64,
    pub(crate) duplicate_tokens: u64,
    pub(crate) writes_after_loss: u64,
    pub(crate) losses: u64,
    pub(crate) errors: u64,
    /// The longest time the resource saw no new accepted section while no fault was active
    /// and no earlier section was still going.
    pub(crate) longest_idle: Duration,
    /// Idle stretches longer than the liveness bound.
    pub(crate) stalls: u64,
}

/// Runs every checker over `history`, recorded from `started` to `finished`; an idle stretch
/// longer than `liveness_bound` is a stall.
pub(crate) fn check(
    history: &History,
    started: Instant,
    finished: Instant,
    liveness_bound: Duration,
) -> Findings {
    let (longest_idle, stalls) = idle_stretches(history, started, finished, liveness_bound);
    Findings {
        acquisitions: history.sections.len(),
        faults: history.faults.len(),
        stale_rejected: history.stale_rejected,
        overlaps: overlaps(history),
        lost_updates: history.lost_updates,
        duplicate_tokens: history.duplicate_tokens,
        writes_after_loss: history.writes_after_loss,
        losses: history.losses,
        errors: history.errors.values().sum(),
        longest_idle,
        stalls,
    }
}

/// Accepted sections (from the read to the accepted write) that began before another
/// worker's accepted section had ended: O(n log n), by start.
fn overlaps(history: &History) -> u64 {
    let mut accepted: Vec<(Instant, Instant, usize)> = history
        .sections
        .iter()
        .filter(|s| s.begin_accepted)
        .filter_map(|s| Some((s.begin, s.written?, s.worker)))
        .collect();
    accepted.sort_by_key(|&(begin, _, _)| begin);
    let mut count = 0;
    let mut latest: Option<(Instant, usize)> = None; // the furthest end so far, and whose
    for (begin, end, worker) in accepted {
        if let Some((latest_end, other)) = latest
            && begin < latest_end
            && other != worker
        {
            count += 1;
        }
        if latest.is_none_or(|(latest_end, _)| end > latest_end) {
            latest = Some((end, worker));
        }
    }
    count
}

/// The longest stretch without a new accepted section, counted from when the previous
/// section was last heard of or a fault healed (whichever is later), to the next accepted
/// read or the end of the run; and how many such stretches exceed `bound`.
fn idle_stretches(
    history: &History,
    started: Instant,
    finished: Instant,
    bound: Duration,
) -> (Duration, u64) {
    // Everything that keeps the lock legitimately busy or unavailable, as (from, until).
    let mut busy: Vec<(Instant, Instant)> = history
        .sections
        .iter()
        .map(|s| (s.begin, s.last_seen()))
        .chain(history.faults.iter().map(|f| (f.start, f.healed)))
        .collect();
    busy.sort_by_key(|&(from, _)| from);
    let mut progress: Vec<Instant> = history
        .sections
        .iter()
        .filter(|s| s.begin_accepted)
        .map(|s| s.begin)
        .collect();
    progress.push(finished);
    progress.sort();

    let (mut longest, mut stalls) = (Duration::ZERO, 0);
    let mut free_since = started;
    let mut busy_iter = busy.into_iter().peekable();
    for next in progress {
        // Everything that started before this progress pushes the free moment on.
        while let Some(&(from, until)) = busy_iter.peek() {
            if from >= next {
                break;
            }
            free_since = free_since.max(until);
            busy_iter.next();
        }
        let idle = next.saturating_duration_since(free_since);
        longest = longest.max(idle);
        if idle > bound {
            stalls += 1;
        }
    }
    (longest, stalls)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::{FaultWindow, Section};

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
        assert_eq!(overlaps(&history), 0);
        history
            .sections
            .push(section(2, at(t, 35), Some(at(t, 36))));
        assert_eq!(overlaps(&history), 1, "worker 2 read while worker 1 was in");
        // A section whose write was refused is not an accepted section.
        history.sections.push(section(3, at(t, 37), None));
        assert_eq!(overlaps(&history), 1);
    }

    #[test]
    fn idle_time_counts_from_the_last_activity_or_healed_fault() {
        let t = Instant::now();
        let mut history = History::default();
        history.sections = vec![
            section(0, at(t, 0), Some(at(t, 100))),
            section(1, at(t, 2_000), Some(at(t, 2_100))),
        ];
        let (longest, stalls) =
            idle_stretches(&history, t, at(t, 2_200), Duration::from_millis(1_000));
        assert_eq!(longest, Duration::from_millis(1_900));
        assert_eq!(stalls, 1);
        // A fault healed at 1.5 s: only 500 ms of it counts.
        history.faults.push(FaultWindow {
            start: at(t, 500),
            healed: at(t, 1_500),
        });
        let (longest, stalls) =
            idle_stretches(&history, t, at(t, 2_200), Duration::from_millis(1_000));
        assert_eq!(longest, Duration::from_millis(500));
        assert_eq!(stalls, 0);
    }

    #[test]
    fn a_run_that_stops_making_progress_stalls_at_its_end() {
        let t = Instant::now();
        let mut history = History::default();
        history.sections = vec![section(0, at(t, 0), Some(at(t, 10)))];
        let (longest, stalls) = idle_stretches(&history, t, at(t, 5_010), Duration::from_secs(1));
        assert_eq!((longest, stalls), (Duration::from_secs(5), 1));
    }
}
