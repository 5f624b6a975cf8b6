//! `dlock inspect`: who holds a lock and who waits for it, as text or JSON.

use std::time::Duration;

use dlock_core::{HolderInfo, LockInfo, LockMode, Locker, WaiterInfo};
use serde_json::{Value, json};

use crate::args::InspectArgs;
use crate::{exit, settings};

/// Runs `dlock inspect`; its exit status (0 whether the lock is held or free).
pub(crate) async fn inspect(args: InspectArgs) -> u8 {
    let config = match settings::config(&args.connection, &[], |_| {}) {
        Ok(config) => config,
        Err(e) => return exit::failed(&e, exit::UNAVAILABLE),
    };
    let locker = match settings::connect(&config).await {
        Ok(locker) => locker,
        Err(e) => {
            exit::report_at(&e, &config.backend);
            return exit::for_error(&e, exit::UNAVAILABLE);
        }
    };
    let status = match locker.inspect(&args.key).await {
        Ok(info) => {
            let view = View {
                key: &args.key,
                locker: &locker,
                info: &info,
            };
            if args.json {
                println!("{}", view.json());
            } else {
                print!("{}", view.text());
            }
            0
        }
        Err(e) => {
            exit::report_at(&e, &config.backend);
            exit::for_error(&e, exit::UNAVAILABLE)
        }
    };
    settings::shut_down(&locker).await;
    status
}

/// One lock's state with what names it.
struct View<'a> {
    key: &'a str,
    locker: &'a Locker,
    info: &'a LockInfo,
}

impl View<'_> {
    /// The name the backend is given: the key with the prefix.
    fn name(&self) -> String {
        self.locker
            .backend_key(self.key)
            .unwrap_or_else(|_| self.key.to_owned())
    }

    /// `{"key", "name", "backend", "holders": [...], "waiters": [...] or null}`.
    fn json(&self) -> Value {
        json!({
            "key": self.key,
            "name": self.name(),
            "backend": self.locker.capabilities().name,
            "holders": self.info.holders.iter().map(holder_json).collect::<Vec<_>>(),
            "waiters": self.info.waiters.as_ref().map(|waiters| {
                waiters.iter().map(waiter_json).collect::<Vec<_>>()
            }),
        })
    }

    fn text(&self) -> String {
        let backend = self.locker.capabilities().name;
        let mut text = format!("lock {} (named {} on {backend})\n", self.key, self.name());
        if self.info.is_free() {
            text.push_str("free\n");
        } else {
            text.push_str(&format!("held by {}:\n", self.info.holders.len()));
        }
        for holder in &self.info.holders {
            text.push_str(&format!(
                "  {:<16} owner {}",
                mode_text(holder.mode),
                holder.owner
            ));
            if let Some(token) = holder.fencing_token {
                text.push_str(&format!("  fencing token {token}"));
            }
            if let Some(left) = holder.expires_in {
                text.push_str(&format!("  expires in {}", shown(left)));
            }
            if let Some(kept) = holder.kept {
                text.push_str(&format!("  kept after its release ({kept})"));
            }
            text.push('\n');
        }
        match &self.info.waiters {
            None => text.push_str(&format!(
                "waiters: not kept on {backend} (each client queues its own)\n"
            )),
            Some(waiters) => {
                text.push_str(&format!("waiters: {}\n", waiters.len()));
                for waiter in waiters {
                    let owner = waiter.owner.as_deref().unwrap_or("-");
                    text.push_str(&format!("  {:<16} owner {owner}\n", mode_text(waiter.mode)));
                }
            }
        }
        text
    }
}

fn holder_json(holder: &HolderInfo) -> Value {
    let mut value = mode_json(holder.mode);
    value["owner"] = json!(holder.owner);
    value["fencing_token"] = json!(holder.fencing_token);
    value["expires_in_ms"] = json!(holder.expires_in.map(|left| left.as_millis()));
    value["kept"] = json!(holder.kept.map(|kept| kept.as_str()));
    value
}

fn waiter_json(waiter: &WaiterInfo) -> Value {
    let mut value = mode_json(waiter.mode);
    value["owner"] = json!(waiter.owner);
    value
}

/// `{"mode": "exclusive" | "shared" | "permit", "permits": N}` (permits for a semaphore).
fn mode_json(mode: LockMode) -> Value {
    match mode {
        LockMode::Permit { limit } => json!({ "mode": mode.name(), "permits": limit }),
        other => json!({ "mode": other.name() }),
    }
}

fn mode_text(mode: LockMode) -> String {
    mode.to_string()
}

/// A duration rounded to milliseconds.
fn shown(left: Duration) -> String {
    let millis = u64::try_from(left.as_millis()).unwrap_or(u64::MAX);
    humantime::format_duration(Duration::from_millis(millis)).to_string()
}
