//! Host lists in backend URLs, `scheme://[user:password@]host[:port],host[:port][/path]`: the
//! well-formedness check every URL gets, and the split etcd and ZooKeeper parse theirs with.

#[cfg(any(feature = "etcd", feature = "zookeeper"))]
use crate::{Error, Result};

/// The parts of a multi-host URL, `scheme://[user:password@]host[:port],host[:port][/path]`
/// (etcd, ZooKeeper): credentials and path percent-decoded, every host with a port.
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
#[derive(Debug)]
pub(crate) struct HostsUrl {
    /// User and password, if the URL has user info.
    pub(crate) user: Option<(String, String)>,
    /// `host:port` of every host, `default_port` where the URL gives none.
    pub(crate) hosts: Vec<String>,
    /// What follows the first `/` after the hosts (without it), decoded.
    pub(crate) path: String,
}

#[cfg(any(feature = "etcd", feature = "zookeeper"))]
impl HostsUrl {
    /// Splits `raw` (whose scheme the caller checked), refusing queries and fragments (`what`
    /// names the parts the URL may have, for the message), an empty user name, an empty host
    /// and percent-encoding that is not UTF-8.
    pub(crate) fn parse(raw: &str, default_port: u16, what: &str) -> Result<Self> {
        let bad =
            |reason: &str| Error::config("backend", crate::backend::url_text::redact(raw), reason);
        let (scheme, rest) = raw.split_once("://").unwrap_or(("", raw));
        if rest.contains(['?', '#']) {
            return Err(bad(&format!(
                "`{scheme}://` URLs take no query options: {what}"
            )));
        }
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (userinfo, hosts) = authority
            .rsplit_once('@')
            .map_or((None, authority), |(u, h)| (Some(u), h));
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8()
                .map(|s| s.into_owned())
                .map_err(|_| bad("percent-encoding is not valid UTF-8"))
        };
        let user = match userinfo {
            None => None,
            Some(info) => {
                let (user, password) = info.split_once(':').unwrap_or((info, ""));
                if user.is_empty() {
                    return Err(bad("empty user name before `@`"));
                }
                Some((decode(user)?, decode(password)?))
            }
        };
        let mut with_ports = Vec::new();
        for host in hosts.split(',') {
            if host.is_empty() {
                return Err(bad("expected at least one `host:port`, comma-separated"));
            }
            let has_port = match host.strip_prefix('[') {
                Some(v6) => v6.contains("]:"),
                None => host.contains(':'),
            };
            with_ports.push(if has_port {
                host.to_owned()
            } else {
                format!("{host}:{default_port}")
            });
        }
        Ok(Self {
            user,
            hosts: with_ports,
            path: decode(path)?,
        })
    }
}

/// Checks that `url` is well-formed, allowing a comma-separated host list.
pub(super) fn check_hosts(url: &str) -> std::result::Result<(), String> {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let (userinfo, hosts) = authority
        .rsplit_once('@')
        .map_or((None, authority), |(u, h)| (Some(u), h));
    let hosts: Vec<&str> = if hosts.is_empty() {
        vec![""]
    } else {
        hosts.split(',').collect()
    };
    for host in hosts {
        let userinfo = userinfo.map_or(String::new(), |u| format!("{u}@"));
        url::Url::parse(&format!("{scheme}://{userinfo}{host}{tail}")).map_err(|e| {
            if host.is_empty() {
                e.to_string()
            } else {
                format!("host `{host}`: {e}")
            }
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_lists_are_checked_host_by_host() {
        assert!(check_hosts("redis+cluster://a:1,b:2,c:3").is_ok());
        assert!(check_hosts("etcd://u:p@a:2379,b:2379/prefix?x=1").is_ok());
        let err = check_hosts("redis+cluster://a:1,b:notaport").unwrap_err();
        assert!(err.contains("host `b:notaport`"), "{err}");
    }
}
