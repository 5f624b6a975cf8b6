//! Latency samples and the rows of the result table.

use std::time::Duration;

use serde::Serialize;

/// Latencies of one run of one scenario (or its floor).
#[derive(Debug, Clone, Default)]
pub(crate) struct Samples {
    pub(crate) latencies: Vec<Duration>,
    pub(crate) elapsed: Duration,
    /// For the median of several runs: the lowest and highest throughput among them.
    pub(crate) ops_range: Option<(f64, f64)>,
}

impl Samples {
    pub(crate) fn ops_per_sec(&self) -> f64 {
        self.latencies.len() as f64 / self.elapsed.as_secs_f64().max(f64::EPSILON)
    }

    pub(crate) fn percentile(&self, p: f64) -> Duration {
        let mut sorted = self.latencies.clone();
        sorted.sort_unstable();
        if sorted.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((sorted.len() as f64 - 1.0) * p / 100.0).round() as usize;
        sorted[rank.min(sorted.len() - 1)]
    }
}

/// The run with the median throughput of several repetitions, knowing the lowest and highest.
pub(crate) fn median_run(mut runs: Vec<Samples>) -> Samples {
    runs.sort_by(|a, b| a.ops_per_sec().total_cmp(&b.ops_per_sec()));
    let range = (runs[0].ops_per_sec(), runs[runs.len() - 1].ops_per_sec());
    let mut median = runs.swap_remove(runs.len() / 2);
    median.ops_range = Some(range);
    median
}

/// One line of the result table.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Row {
    pub(crate) backend: String,
    pub(crate) scenario: &'static str,
    pub(crate) ops_per_sec: f64,
    pub(crate) p50_us: f64,
    pub(crate) p99_us: f64,
    pub(crate) max_us: f64,
    pub(crate) floor_ops_per_sec: f64,
    /// dlock's throughput over the floor's (higher is better; 1.0 = as fast as the floor).
    /// Not a number where a scenario has no floor (serialised as `null`).
    pub(crate) ratio: f64,
    /// The lowest and highest ratio among the repetitions: a change of the ratio within
    /// this spread is noise. `None` where a scenario has no floor or one repetition.
    pub(crate) spread: Option<(f64, f64)>,
    pub(crate) note: String,
}

impl Row {
    pub(crate) fn new(
        backend: &str,
        scenario: &'static str,
        run: &Samples,
        floor_ops: f64,
        note: String,
    ) -> Self {
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        Self {
            backend: backend.to_owned(),
            scenario,
            ops_per_sec: run.ops_per_sec(),
            p50_us: us(run.percentile(50.0)),
            p99_us: us(run.percentile(99.0)),
            max_us: us(run.percentile(100.0)),
            floor_ops_per_sec: floor_ops,
            ratio: if floor_ops.is_finite() && floor_ops > 0.0 {
                run.ops_per_sec() / floor_ops
            } else {
                f64::NAN
            },
            spread: run
                .ops_range
                .filter(|_| floor_ops.is_finite() && floor_ops > 0.0)
                .map(|(low, high)| (low / floor_ops, high / floor_ops)),
            note,
        }
    }
}

impl Row {
    /// Replaces the ratio by the median of per-repetition `ratios` (e.g. of pairs), and the
    /// spread by the median's 95 % confidence interval ([`median_interval`]), or by their
    /// range when there are too few for one.
    pub(crate) fn with_ratios(mut self, ratios: &[f64]) -> Self {
        let mut sorted = ratios.to_vec();
        sorted.sort_by(f64::total_cmp);
        self.ratio = sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN);
        self.spread = median_interval(ratios)
            .or_else(|| sorted.first().zip(sorted.last()).map(|(l, h)| (*l, *h)));
        self
    }
}

/// The median of `values` and its 95 % confidence interval, distribution-free: the median
/// lies between the `j`-th and the `(n + 1 - j)`-th smallest of `n` values with probability
/// `1 - 2 P(B < j)`, `B` binomial of `n` halves; the largest `j` keeping that at 95 % or more
/// gives the interval. How far the median of such a run would move from run to run. `None`
/// below 6 values (no `j` reaches 95 %).
pub(crate) fn median_interval(values: &[f64]) -> Option<(f64, f64)> {
    let n = values.len();
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    // P(B <= i) for i = 0, 1, ..., by the binomial coefficients of n over 2^n.
    let mut below = 0.0; // P(B < j)
    let mut coefficient = 1.0; // C(n, j - 1)
    let mut j = 0;
    for i in 0..n {
        let with_i = below + coefficient / 2f64.powi(n as i32);
        if 2.0 * with_i > 0.05 {
            break;
        }
        below = with_i;
        coefficient = coefficient * (n - i) as f64 / (i + 1) as f64;
        j = i + 1;
    }
    (j >= 1).then(|| (sorted[j - 1], sorted[n - j]))
}

/// Whether the median of `ratios` is known to within `within` of itself (its 95 %
/// interval's width over the median): a paired scenario adds pairs until it is.
pub(crate) fn settled(ratios: &[f64], within: f64) -> bool {
    let mut sorted = ratios.to_vec();
    sorted.sort_by(f64::total_cmp);
    let Some(median) = sorted.get(sorted.len() / 2) else {
        return false;
    };
    median_interval(ratios).is_some_and(|(low, high)| (high - low) <= within * median)
}

fn human_us(us: f64) -> String {
    if us >= 1000.0 {
        format!("{:.1} ms", us / 1000.0)
    } else {
        format!("{us:.0} µs")
    }
}

/// Prints rows as a Markdown table.
pub(crate) fn print_table(rows: &[Row]) {
    println!(
        "| backend | scenario | ops/s | p50 | p99 | max | floor ops/s | ratio (spread) | notes |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---|");
    for row in rows {
        println!("{}", row.markdown());
    }
}

impl Row {
    /// The row as a line of [`print_table`]'s table.
    pub(crate) fn markdown(&self) -> String {
        let number = |value: f64, precision: usize| {
            if value.is_finite() {
                format!("{value:.precision$}")
            } else {
                "—".to_owned()
            }
        };
        format!(
            "| {} | {} | {:.0} | {} | {} | {} | {} | {} | {} |",
            self.backend,
            self.scenario,
            self.ops_per_sec,
            human_us(self.p50_us),
            human_us(self.p99_us),
            human_us(self.max_us),
            number(self.floor_ops_per_sec, 0),
            match self.spread {
                Some((low, high)) if self.ratio.is_finite() => format!(
                    "{} ({}–{})",
                    number(self.ratio, 2),
                    number(low, 2),
                    number(high, 2)
                ),
                _ => number(self.ratio, 2),
            },
            self.note
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_interval_is_the_order_statistics_of_95_percent() {
        assert_eq!(median_interval(&[1.0, 2.0, 3.0, 4.0, 5.0]), None);
        // n = 6: the extremes (coverage 1 - 2/64 = 96.9 %).
        assert_eq!(
            median_interval(&[6.0, 1.0, 5.0, 2.0, 4.0, 3.0]),
            Some((1.0, 6.0))
        );
        // n = 25: the 8th and the 18th smallest (coverage 95.7 %; the 9th and 17th: 89.2 %).
        let values: Vec<f64> = (1..=25).rev().map(f64::from).collect();
        assert_eq!(median_interval(&values), Some((8.0, 18.0)));
        assert!(settled(&[1.0; 6], 0.01));
        assert!(!settled(&values, 0.10));
    }
}
