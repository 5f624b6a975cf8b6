//! The attribute's arguments: `key = "order:<id>"` or `keys = ["account:<from>",
//! "sku:<sku>" for sku in order.skus]`, `ttl = "10s", wait = "2s", watchdog = false,
//! max_hold = "1h", hold_at_least = "1m", once = "48h", fencing = true, mode = "read" |
//! "write", permits = N, locker = <expr>, crate = "path"`.

use proc_macro2::Span;
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::{Expr, ExprLit, Ident, Lit, LitBool, LitInt, LitStr, Path, Token};

use std::time::Duration;

use crate::key_template::KeyTemplate;
use dlock_grammar::duration;

mod kw {
    syn::custom_keyword!(key);
    syn::custom_keyword!(keys);
    syn::custom_keyword!(ttl);
    syn::custom_keyword!(wait);
    syn::custom_keyword!(watchdog);
    syn::custom_keyword!(max_hold);
    syn::custom_keyword!(hold_at_least);
    syn::custom_keyword!(once);
    syn::custom_keyword!(fencing);
    syn::custom_keyword!(mode);
    syn::custom_keyword!(permits);
    syn::custom_keyword!(locker);
}

/// Every argument name, in the order the docs list them.
const ARGUMENTS: &str = "`key`, `keys`, `ttl`, `wait`, `watchdog`, `max_hold`, `hold_at_least`, `once`, \
     `fencing`, `mode`, `permits`, `locker`, `crate`";

/// The error for `mode` and `permits` together, spanned on the second of them.
const MODE_AND_PERMITS: &str = "`#[distributed_lock]`: `mode` and `permits` cannot be combined: \
     `mode` takes one side of a read-write lock, `permits` one permit of a semaphore";

/// The error for `key` and `keys` together, spanned on the second of them.
const KEY_AND_KEYS: &str = "`#[distributed_lock]`: `key` and `keys` cannot be combined: `key` \
     takes one lock, `keys` a set of locks taken together; put every key in `keys`";

/// The error for `keys` next to `once` or `hold_at_least`, spanned on the second of them.
const KEYS_AND: &str = "`#[distributed_lock]`: `keys` takes a lock set, which is released \
     outright: it cannot be combined with `once` or `hold_at_least` (they keep one job's lock)";

/// The error for `once` next to `wait`, `mode` or `permits`, spanned on the second of them.
const ONCE_AND: &str = "`#[distributed_lock]`: `once` runs a fire at most once and skips it when \
     it is busy, never waiting, on an exclusive lock: it cannot be combined with `wait`, `mode` \
     or `permits`";

/// The parsed arguments of one `#[distributed_lock(..)]`.
#[derive(Default)]
pub(crate) struct LockArgs {
    pub(crate) key: Option<KeyArg>,
    /// `keys = [..]`: a lock set.
    pub(crate) keys: Option<Vec<SetKey>>,
    pub(crate) ttl: Option<Duration>,
    pub(crate) wait: Option<Wait>,
    pub(crate) watchdog: Option<LitBool>,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) hold_at_least: Option<Duration>,
    /// `once = ".."`: the retention of a fire's done record.
    pub(crate) once: Option<Duration>,
    pub(crate) fencing: Option<LitBool>,
    pub(crate) mode: Option<Mode>,
    pub(crate) permits: Option<Permits>,
    pub(crate) locker: Option<Expr>,
    pub(crate) krate: Option<Path>,
}

/// `key = "..."`: the literal (for spans) and its parsed template.
pub(crate) struct KeyArg {
    pub(crate) lit: LitStr,
    pub(crate) template: KeyTemplate,
}

/// One element of `keys = [..]`: a template, and for `"sku:<sku>" for sku in order.skus`, the
/// binding and the collection it runs over (one key per element).
pub(crate) struct SetKey {
    pub(crate) key: KeyArg,
    pub(crate) each: Option<(Ident, Expr)>,
}

/// `mode = "read" | "write"`: the side of a read-write lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Read,
    Write,
}

/// `permits = N`: one of N permits of a semaphore, and where it was written.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Permits {
    pub(crate) limit: u32,
    pub(crate) span: Span,
}

/// `wait = "..."`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    For(Duration),
    Forever,
}

impl Parse for LockArgs {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut args = Self::default();
        while !input.is_empty() {
            if input.peek(kw::keys) {
                let at = input.span();
                parse_once::<kw::keys, _>(input, &mut args.keys, parse_keys)?;
                if args.key.is_some() {
                    return Err(syn::Error::new(at, KEY_AND_KEYS));
                }
                if args.once.is_some() || args.hold_at_least.is_some() {
                    return Err(syn::Error::new(at, KEYS_AND));
                }
            } else if input.peek(kw::key) {
                let at = input.span();
                parse_once::<kw::key, _>(input, &mut args.key, parse_key)?;
                if args.keys.is_some() {
                    return Err(syn::Error::new(at, KEY_AND_KEYS));
                }
            } else if input.peek(kw::ttl) {
                parse_once::<kw::ttl, _>(input, &mut args.ttl, parse_ttl)?;
            } else if input.peek(kw::wait) {
                let at = input.span();
                parse_once::<kw::wait, _>(input, &mut args.wait, parse_wait)?;
                if args.once.is_some() {
                    return Err(syn::Error::new(at, ONCE_AND));
                }
            } else if input.peek(kw::watchdog) {
                parse_once::<kw::watchdog, _>(input, &mut args.watchdog, parse_bool)?;
            } else if input.peek(kw::max_hold) {
                parse_once::<kw::max_hold, _>(input, &mut args.max_hold, parse_max_hold)?;
            } else if input.peek(kw::hold_at_least) {
                if args.keys.is_some() {
                    return Err(syn::Error::new(input.span(), KEYS_AND));
                }
                parse_once::<kw::hold_at_least, _>(
                    input,
                    &mut args.hold_at_least,
                    |input, name| {
                        positive_duration(
                            input,
                            name,
                            "\"1m\"",
                            "the least time the lock stays taken after it was granted",
                        )
                    },
                )?;
            } else if input.peek(kw::once) {
                let at = input.span();
                parse_once::<kw::once, _>(input, &mut args.once, |input, name| {
                    positive_duration(
                        input,
                        name,
                        "\"48h\"",
                        "how long a fire's done record stays",
                    )
                })?;
                if args.wait.is_some() || args.mode.is_some() || args.permits.is_some() {
                    return Err(syn::Error::new(at, ONCE_AND));
                }
                if args.keys.is_some() {
                    return Err(syn::Error::new(at, KEYS_AND));
                }
            } else if input.peek(kw::fencing) {
                parse_once::<kw::fencing, _>(input, &mut args.fencing, parse_bool)?;
            } else if input.peek(kw::mode) {
                let at = input.span();
                parse_once::<kw::mode, _>(input, &mut args.mode, parse_mode)?;
                if args.permits.is_some() {
                    return Err(syn::Error::new(at, MODE_AND_PERMITS));
                }
                if args.once.is_some() {
                    return Err(syn::Error::new(at, ONCE_AND));
                }
            } else if input.peek(kw::permits) {
                let at = input.span();
                parse_once::<kw::permits, _>(input, &mut args.permits, parse_permits)?;
                if args.mode.is_some() {
                    return Err(syn::Error::new(at, MODE_AND_PERMITS));
                }
                if args.once.is_some() {
                    return Err(syn::Error::new(at, ONCE_AND));
                }
            } else if input.peek(kw::locker) {
                parse_once::<kw::locker, _>(input, &mut args.locker, |input, _| input.parse())?;
            } else if input.peek(Token![crate]) {
                parse_once::<Token![crate], _>(input, &mut args.krate, parse_crate_path)?;
            } else if input.peek(Ident::peek_any) {
                let unknown = Ident::parse_any(input)?;
                return Err(syn::Error::new_spanned(
                    &unknown,
                    format!(
                        "unknown `#[distributed_lock]` argument `{unknown}`; expected one of {ARGUMENTS}"
                    ),
                ));
            } else {
                return Err(input.error(format!(
                    "`#[distributed_lock]` expects `name = value` arguments ({ARGUMENTS}), \
                     e.g. `#[distributed_lock(key = \"order:<id>\", ttl = \"10s\")]`"
                )));
            }
            if input.is_empty() {
                break;
            }
            input.parse::<Token![,]>()?;
        }
        Ok(args)
    }
}

/// Parses `<keyword> = <value>` into `slot`; the one place that reports a repeated argument,
/// spanned on the second occurrence's keyword.
fn parse_once<K, V>(
    input: ParseStream<'_>,
    slot: &mut Option<V>,
    value: impl FnOnce(ParseStream<'_>, &str) -> syn::Result<V>,
) -> syn::Result<()>
where
    K: Parse + ToTokens,
{
    let keyword: K = input.parse()?;
    let name = keyword.to_token_stream().to_string();
    if slot.is_some() {
        return Err(syn::Error::new_spanned(
            &keyword,
            format!("`{name}` is given more than once in `#[distributed_lock]`"),
        ));
    }
    input.parse::<Token![=]>()?;
    *slot = Some(value(input, &name)?);
    Ok(())
}

/// `expr` without the invisible groups a `macro_rules!` fragment (`$key:literal`) is wrapped
/// in, so the attribute works inside declarative macros.
fn peel(expr: Expr) -> Expr {
    match expr {
        Expr::Group(group) => peel(*group.expr),
        other => other,
    }
}

/// A string literal, or an error spanned on whatever was written instead.
fn string_literal(input: ParseStream<'_>, name: &str, example: &str) -> syn::Result<LitStr> {
    match peel(input.parse::<Expr>()?) {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => Ok(lit),
        other => Err(syn::Error::new_spanned(
            other,
            format!(
                "`#[distributed_lock]`: `{name}` must be a string literal, e.g. `{name} = {example}`"
            ),
        )),
    }
}

fn parse_key(input: ParseStream<'_>, name: &str) -> syn::Result<KeyArg> {
    let lit = string_literal(input, name, "\"order:<id>\"")?;
    let template =
        KeyTemplate::parse(&lit.value()).map_err(|e| syn::Error::new(lit.span(), e.message()))?;
    Ok(KeyArg { lit, template })
}

/// `keys = ["a:<x>", "b:<y>" for y in ys, ..]`: at least one element; each a template,
/// optionally followed by `for <binding> in <parameter or field of one>`.
fn parse_keys(input: ParseStream<'_>, name: &str) -> syn::Result<Vec<SetKey>> {
    let example = "`keys = [\"account:<from>\", \"account:<to>\"]`, or one key per element: \
                   `keys = [\"sku:<sku>\" for sku in order.skus]`";
    if !input.peek(syn::token::Bracket) {
        return Err(input.error(format!(
            "`#[distributed_lock]`: `{name}` must be a list of key templates, e.g. {example}"
        )));
    }
    let list;
    let brackets = syn::bracketed!(list in input);
    let mut keys = Vec::new();
    while !list.is_empty() {
        let key = parse_key(&list, name)?;
        let each = if list.peek(Token![for]) {
            list.parse::<Token![for]>()?;
            let binding: Ident = list.parse()?;
            list.parse::<Token![in]>()?;
            let collection: Expr = list.parse()?;
            collection_root(&collection)?;
            Some((binding, collection))
        } else {
            None
        };
        keys.push(SetKey { key, each });
        if list.is_empty() {
            break;
        }
        list.parse::<Token![,]>()?;
    }
    if keys.is_empty() {
        return Err(syn::Error::new(
            brackets.span.join(),
            format!("`#[distributed_lock]`: `{name}` needs at least one key, e.g. {example}"),
        ));
    }
    Ok(keys)
}

/// The parameter a `for .. in <collection>` runs over: the collection must be a parameter or
/// a field of one (`skus`, `order.skus`), so it is checked like a placeholder.
pub(crate) fn collection_root(collection: &Expr) -> syn::Result<&Ident> {
    match collection {
        Expr::Path(path) if path.qself.is_none() => path.path.get_ident().ok_or(()),
        Expr::Field(field) => return collection_root(&field.base),
        Expr::Group(group) => return collection_root(&group.expr),
        _ => Err(()),
    }
    .map_err(|()| {
        syn::Error::new_spanned(
            collection,
            "`#[distributed_lock]`: the collection after `in` must be a parameter of the fn or \
             a field of one, e.g. `for sku in skus` or `for sku in order.skus`",
        )
    })
}

fn parse_duration(lit: &LitStr, name: &str) -> syn::Result<Duration> {
    duration::parse(&lit.value()).map_err(|error| {
        syn::Error::new(
            lit.span(),
            format!(
                "`#[distributed_lock]`: invalid `{name}` duration {:?}: {error}",
                lit.value()
            ),
        )
    })
}

fn parse_ttl(input: ParseStream<'_>, name: &str) -> syn::Result<Duration> {
    let lit = string_literal(input, name, "\"10s\"")?;
    let ttl = parse_duration(&lit, name)?;
    if ttl.is_zero() {
        return Err(syn::Error::new(
            lit.span(),
            "`#[distributed_lock]`: `ttl` must be greater than zero: it is how long a crashed \
             holder keeps the lock (e.g. \"10s\")",
        ));
    }
    if ttl < Duration::from_millis(10) {
        return Err(syn::Error::new(
            lit.span(),
            "`#[distributed_lock]`: `ttl` must be at least 10ms",
        ));
    }
    Ok(ttl)
}

fn parse_max_hold(input: ParseStream<'_>, name: &str) -> syn::Result<Duration> {
    let lit = string_literal(input, name, "\"1h\"")?;
    let cap = parse_duration(&lit, name)?;
    if cap.is_zero() {
        return Err(syn::Error::new(
            lit.span(),
            "`#[distributed_lock]`: `max_hold` must be greater than zero: it is the longest the \
             lock is held before the body is cancelled (e.g. \"1h\")",
        ));
    }
    Ok(cap)
}

/// A duration greater than zero (`what` it is, for the error).
fn positive_duration(
    input: ParseStream<'_>,
    name: &str,
    example: &str,
    what: &str,
) -> syn::Result<Duration> {
    let lit = string_literal(input, name, example)?;
    let duration = parse_duration(&lit, name)?;
    if duration.is_zero() {
        return Err(syn::Error::new(
            lit.span(),
            format!(
                "`#[distributed_lock]`: `{name}` must be greater than zero: it is {what} (e.g. {example})"
            ),
        ));
    }
    Ok(duration)
}

fn parse_wait(input: ParseStream<'_>, name: &str) -> syn::Result<Wait> {
    let lit = string_literal(input, name, "\"2s\"")?;
    match duration::parse_wait(&lit.value()) {
        Ok(Some(wait)) => Ok(Wait::For(wait)),
        Ok(None) => Ok(Wait::Forever),
        Err(error) => Err(syn::Error::new(
            lit.span(),
            format!(
                "`#[distributed_lock]`: invalid `{name}` duration {:?}: {error}",
                lit.value()
            ),
        )),
    }
}

fn parse_mode(input: ParseStream<'_>, name: &str) -> syn::Result<Mode> {
    let lit = string_literal(input, name, "\"read\"")?;
    match lit.value().as_str() {
        "read" => Ok(Mode::Read),
        "write" => Ok(Mode::Write),
        other => Err(syn::Error::new(
            lit.span(),
            format!(
                "`#[distributed_lock]`: unknown `mode` {other:?}; expected \"read\" (shared with \
                 other readers) or \"write\" (exclusive); for a semaphore use `permits = N`"
            ),
        )),
    }
}

fn parse_permits(input: ParseStream<'_>, name: &str) -> syn::Result<Permits> {
    let lit = match peel(input.parse::<Expr>()?) {
        Expr::Lit(ExprLit {
            lit: Lit::Int(lit), ..
        }) => lit,
        other => {
            return Err(syn::Error::new_spanned(
                other,
                format!(
                    "`#[distributed_lock]`: `{name}` must be a whole number, e.g. `{name} = 3`"
                ),
            ));
        }
    };
    let limit = positive_u32(&lit)?;
    Ok(Permits {
        limit,
        span: lit.span(),
    })
}

fn positive_u32(lit: &LitInt) -> syn::Result<u32> {
    let limit: u32 = lit.base10_parse().map_err(|_| {
        syn::Error::new(
            lit.span(),
            format!(
                "`#[distributed_lock]`: `permits` must fit in a u32 (at most {}), not {lit}",
                u32::MAX
            ),
        )
    })?;
    if limit == 0 {
        return Err(syn::Error::new(
            lit.span(),
            "`#[distributed_lock]`: `permits` must be at least 1: it is how many holders the \
             semaphore lets in at once",
        ));
    }
    Ok(limit)
}

fn parse_bool(input: ParseStream<'_>, name: &str) -> syn::Result<LitBool> {
    match peel(input.parse::<Expr>()?) {
        Expr::Lit(ExprLit {
            lit: Lit::Bool(lit),
            ..
        }) => Ok(lit),
        other => Err(syn::Error::new_spanned(
            other,
            format!("`#[distributed_lock]`: `{name}` must be `true` or `false`"),
        )),
    }
}

/// `crate = "dlock"` (as tokio-macros) or `crate = dlock`.
fn parse_crate_path(input: ParseStream<'_>, _name: &str) -> syn::Result<Path> {
    match peel(input.parse::<Expr>()?) {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => lit.parse_with(Path::parse_mod_style).map_err(|_| {
            syn::Error::new(
                lit.span(),
                format!(
                    "`#[distributed_lock]`: `crate` must name a path, e.g. `crate = \"dlock_core\"`, not {:?}",
                    lit.value()
                ),
            )
        }),
        Expr::Path(path) if path.qself.is_none() => Ok(path.path),
        other => Err(syn::Error::new_spanned(
            other,
            "`#[distributed_lock]`: `crate` must name a path, e.g. `crate = \"dlock_core\"`",
        )),
    }
}

impl LockArgs {
    /// The path generated code reaches dlock-core through.
    pub(crate) fn crate_path(&self) -> Path {
        self.krate.clone().unwrap_or_else(|| {
            let mut path: Path = Ident::new("dlock_core", Span::call_site()).into();
            path.leading_colon = Some(Token![::](Span::call_site()));
            path
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{LockArgs, Wait};

    macro_rules! duration_cases {
        ($($name:ident: $text:literal => $kind:ident($($arg:tt)*),)*) => {
            #[test]
            fn wait_reads_every_case_of_the_duration_table() {
                $(
                    let parsed: syn::Result<LockArgs> =
                        syn::parse_str(&format!("key = \"job\", wait = {:?}", $text));
                    match (expected!($kind $($arg)*), parsed) {
                        (Expected::Wait(wait), Ok(args)) => {
                            let wait = wait.map_or(Wait::Forever, Wait::For);
                            assert_eq!(args.wait, Some(wait), "{:?}", $text);
                        }
                        (Expected::Error(hint), Err(error)) => {
                            let message = error.to_string();
                            assert!(message.contains(hint), "{:?}: {message}", $text);
                        }
                        (expected, Ok(args)) => {
                            panic!("{:?}: expected {expected:?}, got {:?}", $text, args.wait)
                        }
                        (expected, Err(error)) => {
                            panic!("{:?}: expected {expected:?}, got {error}", $text)
                        }
                    }
                )*
            }
        };
    }

    include!("../../dlock-core/tests/data/duration_cases.rs");
}
