//! Compile-time parsing of `ttl = "10s"` / `wait = "1m 30s"`: the humantime syntax
//! `dlock-core`'s config uses, checked while the crate compiles instead of at start-up.

//! Durations, written the same way everywhere dlock takes one — the attribute's `ttl = "10s"`,
//! the TOML config, the `DLOCK_*` environment variables and the `dlock` command line's flags:
//!
//! ```text
//! duration = part { [whitespace] part }            e.g. 10s, 500ms, 1m 30s, 1h30m, 2 hours
//! part     = integer [whitespace] unit
//! unit     = ns | us | µs | ms | s | sec | m | min | h | hr | d | w | M | y  (or long names)
//! wait     = duration | "forever"                  (until acquired)
//! optional = duration | "none"                     (no limit)
//! ```
//!
//! The units are humantime's. A number without a unit (`10`) is refused with a hint: seconds
//! to one reader are milliseconds to another.

use std::fmt;
use std::time::Duration;

/// Why a duration was refused; its message ends with what the field accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurationError {
    problem: Problem,
    accepts: Accepts,
}

/// What is wrong with the text.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Problem {
    /// Nothing but whitespace.
    Empty,
    /// A unit or other text where a number should be (`s`, `-1s`).
    MissingNumber(String),
    /// A number without a unit (`10`).
    MissingUnit(String),
    /// A unit humantime does not know (`10x`, `1.5s`).
    UnknownUnit(String),
    /// More than `Duration` holds.
    Overflow,
}

/// Which of the three forms the field takes, for the message's hint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Accepts {
    Duration,
    Wait,
    Optional,
}

impl DurationError {
    /// What is wrong with the text.
    #[must_use]
    pub const fn problem(&self) -> &Problem {
        &self.problem
    }
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.problem {
            Problem::Empty => f.write_str("the duration is empty")?,
            Problem::MissingNumber(at) => write!(f, "expected a number before `{at}`")?,
            Problem::MissingUnit(number) => write!(
                f,
                "`{number}` has no unit (write e.g. `{number}s` or `{number}ms`)"
            )?,
            Problem::UnknownUnit(unit) => write!(
                f,
                "unknown unit `{unit}` (use ns, us, ms, s, m/min, h, d, w, or their long names)"
            )?,
            Problem::Overflow => f.write_str("the duration is too large")?,
        }
        f.write_str("; expected a duration such as `10s`, `500ms` or `1m 30s`")?;
        match self.accepts {
            Accepts::Duration => Ok(()),
            Accepts::Wait => f.write_str(", or `forever`"),
            Accepts::Optional => f.write_str(", or `none`"),
        }
    }
}

impl std::error::Error for DurationError {}

/// The length of one `unit`, in nanoseconds; the units humantime accepts.
fn unit_nanos(unit: &str) -> Option<u128> {
    const SEC: u128 = 1_000_000_000;
    Some(match unit {
        "nsec" | "ns" => 1,
        "usec" | "us" | "µs" => 1_000,
        "msec" | "ms" => 1_000_000,
        "seconds" | "second" | "sec" | "s" => SEC,
        "minutes" | "minute" | "min" | "m" => 60 * SEC,
        "hours" | "hour" | "hr" | "h" => 3_600 * SEC,
        "days" | "day" | "d" => 86_400 * SEC,
        "weeks" | "week" | "w" => 604_800 * SEC,
        "months" | "month" | "M" => 2_630_016 * SEC,
        "years" | "year" | "y" => 31_557_600 * SEC,
        _ => return None,
    })
}

/// Parses a duration: `"10s"`, `"500ms"`, `"1m 30s"`, `"1h30m"`, `"2 hours"` — one or more
/// `<integer><unit>` parts, summed; whitespace between parts (and between a number and its
/// unit) is allowed.
///
/// # Errors
///
/// [`DurationError`] for empty text, a number without a unit, an unknown unit, or a
/// duration too large for [`Duration`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// assert_eq!(dlock_grammar::duration::parse("1h30m"), Ok(Duration::from_secs(5_400)));
/// ```
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    parse_part_sum(text).map_err(|problem| DurationError {
        problem,
        accepts: Accepts::Duration,
    })
}

/// Parses a wait: a duration, or `forever` (`None`: until acquired).
///
/// # Errors
///
/// [`DurationError`] as for [`parse`], its message naming `forever` too.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use dlock_grammar::duration::parse_wait;
/// assert_eq!(parse_wait("forever"), Ok(None));
/// assert_eq!(parse_wait("2s"), Ok(Some(Duration::from_secs(2))));
/// ```
pub fn parse_wait(text: &str) -> Result<Option<Duration>, DurationError> {
    parse_or(text, "forever", Accepts::Wait)
}

/// Parses an optional limit: a duration, or `none` (`None`: no limit).
///
/// # Errors
///
/// [`DurationError`] as for [`parse`], its message naming `none` too.
///
/// # Examples
///
/// ```
/// use dlock_grammar::duration::parse_optional;
/// assert_eq!(parse_optional("none"), Ok(None));
/// ```
pub fn parse_optional(text: &str) -> Result<Option<Duration>, DurationError> {
    parse_or(text, "none", Accepts::Optional)
}

/// A duration, or `word` for `None`.
fn parse_or(text: &str, word: &str, accepts: Accepts) -> Result<Option<Duration>, DurationError> {
    if text.trim() == word {
        return Ok(None);
    }
    parse_part_sum(text)
        .map(Some)
        .map_err(|problem| DurationError { problem, accepts })
}

fn parse_part_sum(text: &str) -> Result<Duration, Problem> {
    let mut rest = text.trim_start();
    if rest.is_empty() {
        return Err(Problem::Empty);
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            let word: String = rest.chars().take_while(|c| !c.is_whitespace()).collect();
            return Err(Problem::MissingNumber(word));
        }
        let (number, after) = rest.split_at(digits);
        let after = after.trim_start();
        let unit_len = after.len() - after.trim_start_matches(char::is_alphabetic).len();
        if unit_len == 0 {
            if after.is_empty() || after.starts_with(|c: char| c.is_ascii_digit()) {
                return Err(Problem::MissingUnit(number.to_owned()));
            }
            let junk: String = after.chars().take_while(|c| !c.is_whitespace()).collect();
            return Err(Problem::UnknownUnit(junk));
        }
        let (unit, after) = after.split_at(unit_len);
        let per_unit = unit_nanos(unit).ok_or_else(|| Problem::UnknownUnit(unit.to_owned()))?;
        let value: u128 = number.parse().map_err(|_| Problem::Overflow)?;
        total = value
            .checked_mul(per_unit)
            .and_then(|part| total.checked_add(part))
            .ok_or(Problem::Overflow)?;
        rest = after.trim_start();
    }
    let secs = u64::try_from(total / 1_000_000_000).map_err(|_| Problem::Overflow)?;
    let nanos = u32::try_from(total % 1_000_000_000).map_err(|_| Problem::Overflow)?;
    Ok(Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::{Problem, parse, parse_optional, parse_wait};

    fn ok(text: &str) -> (u64, u32) {
        let d = parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        (d.as_secs(), d.subsec_nanos())
    }

    fn problem(text: &str) -> Problem {
        parse(text).unwrap_err().problem().clone()
    }

    #[test]
    fn parses_the_humantime_forms() {
        assert_eq!(ok("10s"), (10, 0));
        assert_eq!(ok("500ms"), (0, 500_000_000));
        assert_eq!(ok("1m 30s"), (90, 0));
        assert_eq!(ok("1m30s"), (90, 0));
        assert_eq!(ok("2h"), (7_200, 0));
        assert_eq!(ok("2 hours"), (7_200, 0));
        assert_eq!(ok("1d 2h 3min 4s 5ms 6us 7ns"), (93_784, 5_006_007));
        assert_eq!(ok("  15sec "), (15, 0));
        assert_eq!(ok("0s"), (0, 0));
    }

    #[test]
    fn rejects_bad_input() {
        assert_eq!(problem(""), Problem::Empty);
        assert_eq!(problem("  "), Problem::Empty);
        assert_eq!(problem("10x"), Problem::UnknownUnit("x".into()));
        assert_eq!(problem("10"), Problem::MissingUnit("10".into()));
        assert_eq!(problem("s"), Problem::MissingNumber("s".into()));
        assert_eq!(problem("1.5s"), Problem::UnknownUnit(".5s".into()));
        assert_eq!(problem("-1s"), Problem::MissingNumber("-1s".into()));
        assert_eq!(
            problem("99999999999999999999999999999999999999999y"),
            Problem::Overflow
        );
        assert_eq!(problem("forever"), Problem::MissingNumber("forever".into()));
    }

    #[test]
    fn messages_name_the_problem() {
        assert!(
            parse("10x")
                .unwrap_err()
                .to_string()
                .contains("unknown unit `x`")
        );
        assert!(
            parse("10")
                .unwrap_err()
                .to_string()
                .contains("`10` has no unit")
        );
    }

    #[test]
    fn waits_take_forever_and_limits_none() {
        assert_eq!(parse_wait(" forever "), Ok(None));
        assert_eq!(parse_optional("none"), Ok(None));
        assert!(
            parse_wait("none")
                .unwrap_err()
                .to_string()
                .ends_with(", or `forever`")
        );
        assert!(
            parse_optional("forever")
                .unwrap_err()
                .to_string()
                .ends_with(", or `none`")
        );
    }
}
