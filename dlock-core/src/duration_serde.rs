//! The config's durations in TOML (and any serde format), in the one grammar dlock writes
//! durations in everywhere ([`dlock_grammar::duration`]): `"10s"`, `"1m 30s"`; `"forever"`
//! for the wait, `"none"` for an optional limit. A bare number (`wait = 5`) is refused with
//! the same hint as everywhere else: write its unit.

use std::fmt;
use std::time::Duration;

use dlock_grammar::duration::{self as grammar, DurationError};
use serde::de::{self, Visitor};
use serde::{Deserializer, Serializer};

/// Text or a number, read as the text a user wrote.
struct Text;

impl Visitor<'_> for Text {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration such as \"10s\"")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<String, E> {
        Ok(text.to_owned())
    }

    fn visit_u64<E: de::Error>(self, number: u64) -> Result<String, E> {
        Ok(number.to_string())
    }

    fn visit_i64<E: de::Error>(self, number: i64) -> Result<String, E> {
        Ok(number.to_string())
    }

    fn visit_f64<E: de::Error>(self, number: f64) -> Result<String, E> {
        Ok(number.to_string())
    }
}

fn read<'de, D: Deserializer<'de>, T>(
    deserializer: D,
    parse: fn(&str) -> Result<T, DurationError>,
) -> Result<T, D::Error> {
    let text = deserializer.deserialize_any(Text)?;
    parse(&text).map_err(de::Error::custom)
}

fn write<S: Serializer>(duration: Option<&Duration>, serializer: S) -> Result<S::Ok, S::Error> {
    match duration {
        Some(duration) => {
            serializer.serialize_str(&humantime::format_duration(*duration).to_string())
        }
        None => serializer.serialize_none(),
    }
}

/// A required duration (`ttl`, `operation_timeout`).
pub(crate) mod required {
    use super::{Deserializer, Duration, Serializer, grammar, read, write};

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        read(d, grammar::parse)
    }

    pub(crate) fn serialize<S: Serializer>(value: &Duration, s: S) -> Result<S::Ok, S::Error> {
        write(Some(value), s)
    }
}

/// A wait: a duration, or `"forever"` (`None`; also what an absent field means).
pub(crate) mod wait {
    use super::{Deserializer, Duration, Serializer, grammar, read, write};

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        read(d, grammar::parse_wait)
    }

    #[allow(clippy::ref_option)] // serde's `with` passes a reference to the field
    pub(crate) fn serialize<S: Serializer>(
        value: &Option<Duration>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        write(value.as_ref(), s)
    }
}

/// An optional limit or interval: a duration, or `"none"` (`None`; also what an absent field
/// means).
pub(crate) mod optional {
    use super::{Deserializer, Duration, Serializer, grammar, read, write};

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        read(d, grammar::parse_optional)
    }

    #[allow(clippy::ref_option)] // serde's `with` passes a reference to the field
    pub(crate) fn serialize<S: Serializer>(
        value: &Option<Duration>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        write(value.as_ref(), s)
    }
}
