//! What each backend is expected to survive, and the table of what it did.

use std::fmt::Write as _;

use crate::cell::CellOutcome;
use crate::faults::Fault;
use crate::shapes::ShapeKind;

/// A kind of violation the checkers count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Violation {
    Overlaps,
    LostUpdates,
    DuplicateTokens,
    WritesAfterLoss,
    Stalls,
}

impl Violation {
    const ALL: [Self; 5] = [
        Self::Overlaps,
        Self::LostUpdates,
        Self::DuplicateTokens,
        Self::WritesAfterLoss,
        Self::Stalls,
    ];

    const fn name(self) -> &'static str {
        match self {
            Self::Overlaps => "overlaps",
            Self::LostUpdates => "lost updates",
            Self::DuplicateTokens => "duplicate tokens",
            Self::WritesAfterLoss => "writes after loss",
            Self::Stalls => "stalls",
        }
    }
}

/// The violations a backend cannot prevent under `fault`, by its design, and why; empty
/// where it must come through clean.
pub(crate) fn by_design(shape: ShapeKind, fault: Fault) -> (&'static [Violation], &'static str) {
    use Violation::{DuplicateTokens, LostUpdates, Overlaps, Stalls};
    match (shape, fault) {
        (ShapeKind::RedLock, Fault::PauseHolder) => (
            &[Overlaps, LostUpdates],
            "RedLock has no fencing token: a holder frozen past its lease may still write if \
             it froze after its last look at the lease",
        ),
        (ShapeKind::RedLock, Fault::KillServer) => (
            &[Overlaps, LostUpdates],
            "a master restarted without persistence within the ttl forgets its vote, so a \
             second majority can form (RedLock asks for restarts delayed by the ttl)",
        ),
        (ShapeKind::Redis | ShapeKind::RedisCluster, Fault::KillServer) => (
            &[Overlaps, LostUpdates, DuplicateTokens, Stalls],
            "without persistence a restart forgets the lock and the fencing counter; tokens \
             start again at 1, so the resource refuses new holders until they catch up \
             (run Redis with `appendonly yes`, `appendfsync always` to keep both)",
        ),
        _ => (&[], ""),
    }
}

/// One row of the report: a shape under one fault (or a mix), and what the checkers found.
pub(crate) struct Row {
    pub(crate) shape: ShapeKind,
    pub(crate) label: String,
    pub(crate) outcome: CellOutcome,
}

impl Row {
    fn count(&self, violation: Violation) -> u64 {
        let findings = &self.outcome.findings;
        match violation {
            Violation::Overlaps => findings.overlaps,
            Violation::LostUpdates => findings.lost_updates,
            Violation::DuplicateTokens => findings.duplicate_tokens,
            Violation::WritesAfterLoss => findings.writes_after_loss,
            Violation::Stalls => findings.stalls,
        }
    }

    /// Whether a violation of this kind is expected under one of the faults injected.
    fn allowed(&self, violation: Violation) -> bool {
        self.outcome
            .injected
            .iter()
            .any(|&fault| by_design(self.shape, fault).0.contains(&violation))
    }

    /// Violations no injected fault explains: each fails the run.
    pub(crate) fn unexpected(&self) -> Vec<(Violation, u64)> {
        Violation::ALL
            .into_iter()
            .map(|v| (v, self.count(v)))
            .filter(|&(v, n)| n > 0 && !self.allowed(v))
            .collect()
    }

    fn verdict(&self) -> String {
        let unexpected = self.unexpected();
        if !unexpected.is_empty() {
            return format!("**VIOLATION**: {}", list(&unexpected));
        }
        let expected: Vec<_> = Violation::ALL
            .into_iter()
            .map(|v| (v, self.count(v)))
            .filter(|&(_, n)| n > 0)
            .collect();
        if expected.is_empty() {
            "ok".to_owned()
        } else {
            format!("by design: {}", list(&expected))
        }
    }
}

fn list(violations: &[(Violation, u64)]) -> String {
    let parts: Vec<String> = violations
        .iter()
        .map(|(v, n)| format!("{n} {}", v.name()))
        .collect();
    parts.join(", ")
}

/// The table, in Markdown.
pub(crate) fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| Backend | Fault | Acquired | Faults | Fence refused | Leases lost | Errors | Overlaps | \
         Lost updates | Duplicate tokens | Writes after loss | Longest idle | Verdict |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for row in rows {
        let f = &row.outcome.findings;
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} s | {} |",
            row.shape.title(),
            row.label,
            f.acquisitions,
            f.faults,
            f.stale_rejected,
            f.losses,
            f.errors,
            f.overlaps,
            f.lost_updates,
            f.duplicate_tokens,
            f.writes_after_loss,
            f.longest_idle.as_secs_f64(),
            row.verdict(),
        );
    }
    out
}

/// The reasons behind every "by design" verdict in `rows`, once each.
pub(crate) fn footnotes(rows: &[Row]) -> String {
    let mut notes: Vec<String> = Vec::new();
    for row in rows {
        for &fault in &row.outcome.injected {
            let (violations, why) = by_design(row.shape, fault);
            let shown = violations.iter().any(|&v| row.count(v) > 0);
            let note = format!("- {} under {}: {why}.", row.shape.title(), fault.name());
            if shown && !notes.contains(&note) {
                notes.push(note);
            }
        }
    }
    notes.join("\n")
}
