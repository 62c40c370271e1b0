//! The `#[tuned_kernel]` attribute. Use it through the `ktune` crate, which
//! re-exports it and provides everything the expansion refers to.

mod expand;
mod reference;

use proc_macro::TokenStream;

/// Declares a tuned GPU kernel. See the `ktune` crate for the language.
#[proc_macro_attribute]
pub fn tuned_kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(attr.into(), item.into()).into()
}
