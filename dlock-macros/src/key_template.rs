//! Key templates: `"order:<id>"`, `"order:{id}"`, `"user:<req.user.id>"`, with `<<`, `>>`,
//! `{{`, `}}` escapes — parsed by the grammar dlock-core and dlock-tower's `path_key` use
//! (the `dlock-grammar` crate). Every placeholder is checked against the fn's
//! parameters at compile time, and the template becomes one `format!` (or a `&'static str`
//! when it has no placeholder).

use proc_macro2::{Span, TokenStream};
use quote::quote_spanned;
use syn::LitStr;

use dlock_grammar::key_template as grammar;

use grammar::Part;

/// A parsed template of the attribute.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct KeyTemplate {
    parsed: grammar::KeyTemplate,
}

/// Why a template was rejected; rendered into a message naming the macro.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum TemplateError {
    /// It does not parse.
    Syntax(grammar::TemplateError),
    /// A placeholder names no parameter of the fn.
    Unknown {
        written: String,
        params: Vec<String>,
    },
}

impl TemplateError {
    pub(crate) fn message(&self) -> String {
        match self {
            Self::Syntax(error) => format!("`#[distributed_lock]`: in the key, {error}"),
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

impl KeyTemplate {
    /// Parses `text` (the literal's value). Does not check names; see [`Self::check`].
    pub(crate) fn parse(text: &str) -> Result<Self, TemplateError> {
        grammar::KeyTemplate::parse(text)
            .map(|parsed| Self { parsed })
            .map_err(TemplateError::Syntax)
    }

    /// Checks every placeholder's first segment against `params` (the fn's parameter names,
    /// `self` included for methods).
    pub(crate) fn check(&self, params: &[String]) -> Result<(), TemplateError> {
        for part in self.parsed.parts() {
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
    /// not `Display` is reported there; a placeholder's name resolves where its parameter
    /// (`params`: name and binding span) was written, so a key and a fn that come from
    /// different macro contexts (a `macro_rules!` that passes `$key:literal`) still agree.
    pub(crate) fn to_cow_expr(
        &self,
        lit: &LitStr,
        params: &[(String, Option<Span>)],
    ) -> TokenStream {
        let span = lit.span();
        let mut format = String::new();
        let mut plain = String::new();
        let mut args = Vec::new();
        for part in self.parsed.parts() {
            match part {
                Part::Text(text) => {
                    plain.push_str(text);
                    format.push_str(&text.replace('{', "{{").replace('}', "}}"));
                }
                Part::Placeholder { path, .. } => {
                    format.push_str("{}");
                    let binding = params
                        .iter()
                        .find(|(name, _)| *name == path[0])
                        .and_then(|(_, binding)| *binding);
                    let name_span = binding.map_or(span, |binding| span.resolved_at(binding));
                    args.push(placeholder_expr(path, span, name_span));
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

/// `["order", "id"]` → `order.id`, every token spanned on the key literal, the name resolved
/// with `name_span`'s hygiene.
fn placeholder_expr(path: &[String], span: Span, name_span: Span) -> TokenStream {
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
            let ident = syn::Ident::new(segment, if i == 0 { name_span } else { span });
            tokens.extend(quote_spanned! {span=> #ident });
        }
    }
    tokens
}

#[cfg(test)]
mod tests {
    use super::{KeyTemplate, TemplateError};

    fn render(text: &str) -> String {
        let lit = syn::LitStr::new(text, proc_macro2::Span::call_site());
        KeyTemplate::parse(text)
            .unwrap()
            .to_cow_expr(&lit, &[])
            .to_string()
    }

    #[test]
    fn renders_text_and_placeholders_into_one_format() {
        assert_eq!(
            render("a<<b>>"),
            r#":: std :: borrow :: Cow :: Borrowed ("a<b>")"#
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
    fn errors_name_the_macro() {
        let unclosed = KeyTemplate::parse("order:<id").unwrap_err();
        assert!(matches!(unclosed, TemplateError::Syntax(_)));
        assert!(
            unclosed
                .message()
                .starts_with("`#[distributed_lock]`: in the key, unclosed placeholder `<id`")
        );
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
