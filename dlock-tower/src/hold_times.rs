//! How long this layer's requests held their locks: the basis of `Retry-After`, which tells a
//! refused client when the holder is likely done rather than when its lease would run out.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

/// The most recent holds kept: enough for a stable median, few enough to follow a change.
const KEPT: usize = 32;

/// The last [`KEPT`] hold durations of one layer's requests (one key template).
#[derive(Debug, Default)]
pub(crate) struct HoldTimes {
    recent: Mutex<VecDeque<Duration>>,
}

impl HoldTimes {
    /// Records that a request held its lock for `held`.
    pub(crate) fn record(&self, held: Duration) {
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        if recent.len() == KEPT {
            recent.pop_front();
        }
        recent.push_back(held);
    }

    /// When a busy key is likely free: the median of the recorded holds, capped by the
    /// holder's remaining lease when the backend knows it; the remaining lease alone before
    /// any hold was recorded.
    pub(crate) fn estimate(&self, remaining_lease: Option<Duration>) -> Option<Duration> {
        let median = {
            let recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
            let mut sorted: Vec<Duration> = recent.iter().copied().collect();
            sorted.sort_unstable();
            sorted.get(sorted.len() / 2).copied()
        };
        match (median, remaining_lease) {
            (Some(median), Some(remaining)) => Some(median.min(remaining)),
            (median, remaining) => median.or(remaining),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_median_of_recent_holds_capped_by_the_remaining_lease() {
        let holds = HoldTimes::default();
        assert_eq!(holds.estimate(Some(ms(9_000))), Some(ms(9_000)));
        assert_eq!(holds.estimate(None), None);
        for held in [1_400, 1_500, 60_000] {
            holds.record(ms(held));
        }
        assert_eq!(holds.estimate(Some(ms(9_000))), Some(ms(1_500)));
        assert_eq!(holds.estimate(None), Some(ms(1_500)));
        assert_eq!(holds.estimate(Some(ms(700))), Some(ms(700)));
    }

    #[test]
    fn only_the_most_recent_holds_count() {
        let holds = HoldTimes::default();
        for _ in 0..KEPT {
            holds.record(ms(5_000));
        }
        for _ in 0..=KEPT / 2 {
            holds.record(ms(200));
        }
        assert_eq!(holds.estimate(None), Some(ms(200)));
    }
}
