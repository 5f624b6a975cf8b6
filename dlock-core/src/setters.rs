//! `with_*` setters for the public config structs: they are `#[non_exhaustive]` (a new field
//! must not break users), so code outside the crate builds them from `Default` and these
//! setters instead of a struct literal.

/// Generates, for each `field: Type`, a `#[must_use]` `with_field(self, value) -> Self` whose
/// doc names the field and shows it set on `$example` (an expression of the struct's type).
macro_rules! with_setters {
    ($ty:ident, $example:literal; $($setter:ident($field:ident: $value:ty) = $sample:literal;)*) => {
        impl $ty {
            $(
                #[doc = concat!("Sets [`", stringify!($field), "`](Self::", stringify!($field), ").")]
                ///
                /// # Examples
                ///
                /// ```
                #[doc = concat!("let value = ", $example, ".", stringify!($setter), "(", $sample, ");")]
                #[doc = concat!("assert_eq!(value.", stringify!($field), ", ", $sample, ");")]
                /// ```
                #[must_use]
                pub fn $setter(mut self, $field: $value) -> Self {
                    self.$field = $field;
                    self
                }
            )*
        }
    };
}

pub(crate) use with_setters;
