//! What the example binaries share: how they report a failure, and the one-line hint for a
//! backend URL whose cargo feature this build of the examples lacks.

use std::process::ExitCode;

use dlock_core::Error;
use dlock_core::backend::BackendKind;

/// The backend features of this crate (each forwards to dlock-core's feature of the same name).
pub const BACKEND_FEATURES: &[&str] = &["redis", "etcd"];

/// Prints why the binary `bin` failed — for a backend this build lacks, one line with the
/// command that works — and returns the exit code to end with.
///
/// # Examples
///
/// ```
/// let error = dlock_core::Error::config("ttl", "0s", "must be positive");
/// let _code = dlock_examples::report_failure("quickstart", &error); // prints "quickstart failed: ..."
/// ```
#[must_use]
pub fn report_failure(bin: &str, error: &Error) -> ExitCode {
    match missing_feature_hint(bin, error, std::env::args().skip(1)) {
        Some(hint) => eprintln!("{hint}"),
        None => eprintln!("{bin} failed: {error}"),
    }
    ExitCode::FAILURE
}

/// For a config error on a backend URL whose backend this build leaves out, the line that
/// names its feature and the command that runs `bin` with it (`args`: the binary's own
/// arguments, repeated in that command); `None` for any other error.
///
/// # Examples
///
/// ```
/// use dlock_core::DlockConfig;
///
/// let url = |name: &str| (name == "DLOCK_URL").then(|| "etcd://127.0.0.1:2379".to_owned());
/// if let Err(error) = DlockConfig::from_vars(url) {
///     // This build has no `etcd` feature: "quickstart: the etcd backend (etcd://127.0.0.1:2379)
///     // needs the `etcd` feature of dlock-examples; run: DLOCK_URL=etcd://127.0.0.1:2379 cargo
///     // run -p dlock-examples --features etcd --bin quickstart"
///     let hint = dlock_examples::missing_feature_hint("quickstart", &error, []).unwrap();
///     assert!(hint.contains("--features etcd --bin quickstart"));
/// }
/// ```
#[must_use]
pub fn missing_feature_hint(
    bin: &str,
    error: &Error,
    args: impl IntoIterator<Item = String>,
) -> Option<String> {
    hint_unless_built_in(bin, error, args, BackendKind::is_built_in)
}

/// [`missing_feature_hint`] with the question "does this build include the backend?" asked of
/// `built_in`, so the tests can ask it of either answer whatever features they run with.
fn hint_unless_built_in(
    bin: &str,
    error: &Error,
    args: impl IntoIterator<Item = String>,
    built_in: impl Fn(BackendKind) -> bool,
) -> Option<String> {
    let Error::Config { field, value, .. } = error else {
        return None;
    };
    let kind = BackendKind::from_url(value)?;
    let feature = kind.feature();
    if built_in(kind) || !BACKEND_FEATURES.contains(&feature) {
        return None;
    }
    // The URL came from the environment or from a file the arguments name.
    let env = if field == "DLOCK_URL" {
        format!("DLOCK_URL={value} ")
    } else {
        String::new()
    };
    let args: Vec<String> = args.into_iter().collect();
    let args = if args.is_empty() {
        String::new()
    } else {
        format!(" -- {}", args.join(" "))
    };
    Some(format!(
        "{bin}: the {kind} backend ({value}) needs the `{feature}` feature of dlock-examples; run: \
         {env}cargo run -p dlock-examples --features {feature} --bin {bin}{args}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hint for `error` in a build that includes no backend but memory.
    fn hint(bin: &str, error: &Error, args: &[&str]) -> Option<String> {
        let args = args.iter().map(|a| (*a).to_owned());
        hint_unless_built_in(bin, error, args, |kind| kind == BackendKind::Memory)
    }

    #[test]
    fn names_the_feature_and_the_command_for_each_backend_feature_left_out() {
        for (url, feature) in [
            ("redis://127.0.0.1:6379", "redis"),
            ("redis+cluster://a:1,b:2", "redis"),
            ("etcd://127.0.0.1:2379", "etcd"),
        ] {
            let error = Error::config("DLOCK_URL", url, "needs a feature");
            let line = hint("quickstart", &error, &[]).expect(url);
            assert!(line.contains(&format!("`{feature}` feature")), "{line}");
            let command = format!(
                "run: DLOCK_URL={url} cargo run -p dlock-examples --features {feature} --bin quickstart"
            );
            assert!(line.ends_with(&command), "{line}");
        }
    }

    #[test]
    fn a_build_with_the_feature_gets_no_hint() {
        let error = Error::config("DLOCK_URL", "redis://h:6379", "connection refused");
        let args = std::iter::empty();
        assert_eq!(
            hint_unless_built_in("quickstart", &error, args, |_| true),
            None
        );
    }

    #[test]
    fn a_url_from_a_file_repeats_the_arguments_instead_of_the_variable() {
        let error = Error::config("backend", "etcd://h:2379", "needs a feature");
        let line = hint("config_from_toml", &error, &["my.toml"]).unwrap();
        assert!(
            line.ends_with(
                "run: cargo run -p dlock-examples --features etcd --bin config_from_toml -- my.toml"
            ),
            "{line}"
        );
    }

    #[test]
    fn other_errors_and_unwritten_backends_get_no_hint() {
        assert_eq!(hint("quickstart", &Error::NoGlobalLocker, &[]), None);
        let ttl = Error::config("DLOCK_TTL", "ten", "not a duration");
        assert_eq!(hint("quickstart", &ttl, &[]), None);
        let memory = Error::config("DLOCK_URL", "memory://", "whatever");
        assert_eq!(hint("quickstart", &memory, &[]), None);
        // No feature of the examples brings ZooKeeper yet: the core's own error says it all.
        let zk = Error::config("DLOCK_URL", "zk://h:2181", "needs a feature");
        assert_eq!(hint("quickstart", &zk, &[]), None);
    }
}
