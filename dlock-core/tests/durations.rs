//! The duration table (`tests/data/duration_cases.rs`) read as the TOML config's `wait` and
//! as `DLOCK_WAIT`: the same meaning, and the same hint, as the attribute and the command
//! line give.

use std::time::Duration;

use dlock_core::{DlockConfig, Error};

fn check(surface: &str, text: &str, got: Result<DlockConfig, Error>, expected: &Expected) {
    match (expected, got) {
        (Expected::Wait(wait), Ok(config)) => {
            assert_eq!(config.wait, *wait, "{surface} {text:?}");
        }
        (Expected::Error(hint), Err(Error::Config { field, reason, .. })) => {
            assert!(reason.contains(hint), "{surface} {text:?}: {reason}");
            assert!(
                field.contains("wait") || field.contains("WAIT"),
                "{surface}: {field}"
            );
        }
        (expected, got) => panic!("{surface} {text:?}: expected {expected:?}, got {got:?}"),
    }
}

macro_rules! duration_cases {
    ($($name:ident: $text:literal => $kind:ident($($arg:tt)*),)*) => {
        #[test]
        fn toml_and_the_environment_read_every_case_of_the_table() {
            $(
                let expected = expected!($kind $($arg)*);
                let toml = DlockConfig::from_toml_str(&format!("wait = {:?}", $text));
                check("TOML", $text, toml, &expected);
                let env = DlockConfig::default()
                    .with_vars(|name| (name == "DLOCK_WAIT").then(|| $text.to_owned()));
                check("DLOCK_WAIT", $text, env, &expected);
            )*
        }
    };
}

include!("data/duration_cases.rs");

#[test]
fn a_bare_number_in_toml_gets_the_same_hint() {
    let err = DlockConfig::from_toml_str("wait = 5")
        .unwrap_err()
        .to_string();
    assert!(err.contains("`5` has no unit (write e.g. `5s`"), "{err}");
}

#[test]
fn the_config_writes_durations_back_in_the_grammar() {
    let config = DlockConfig::default()
        .with_wait(Some(Duration::from_millis(1_500)))
        .with_max_hold(Some(Duration::from_secs(3_600)));
    let text = toml::to_string(&config).unwrap();
    assert!(text.contains("wait = \"1s 500ms\""), "{text}");
    assert_eq!(DlockConfig::from_toml_str(&text).unwrap(), config);
}
