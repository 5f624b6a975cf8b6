//! `redlock://` URLs: the independent Redis masters, each with its own credentials, and how
//! long one master may take to answer.

use std::time::Duration;

use redis::ConnectionInfo;

use crate::backend::BackendKind;
use crate::backend::redis::{Layout, RedisUrl};
use crate::backend::url_text::{redact, redact_userinfo};
use crate::{Error, Result};

/// The fewest masters a RedLock may have: with fewer, a majority is every master, and one
/// that fails stops every lock (a single `redis://` server is better then).
pub(crate) const MIN_NODES: usize = 3;

/// The most masters a RedLock may have (a waiter tracks which masters confirmed its
/// subscription in one 64-bit mask); real deployments use 3, 5 or 7.
pub(crate) const MAX_NODES: usize = crate::backend::redis::MAX_SUBSCRIPTION_SERVERS;

/// A master's share of the lock's ttl when the URL does not say (`node_timeout=5%`, as
/// redsync): with a 30 s ttl one master may take 1.5 s before the acquire goes on without it.
const DEFAULT_NODE_SHARE: f64 = 0.05;

/// The least time a share of the ttl gives a master: a busy machine's scheduler alone can
/// hold a reply for tens of milliseconds, and a round that stops waiting once a majority
/// answered pays this only when a majority is slow.
const MIN_SHARE_BOUND: Duration = Duration::from_millis(50);

/// What a `redlock://` URL says, parsed once by
/// [`BackendUrl::parse`](crate::backend::BackendUrl::parse).
#[derive(Debug, Clone)]
pub(crate) struct RedLockUrl {
    /// One `redis://` connection per master, in the URL's order.
    pub(crate) nodes: Vec<ConnectionInfo>,
    /// How long one master may take to answer one request.
    pub(crate) node_timeout: NodeTimeout,
    /// Where the locks live on each master (`?layout=plain`: node-redlock's own layout).
    pub(crate) layout: Layout,
}

/// The per-master bound on one request: a share of the lock's ttl, or a fixed time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum NodeTimeout {
    /// This share of the request's ttl (between 0 and 0.5).
    ShareOfTtl(f64),
    Fixed(Duration),
}

impl NodeTimeout {
    /// The bound for a lock of `ttl`: a share of it (at least 50 ms) or the fixed time (at
    /// least 1 ms), at most `operation_timeout`.
    pub(crate) fn for_ttl(self, ttl: Duration, operation_timeout: Duration) -> Duration {
        let bound = match self {
            Self::ShareOfTtl(share) => ttl.mul_f64(share).max(MIN_SHARE_BOUND),
            Self::Fixed(bound) => bound,
        };
        bound.max(Duration::from_millis(1)).min(operation_timeout)
    }
}

impl RedLockUrl {
    /// Parses `redlock://[user:password@]h1:p1,[user:password@]h2:p2,...[/db][?node_timeout=5%][&layout=plain]`.
    /// Credentials belong to the master they precede; `/db` and the query apply to all.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the URL (passwords redacted): fewer than [`MIN_NODES`]
    /// masters, a master the Redis client refuses, or a `node_timeout` that is neither a
    /// share of the ttl (`1%`–`50%`) nor a duration (`50ms`).
    pub(crate) fn parse(url: &str) -> Result<Self> {
        let bad = |reason: String| Error::config("backend", redact(url), reason);
        let (scheme, rest) = url.split_once("://").unwrap_or(("redlock", url));
        // `redlocks://`: every master over TLS.
        let node_scheme = if scheme.eq_ignore_ascii_case("redlocks") {
            "rediss"
        } else {
            "redis"
        };
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        let (path, query) = tail.split_once('?').unwrap_or((tail, ""));
        let mut node_timeout = NodeTimeout::ShareOfTtl(DEFAULT_NODE_SHARE);
        let mut layout = Layout::Dlock;
        let mut passed_on = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("layout", value)) => layout = Layout::parse(value)?,
                Some(("node_timeout", value)) => {
                    node_timeout = parse_node_timeout(value)
                        .map_err(|reason| Error::config("backend.node_timeout", value, reason))?;
                }
                _ => passed_on.push(pair),
            }
        }
        let query = if passed_on.is_empty() {
            String::new()
        } else {
            format!("?{}", passed_on.join("&"))
        };
        let entries: Vec<&str> = authority.split(',').filter(|e| !e.is_empty()).collect();
        if entries.len() < MIN_NODES {
            return Err(bad(format!(
                "RedLock needs at least {MIN_NODES} independent Redis masters, got {}; for one server use `redis://`",
                entries.len()
            )));
        }
        if entries.len() > MAX_NODES {
            return Err(bad(format!(
                "RedLock takes at most {MAX_NODES} masters, got {}",
                entries.len()
            )));
        }
        let nodes = entries
            .iter()
            .map(|entry| {
                let node = format!("{node_scheme}://{entry}{path}{query}");
                match RedisUrl::parse(&node, BackendKind::Redis) {
                    Ok(RedisUrl::Single(info)) => Ok(*info),
                    Ok(RedisUrl::Cluster(_) | RedisUrl::Sentinel(_)) => {
                        Err(bad(format!("master `{entry}` is not one server")))
                    }
                    Err(error) => Err(bad(format!("master `{}`: {error}", redact_userinfo(entry)))),
                }
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            nodes,
            node_timeout,
            layout,
        })
    }

    /// The majority: how many masters must agree.
    pub(crate) const fn quorum(&self) -> usize {
        self.nodes.len() / 2 + 1
    }
}

fn parse_node_timeout(value: &str) -> std::result::Result<NodeTimeout, String> {
    if let Some(percent) = value.strip_suffix('%') {
        let share = percent
            .trim()
            .parse::<f64>()
            .map_err(|e| format!("expected a share of the ttl such as `5%`: {e}"))?
            / 100.0;
        if !(0.01..=0.5).contains(&share) {
            return Err("a share of the ttl between 1% and 50%".to_owned());
        }
        return Ok(NodeTimeout::ShareOfTtl(share));
    }
    dlock_grammar::duration::parse(value)
        .map(NodeTimeout::Fixed)
        .map_err(|e| format!("expected a share of the ttl (`5%`) or a duration (`50ms`): {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_master_has_its_own_credentials_and_shares_the_path() {
        let url = RedLockUrl::parse("redlock://:pw1@a:1,b:2,app:pw3@c:3/2").unwrap();
        assert_eq!(url.nodes.len(), 3);
        assert_eq!(url.quorum(), 2);
        let redis = |i: usize| url.nodes[i].redis_settings();
        assert_eq!(redis(0).password(), Some("pw1"));
        assert_eq!(redis(1).password(), None);
        assert_eq!(
            (redis(2).username(), redis(2).password()),
            (Some("app"), Some("pw3"))
        );
        assert!((0..3).all(|i| redis(i).db() == 2));
        assert_eq!(url.node_timeout, NodeTimeout::ShareOfTtl(0.05));
    }

    #[test]
    fn node_timeout_is_a_share_or_a_duration_and_bounded() {
        let share = RedLockUrl::parse("redlock://a:1,b:2,c:3?node_timeout=2%").unwrap();
        assert_eq!(
            share
                .node_timeout
                .for_ttl(Duration::from_secs(10), Duration::from_secs(5)),
            Duration::from_millis(200)
        );
        assert_eq!(
            share
                .node_timeout
                .for_ttl(Duration::from_millis(500), Duration::from_secs(5)),
            Duration::from_millis(50),
            "a share is at least 50 ms"
        );
        let fixed = RedLockUrl::parse("redlock://a:1,b:2,c:3/?node_timeout=50ms").unwrap();
        assert_eq!(
            fixed
                .node_timeout
                .for_ttl(Duration::from_secs(10), Duration::from_millis(20)),
            Duration::from_millis(20),
            "never above the operation timeout"
        );
        for bad in ["0.5%", "80%", "soon"] {
            let err = RedLockUrl::parse(&format!("redlock://a:1,b:2,c:3?node_timeout={bad}"))
                .unwrap_err()
                .to_string();
            assert!(err.contains("node_timeout") && err.contains(bad), "{err}");
        }
    }

    #[test]
    fn too_few_masters_and_bad_masters_are_named_without_passwords() {
        let err = RedLockUrl::parse("redlock://:s3cret@a:1,b:2")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("at least 3") && !err.contains("s3cret"),
            "{err}"
        );
        let err = RedLockUrl::parse("redlock://a:1,b:2,:s3cret@c:notaport")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("c:notaport") && !err.contains("s3cret"),
            "{err}"
        );
        let many: Vec<String> = (0..=MAX_NODES).map(|i| format!("h{i}:6379")).collect();
        let err = RedLockUrl::parse(&format!("redlock://{}", many.join(",")))
            .unwrap_err()
            .to_string();
        assert!(err.contains("at most 64 masters, got 65"), "{err}");
        let most = &many[..MAX_NODES];
        assert_eq!(
            RedLockUrl::parse(&format!("redlock://{}", most.join(",")))
                .expect("64 masters")
                .nodes
                .len(),
            MAX_NODES
        );
    }
}
