//! Lock keys from axum path parameters: `path_key("order:<id>")`.

use std::fmt;

use axum::extract::{FromRequestParts, MatchedPath, RawPathParams};
use std::sync::Arc;

use dlock_core::key_template::{KeyTemplate, Part as TemplatePart};
use http::Request;

use crate::key::{KeyError, MakeLockKey};

/// A key template over the matched route's path parameters, in the syntax of
/// `#[distributed_lock]` (one parser for both): `<id>` or `{id}` name a parameter; `<<`, `>>`,
/// `{{`, `}}` are the literal characters. Path parameters have no fields: `<order.id>` is an
/// error here. Use it with [`Router::route_layer`](axum::Router::route_layer) (which
/// runs after routing, when the parameters are known), not `Router::layer`.
///
/// # Examples
///
/// ```
/// use axum::{Router, routing::post};
/// use dlock_tower::{DistributedLockLayer, path_key};
///
/// async fn pay() -> &'static str { "paid" }
///
/// let key = path_key("order:<id>");
/// key.check_route("/orders/{id}/pay").expect("the template only uses the route's parameters");
/// let app: Router = Router::new()
///     .route("/orders/{id}/pay", post(pay))
///     .route_layer(DistributedLockLayer::new(dlock_core::Locker::memory(), key));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct PathKey {
    template: Arc<str>,
    parts: Vec<Part>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Text(String),
    Param(String),
}

/// A key template that does not parse, or names a parameter its route lacks.
///
/// # Examples
///
/// ```
/// let err = dlock_tower::PathKey::parse("order:<id").unwrap_err();
/// assert!(err.to_string().contains("unclosed"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError(String);

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TemplateError {}

/// Parses `template` into a [`PathKey`].
///
/// # Panics
///
/// If the template does not parse (an unclosed or empty placeholder); use
/// [`PathKey::parse`] to handle that as an error.
///
/// # Examples
///
/// See [`PathKey`].
#[must_use]
pub fn path_key(template: &str) -> PathKey {
    PathKey::parse(template).unwrap_or_else(|e| panic!("{e}"))
}

impl PathKey {
    /// Parses `template`.
    ///
    /// # Errors
    ///
    /// [`TemplateError`] for an unclosed, empty or invalid placeholder, or one with fields.
    ///
    /// # Examples
    ///
    /// ```
    /// let key = dlock_tower::PathKey::parse("user:{user}:cart:<cart>").unwrap();
    /// assert_eq!(key.parameters().collect::<Vec<_>>(), ["user", "cart"]);
    /// ```
    pub fn parse(template: &str) -> Result<Self, TemplateError> {
        let error = |why: String| TemplateError(format!("key template `{template}`: {why}"));
        let parsed = KeyTemplate::parse(template).map_err(|e| error(e.to_string()))?;
        let parts = parsed
            .parts()
            .iter()
            .map(|part| match part {
                TemplatePart::Text(text) => Ok(Part::Text(text.clone())),
                TemplatePart::Placeholder { path, .. } if path.len() == 1 => {
                    Ok(Part::Param(path[0].clone()))
                }
                TemplatePart::Placeholder { written, .. } => Err(error(format!(
                    "`{written}`: a path parameter has no fields; name the parameter alone"
                ))),
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            template: Arc::from(template),
            parts,
        })
    }

    /// The parameter names the template uses, in order.
    pub fn parameters(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|part| match part {
            Part::Param(name) => Some(name.as_str()),
            Part::Text(_) => None,
        })
    }

    /// Checks at start-up that every parameter of the template is a parameter of `route`
    /// (axum syntax: `/orders/{id}` or `/files/{*path}`).
    ///
    /// # Errors
    ///
    /// [`TemplateError`] naming the missing parameter and the route's parameters.
    ///
    /// # Examples
    ///
    /// ```
    /// let key = dlock_tower::path_key("order:<order_id>");
    /// let err = key.check_route("/orders/{id}").unwrap_err();
    /// assert!(err.to_string().contains("`order_id`"));
    /// ```
    pub fn check_route(&self, route: &str) -> Result<(), TemplateError> {
        let route_params: Vec<&str> = route
            .split('/')
            .filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
            .map(|name| name.trim_start_matches('*'))
            .collect();
        match self.parameters().find(|p| !route_params.contains(p)) {
            None => Ok(()),
            Some(missing) => Err(TemplateError(format!(
                "key template `{}` uses `{missing}`, which route `{route}` does not have (its parameters: {})",
                self.template,
                if route_params.is_empty() {
                    "none".to_owned()
                } else {
                    route_params.join(", ")
                }
            ))),
        }
    }

    /// The key for a request whose route (`None` if axum did not record it) matched `params`.
    fn render(&self, params: &RawPathParams, route: Option<&str>) -> Result<String, KeyError> {
        let mut key = String::new();
        for part in &self.parts {
            match part {
                Part::Text(text) => key.push_str(text),
                Part::Param(name) => {
                    let value = params.iter().find(|(n, _)| n == name).map(|(_, v)| v);
                    let Some(value) = value else {
                        let known: Vec<&str> = params.iter().map(|(n, _)| n).collect();
                        let route = route.map_or_else(
                            || "the matched route".to_owned(),
                            |route| format!("route `{route}`"),
                        );
                        return Err(KeyError::new(format!(
                            "key template `{}` uses path parameter `{name}`, which {route} does not have (its parameters: {}); check it at start-up with PathKey::check_route",
                            self.template,
                            if known.is_empty() {
                                "none".to_owned()
                            } else {
                                known.join(", ")
                            }
                        )));
                    };
                    key.push_str(value);
                }
            }
        }
        Ok(key)
    }
}

impl fmt::Debug for PathKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("PathKey").field(&self.template).finish()
    }
}

impl<B> MakeLockKey<B> for PathKey {
    /// The template as written (`order:{id}`).
    fn key_template(&self) -> Option<Arc<str>> {
        Some(Arc::clone(&self.template))
    }

    fn make_key(&mut self, request: &mut Request<B>) -> Result<Option<String>, KeyError> {
        // The parameters live in the request's extensions, which axum's extractor reads from
        // request parts: lend it the extensions and take them back.
        let mut parts = Request::new(()).into_parts().0;
        std::mem::swap(&mut parts.extensions, request.extensions_mut());
        let params = poll_once(RawPathParams::from_request_parts(&mut parts, &()));
        std::mem::swap(&mut parts.extensions, request.extensions_mut());
        let route = request
            .extensions()
            .get::<MatchedPath>()
            .map(MatchedPath::as_str);
        match params {
            Some(Ok(params)) => self.render(&params, route).map(Some),
            Some(Err(rejection)) => Err(KeyError::new(format!(
                "key template `{}`: no path parameters ({rejection}); add the layer with Router::route_layer",
                self.template
            ))),
            None => Err(KeyError::new(
                "axum's path parameter extractor did not complete at once",
            )),
        }
    }
}

/// Polls a future once: axum's `RawPathParams` extractor only reads the extensions.
fn poll_once<F: std::future::Future>(future: F) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(output) => Some(output),
        std::task::Poll::Pending => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_placeholder_styles_and_escapes() {
        let key = PathKey::parse("a<<b>>{{c}}:<id>:{x}").unwrap();
        assert_eq!(
            key.parts,
            [
                Part::Text("a<b>{c}:".into()),
                Part::Param("id".into()),
                Part::Text(":".into()),
                Part::Param("x".into())
            ]
        );
    }

    #[test]
    fn the_template_is_the_metrics_key_label() {
        let key = path_key("order:{id}");
        let template = MakeLockKey::<()>::key_template(&key);
        assert_eq!(template.as_deref(), Some("order:{id}"));
    }

    #[test]
    fn bad_templates_are_errors() {
        assert!(
            PathKey::parse("order:{id")
                .unwrap_err()
                .to_string()
                .contains("unclosed")
        );
        assert!(
            PathKey::parse("order:<>")
                .unwrap_err()
                .to_string()
                .contains("empty")
        );
        assert!(
            PathKey::parse("order:<order.id>")
                .unwrap_err()
                .to_string()
                .contains("no fields")
        );
    }

    #[test]
    fn routes_are_checked_for_every_parameter() {
        let key = path_key("order:<id>:<part>");
        assert!(key.check_route("/orders/{id}/parts/{*part}").is_ok());
        let err = key.check_route("/orders/{id}").unwrap_err().to_string();
        assert!(
            err.contains("`part`") && err.contains("its parameters: id"),
            "{err}"
        );
    }
}
