//! Property tests of what users type: keys, backend URLs and TOML config. Whatever the input,
//! nothing panics, and a refusal is a typed error naming the field (or key) and the value.

use dlock_core::backend::{BackendUrl, MAX_KEY_LEN, validate_key};
use dlock_core::{DlockConfig, Error, Locker};
use proptest::prelude::*;

/// Keys as users (and attackers) write them: any characters, with the ones that mean
/// something to a backend (hash tags, paths, separators, escapes) made likely.
fn keys() -> impl Strategy<Value = String> {
    let special = prop::sample::select(vec![
        '{', '}', '/', ':', '%', '.', '\\', '\n', '\0', ' ', 'é', '鍵', '🔒', '\u{202e}',
    ]);
    let piece = prop_oneof![
        any::<char>(),
        special,
        "[a-z0-9]".prop_map(|s| s.chars().next().unwrap())
    ];
    prop::collection::vec(piece, 0..80).prop_map(|chars| chars.into_iter().collect())
}

/// Keys around the length limit, in bytes: ASCII and multi-byte characters.
fn long_keys() -> impl Strategy<Value = String> {
    prop_oneof![
        (MAX_KEY_LEN - 3..MAX_KEY_LEN + 3).prop_map(|n| "k".repeat(n)),
        (MAX_KEY_LEN / 3 - 2..MAX_KEY_LEN / 3 + 2).prop_map(|n| "鍵".repeat(n)),
        (MAX_KEY_LEN / 4 - 2..MAX_KEY_LEN / 4 + 2).prop_map(|n| "🔒".repeat(n)),
    ]
}

fn check_key(key: &str) -> Result<(), TestCaseError> {
    let valid = !key.is_empty() && key.len() <= MAX_KEY_LEN && !key.chars().any(char::is_control);
    match validate_key(key) {
        Ok(()) => {
            prop_assert!(valid, "accepted {key:?}");
            let locker = Locker::memory();
            prop_assert_eq!(locker.backend_key(key).unwrap(), format!("dlock:{key}"));
        }
        Err(Error::InvalidKey { key: shown, reason }) => {
            prop_assert!(!valid, "refused {key:?}: {reason}");
            // The key is shown escaped, cut to 64 bytes, so a log line stays short.
            let escaped = key.escape_debug().to_string();
            let head = shown.split('…').next().unwrap();
            prop_assert!(escaped.starts_with(head), "{shown:?} is not {key:?}");
            prop_assert!(shown.len() <= 64 + " (… 9999 bytes)".len(), "{shown:?}");
        }
        Err(other) => prop_assert!(false, "{key:?}: not InvalidKey: {other:?}"),
    }
    Ok(())
}

proptest! {
    // Failures print their minimal input; nothing is written into the source tree.
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn any_key_is_accepted_or_refused_by_name(key in keys()) {
        check_key(&key)?;
    }

    #[test]
    fn keys_near_the_limit_are_measured_in_bytes(key in long_keys()) {
        check_key(&key)?;
    }

    #[test]
    fn any_key_locks_on_memory_or_fails_as_invalid(key in keys()) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let outcome = runtime.block_on(async {
            let locker = Locker::memory();
            let guard = locker.try_lock(&key).await?;
            guard.release().await
        });
        match outcome {
            Ok(()) => prop_assert!(validate_key(&key).is_ok()),
            Err(error) => prop_assert!(matches!(error, Error::InvalidKey { .. }), "{error:?}"),
        }
    }

    #[test]
    fn any_url_parses_or_is_a_config_error_on_backend(url in urls()) {
        match BackendUrl::parse(&url) {
            Ok(_) => {}
            Err(Error::Config { field, value, reason }) => {
                prop_assert_eq!(field, "backend");
                prop_assert!(!reason.is_empty());
                // The value is the URL as given, with a password hidden.
                if !url.contains('@') {
                    prop_assert_eq!(value, url);
                }
            }
            Err(other) => prop_assert!(false, "{url:?}: {other:?}"),
        }
    }

    #[test]
    fn any_toml_loads_or_names_what_is_wrong(text in toml_texts()) {
        match DlockConfig::from_toml_str(&text) {
            Ok(config) => prop_assert!(config.validate().is_ok()),
            Err(Error::Config { field, reason, .. }) => {
                prop_assert!(!field.is_empty() && !reason.is_empty(), "{text:?}");
            }
            Err(other) => prop_assert!(false, "{text:?}: {other:?}"),
        }
    }

    #[test]
    fn a_bad_value_is_named_with_its_field(
        field in prop::sample::select(vec![
            "ttl", "wait", "watchdog_interval", "operation_timeout", "max_hold", "backend",
            "key_prefix", "fencing",
        ]),
        value in "[a-z0-9 :/.%{}-]{0,24}",
    ) {
        let text = format!("{field} = \"{value}\"");
        if let Err(error) = DlockConfig::from_toml_str(&text) {
            let Error::Config { field: named, value: shown, .. } = &error else {
                return Err(TestCaseError::fail(format!("{text}: {error:?}")));
            };
            prop_assert_eq!(named.as_str(), field, "{}", error);
            // As given, or (for a duration the checks refused) the same duration spelled out.
            let same_duration = humantime::parse_duration(shown).ok().is_some()
                && humantime::parse_duration(shown).ok() == humantime::parse_duration(&value).ok();
            prop_assert!(shown.trim() == value.trim() || same_duration, "{}", error);
        }
    }
}

/// URLs: a known or unknown scheme, then hosts, ports, paths and queries of any shape.
fn urls() -> impl Strategy<Value = String> {
    let scheme = prop::sample::select(vec![
        "memory",
        "redis",
        "rediss",
        "redis+cluster",
        "REDIS",
        "redlock",
        "redlocks",
        "etcd",
        "etcds",
        "zk",
        "zks",
        "postgres",
        "postgresql",
        "mongodb",
        "",
        "http",
    ]);
    let rest = prop_oneof![
        ".{0,40}",
        "[a-z0-9.:@,/?=&%\\[\\]-]{0,40}",
        "(127.0.0.1|\\[::1\\]|localhost|u:p@h)(:[0-9]{0,6})?(,h:[0-9]{1,5}){0,3}(/[a-z0-9/]{0,8})?(\\?[a-z_]{1,12}=[a-z0-9%]{0,8}(&[a-z_]{1,12}=[a-z0-9]{0,5}){0,2})?",
    ];
    let separator = prop::sample::select(vec!["://", ":/", ":", ""]);
    (scheme, separator, rest)
        .prop_map(|(scheme, separator, rest)| format!("{scheme}{separator}{rest}"))
}

/// TOML documents: random text, and known fields with values of every type.
fn toml_texts() -> impl Strategy<Value = String> {
    let field = prop::sample::select(vec![
        "backend",
        "key_prefix",
        "ttl",
        "wait",
        "watchdog_interval",
        "operation_timeout",
        "fencing",
        "max_hold",
        "metrics_raw_keys",
        "tls",
        "tls.ca_file",
        "unknown",
    ]);
    let value = prop_oneof![
        "\"[a-z0-9 :/.]{0,16}\"",
        "-?[0-9]{1,20}",
        Just("true".to_owned()),
        Just("[]".to_owned()),
        Just("{}".to_owned()),
        "\"[0-9]{1,3}(ms|s|m|h|d| years)\"",
    ];
    let line = (field, value).prop_map(|(field, value)| format!("{field} = {value}"));
    prop_oneof![
        ".{0,60}",
        prop::collection::vec(line, 0..6).prop_map(|lines| lines.join("\n")),
    ]
}
