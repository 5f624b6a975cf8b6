//! Key templates: `"order:<id>"`, `"order:{id}"`, `"user:<req.user.id>"`, with `<<`, `{{`, `}}`
//! escapes. Every placeholder is checked against the fn's parameters at compile time, and the
//! template becomes one `format!` (or a `&'static str` when it has no placeholder).

use proc_macro2::{Span, TokenStream};
use quote::quote_spanned;
use syn::LitStr;

/// A parsed template: literal text and placeholders, in order.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct KeyTemplate {
    parts: Vec<Part>,
}

#[derive(Debug, PartialEq, Eq)]
enum Part {
    Text(String),
    /// `<order.id>`: `["order", "id"]`, as written between the delimiters.
    Placeholder {
        written: String,
        path: Vec<String>,
    },
}

/// Why a template was rejected; rendered into a message naming the macro.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum TemplateError {
    Unclosed {
        open: char,
        so_far: String,
    },
    Empty {
        open: char,
        close: char,
    },
    Invalid {
        written: String,
    },
    Unknown {
        written: String,
        params: Vec<String>,
    },
}

impl TemplateError {
    pub(crate) fn message(&self) -> String {
        match self {
            Self::Unclosed { open, so_far } => {
                let close = closing(*open);
                format!(
                    "`#[distributed_lock]`: unclosed placeholder `{open}{so_far}` in the key; \
                     close it with `{close}` (write `{open}{open}` for a literal `{open}`)"
                )
            }
            Self::Empty { open, close } => format!(
                "`#[distributed_lock]`: empty placeholder `{open}{close}` in the key; \
                 name a parameter, e.g. `{open}id{close}` (write `{open}{open}` for a literal `{open}`)"
            ),
            Self::Invalid { written } => format!(
                "`#[distributed_lock]`: invalid placeholder `{written}` in the key; expected a \
                 parameter name, optionally with fields, e.g. `<id>` or `<order.id>`"
            ),
            Self::Unknown { written, params } => {
                let known = if params.is_empty() {
                    "the function has no parameters".to_owned()
                } else {
                    let names: Vec<String> = params.iter().map(|p| format!("`{p}`")).collect();
                    format!("the function's parameters are: {}", names.join(", "))
                };
                format!(
                    "`#[distributed_lock]`: unknown placeholder `{written}` in the key; {known}"
                )
            }
        }
    }
}

const fn closing(open: char) -> char {
    if open == '<' { '>' } else { '}' }
}

impl KeyTemplate {
    /// Parses `text` (the literal's value). Does not check names; see [`Self::check`].
    pub(crate) fn parse(text: &str) -> Result<Self, TemplateError> {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '<' | '{' => {
                    if chars.peek() == Some(&c) {
                        chars.next();
                        literal.push(c);
                        continue;
                    }
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
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    literal.push('}');
                }
                other => literal.push(other),
            }
        }
        if !literal.is_empty() {
            parts.push(Part::Text(literal));
        }
        Ok(Self { parts })
    }

    /// Checks every placeholder's first segment against `params` (the fn's parameter names,
    /// `self` included for methods).
    pub(crate) fn check(&self, params: &[String]) -> Result<(), TemplateError> {
        for part in &self.parts {
            if let Part::Placeholder { written, path } = part
                && !params.iter().any(|p| *p == path[0])
            {
                return Err(TemplateError::Unknown {
                    written: written.clone(),
                    params: params.to_vec(),
                });
            }
        }
        Ok(())
    }

    /// An expression of type `Cow<'static, str>`: `Cow::Borrowed("literal")` without
    /// placeholders, else `Cow::Owned(format!(..))` with each placeholder formatted with
    /// `Display` into one `String`. Spanned on the key literal, so a placeholder whose type is
    /// not `Display` is reported there.
    pub(crate) fn to_cow_expr(&self, lit: &LitStr) -> TokenStream {
        let span = lit.span();
        let mut format = String::new();
        let mut plain = String::new();
        let mut args = Vec::new();
        for part in &self.parts {
            match part {
                Part::Text(text) => {
                    plain.push_str(text);
                    format.push_str(&text.replace('{', "{{").replace('}', "}}"));
                }
                Part::Placeholder { path, .. } => {
                    format.push_str("{}");
                    args.push(placeholder_expr(path, span));
                }
            }
        }
        if args.is_empty() {
            let text = LitStr::new(&plain, span);
            return quote_spanned! {span=> ::std::borrow::Cow::Borrowed(#text) };
        }
        let format = LitStr::new(&format, span);
        quote_spanned! {span=>
            ::std::borrow::Cow::Owned(::std::format!(#format, #(#args),*))
        }
    }
}

/// `order.id` / `self.items.0` → segments; `None` unless each segment is an ASCII identifier
/// or (after the first) a tuple index.
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

/// `["order", "id"]` → `order.id`, every token spanned on the key literal.
fn placeholder_expr(path: &[String], span: Span) -> TokenStream {
    let mut tokens = TokenStream::new();
    for (i, segment) in path.iter().enumerate() {
        if i > 0 {
            tokens.extend(quote_spanned! {span=> . });
        }
        if segment.bytes().all(|b| b.is_ascii_digit()) {
            let index = syn::Index {
                index: segment.parse().unwrap_or(0),
                span,
            };
            tokens.extend(quote_spanned! {span=> #index });
        } else {
            let ident = syn::Ident::new(segment, span);
            tokens.extend(quote_spanned! {span=> #ident });
        }
    }
    tokens
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

    fn render(text: &str) -> String {
        let lit = syn::LitStr::new(text, proc_macro2::Span::call_site());
        KeyTemplate::parse(text)
            .unwrap()
            .to_cow_expr(&lit)
            .to_string()
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
    fn escapes() {
        assert_eq!(
            render("a<<b"),
            r#":: std :: borrow :: Cow :: Borrowed ("a<b")"#
        );
        assert_eq!(
            render("a{{b}}"),
            r#":: std :: borrow :: Cow :: Borrowed ("a{b}")"#
        );
        assert_eq!(
            render("a>b}c"),
            r#":: std :: borrow :: Cow :: Borrowed ("a>b}c")"#
        );
        assert_eq!(
            render("{{<id>}}"),
            r#":: std :: borrow :: Cow :: Owned (:: std :: format ! ("{{{}}}" , id))"#
        );
        assert_eq!(
            render("order:<order.id>"),
            r#":: std :: borrow :: Cow :: Owned (:: std :: format ! ("order:{}" , order . id))"#
        );
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
            KeyTemplate::parse("order:{id"),
            Err(TemplateError::Unclosed {
                open: '{',
                so_far: "id".into()
            })
        );
        assert_eq!(
            KeyTemplate::parse("x<>"),
            Err(TemplateError::Empty {
                open: '<',
                close: '>'
            })
        );
        for bad in ["<a b>", "<a.>", "<.a>", "<1>", "<a:?>", "<a.01>", "<_>"] {
            assert!(
                matches!(KeyTemplate::parse(bad), Err(TemplateError::Invalid { .. })),
                "{bad}"
            );
        }
        let template = KeyTemplate::parse("order:<idd>").unwrap();
        let err = template.check(&["id".into(), "amount".into()]).unwrap_err();
        assert_eq!(
            err.message(),
            "`#[distributed_lock]`: unknown placeholder `<idd>` in the key; \
             the function's parameters are: `id`, `amount`"
        );
        assert!(template.check(&["idd".into()]).is_ok());
        assert!(
            template
                .check(&[])
                .unwrap_err()
                .message()
                .ends_with("the function has no parameters")
        );
    }
}
