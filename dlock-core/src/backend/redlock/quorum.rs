//! Counting the masters' answers: what one round of RedLock decided.

use std::time::Duration;

use crate::Error;

/// One master's answer to an attempt.
#[derive(Debug)]
pub(super) enum Answer {
    /// `SET NX` took the lock there.
    Granted,
    /// Someone holds it there, for this long if it has an expiry.
    Held(Option<Duration>),
    /// No answer within the master's bound, or an error: it may or may not have taken it.
    Failed(Error),
}

/// What one round decided.
#[derive(Debug)]
pub(super) enum Verdict {
    /// A majority granted it in time.
    Won,
    /// No majority: retry (give back first what was taken), at `retry_after` at the latest.
    Lost { retry_after: Option<Duration> },
    /// Too few masters answered for any majority: the error of the first that failed.
    Unreachable(Error),
}

/// Decides a round from the answers of every master. `in_time` says whether the round ended
/// within the lock's validity (its ttl less the elapsed time and the clock drift margin).
pub(super) fn decide(answers: Vec<Answer>, quorum: usize, in_time: bool) -> Verdict {
    let masters = answers.len();
    let mut granted = 0;
    let mut holds = Vec::new();
    let mut first_failure = None;
    let mut failed = 0;
    for answer in answers {
        match answer {
            Answer::Granted => granted += 1,
            Answer::Held(left) => holds.push(left),
            Answer::Failed(error) => {
                failed += 1;
                first_failure.get_or_insert(error);
            }
        }
    }
    if granted >= quorum && in_time {
        return Verdict::Won;
    }
    if failed > masters - quorum {
        let error = first_failure.unwrap_or_else(|| Error::unavailable("redlock", "no answer"));
        return Verdict::Unreachable(Error::unavailable(
            "redlock",
            format!(
                "{failed} of {masters} masters did not answer (a majority is {quorum}): {error}"
            ),
        ));
    }
    // Once what we took is given back, the masters that granted are free; a majority needs
    // `short` of the holders' keys to expire too (masters that did not answer are unknown).
    let short = quorum.saturating_sub(granted);
    let retry_after = if short == 0 {
        // A majority granted, too late: retry soon.
        Some(Duration::ZERO)
    } else {
        let mut expiries: Vec<Duration> = holds.into_iter().flatten().collect();
        expiries.sort_unstable();
        expiries.get(short - 1).copied()
    };
    Verdict::Lost { retry_after }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(ms: u64) -> Answer {
        Answer::Held(Some(Duration::from_millis(ms)))
    }

    fn failed() -> Answer {
        Answer::Failed(Error::unavailable("redlock", "connection refused"))
    }

    #[test]
    fn a_majority_in_time_wins() {
        let answers = vec![
            Answer::Granted,
            Answer::Granted,
            Answer::Granted,
            failed(),
            held(5),
        ];
        assert!(matches!(decide(answers, 3, true), Verdict::Won));
        let late = vec![
            Answer::Granted,
            Answer::Granted,
            Answer::Granted,
            failed(),
            held(5),
        ];
        assert!(matches!(decide(late, 3, false), Verdict::Lost { .. }));
    }

    #[test]
    fn a_lost_round_retries_when_enough_holders_expire() {
        // 5 masters, 3 held (expiring in 30, 10, 20 ms), 2 granted: one more must expire.
        let answers = vec![
            Answer::Granted,
            Answer::Granted,
            held(30),
            held(10),
            held(20),
        ];
        let Verdict::Lost { retry_after } = decide(answers, 3, true) else {
            panic!("not lost");
        };
        assert_eq!(retry_after, Some(Duration::from_millis(10)));
        // A master that did not answer is not counted free: 1 granted, so 2 must expire.
        let answers = vec![Answer::Granted, failed(), held(30), held(10), held(20)];
        let Verdict::Lost { retry_after } = decide(answers, 3, true) else {
            panic!("not lost");
        };
        assert_eq!(retry_after, Some(Duration::from_millis(20)));
        // Not enough expiries known: no time to give (the waiter falls back to its ttl).
        let answers = vec![
            Answer::Granted,
            failed(),
            failed(),
            held(30),
            Answer::Held(None),
        ];
        let Verdict::Lost { retry_after } = decide(answers, 3, true) else {
            panic!("not lost");
        };
        assert_eq!(retry_after, None);
        // A majority granted, too late: retry at once.
        let late = vec![
            Answer::Granted,
            Answer::Granted,
            Answer::Granted,
            held(30),
            held(40),
        ];
        let Verdict::Lost { retry_after } = decide(late, 3, false) else {
            panic!("not lost");
        };
        assert_eq!(retry_after, Some(Duration::ZERO));
    }

    #[test]
    fn without_a_majority_of_answers_it_is_unreachable() {
        let answers = vec![
            Answer::Granted,
            Answer::Granted,
            failed(),
            failed(),
            failed(),
        ];
        let Verdict::Unreachable(error) = decide(answers, 3, true) else {
            panic!("not unreachable");
        };
        assert!(error.to_string().contains("3 of 5 masters"), "{error}");
    }
}
