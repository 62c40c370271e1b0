//! The kernel language front-end.
//!
//! A kernel is written in Rust syntax and marked `#[tuned_kernel(...)]`:
//!
//! ```text
//! #[tuned_kernel(shape(R = 8192, C = 1000))]
//! pub fn softmax(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
//!     compute(|r, c| {
//!         let mx = max(C, |j| x[r][j]);
//!         let s = sum(C, |j| exp(x[r][j] - mx));
//!         exp(x[r][c] - mx) / s
//!     })
//! }
//! ```
//!
//! The proc macro ([`parse_kernel`]) and the build helper
//! ([`parse_kernel_fn`], after `syn::parse_file` and [`is_kernel_attr`]) both
//! call this module, so the language has exactly one definition.
//!
//! # The language
//!
//! - **Attribute.** `shape(NAME = SIZE, ...)` declares the kernel's named
//!   dimensions; sizes are positive and fit in a `u32`. The optional flag
//!   `allow_tf32` lets a contraction of f32 tensors run on tensor cores,
//!   which round each factor to tf32 (see [`ir::Kernel::allow_tf32`]).
//! - **Signature.** Every parameter is `name: Tensor<DTYPE, (D1, D2, ...)>`
//!   (`Tensor<f32, N>` and `(N,)` for rank one), with `DTYPE` one of `f32`,
//!   `f16`, `bf16` and the dimensions from `shape(...)`. The return type is
//!   the one output tensor, written the same way; the IR calls it `out`. No
//!   generics, `self`, `async`/`const`/`unsafe`/`extern`, `where` clauses or
//!   parameter patterns. Visibility and doc comments are allowed.
//! - **Body.** Exactly one expression, `compute(|i, j, ...| value)`, whose
//!   closure binds one index variable per output dimension, in order. Its
//!   body may start with `let name = value;` bindings.
//! - **Expressions.** Number literals (f32), index variables used as numbers,
//!   tensor loads `x[i][j]` (each index a plain index variable ranging over
//!   that dimension), `let` names, `+ - * /`, comparisons, `&& || !` on
//!   booleans, `value as f32|f16|bf16`, the functions `exp log sqrt rsqrt tanh
//!   abs relu sigmoid silu gelu gelu_erf erf`, `min(a, b)`, `max(a, b)`,
//!   `select(cond, a, b)`, and the reductions `sum`, `max`, `min`, `mean`
//!   written `sum(D, |v| body)` over a dimension `D`.
//! - **Names.** Dimensions, tensors, index variables and lets share one
//!   namespace; declaring a name twice is an error. A reduction's variable is
//!   visible only inside its closure.
//! - **Types.** Loads have the tensor's dtype; constants and index values are
//!   f32. Combining f32 with anything gives f32, a 16-bit dtype with itself
//!   gives that dtype, and f16 with bf16 is an error (cast one side).
//!   Comparisons give booleans, which only `&&`, `||`, `!` and `select`'s
//!   condition accept. The output value must be a number; it is stored with
//!   a conversion to the output's dtype.
//!
//! # Errors
//!
//! Every mistake is reported as a spanned [`syn::Error`]; independent mistakes
//! are combined into one error value (one `compile_error!` each), and a
//! construct that failed is not reported again by the constructs that use it.
//! The front-end never panics.
//!
//! # Pipeline
//!
//! `args` (the attribute) → `parse` (syn item → surface tree, syntax errors)
//! → `check` (names, shapes, types → [`ir::Kernel`]).

mod args;
mod ast;
mod builtin;
mod check;
mod parse;
mod scope;
mod suggest;

use proc_macro2::{Span, TokenStream};
use syn::{Attribute, Item, ItemFn, Meta};

use crate::ir;
use ast::Loc;

/// Parses and checks one kernel: `attr` are the tokens inside
/// `#[tuned_kernel(...)]`, `item` the fn item it is attached to.
///
/// Errors point into `attr` and `item`; one about the attribute as a whole
/// (a missing `shape(...)`) points at [`Span::call_site`], which in a proc
/// macro is the attribute.
pub fn parse_kernel(attr: TokenStream, item: TokenStream) -> Result<ir::Kernel, syn::Error> {
    let item: Item = syn::parse2(item)?;
    let Item::Fn(func) = item else {
        return Err(Loc::of(&item).error(
            "`#[tuned_kernel]` applies to a function: `fn name(x: Tensor<...>) -> Tensor<...> { compute(...) }`",
        ));
    };
    run(attr, Loc::at(Span::call_site()), &func, None)
}

/// Parses and checks one kernel, for callers that already hold a parsed fn
/// (the build helper scans files with `syn::parse_file`).
///
/// `attr` is the kernel's `#[tuned_kernel(...)]` attribute; it may be (a copy
/// of) one of `item.attrs`, which is then not reported as a duplicate.
pub fn parse_kernel_fn(attr: &Attribute, item: &ItemFn) -> Result<ir::Kernel, syn::Error> {
    let tokens = match &attr.meta {
        Meta::List(list) => list.tokens.clone(),
        Meta::Path(_) => TokenStream::new(),
        Meta::NameValue(_) => {
            return Err(Loc::of(attr).error(
                "expected `#[tuned_kernel(shape(...))]`, e.g. `#[tuned_kernel(shape(M = 1024, N = 1024))]`",
            ));
        }
    };
    run(tokens, Loc::of(attr), item, Some(attr))
}

/// Whether an attribute is `#[tuned_kernel(...)]`, `#[ktune::tuned_kernel(...)]`
/// or any other path ending in `tuned_kernel`.
pub fn is_kernel_attr(attr: &Attribute) -> bool {
    attr.path()
        .segments
        .last()
        .is_some_and(|segment| segment.ident == "tuned_kernel")
}

fn run(
    attr_tokens: TokenStream,
    attr: Loc,
    func: &ItemFn,
    own_attr: Option<&Attribute>,
) -> Result<ir::Kernel, syn::Error> {
    let mut errors = Errors::default();
    let args = args::parse(attr_tokens, attr, &mut errors);
    let kernel = parse::kernel(func, own_attr, &mut errors);
    let checked = check::kernel(&args, &kernel, &mut errors);
    errors.finish()?;
    // Every path that yields no kernel reports an error first; this is the
    // net under that invariant, so a front-end bug is a diagnostic, not a
    // silently accepted kernel or a panic.
    checked.ok_or_else(|| {
        Loc::of(&func.sig.ident).error("internal error in ktune's front-end: kernel rejected without a diagnostic; please report this")
    })
}

/// Accumulates independent errors into one [`syn::Error`].
#[derive(Debug, Default)]
pub(crate) struct Errors {
    combined: Option<syn::Error>,
}

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.combined {
            Some(combined) => combined.combine(error),
            None => self.combined = Some(error),
        }
    }

    pub(crate) fn finish(self) -> Result<(), syn::Error> {
        match self.combined {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}
