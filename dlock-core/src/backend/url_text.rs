//! The text of a backend URL: its password redacted for messages and logs, and an option
//! taken out of its query (the TLS file options, which are the config's, not the server's).

/// `url` with the password of its user-info (if any) replaced by `<redacted>`.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    if scheme.eq_ignore_ascii_case("redlock") || scheme.eq_ignore_ascii_case("redlocks") {
        // Each master has credentials of its own.
        let entries: Vec<String> = rest.split(',').map(redact_userinfo).collect();
        return format!("{scheme}://{}", entries.join(","));
    }
    format!("{scheme}://{}", redact_userinfo(rest))
}

/// `user:<redacted>@rest` for `user:password@rest`; anything else as it is.
pub(crate) fn redact_userinfo(authority: &str) -> String {
    let Some((userinfo, hosts)) = authority.rsplit_once('@') else {
        return authority.to_owned();
    };
    match userinfo.split_once(':') {
        Some((user, _password)) => format!("{user}:<redacted>@{hosts}"),
        None => authority.to_owned(),
    }
}

/// Removes every `name=value` pair from `raw`'s query, giving back the rest of the URL and
/// the last value (percent-decoded).
pub(crate) fn take_query_option(raw: &str, name: &str) -> (String, Option<String>) {
    let Some((base, query)) = raw.split_once('?') else {
        return (raw.to_owned(), None);
    };
    let mut value = None;
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| {
            let (key, v) = pair.split_once('=').unwrap_or((pair, ""));
            if key == name {
                value = Some(
                    percent_encoding::percent_decode_str(v)
                        .decode_utf8_lossy()
                        .into_owned(),
                );
                false
            } else {
                true
            }
        })
        .collect();
    if kept.is_empty() {
        (base.to_owned(), value)
    } else {
        (format!("{base}?{}", kept.join("&")), value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_hides_only_the_password() {
        assert_eq!(
            redact("redis://app:s3cret@h:6379/0"),
            "redis://app:<redacted>@h:6379/0"
        );
        assert_eq!(redact("redis://h:6379/0"), "redis://h:6379/0");
        assert_eq!(redact("postgres://app@h/db"), "postgres://app@h/db");
        assert_eq!(
            redact("redlock://:a@h1:1,h2:2,u:b@h3:3/0"),
            "redlock://:<redacted>@h1:1,h2:2,u:<redacted>@h3:3/0"
        );
    }
}
