//! Compile-time parsing of `ttl = "10s"` / `wait = "1m 30s"`: the humantime syntax
//! `dlock-core`'s config uses, checked while the crate compiles instead of at start-up.

use std::fmt;

/// A parsed duration, as whole seconds plus nanoseconds (`Duration::new`'s arguments).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Parsed {
    pub(crate) secs: u64,
    pub(crate) nanos: u32,
}

impl Parsed {
    pub(crate) const fn is_zero(self) -> bool {
        self.secs == 0 && self.nanos == 0
    }

    pub(crate) fn total_nanos(self) -> u128 {
        u128::from(self.secs) * 1_000_000_000 + u128::from(self.nanos)
    }
}

/// Why a duration string was rejected.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum DurationError {
    Empty,
    MissingNumber(String),
    MissingUnit(String),
    UnknownUnit(String),
    Overflow,
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("the duration is empty"),
            Self::MissingNumber(at) => write!(f, "expected a number before `{at}`"),
            Self::MissingUnit(number) => {
                write!(
                    f,
                    "`{number}` has no unit (write e.g. `{number}s` or `{number}ms`)"
                )
            }
            Self::UnknownUnit(unit) => write!(
                f,
                "unknown unit `{unit}` (use ns, us, ms, s, m/min, h, d, w, or their long names)"
            ),
            Self::Overflow => f.write_str("the duration is too large"),
        }
    }
}

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

/// Parses `"10s"`, `"500ms"`, `"1m 30s"`, `"1h30m"`, `"2 hours"`: one or more
/// `<integer><unit>` parts, summed; whitespace between parts (and between a number and its
/// unit) is allowed.
pub(crate) fn parse(text: &str) -> Result<Parsed, DurationError> {
    let mut rest = text.trim_start();
    if rest.is_empty() {
        return Err(DurationError::Empty);
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            let word: String = rest.chars().take_while(|c| !c.is_whitespace()).collect();
            return Err(DurationError::MissingNumber(word));
        }
        let (number, after) = rest.split_at(digits);
        let after = after.trim_start();
        let unit_len = after.len() - after.trim_start_matches(char::is_alphabetic).len();
        if unit_len == 0 {
            if after.is_empty() || after.starts_with(|c: char| c.is_ascii_digit()) {
                return Err(DurationError::MissingUnit(number.to_owned()));
            }
            let junk: String = after.chars().take_while(|c| !c.is_whitespace()).collect();
            return Err(DurationError::UnknownUnit(junk));
        }
        let (unit, after) = after.split_at(unit_len);
        let per_unit =
            unit_nanos(unit).ok_or_else(|| DurationError::UnknownUnit(unit.to_owned()))?;
        let value: u128 = number.parse().map_err(|_| DurationError::Overflow)?;
        total = value
            .checked_mul(per_unit)
            .and_then(|part| total.checked_add(part))
            .ok_or(DurationError::Overflow)?;
        rest = after.trim_start();
    }
    let secs = u64::try_from(total / 1_000_000_000).map_err(|_| DurationError::Overflow)?;
    let nanos = u32::try_from(total % 1_000_000_000).map_err(|_| DurationError::Overflow)?;
    Ok(Parsed { secs, nanos })
}

#[cfg(test)]
mod tests {
    use super::{DurationError, Parsed, parse};

    fn ok(text: &str) -> (u64, u32) {
        let Parsed { secs, nanos } = parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        (secs, nanos)
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
        assert_eq!(parse(""), Err(DurationError::Empty));
        assert_eq!(parse("  "), Err(DurationError::Empty));
        assert_eq!(parse("10x"), Err(DurationError::UnknownUnit("x".into())));
        assert_eq!(parse("10"), Err(DurationError::MissingUnit("10".into())));
        assert_eq!(parse("s"), Err(DurationError::MissingNumber("s".into())));
        assert_eq!(parse("1.5s"), Err(DurationError::UnknownUnit(".5s".into())));
        assert_eq!(
            parse("-1s"),
            Err(DurationError::MissingNumber("-1s".into()))
        );
        assert_eq!(
            parse("99999999999999999999999999999999999999999y"),
            Err(DurationError::Overflow)
        );
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
}
