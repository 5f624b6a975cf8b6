//! `path_key` builds every key of the shared template table
//! (`dlock-core/tests/data/key_template_cases.rs`) as the attribute does: in a real axum
//! Router, the handler finds exactly the expected key held by the layer. A template naming a
//! parameter its route lacks is answered `500` with a problem+json `detail` naming both, and
//! logged at `error`.

use std::sync::{Arc, Mutex};

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use axum::routing::get;
use dlock_core::{Error, Locker};
use dlock_tower::{DistributedLockLayer, path_key};
use tower::ServiceExt;
use tracing_subscriber::layer::SubscriberExt as _;

macro_rules! key_template_cases {
    ($($name:ident: $template:literal => $expected:literal,)*) => {
        #[tokio::test]
        async fn path_key_builds_every_key_of_the_table() {
            $(
                let $name = held_key($template, $expected).await;
                assert_eq!($name, "held", "template {:?}", $template);
            )*
        }
    };
}

include!("../../dlock-core/tests/data/key_template_cases.rs");

/// Sends `GET /t/42/ann` through a layer keyed by `template`; the handler answers `held` if
/// the key `expected` is held (by the layer) while it runs.
async fn held_key(template: &str, expected: &'static str) -> String {
    let locker = Locker::memory();
    let probe = locker.clone();
    let handler = move || {
        let probe = probe.clone();
        async move {
            let attempt = probe
                .lock(expected)
                .reentrant(false)
                .wait(Duration::ZERO)
                .await;
            match attempt {
                Err(Error::Busy { .. }) => "held".to_owned(),
                other => format!("`{expected}` was not held: {other:?}"),
            }
        }
    };
    let app = Router::new()
        .route("/t/{id}/{user}", get(handler))
        .route_layer(DistributedLockLayer::new(locker, path_key(template)));
    let request = Request::get("/t/42/ann").body(Body::empty()).unwrap();
    let response = app.oneshot(request).await.unwrap();
    let body = axum::body::to_bytes(response.into_body(), 4096)
        .await
        .unwrap();
    String::from_utf8(body.to_vec()).unwrap()
}

/// Every event's level and fields, as text.
#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<(tracing::Level, String)>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Events {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Text(String);
        impl tracing::field::Visit for Text {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0 += &format!("{}={value:?} ", field.name());
            }
        }
        let mut text = Text(String::new());
        event.record(&mut text);
        let level = *event.metadata().level();
        self.0.lock().unwrap().push((level, text.0));
    }
}

// One thread: the layer logs where the subscriber is set.
#[tokio::test(flavor = "current_thread")]
async fn a_template_naming_no_route_parameter_answers_500_naming_it_and_logs_an_error() {
    let events = Events::default();
    let _default =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(events.clone()));
    let app = Router::new()
        .route("/orders/{id}/pay", get(|| async { "paid" }))
        .route_layer(DistributedLockLayer::new(
            Locker::memory(),
            path_key("order:<idd>"),
        ));
    let request = Request::get("/orders/42/pay").body(Body::empty()).unwrap();
    let response = app.oneshot(request).await.unwrap();

    assert_eq!(response.status(), 500);
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    let body = axum::body::to_bytes(response.into_body(), 4096)
        .await
        .unwrap();
    let problem: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let detail = problem["detail"].as_str().unwrap();
    for part in [
        "`idd`",
        "route `/orders/{id}/pay`",
        "its parameters: id",
        "check_route",
    ] {
        assert!(detail.contains(part), "{part} missing from: {detail}");
    }
    let events = events.0.lock().unwrap();
    let logged = events
        .iter()
        .find(|(level, text)| *level == tracing::Level::ERROR && text.contains("`idd`"));
    assert!(logged.is_some(), "no error event names `idd`: {events:?}");
}
