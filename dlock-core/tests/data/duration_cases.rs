// One table of durations as a user writes them for a wait, and what each means: a number of
// milliseconds, `forever`, or an error whose message contains the given hint. Every place
// that takes a duration reads it with the one grammar (`dlock_grammar::duration`), and each
// includes this table with its own `duration_cases!`:
//   - the attribute's `wait = ".."`          dlock-macros/src/attr.rs (its tests)
//   - the TOML config's `wait = ".."`        dlock-core/tests/durations.rs
//   - the `DLOCK_WAIT` environment variable  dlock-core/tests/durations.rs
//   - the command line's `--wait ..`         dlock-core/src/bin/dlock/args.rs (its tests)
// (An empty or blank environment variable is an unset one, so blank text is not a case here.)

/// What a case expects: a wait (`None`: forever), or an error whose message has the hint.
#[derive(Debug)]
enum Expected {
    Wait(Option<std::time::Duration>),
    Error(&'static str),
}

macro_rules! expected {
    (millis $ms:literal) => {
        Expected::Wait(Some(std::time::Duration::from_millis($ms)))
    };
    (forever) => {
        Expected::Wait(None)
    };
    (error $hint:literal) => {
        Expected::Error($hint)
    };
}

duration_cases! {
    seconds: "10s" => millis(10_000),
    milliseconds: "250ms" => millis(250),
    compound: "1m 30s" => millis(90_000),
    compound_unspaced: "1h30m" => millis(5_400_000),
    long_unit_names: " 2 hours " => millis(7_200_000),
    zero: "0s" => millis(0),
    forever: "forever" => forever(),
    bare_number: "10" => error("`10` has no unit (write e.g. `10s` or `10ms`)"),
    unknown_unit: "10x" => error("unknown unit `x`"),
    fraction: "1.5s" => error("unknown unit `.5s`"),
    negative: "-1s" => error("expected a number before `-1s`"),
    none_is_not_a_wait: "none" => error("expected a number before `none`"),
}
