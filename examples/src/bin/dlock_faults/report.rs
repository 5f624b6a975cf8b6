//! What each backend is expected to survive, and the table of what it did.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use crate::TTL;
use crate::checks::{Findings, Violation};
use crate::faults::Fault;
use crate::shapes::ShapeKind;

/// Violations a backend cannot prevent under a fault, by its design.
pub(crate) struct ByDesign {
    pub(crate) violations: &'static [Violation],
    /// How long after the fault healed they may still show; `None`: to the end of the run.
    pub(crate) aftermath: Option<Duration>,
    pub(crate) why: &'static str,
}

/// What `shape` cannot prevent under `fault`, if anything: every other violation fails.
pub(crate) fn by_design(shape: ShapeKind, fault: Fault) -> Option<ByDesign> {
    use Violation::{DuplicateTokens, LostUpdates, Overlaps, Stalls};
    match (shape, fault) {
        (ShapeKind::RedLock, Fault::PauseHolder) => Some(ByDesign {
            violations: &[Overlaps, LostUpdates],
            aftermath: Some(TTL * 2),
            why: "RedLock has no fencing token: a holder frozen past its lease may still write \
                  if it froze after its last look at the lease",
        }),
        (ShapeKind::RedLock, Fault::KillServer) => Some(ByDesign {
            violations: &[Overlaps, LostUpdates],
            aftermath: Some(TTL * 2),
            why: "a master restarted without persistence within the ttl forgets its vote, so a \
                  second majority can form (RedLock asks for restarts delayed by the ttl)",
        }),
        (ShapeKind::Redis | ShapeKind::RedisCluster, Fault::KillServer) => Some(ByDesign {
            violations: &[Overlaps, LostUpdates, DuplicateTokens, Stalls],
            aftermath: None,
            why: "without persistence a restart forgets the lock and the fencing counter; \
                  tokens start again at 1, so the resource refuses new holders until they \
                  catch up (run Redis with `appendonly yes`, `appendfsync always` to keep both)",
        }),
        (ShapeKind::RedisSentinel, Fault::PauseServer) => Some(ByDesign {
            violations: &[DuplicateTokens],
            // Tokens repeat until the new master's counter catches up.
            aftermath: None,
            why: "a master frozen past the sentinels' patience is failed over to a replica \
                  they pick by the replication offsets they last saw, which need not be the \
                  replica that acknowledged the newest grants: fencing tokens then repeat, and \
                  the resource refuses them (replication is asynchronous; `WAIT` narrows the \
                  window only)",
        }),
        (ShapeKind::RedisSentinel, Fault::KillServer) => Some(ByDesign {
            violations: &[DuplicateTokens, Stalls],
            aftermath: None,
            why: "a master killed and restarted within seconds comes back a master while the \
                  sentinels promote a replica; until they agree again (which took them up to \
                  25 s here) the replicas may follow either master, so grants are refused \
                  (`NotReplicated`), and writes a replica acknowledged can still be lost when \
                  another replica is promoted: fencing tokens then repeat, and the resource \
                  refuses them (replication is asynchronous; `WAIT` narrows the window only)",
        }),
        _ => None,
    }
}

/// One row of the report: a shape under one fault (or a mix), and what the checkers found.
pub(crate) struct Row {
    pub(crate) shape: ShapeKind,
    pub(crate) label: String,
    pub(crate) findings: Findings,
}

impl Row {
    /// Whether a violation of `kind` at `at` follows a fault under which this backend cannot
    /// prevent it.
    fn excused(&self, kind: Violation, at: Instant) -> bool {
        self.findings.faults.iter().any(|window| {
            by_design(self.shape, window.fault).is_some_and(|design| {
                let until = design
                    .aftermath
                    .map_or(self.findings.finished, |after| window.healed + after);
                design.violations.contains(&kind) && window.start <= at && at <= until
            })
        })
    }

    /// Violations no injected fault explains, by kind: each fails the run.
    pub(crate) fn unexpected(&self) -> Vec<(Violation, usize)> {
        self.by_kind(|excused| !excused)
    }

    /// Violations (`excused` or not), counted by kind, the empty kinds left out.
    fn by_kind(&self, keep: impl Fn(bool) -> bool) -> Vec<(Violation, usize)> {
        Violation::ALL
            .into_iter()
            .map(|kind| {
                let count = self
                    .findings
                    .violations
                    .iter()
                    .filter(|&&(v, at)| v == kind && keep(self.excused(v, at)))
                    .count();
                (kind, count)
            })
            .filter(|&(_, count)| count > 0)
            .collect()
    }

    fn verdict(&self) -> String {
        let unexpected = self.unexpected();
        if !unexpected.is_empty() {
            return format!("**VIOLATION**: {}", list(&unexpected));
        }
        let excused = self.by_kind(|excused| excused);
        if excused.is_empty() {
            "ok".to_owned()
        } else {
            format!("by design: {}", list(&excused))
        }
    }
}

fn list(violations: &[(Violation, usize)]) -> String {
    let parts: Vec<String> = violations
        .iter()
        .map(|(kind, count)| format!("{count} {}", kind.name()))
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
        let findings = &row.findings;
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} s | {} |",
            row.shape.title(),
            row.label,
            findings.acquisitions,
            findings.faults.len(),
            findings.stale_rejected,
            findings.losses,
            findings.errors,
            findings.count(Violation::Overlaps),
            findings.count(Violation::LostUpdates),
            findings.count(Violation::DuplicateTokens),
            findings.count(Violation::WritesAfterLoss),
            findings.longest_idle.as_secs_f64(),
            row.verdict(),
        );
    }
    out
}

/// The reasons behind every "by design" verdict in `rows`, once each.
pub(crate) fn footnotes(rows: &[Row]) -> String {
    let mut notes: Vec<String> = Vec::new();
    for row in rows {
        for window in &row.findings.faults {
            let Some(design) = by_design(row.shape, window.fault) else {
                continue;
            };
            let shown = row
                .findings
                .violations
                .iter()
                .any(|&(kind, at)| design.violations.contains(&kind) && row.excused(kind, at));
            let note = format!(
                "- {} under {}: {}.",
                row.shape.title(),
                window.fault.name(),
                design.why
            );
            if shown && !notes.contains(&note) {
                notes.push(note);
            }
        }
    }
    notes.join("\n")
}
