//! The key-template grammar of `#[distributed_lock(key = "..")]` and of dlock-tower's
//! `path_key("..")`: one parser for both. **Not API-stable**.
//!
//! ```text
//! template    = { text | escape | placeholder }
//! escape      = "<<" | ">>" | "{{" | "}}"          (the one character)
//! placeholder = "<" path ">" | "{" path "}"
//! path        = name { "." ( name | index ) }       (name: an ASCII identifier, not `_`)
//! ```
//!
//! A lone `>` or `}` outside a placeholder is literal text.
//!
//! # Examples
//!
//! ```
//! use dlock_grammar::key_template::{KeyTemplate, Part};
//! let template = KeyTemplate::parse("a<<b>>:<order.id>").unwrap();
//! assert_eq!(template.parts()[0], Part::Text("a<b>:".into()));
//! ```

use std::fmt;

/// A parsed template: literal text and placeholders, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyTemplate {
    parts: Vec<Part>,
}

/// One piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// Literal text, escapes resolved.
    Text(String),
    /// `<order.id>`: the path `["order", "id"]`, and the placeholder as written.
    Placeholder {
        /// As written, delimiters included (for messages).
        written: String,
        /// The name and the fields after it.
        path: Vec<String>,
    },
}

/// Why a template does not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateError {
    /// `<id` with no `>`.
    Unclosed {
        /// `<` or `{`.
        open: char,
        /// What followed it.
        so_far: String,
    },
    /// `<>` or `{}`.
    Empty {
        /// `<` or `{`.
        open: char,
        /// `>` or `}`.
        close: char,
    },
    /// `<a b>`, `<1>`, `<a.>`: not a name with fields.
    Invalid {
        /// As written.
        written: String,
    },
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unclosed { open, so_far } => write!(
                f,
                "unclosed placeholder `{open}{so_far}`; close it with `{}` (write `{open}{open}` \
                 for a literal `{open}`)",
                closing(*open)
            ),
            Self::Empty { open, close } => write!(
                f,
                "empty placeholder `{open}{close}`; name a parameter, e.g. `{open}id{close}` \
                 (write `{open}{open}` for a literal `{open}`)"
            ),
            Self::Invalid { written } => write!(
                f,
                "invalid placeholder `{written}`; expected a parameter name, optionally with \
                 fields, e.g. `<id>` or `<order.id>`"
            ),
        }
    }
}

impl std::error::Error for TemplateError {}

const fn closing(open: char) -> char {
    if open == '<' { '>' } else { '}' }
}

impl KeyTemplate {
    /// Parses `text`.
    ///
    /// # Errors
    ///
    /// [`TemplateError`] for an unclosed, empty or invalid placeholder.
    pub fn parse(text: &str) -> Result<Self, TemplateError> {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '<' | '{' | '>' | '}' if chars.peek() == Some(&c) => {
                    chars.next();
                    literal.push(c);
                }
                '<' | '{' => {
                    let close = closing(c);
                    let mut inner = String::new();
                    let mut closed = false;
                    for next in chars.by_ref() {
                        if next == close {
                            closed = true;
                            break;
                        }
                        inner.push(next);
                    }
                    if !closed {
                        return Err(TemplateError::Unclosed {
                            open: c,
                            so_far: inner,
                        });
                    }
                    if inner.is_empty() {
                        return Err(TemplateError::Empty { open: c, close });
                    }
                    let written = format!("{c}{inner}{close}");
                    let path = parse_path(&inner).ok_or(TemplateError::Invalid {
                        written: written.clone(),
                    })?;
                    if !literal.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut literal)));
                    }
                    parts.push(Part::Placeholder { written, path });
                }
                other => literal.push(other),
            }
        }
        if !literal.is_empty() {
            parts.push(Part::Text(literal));
        }
        Ok(Self { parts })
    }

    /// The pieces, in order.
    #[must_use]
    pub fn parts(&self) -> &[Part] {
        &self.parts
    }
}

/// `order.id` / `self.items.0` → segments; `None` unless each segment is an ASCII identifier
/// (not `_`) or, after the first, a tuple index without leading zeros.
fn parse_path(inner: &str) -> Option<Vec<String>> {
    let segments: Vec<String> = inner.split('.').map(str::to_owned).collect();
    let is_ident = |s: &str| {
        let mut chars = s.chars();
        chars
            .next()
            .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
            && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
            && s != "_"
    };
    let is_index = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let ok = segments
        .iter()
        .enumerate()
        .all(|(i, s)| is_ident(s) || (i > 0 && is_index(s) && (s == "0" || !s.starts_with('0'))));
    ok.then_some(segments)
}

#[cfg(test)]
mod tests {
    use super::{KeyTemplate, Part, TemplateError};

    fn placeholders(text: &str) -> Vec<Vec<String>> {
        KeyTemplate::parse(text)
            .unwrap()
            .parts
            .into_iter()
            .filter_map(|p| match p {
                Part::Placeholder { path, .. } => Some(path),
                Part::Text(_) => None,
            })
            .collect()
    }

    #[test]
    fn both_placeholder_styles() {
        assert_eq!(placeholders("order:<id>"), [["id"]]);
        assert_eq!(placeholders("order:{id}"), [["id"]]);
        assert_eq!(placeholders("<a>-{b}"), [["a"], ["b"]]);
        assert_eq!(placeholders("user:<req.user.id>"), [["req", "user", "id"]]);
        assert_eq!(placeholders("pair:<p.0>"), [["p", "0"]]);
        assert_eq!(placeholders("<self.id>"), [["self", "id"]]);
    }

    #[test]
    fn escapes_and_lone_closers() {
        let text = |t: &str| KeyTemplate::parse(t).unwrap().parts;
        assert_eq!(text("a<<b>>{{c}}"), [Part::Text("a<b>{c}".into())]);
        assert_eq!(text("a>b}c"), [Part::Text("a>b}c".into())]);
    }

    #[test]
    fn errors() {
        assert_eq!(
            KeyTemplate::parse("order:<id"),
            Err(TemplateError::Unclosed {
                open: '<',
                so_far: "id".into()
            })
        );
        assert_eq!(
            KeyTemplate::parse("x{}"),
            Err(TemplateError::Empty {
                open: '{',
                close: '}'
            })
        );
        for bad in [
            "<a b>", "<a.>", "<.a>", "<1>", "<a:?>", "<a.01>", "<_>", "< id >",
        ] {
            assert!(
                matches!(KeyTemplate::parse(bad), Err(TemplateError::Invalid { .. })),
                "{bad}"
            );
        }
    }
}
