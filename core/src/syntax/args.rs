//! The arguments of `#[tuned_kernel(...)]`.
//!
//! Two keys: `shape(NAME = SIZE, ...)` (required) and the flag `allow_tf32`
//! (optional, no value). Further keys (such as `targets(...)`) get a field
//! in [`Args`] and an arm in [`parse`].

use proc_macro2::{Ident, TokenStream, TokenTree};
use syn::meta::ParseNestedMeta;
use syn::parse::Parser as _;
use syn::{Expr, ExprLit, Lit, Token, UnOp};

use super::Errors;
use super::ast::Loc;

#[derive(Debug)]
pub(crate) struct Args {
    /// The dimensions of `shape(...)`, in order, without duplicates. One whose
    /// size was rejected keeps a placeholder size (the error is reported), so
    /// that its uses are not reported again as unknown.
    pub dims: Vec<DimDecl>,
    /// False when `shape(...)` is missing, empty or unreadable: then unknown
    /// dimension names elsewhere are not reported, as they would all be.
    pub dims_complete: bool,
    /// `allow_tf32`: f32 contractions may round their factors to tf32 on
    /// tensor cores.
    pub allow_tf32: bool,
}

#[derive(Debug)]
pub(crate) struct DimDecl {
    pub name: Ident,
    pub size: u32,
}

const EXAMPLE: &str = "`#[tuned_kernel(shape(M = 1024, N = 1024))]`";

/// What the attribute accepts, for errors about an unknown key.
const KEYS: &str = "`shape(...)` or `allow_tf32`";

/// Parses the tokens inside `#[tuned_kernel(...)]`; `attr` locates the whole
/// attribute, for errors about what is missing.
pub(crate) fn parse(tokens: TokenStream, attr: Loc, errors: &mut Errors) -> Args {
    let mut shape: Option<Vec<DimDecl>> = None;
    let mut allow_tf32 = false;
    let parsed = syn::meta::parser(|meta| {
        if meta.path.is_ident("shape") {
            let key = Loc::of(&meta.path);
            if shape.is_some() {
                errors.push(key.error(
                    "duplicate argument `shape`; declare all dimensions in one `shape(...)`",
                ));
                return skip_value(&meta);
            }
            if !meta.input.peek(syn::token::Paren) {
                return Err(key.error(
                    "expected `shape(NAME = SIZE, ...)`, e.g. `shape(M = 1024, N = 1024)`",
                ));
            }
            if let Ok(TokenTree::Group(group)) = meta.input.fork().parse::<TokenTree>()
                && group.stream().is_empty()
            {
                meta.input.parse::<TokenTree>()?;
                errors.push(key.error(
                    "`shape(...)` declares no dimensions; add at least one, e.g. `shape(N = 1024)`",
                ));
                shape = Some(Vec::new());
                return Ok(());
            }
            let mut dims = Vec::new();
            meta.parse_nested_meta(|dim| dim_entry(&dim, &mut dims, errors))?;
            shape = Some(dims);
            Ok(())
        } else if meta.path.is_ident("allow_tf32") {
            let key = Loc::of(&meta.path);
            if allow_tf32 {
                errors.push(key.error("duplicate argument `allow_tf32`; remove one"));
            } else if meta.input.peek(Token![=]) || meta.input.peek(syn::token::Paren) {
                errors.push(key.error(
                    "`allow_tf32` is a flag and takes no value: write `allow_tf32`, or leave it out",
                ));
            }
            allow_tf32 = true;
            skip_value(&meta)
        } else {
            let key = path_string(&meta.path);
            errors.push(
                Loc::of(&meta.path).error(format!("unknown argument `{key}`; expected {KEYS}")),
            );
            skip_value(&meta)
        }
    })
    .parse2(tokens);

    if let Err(error) = parsed {
        errors.push(error);
        return Args {
            dims: shape.unwrap_or_default(),
            dims_complete: false,
            allow_tf32,
        };
    }
    if shape.is_none() {
        errors.push(attr.error(format!(
            "missing `shape(...)`: declare the kernel's dimensions, e.g. {EXAMPLE}"
        )));
    }
    let dims = shape.unwrap_or_default();
    // With no dimension declared (each missing or rejected one reported),
    // every dimension name elsewhere would be unknown: say nothing of them.
    let dims_complete = !dims.is_empty();
    Args {
        dims,
        dims_complete,
        allow_tf32,
    }
}

fn dim_entry(
    meta: &ParseNestedMeta<'_>,
    dims: &mut Vec<DimDecl>,
    errors: &mut Errors,
) -> syn::Result<()> {
    let Some(name) = meta.path.get_ident().cloned() else {
        errors
            .push(Loc::of(&meta.path).error("dimension names must be plain identifiers, like `M`"));
        return skip_value(meta);
    };
    let size = if meta.input.peek(Token![=]) {
        let value: Expr = meta.value()?.parse()?;
        size(&name, &value)
    } else {
        skip_value(meta)?;
        Err(Loc::of(&name).error(format!(
            "dimension `{name}` needs a size: write `{name} = 1024`"
        )))
    };
    let size = size.unwrap_or_else(|error| {
        errors.push(error);
        1
    });
    if dims.iter().any(|d| d.name == name) {
        errors.push(Loc::of(&name).error(format!(
            "dimension `{name}` is declared twice in `shape(...)`; remove one"
        )));
    } else {
        dims.push(DimDecl { name, size });
    }
    Ok(())
}

fn size(name: &Ident, value: &Expr) -> Result<u32, syn::Error> {
    let loc = Loc::of(value);
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Int(int), ..
        }) => match int.base10_parse::<u64>() {
            Ok(0) => Err(loc.error(format!("size of `{name}` must be positive, found 0"))),
            Ok(n) => u32::try_from(n).map_err(|_| too_large(name, loc)),
            Err(_) => Err(too_large(name, loc)),
        },
        Expr::Unary(unary) if matches!(unary.op, UnOp::Neg(_)) => Err(loc.error(format!(
            "size of `{name}` must be positive, found a negative number"
        ))),
        _ => Err(loc.error(format!(
            "size of `{name}` must be an integer literal, like `{name} = 1024`"
        ))),
    }
}

fn too_large(name: &Ident, loc: Loc) -> syn::Error {
    loc.error(format!(
        "size of `{name}` does not fit in u32; the largest size is {}",
        u32::MAX
    ))
}

/// Consumes an argument's value (`= expr` or `(...)`) without reading it.
fn skip_value(meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
    if meta.input.peek(Token![=]) {
        meta.value()?.parse::<Expr>()?;
    } else if meta.input.peek(syn::token::Paren) {
        meta.input.parse::<TokenTree>()?;
    }
    Ok(())
}

fn path_string(path: &syn::Path) -> String {
    let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
    segments.join("::")
}
