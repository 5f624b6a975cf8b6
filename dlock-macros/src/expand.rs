//! Code generation: the annotated fn's body becomes one call to
//! `dlock_core::__private::run(locker, key, options, async move { body })`, which acquires,
//! runs the body under the guard (cancelled if the lease is lost), and releases.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;
use syn::{
    AttrStyle, Expr, ExprAsync, ExprCall, FnArg, GenericArgument, ItemFn, Pat, PathArguments,
    ReturnType, Stmt, Type, TypeParamBound,
};

use crate::attr::{LockArgs, Mode, SetKey, Wait, collection_root};
use std::time::Duration;

/// Expands `#[distributed_lock(args)] item`. On any error the original item is emitted
/// unchanged, followed by the errors, so one mistake does not cascade into others.
pub(crate) fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    let result = syn::parse2::<LockArgs>(args).and_then(|args| {
        let func = syn::parse2::<ItemFn>(item.clone()).map_err(|_| {
            syn::Error::new(
                Span::call_site(),
                "`#[distributed_lock]` can only be used on an `async fn`",
            )
        })?;
        gen_function(&args, &func)
    });
    let expanded = match result {
        Ok(tokens) => tokens,
        Err(error) => {
            let mut tokens = item;
            tokens.extend(error.into_compile_error());
            tokens
        }
    };
    if std::env::var_os("DLOCK_MACROS_DEBUG").is_some() {
        eprintln!("{expanded}");
    }
    expanded
}

/// Where the body to lock lives.
enum Shape<'a> {
    /// `async fn f(..) -> Result<T, E> { body }`.
    AsyncFn,
    /// A fn returning a (boxed) async block, as `#[async_trait]` desugars `async fn`s (≥ 0.1.44):
    /// `fn f(..) -> Pin<Box<dyn Future<Output = R> + Send + '_>> { Box::pin(async move { .. }) }`.
    /// The lock is taken inside that future, not around the cheap call that allocates it.
    ReturnsAsyncBlock(AsyncInfo<'a>),
}

fn gen_function(args: &LockArgs, func: &ItemFn) -> syn::Result<TokenStream> {
    let mut errors: Option<syn::Error> = None;
    let mut push = |error: syn::Error| match &mut errors {
        Some(all) => all.combine(error),
        None => errors = Some(error),
    };

    let shape = if func.sig.asyncness.is_some() {
        Some(Shape::AsyncFn)
    } else if let Some(info) = AsyncInfo::from_fn(func) {
        Some(Shape::ReturnsAsyncBlock(info))
    } else {
        push(syn::Error::new_spanned(
            func.sig.fn_token,
            "`#[distributed_lock]` requires an `async fn`",
        ));
        None
    };

    let output = match &shape {
        Some(Shape::ReturnsAsyncBlock(_)) => match &func.sig.output {
            ReturnType::Type(_, ty) => future_output(ty),
            ReturnType::Default => None,
        },
        _ => match &func.sig.output {
            ReturnType::Type(_, ty) => Some(&**ty),
            ReturnType::Default => None,
        },
    };
    let output_span = output.map_or_else(|| func.sig.ident.span(), Spanned::span);
    let returns_result = output.is_some_and(is_result);
    // A hand-written future whose output is hidden behind an alias is left to the type checker.
    let output_hidden = matches!(shape, Some(Shape::ReturnsAsyncBlock(_))) && output.is_none();
    if !returns_result && !output_hidden {
        let message = "`#[distributed_lock]` requires the fn to return a `Result<T, E>` with \
                       `E: From<dlock_core::Error>`: taking the lock can fail (busy, lease lost)";
        push(match (&func.sig.output, output) {
            (_, Some(ty)) => syn::Error::new_spanned(ty, message),
            (ReturnType::Type(_, ty), None) => syn::Error::new_spanned(ty, message),
            (ReturnType::Default, None) => syn::Error::new_spanned(&func.sig.ident, message),
        });
    }

    if args.once.is_some()
        && let Some(ty) = output.filter(|ty| is_result(ty))
        && !skippable(ty)
    {
        push(syn::Error::new_spanned(
            ok_type(ty).map_or_else(|| ty.to_token_stream(), ToTokens::to_token_stream),
            "`#[distributed_lock(once = ..)]` requires the fn to return `Result<Option<T>, E>` \
             or `Result<(), E>`: a fire another process runs or ran is skipped, returning \
             `Ok(None)` or `Ok(())`",
        ));
    }

    let params = parameters(func);
    match (&args.key, &args.keys) {
        (None, None) => push(syn::Error::new(
            Span::call_site(),
            "`#[distributed_lock]` requires a `key` argument, e.g. \
             `#[distributed_lock(key = \"order:<id>\")]` (or `keys = [..]` for a lock set)",
        )),
        (Some(key), _) => {
            let names: Vec<String> = params.iter().map(|p| p.0.clone()).collect();
            if let Err(error) = key.template.check(&names) {
                push(syn::Error::new(key.lit.span(), error.message()));
            }
        }
        (None, Some(keys)) => {
            for set_key in keys {
                if let Err(error) = check_set_key(set_key, &params) {
                    push(error);
                }
            }
        }
    }

    if let Some(errors) = errors {
        return Err(errors);
    }
    let Some(shape) = shape else {
        unreachable!("errors were reported above");
    };

    let krate = args.crate_path();
    let (run_name, key) = match (&args.key, &args.keys) {
        (Some(key), _) => (quote! { run }, key.template.to_cow_expr(&key.lit, &params)),
        (None, Some(keys)) => (quote! { run_all }, set_keys_expr(keys, &params)),
        (None, None) => unreachable!("errors were reported above"),
    };
    let locker = match &args.locker {
        Some(expr) => {
            let krate = respan(krate.to_token_stream(), expr.span());
            quote_spanned! {expr.span()=>
                #krate::__private::IntoLocker::into_locker(#expr)
            }
        }
        None => quote! { #krate::__private::Locker::global() },
    };
    let options = gen_options(args);
    // Spanned on the return type: an error type without `From<dlock_core::Error>` is
    // reported there.
    let run_fn = respan(krate.to_token_stream(), output_span);
    let run = |body: TokenStream| match args.once {
        None => quote_spanned! {output_span=>
            #run_fn::__private::#run_name(#locker, #key, #options, #body).await
        },
        Some(retention) => {
            let retention = duration_tokens(retention);
            quote_spanned! {output_span=>
                #run_fn::__private::run_once(#locker, #key, #options, #retention, #body).await
            }
        }
    };

    let outer_attrs = func
        .attrs
        .iter()
        .filter(|a| matches!(a.style, AttrStyle::Outer));
    let inner_attrs = func
        .attrs
        .iter()
        .filter(|a| !matches!(a.style, AttrStyle::Outer));
    let vis = &func.vis;
    let sig = &func.sig;
    let body = match shape {
        Shape::AsyncFn => {
            let fake_return_edge = fake_return_edge(&func.sig.output);
            let block = &func.block;
            let run = run(quote! { async move { #fake_return_edge #block } });
            quote! { #(#inner_attrs)* #run }
        }
        Shape::ReturnsAsyncBlock(info) => {
            let stmts = func.block.stmts.iter().map(|stmt| {
                if std::ptr::eq(stmt, info.stmt) {
                    let run = run(info.async_expr.to_token_stream());
                    let future = quote! { async move { #run } };
                    if info.boxed {
                        quote! { ::std::boxed::Box::pin(#future) }
                    } else {
                        future
                    }
                } else {
                    stmt.to_token_stream()
                }
            });
            quote! { #(#inner_attrs)* #(#stmts)* }
        }
    };
    Ok(quote! {
        #(#outer_attrs)*
        #vis #sig {
            #body
        }
    })
}

/// Checks one element of `keys = [..]`: its collection's root names a parameter, and its
/// placeholders name parameters or its own binding.
fn check_set_key(set_key: &SetKey, params: &[(String, Option<Span>)]) -> syn::Result<()> {
    let mut names: Vec<String> = params.iter().map(|p| p.0.clone()).collect();
    if let Some((binding, collection)) = &set_key.each {
        let root = collection_root(collection)?;
        if !names.iter().any(|name| root == name) {
            return Err(syn::Error::new_spanned(
                root,
                format!(
                    "`#[distributed_lock]`: unknown parameter `{root}` after `in`; the \
                     function's parameters are: {}",
                    names
                        .iter()
                        .map(|name| format!("`{name}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        names.push(binding.to_string());
    }
    set_key
        .key
        .template
        .check(&names)
        .map_err(|error| syn::Error::new(set_key.key.lit.span(), error.message()))
}

/// The keys of a set as one `Vec<String>` expression: each template formatted once, or once
/// per element of its collection (borrowed, before the body takes the parameters).
fn set_keys_expr(keys: &[SetKey], params: &[(String, Option<Span>)]) -> TokenStream {
    let pushes = keys.iter().map(|set_key| {
        let lit = &set_key.key.lit;
        match &set_key.each {
            None => {
                let key = set_key.key.template.to_cow_expr(lit, params);
                quote_spanned! {lit.span()=>
                    __dlock_keys.push(::std::string::String::from(#key));
                }
            }
            Some((binding, collection)) => {
                let mut scope = params.to_vec();
                scope.push((binding.to_string(), Some(binding.span())));
                let key = set_key.key.template.to_cow_expr(lit, &scope);
                quote_spanned! {lit.span()=>
                    for #binding in &#collection {
                        __dlock_keys.push(::std::string::String::from(#key));
                    }
                }
            }
        }
    });
    quote! {{
        let mut __dlock_keys: ::std::vec::Vec<::std::string::String> = ::std::vec::Vec::new();
        #(#pushes)*
        __dlock_keys
    }}
}

/// `tokens` with every token spanned at `span`.
fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut tree| {
            if let proc_macro2::TokenTree::Group(group) = &tree {
                let mut respanned =
                    proc_macro2::Group::new(group.delimiter(), respan(group.stream(), span));
                respanned.set_span(span);
                tree = respanned.into();
            } else {
                tree.set_span(span);
            }
            tree
        })
        .collect()
}

/// `d` as a `core::time::Duration` expression.
fn duration_tokens(d: Duration) -> TokenStream {
    let (secs, nanos) = (d.as_secs(), d.subsec_nanos());
    quote! { ::core::time::Duration::new(#secs, #nanos) }
}

fn gen_options(args: &LockArgs) -> TokenStream {
    let krate = args.crate_path();
    let duration = duration_tokens;
    let ttl = match args.ttl {
        Some(ttl) => {
            let ttl = duration(ttl);
            quote! { ::core::option::Option::Some(#ttl) }
        }
        None => quote! { ::core::option::Option::None },
    };
    let wait = match args.wait {
        None => quote! { #krate::__private::Wait::Default },
        Some(Wait::Forever) => quote! { #krate::__private::Wait::Forever },
        Some(Wait::For(d)) => {
            let d = duration(d);
            quote! { #krate::__private::Wait::For(#d) }
        }
    };
    let max_hold = match args.max_hold {
        Some(cap) => {
            let cap = duration(cap);
            quote! { ::core::option::Option::Some(#cap) }
        }
        None => quote! { ::core::option::Option::None },
    };
    let hold_at_least = match args.hold_at_least {
        Some(at_least) => {
            let at_least = duration(at_least);
            quote! { ::core::option::Option::Some(#at_least) }
        }
        None => quote! { ::core::option::Option::None },
    };
    let watchdog = args
        .watchdog
        .as_ref()
        .map_or_else(|| quote! { true }, ToTokens::to_token_stream);
    let fencing = args.fencing.as_ref().map_or_else(
        || quote! { ::core::option::Option::None },
        |fencing| quote! { ::core::option::Option::Some(#fencing) },
    );
    let mode = match (args.mode, args.permits) {
        (Some(Mode::Read), _) => quote! { #krate::LockMode::Shared },
        (_, Some(permits)) => {
            let limit = permits.limit;
            quote_spanned! { permits.span=> #krate::LockMode::Permit { limit: #limit } }
        }
        (Some(Mode::Write) | None, None) => quote! { #krate::LockMode::Exclusive },
    };
    let kind = match (args.mode, args.permits) {
        (Some(Mode::Write), _) | (Some(Mode::Read), None) => {
            quote! { #krate::backend::LockKind::ReadWrite }
        }
        (_, Some(_)) => quote! { #krate::backend::LockKind::Semaphore },
        (None, None) => quote! { #krate::backend::LockKind::Mutex },
    };
    // The literal as written (`order:<id>`): the `key` label of the lock's metrics; a set's
    // templates joined (`account:<from>, account:<to>`).
    let key_template = match (&args.key, &args.keys) {
        (Some(key), _) => Some(key.lit.clone()),
        (None, Some(keys)) => {
            let joined: Vec<String> = keys.iter().map(|k| k.key.lit.value()).collect();
            Some(syn::LitStr::new(&joined.join(", "), keys[0].key.lit.span()))
        }
        (None, None) => None,
    };
    quote! {
        #krate::__private::Options {
            ttl: #ttl,
            wait: #wait,
            watchdog: #watchdog,
            max_hold: #max_hold,
            hold_at_least: #hold_at_least,
            fencing: #fencing,
            mode: #mode,
            kind: #kind,
            key_template: #key_template,
        }
    }
}

/// `if false { let __dlock_fake_return: R = loop {}; return __dlock_fake_return; }` as the
/// body's first statement pins the async block's output to the declared return type (with
/// `impl Trait` erased to `_`), so `?` and type errors in the body behave and point where they
/// would without the attribute (tracing-attributes' technique).
fn fake_return_edge(output: &ReturnType) -> TokenStream {
    let ReturnType::Type(_, ty) = output else {
        return TokenStream::new();
    };
    let mut ty = (**ty).clone();
    ImplTraitEraser.visit_type_mut(&mut ty);
    quote_spanned! {ty.span()=>
        #[allow(
            unknown_lints,
            unreachable_code,
            clippy::diverging_sub_expression,
            clippy::empty_loop,
            clippy::let_unit_value,
            clippy::let_with_type_underscore,
            clippy::needless_return,
            clippy::unreachable
        )]
        if false {
            let __dlock_fake_return: #ty = loop {};
            return __dlock_fake_return;
        }
    }
}

/// Replaces `impl Trait` with `_`, so the type can annotate a `let`.
struct ImplTraitEraser;

impl VisitMut for ImplTraitEraser {
    fn visit_type_mut(&mut self, ty: &mut Type) {
        if let Type::ImplTrait(_) = ty {
            *ty = Type::Infer(syn::TypeInfer {
                underscore_token: syn::Token![_](ty.span()),
            });
        } else {
            syn::visit_mut::visit_type_mut(self, ty);
        }
    }
}

/// `Result<T, E>`, `io::Result<T>`, `anyhow::Result<T>`, or an alias whose name ends in
/// `Result` (`AppResult<T>`): the attribute cannot resolve aliases, so it goes by the name.
fn is_result(ty: &Type) -> bool {
    match ty {
        Type::Path(path) if path.qself.is_none() => path
            .path
            .segments
            .last()
            .is_some_and(|last| last.ident.to_string().ends_with("Result")),
        Type::Group(group) => is_result(&group.elem),
        Type::Paren(paren) => is_result(&paren.elem),
        _ => false,
    }
}

/// `T` in `Result<T, E>` (the last path segment's first type argument).
fn ok_type(ty: &Type) -> Option<&Type> {
    match ty {
        Type::Path(path) if path.qself.is_none() => {
            let PathArguments::AngleBracketed(args) = &path.path.segments.last()?.arguments else {
                return None;
            };
            args.args.iter().find_map(|arg| match arg {
                GenericArgument::Type(ty) => Some(ty),
                _ => None,
            })
        }
        Type::Group(group) => ok_type(&group.elem),
        Type::Paren(paren) => ok_type(&paren.elem),
        _ => None,
    }
}

/// Whether a skipped fire has a value in result type `ty`: `Result<Option<T>, E>` (`None`) or
/// `Result<(), E>`.
fn skippable(ty: &Type) -> bool {
    fn unit_or_option(ty: &Type) -> bool {
        match ty {
            Type::Tuple(tuple) => tuple.elems.is_empty(),
            Type::Path(path) if path.qself.is_none() => path
                .path
                .segments
                .last()
                .is_some_and(|last| last.ident == "Option"),
            Type::Group(group) => unit_or_option(&group.elem),
            Type::Paren(paren) => unit_or_option(&paren.elem),
            _ => false,
        }
    }
    ok_type(ty).is_some_and(unit_or_option)
}

/// `R` in `Pin<Box<dyn Future<Output = R> + Send + 'a>>` (any nesting of paths, trait
/// objects and `impl Future<Output = R>`).
fn future_output(ty: &Type) -> Option<&Type> {
    fn in_path(path: &syn::Path) -> Option<&Type> {
        path.segments.iter().find_map(|segment| {
            let PathArguments::AngleBracketed(args) = &segment.arguments else {
                return None;
            };
            args.args.iter().find_map(|arg| match arg {
                GenericArgument::AssocType(assoc)
                    if assoc.ident == "Output" && segment.ident == "Future" =>
                {
                    Some(&assoc.ty)
                }
                GenericArgument::Type(inner) => future_output(inner),
                _ => None,
            })
        })
    }
    fn in_bounds<'a>(bounds: impl IntoIterator<Item = &'a TypeParamBound>) -> Option<&'a Type> {
        bounds.into_iter().find_map(|bound| match bound {
            TypeParamBound::Trait(tr) => in_path(&tr.path),
            _ => None,
        })
    }
    match ty {
        Type::Path(path) => in_path(&path.path),
        Type::TraitObject(object) => in_bounds(&object.bounds),
        Type::ImplTrait(imp) => in_bounds(&imp.bounds),
        Type::Group(group) => future_output(&group.elem),
        Type::Paren(paren) => future_output(&paren.elem),
        _ => None,
    }
}

/// The names a key placeholder may start with — `self` for methods, and every binding of the
/// parameters' patterns (`id`, or `a` and `b` in `(a, b): (u32, u32)`) — each with the span of
/// its binding (none for `self`), whose hygiene a placeholder naming it takes.
fn parameters(func: &ItemFn) -> Vec<(String, Option<Span>)> {
    fn bindings(pat: &Pat, out: &mut Vec<(String, Option<Span>)>) {
        match pat {
            Pat::Ident(ident) => {
                out.push((ident.ident.to_string(), Some(ident.ident.span())));
                if let Some((_, sub)) = &ident.subpat {
                    bindings(sub, out);
                }
            }
            Pat::Tuple(tuple) => tuple.elems.iter().for_each(|p| bindings(p, out)),
            Pat::TupleStruct(tuple) => tuple.elems.iter().for_each(|p| bindings(p, out)),
            Pat::Struct(st) => st.fields.iter().for_each(|f| bindings(&f.pat, out)),
            Pat::Slice(slice) => slice.elems.iter().for_each(|p| bindings(p, out)),
            Pat::Reference(reference) => bindings(&reference.pat, out),
            Pat::Paren(paren) => bindings(&paren.pat, out),
            Pat::Type(typed) => bindings(&typed.pat, out),
            _ => {}
        }
    }
    let mut names = Vec::new();
    for input in &func.sig.inputs {
        match input {
            FnArg::Receiver(_) => names.push(("self".to_owned(), None)),
            FnArg::Typed(typed) => bindings(&typed.pat, &mut names),
        }
    }
    names
}

/// The async block a non-`async` fn returns: the shape `#[async_trait]` gives an `async fn`
/// (`Box::pin(async move { .. })` as the last expression), like tracing-attributes'
/// `AsyncInfo`. async-trait ≤ 0.1.43's older shape (an inner `async fn` called through
/// `Box::pin`) is not recognised.
struct AsyncInfo<'a> {
    /// The statement to rewrite.
    stmt: &'a Stmt,
    async_expr: &'a ExprAsync,
    /// Wrapped in `Box::pin(..)`.
    boxed: bool,
}

impl<'a> AsyncInfo<'a> {
    fn from_fn(func: &'a ItemFn) -> Option<Self> {
        let (stmt, expr) = func.block.stmts.iter().rev().find_map(|stmt| match stmt {
            Stmt::Expr(expr, None) => Some((stmt, expr)),
            _ => None,
        })?;
        match expr {
            Expr::Async(async_expr) => Some(Self {
                stmt,
                async_expr,
                boxed: false,
            }),
            Expr::Call(ExprCall {
                func: callee, args, ..
            }) => {
                let Expr::Path(path) = &**callee else {
                    return None;
                };
                let segments: Vec<String> = path
                    .path
                    .segments
                    .iter()
                    .map(|s| s.ident.to_string())
                    .collect();
                if !segments.ends_with(&["Box".to_owned(), "pin".to_owned()]) || args.len() != 1 {
                    return None;
                }
                match &args[0] {
                    Expr::Async(async_expr) => Some(Self {
                        stmt,
                        async_expr,
                        boxed: true,
                    }),
                    _ => None,
                }
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::distributed_lock;

    fn expand(args: proc_macro2::TokenStream, item: proc_macro2::TokenStream) -> String {
        distributed_lock(args, item).to_string()
    }

    #[test]
    fn an_async_fn_becomes_one_call_without_boxing() {
        let out = expand(
            quote!(key = "order:<id>", ttl = "10s"),
            quote!(
                async fn settle(id: u64) -> Result<u64, Error> {
                    Ok(id)
                }
            ),
        );
        assert!(
            out.starts_with("async fn settle (id : u64) -> Result < u64 , Error >"),
            "{out}"
        );
        assert_eq!(
            out.matches(":: dlock_core :: __private :: run (").count(),
            1,
            "{out}"
        );
        assert!(
            out.contains(":: dlock_core :: __private :: Locker :: global ()"),
            "{out}"
        );
        assert!(
            out.contains(":: std :: format ! (\"order:{}\" , id)"),
            "{out}"
        );
        assert!(
            out.contains(":: core :: time :: Duration :: new (10u64 , 0u32)"),
            "{out}"
        );
        assert!(out.contains("async move"), "{out}");
        assert!(!out.contains("Box"), "no boxing: {out}");
        assert!(!out.contains("compile_error"), "{out}");
    }

    #[test]
    fn an_async_trait_method_is_locked_inside_its_boxed_future() {
        let out = expand(
            quote!(key = "order:<id>", locker = &self.locker),
            quote!(
                fn settle<'life0, 'async_trait>(
                    &'life0 self,
                    id: u64,
                ) -> ::core::pin::Pin<
                    Box<
                        dyn ::core::future::Future<Output = Result<u64, Error>>
                            + ::core::marker::Send
                            + 'async_trait,
                    >,
                >
                where
                    'life0: 'async_trait,
                    Self: 'async_trait,
                {
                    Box::pin(async move {
                        let __self = self;
                        let id = id;
                        let __ret: Result<u64, Error> = { Ok(id) };
                        __ret
                    })
                }
            ),
        );
        assert_eq!(
            out.matches("Box :: pin").count(),
            1,
            "one box, as before: {out}"
        );
        assert!(
            out.contains(":: std :: boxed :: Box :: pin (async move {"),
            "{out}"
        );
        assert!(
            out.contains("IntoLocker :: into_locker (& self . locker)"),
            "{out}"
        );
        assert!(!out.contains("compile_error"), "{out}");
    }

    #[test]
    fn on_error_the_item_is_emitted_unchanged_with_the_errors() {
        let item = quote!(
            fn settle(id: u64) -> u64 {
                id
            }
        );
        let out = expand(quote!(key = "order:<idd>"), item.clone());
        assert!(out.starts_with(&item.to_string()), "{out}");
        assert_eq!(out.matches("compile_error").count(), 3, "{out}");
    }
}
