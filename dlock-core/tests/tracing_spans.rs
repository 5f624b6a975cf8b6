//! The spans and events an operator sees: `dlock.acquire` (key, mode, backend, waited,
//! outcome, fencing token), `dlock.renew` (batch size and outcomes), `dlock.release`
//! (outcome), and a warning event when a lease is lost, with its reason.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlock_core::backend::MemoryBackend;
use dlock_core::{Error, Locker};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt as _};
use tracing_subscriber::registry::LookupSpan;

/// One span or event as recorded: its name (an event's message) and its fields as text.
#[derive(Debug, Clone, Default)]
struct Recorded {
    name: String,
    level: String,
    fields: HashMap<String, String>,
}

impl Visit for Recorded {
    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        self.fields
            .insert(field.name().to_owned(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.fields
            .insert(field.name().to_owned(), value.to_owned());
    }
}

/// Keeps every span (with the fields recorded later) and every event.
#[derive(Clone, Default)]
struct Recorder {
    spans: Arc<Mutex<HashMap<u64, Recorded>>>,
    closed: Arc<Mutex<Vec<Recorded>>>,
    events: Arc<Mutex<Vec<Recorded>>>,
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Recorder {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        let mut span = Recorded {
            name: attrs.metadata().name().to_owned(),
            level: attrs.metadata().level().to_string(),
            ..Recorded::default()
        };
        attrs.record(&mut span);
        self.spans.lock().unwrap().insert(id.into_u64(), span);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        if let Some(span) = self.spans.lock().unwrap().get_mut(&id.into_u64()) {
            values.record(span);
        }
    }

    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let mut recorded = Recorded {
            level: event.metadata().level().to_string(),
            ..Recorded::default()
        };
        event.record(&mut recorded);
        recorded.name = recorded.fields.remove("message").unwrap_or_default();
        self.events.lock().unwrap().push(recorded);
    }

    fn on_close(&self, id: Id, _: Context<'_, S>) {
        if let Some(span) = self.spans.lock().unwrap().remove(&id.into_u64()) {
            self.closed.lock().unwrap().push(span);
        }
    }
}

impl Recorder {
    fn closed(&self, name: &str) -> Vec<Recorded> {
        let closed = self.closed.lock().unwrap();
        closed.iter().filter(|s| s.name == name).cloned().collect()
    }
}

// One thread: the watchdog and the background releases run where the subscriber is set.
#[tokio::test(flavor = "current_thread")]
async fn acquire_renew_release_and_loss_are_traced() {
    let recorder = Recorder::default();
    let subscriber = tracing_subscriber::registry().with(recorder.clone());
    let _default = tracing::subscriber::set_default(subscriber);

    let backend = Arc::new(MemoryBackend::new());
    let (locker, other) = (
        Locker::from_shared_backend(backend.clone()),
        Locker::from_shared_backend(backend),
    );
    let ttl = Duration::from_millis(90);
    let guard = locker.lock("order:42").ttl(ttl).await.unwrap();
    let nested = locker.lock("order:42").await.unwrap();
    let busy = other.try_lock("order:42").await;
    assert!(matches!(busy, Err(Error::Busy { .. })), "{busy:?}");
    tokio::time::sleep(ttl).await; // about three renewals
    drop(nested);
    guard.release().await.unwrap();
    let expiring = locker
        .read_lock("report")
        .ttl(Duration::from_millis(20))
        .watchdog(false)
        .await
        .unwrap();
    let _ = expiring.lost().await;

    let acquires = recorder.closed("dlock.acquire");
    let outcomes: Vec<&str> = acquires
        .iter()
        .map(|s| s.fields.get("outcome").map_or("", String::as_str))
        .collect();
    assert_eq!(
        outcomes,
        ["acquired", "reentered", "busy", "acquired"],
        "{acquires:#?}"
    );
    let first = &acquires[0];
    assert_eq!(first.level, "DEBUG");
    assert_eq!(first.fields["key"], "order:42");
    assert_eq!(first.fields["mode"], "exclusive");
    assert_eq!(first.fields["backend"], "memory");
    assert!(first.fields.contains_key("waited_us"), "{first:?}");
    assert!(first.fields.contains_key("fencing_token"), "{first:?}");
    assert_eq!(acquires[3].fields["mode"], "shared");

    let renewals = recorder.closed("dlock.renew");
    assert!(!renewals.is_empty(), "no renewal span");
    for renewal in &renewals {
        assert_eq!(renewal.fields["backend"], "memory");
        assert_eq!(renewal.fields["batch"], "1");
        assert_eq!(renewal.fields["renewed"], "1", "{renewal:?}");
        assert_eq!(renewal.fields["lost"], "0");
    }

    let releases = recorder.closed("dlock.release");
    assert_eq!(releases.len(), 1, "{releases:#?}");
    assert_eq!(releases[0].fields["outcome"], "released");
    assert_eq!(releases[0].fields["key"], "dlock:order:42");

    let events = recorder.events.lock().unwrap();
    let lost: Vec<&Recorded> = events
        .iter()
        .filter(|e| e.name == "dlock: lease lost")
        .collect();
    assert_eq!(lost.len(), 1, "{events:#?}");
    assert_eq!(lost[0].level, "WARN");
    assert_eq!(lost[0].fields["key"], "report");
    assert!(
        lost[0].fields["reason"].contains("expired"),
        "{:?}",
        lost[0]
    );
    // Nothing at info or above besides the loss: a busy service's info log stays quiet.
    let loud: Vec<&Recorded> = events
        .iter()
        .filter(|e| e.level == "INFO" || (e.level == "WARN" && e.name != "dlock: lease lost"))
        .collect();
    assert!(loud.is_empty(), "{loud:#?}");
}
