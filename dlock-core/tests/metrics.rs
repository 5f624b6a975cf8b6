//! The `metrics` feature, read through metrics-util's `DebuggingRecorder`: a scripted
//! workload (the attribute, a busy wait, a waiter served, a force release, a max_hold) leaves
//! the counts and labels it should — key templates, never raw keys unless asked for.
//!
//! One recorder is installed for the whole binary; each test uses its own key templates, so
//! the label sets keep the tests apart.

mod support;

use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use dlock_core::{DlockConfig, Error, Locker, LostReason, distributed_lock};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

/// Everything recorded so far. The recorder's snapshots hand over what changed since the
/// previous one (counters and gauges are swapped to zero, histograms drained): added up here.
struct Recorded {
    snapshotter: Snapshotter,
    series: Vec<Series>,
}

struct Series {
    name: String,
    labels: Vec<(String, String)>,
    count: u64,
    level: f64,
    samples: Vec<f64>,
}

fn recorded() -> &'static Mutex<Recorded> {
    static RECORDED: OnceLock<Mutex<Recorded>> = OnceLock::new();
    RECORDED.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("the only recorder of this binary");
        Mutex::new(Recorded {
            snapshotter,
            series: Vec::new(),
        })
    })
}

/// The series of metric `name` whose labels include `wanted`, summed: (counter total, gauge
/// level, histogram samples).
fn read(name: &str, wanted: &[(&str, &str)]) -> (u64, f64, Vec<f64>) {
    let mut recorded = recorded().lock().unwrap_or_else(PoisonError::into_inner);
    for (key, _, _, value) in recorded.snapshotter.snapshot().into_vec() {
        let (_, key) = key.into_parts();
        let labels: Vec<(String, String)> = key
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        let index = recorded
            .series
            .iter()
            .position(|s| s.name == key.name() && s.labels == labels)
            .unwrap_or_else(|| {
                recorded.series.push(Series {
                    name: key.name().to_owned(),
                    labels,
                    count: 0,
                    level: 0.0,
                    samples: Vec::new(),
                });
                recorded.series.len() - 1
            });
        let series = &mut recorded.series[index];
        match value {
            DebugValue::Counter(n) => series.count += n,
            DebugValue::Gauge(level) => series.level += level.into_inner(),
            DebugValue::Histogram(samples) => {
                series
                    .samples
                    .extend(samples.into_iter().map(|s| s.into_inner()));
            }
        }
    }
    let mut total = (0, 0.0, Vec::new());
    for series in &recorded.series {
        let matches = series.name == name
            && wanted
                .iter()
                .all(|(k, v)| series.labels.iter().any(|(sk, sv)| sk == k && sv == v));
        if matches {
            total.0 += series.count;
            total.1 += series.level;
            total.2.extend_from_slice(&series.samples);
        }
    }
    total
}

fn counter(name: &str, wanted: &[(&str, &str)]) -> u64 {
    read(name, wanted).0
}

fn gauge(name: &str, wanted: &[(&str, &str)]) -> f64 {
    read(name, wanted).1
}

fn samples(name: &str, wanted: &[(&str, &str)]) -> Vec<f64> {
    read(name, wanted).2
}

/// Every series' label values of metric `name`.
fn label_values(name: &str, label: &str) -> Vec<String> {
    read(name, &[]);
    let recorded = recorded().lock().unwrap_or_else(PoisonError::into_inner);
    recorded
        .series
        .iter()
        .filter(|s| s.name == name)
        .filter_map(|s| s.labels.iter().find(|(k, _)| k == label))
        .map(|(_, v)| v.clone())
        .collect()
}

/// Polls `condition` until it holds, failing after 5 s.
async fn until(what: &str, condition: impl FnMut() -> bool) {
    support::processes::until(what, Duration::from_secs(5), condition).await;
}

#[distributed_lock(key = "invoice:<id>", locker = locker)]
async fn settle(locker: &Locker, id: u64) -> Result<u64, Error> {
    Ok(id)
}

#[tokio::test]
async fn the_attribute_labels_its_metrics_with_its_template() {
    recorded(); // installed before anything is recorded
    let locker = Locker::memory();
    for id in 1..=3 {
        assert_eq!(settle(&locker, id).await.unwrap(), id);
    }
    let labels = [
        ("key", "invoice:<id>"),
        ("backend", "memory"),
        ("mode", "exclusive"),
    ];
    let acquired = samples(
        "dlock.acquire.duration",
        &[labels[0], labels[1], labels[2], ("outcome", "acquired")],
    );
    assert_eq!(acquired.len(), 3, "{acquired:?}");
    assert!(
        acquired.iter().all(|s| (0.0..1.0).contains(s)),
        "seconds: {acquired:?}"
    );
    let held = samples("dlock.hold.duration", &[labels[0], ("outcome", "released")]);
    assert_eq!(held.len(), 3, "{held:?}");
    assert!(gauge("dlock.lock.count", &[labels[0], ("state", "held")]).abs() < f64::EPSILON);
    let keys = label_values("dlock.acquire.duration", "key");
    assert!(
        !keys
            .iter()
            .any(|k| k.starts_with("invoice:") && k != "invoice:<id>"),
        "a raw key became a label: {keys:?}"
    );
}

#[tokio::test]
async fn busy_and_served_waits_are_counted_and_raw_keys_only_when_asked() {
    recorded(); // installed before anything is recorded
    let locker = Locker::memory();
    let template = [("key", "cart:<id>")];
    let holder = locker
        .lock("cart:1")
        .key_template("cart:<id>")
        .await
        .unwrap();
    let busy = locker
        .lock("cart:1")
        .key_template("cart:<id>")
        .reentrant(false)
        .wait(Duration::from_millis(20))
        .await;
    assert!(matches!(busy, Err(Error::Busy { .. })), "{busy:?}");
    let busy = samples(
        "dlock.acquire.duration",
        &[template[0], ("outcome", "busy")],
    );
    assert_eq!(busy.len(), 1, "{busy:?}");
    assert!(busy[0] >= 0.020, "waited {}s of its 20 ms", busy[0]);

    let waiter = tokio::spawn({
        let locker = locker.clone();
        async move {
            locker
                .lock("cart:1")
                .key_template("cart:<id>")
                .wait(Duration::from_secs(5))
                .await
        }
    });
    until("the waiter counts as waiting", || {
        gauge("dlock.lock.count", &[template[0], ("state", "waiting")]) >= 1.0
    })
    .await;
    assert!((gauge("dlock.lock.count", &[template[0], ("state", "held")]) - 1.0).abs() < 1e-9);
    holder.release().await.unwrap();
    let served = waiter.await.unwrap().expect("the waiter gets the lock");
    assert!(gauge("dlock.lock.count", &[template[0], ("state", "waiting")]).abs() < 1e-9);
    assert!((gauge("dlock.lock.count", &[template[0], ("state", "held")]) - 1.0).abs() < 1e-9);
    drop(served);
    until("the dropped guard's hold ends", || {
        gauge("dlock.lock.count", &[template[0], ("state", "held")]).abs() < 1e-9
    })
    .await;

    // No template: `*`, unless the config opts in to raw keys.
    let guard = locker.lock("untemplated:7").await.unwrap();
    guard.release().await.unwrap();
    let raw = Locker::connect(&DlockConfig::default().with_metrics_raw_keys(true))
        .await
        .unwrap();
    let guard = raw.lock("rawkey:7").await.unwrap();
    guard.release().await.unwrap();
    let keys = label_values("dlock.acquire.duration", "key");
    assert!(!keys.iter().any(|k| k == "untemplated:7"), "{keys:?}");
    assert!(keys.iter().any(|k| k == "*"), "{keys:?}");
    assert!(keys.iter().any(|k| k == "rawkey:7"), "{keys:?}");
}

#[tokio::test]
async fn renewals_and_losses_are_counted_by_outcome_and_reason() {
    recorded(); // installed before anything is recorded
    let locker = Locker::memory();
    let broken = [("key", "job:<name>")];
    let ttl = Duration::from_millis(150);
    let guard = locker
        .lock("job:nightly")
        .key_template("job:<name>")
        .ttl(ttl)
        .await
        .unwrap();
    until("a renewal", || {
        counter("dlock.renewals", &[broken[0], ("outcome", "renewed")]) >= 1
    })
    .await;
    assert!(locker.force_release("job:nightly").await.unwrap());
    assert_eq!(guard.lost().await, LostReason::NotOwner);
    assert_eq!(
        counter("dlock.renewals", &[broken[0], ("outcome", "lost")]),
        1
    );
    assert_eq!(
        counter("dlock.lost", &[broken[0], ("reason", "not_owner")]),
        1
    );
    assert_eq!(
        samples("dlock.hold.duration", &[broken[0], ("outcome", "lost")]).len(),
        1
    );
    drop(guard);
    assert_eq!(
        samples("dlock.hold.duration", &[broken[0], ("outcome", "released")]).len(),
        0,
        "a lost hold ends once"
    );

    let capped = [("key", "report:<day>")];
    let guard = locker
        .read_lock("report:monday")
        .key_template("report:<day>")
        .ttl(ttl)
        .max_hold(Duration::from_millis(200))
        .await
        .unwrap();
    assert!(matches!(guard.lost().await, LostReason::MaxHold(_)));
    assert_eq!(
        counter(
            "dlock.lost",
            &[capped[0], ("reason", "max_hold"), ("mode", "shared")]
        ),
        1
    );
    assert!(gauge("dlock.lock.count", &[capped[0], ("state", "held")]).abs() < 1e-9);
}
