//! The configuration a subcommand runs with: the `--config` file, under the `DLOCK_*`
//! variables, under the flags — and the Locker connected with it.

use dlock_core::backend::BackendKind;
use dlock_core::{BackendSpec, DlockConfig, Error, Locker, Result};

use crate::args::Connection;

/// The configuration: defaults, then the `--config` file, then `DLOCK_*` variables, then the
/// flags. `adjust` applies the subcommand's own flags, and `replaced` names the variables
/// they replace: a variable a flag wins over is not read, so its bad value stops nothing.
///
/// # Errors
///
/// [`Error::Config`] naming the file, variable or field that is wrong.
pub(crate) fn config(
    connection: &Connection,
    replaced: &[&str],
    adjust: impl FnOnce(&mut DlockConfig),
) -> Result<DlockConfig> {
    let from_file = match &connection.config {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                Error::config(
                    "--config",
                    path.display().to_string(),
                    format!("cannot read it: {e}"),
                )
            })?;
            DlockConfig::from_toml_str(&text).map_err(|e| in_file(e, path))?
        }
        None => DlockConfig::default(),
    };
    let replaced_here = [
        connection.url.as_ref().map(|_| "DLOCK_URL"),
        connection.key_prefix.as_ref().map(|_| "DLOCK_KEY_PREFIX"),
    ];
    let replaced_by_flag =
        |name: &str| replaced.contains(&name) || replaced_here.contains(&Some(name));
    let mut config = from_file.with_vars(|name| {
        if replaced_by_flag(name) {
            None
        } else {
            std::env::var(name).ok()
        }
    })?;
    if let Some(url) = &connection.url {
        config.backend = BackendSpec::Url(url.clone());
    }
    if let Some(prefix) = &connection.key_prefix {
        config.key_prefix.clone_from(prefix);
    }
    adjust(&mut config);
    not_installed(&config.backend)?;
    config.validate()?;
    Ok(config)
}

/// A backend this `dlock` was installed without: the error names the install line that adds
/// it (etcd's client needs `protoc` at build time, so the plain install leaves it out).
///
/// # Errors
///
/// [`Error::Config`] naming the backend and the install line.
fn not_installed(backend: &BackendSpec) -> Result<()> {
    let url = backend.to_url();
    match BackendKind::from_url(&url) {
        Some(kind) if !kind.is_built_in() => {
            let needs = match kind {
                BackendKind::Etcd => {
                    " (etcd's client compiles protocol buffers: it needs `protoc`, e.g. \
                     `apt-get install protobuf-compiler`)"
                }
                _ => "",
            };
            Err(Error::config(
                "backend",
                backend.to_string(),
                format!(
                    "this dlock was installed without the {kind} backend; install it with \
                     `cargo install --path dlock-core/cli --features {feature}` (from \
                     crates.io: `cargo install dlock-cli --features {feature}`){needs}",
                    feature = kind.feature()
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// A Locker on the configured lock service; never the in-process `memory://` backend, which
/// would lock nothing between two `dlock` processes.
///
/// # Errors
///
/// [`Error::Config`] for `memory://`; what [`Locker::connect`] returns.
pub(crate) async fn connect(config: &DlockConfig) -> Result<Locker> {
    let locker = Locker::connect(config).await?;
    if locker.capabilities().name == "memory" {
        return Err(Error::config(
            "backend",
            config.backend.to_string(),
            "the memory backend locks only inside one process: name a lock service with \
             --url, DLOCK_URL or a --config file's `backend`",
        ));
    }
    Ok(locker)
}

/// A config error in a file names the file.
fn in_file(error: Error, path: &std::path::Path) -> Error {
    match error {
        Error::Config {
            field,
            value,
            reason,
        } => Error::config(format!("{}: {field}", path.display()), value, reason),
        other => other,
    }
}

/// Ends the Locker's state on the server — its sessions, leases and queue keys — so that a
/// `dlock` that exits leaves nothing behind for the next holder to wait out. A failure is
/// reported, not fatal: what is left ends at its ttl.
pub(crate) async fn shut_down(locker: &Locker) {
    if let Err(e) = locker.shutdown().await {
        eprintln!(
            "dlock: warning: could not end the session with the lock service ({}); it ends at \
             its ttl",
            crate::exit::describe(&e)
        );
    }
}
