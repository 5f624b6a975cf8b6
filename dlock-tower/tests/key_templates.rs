//! `path_key` builds every key of the shared template table
//! (`dlock-core/tests/data/key_template_cases.rs`) as the attribute does: in a real axum
//! Router, the handler finds exactly the expected key held by the layer.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use axum::routing::get;
use dlock_core::{Error, Locker};
use dlock_tower::{DistributedLockLayer, path_key};
use tower::ServiceExt;

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
