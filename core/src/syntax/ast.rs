//! The surface syntax tree: what a kernel says, with spans, before names are
//! resolved and types checked.
//!
//! A construct that was already reported keeps its place in the tree in a
//! weakened form ([`ExprKind::Invalid`], a parameter without a type, a missing
//! body), so the checker still sees everything else and reports nothing twice.

use std::fmt;

use proc_macro2::{Ident, Punct, Spacing, Span, TokenStream, TokenTree};
use quote::ToTokens;

use crate::dtype::DType;
use crate::ir::{BinaryOp, CmpOp, LogicOp};

/// A source range, from the first to the last token of a construct; errors
/// built from it underline the whole range.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Loc {
    first: Span,
    last: Span,
}

impl Loc {
    pub(crate) fn of(node: &impl ToTokens) -> Loc {
        let mut tokens = node.to_token_stream().into_iter();
        let first = tokens.next().map_or_else(Span::call_site, |t| t.span());
        let last = tokens.last().map_or(first, |t| t.span());
        Loc { first, last }
    }

    pub(crate) fn at(span: Span) -> Loc {
        Loc {
            first: span,
            last: span,
        }
    }

    /// From the start of `self` to the end of `end`.
    pub(crate) fn to(self, end: Loc) -> Loc {
        Loc {
            first: self.first,
            last: end.last,
        }
    }

    pub(crate) fn error(self, message: impl fmt::Display) -> syn::Error {
        let marker = |span| {
            let mut punct = Punct::new('#', Spacing::Alone);
            punct.set_span(span);
            TokenTree::Punct(punct)
        };
        let range: TokenStream = [marker(self.first), marker(self.last)]
            .into_iter()
            .collect();
        syn::Error::new_spanned(range, message)
    }
}

#[derive(Debug)]
pub(crate) struct Kernel {
    pub name: Ident,
    /// The parameters that have a name; those that don't were reported.
    pub params: Vec<Param>,
    /// `None`: missing or malformed, already reported.
    pub output: Option<TensorType>,
    /// `None`: not a well-formed `compute(|...| ...)`, already reported.
    pub body: Option<Compute>,
    /// False when some binding could not be named (a pattern where a name
    /// belongs, already reported): then unknown names are not reported, as
    /// they may be that binding's.
    pub names_complete: bool,
}

#[derive(Debug)]
pub(crate) struct Param {
    pub name: Ident,
    /// `None`: not a well-formed tensor type, already reported.
    pub ty: Option<TensorType>,
}

#[derive(Debug)]
pub(crate) struct TensorType {
    pub dtype: DType,
    /// At least one.
    pub dims: Vec<Ident>,
}

impl TensorType {
    /// The canonical spelling, for messages: `Tensor<f32, (R, C)>`.
    pub(crate) fn display(&self) -> String {
        let dims: Vec<String> = self.dims.iter().map(Ident::to_string).collect();
        let shape = match dims.as_slice() {
            [one] => format!("({one},)"),
            _ => format!("({})", dims.join(", ")),
        };
        format!("Tensor<{}, {shape}>", self.dtype)
    }
}

/// `compute(|indices...| { lets...; value })`.
#[derive(Debug)]
pub(crate) struct Compute {
    /// One per closure parameter; `None` for one that is not a plain name.
    pub indices: Vec<Option<Ident>>,
    /// The closure's `|...|`.
    pub indices_loc: Loc,
    pub lets: Vec<Let>,
    pub value: Expr,
}

#[derive(Debug)]
pub(crate) struct Let {
    pub name: Ident,
    pub value: Expr,
}

#[derive(Debug)]
pub(crate) struct Expr {
    pub kind: ExprKind,
    pub loc: Loc,
}

impl Expr {
    pub(crate) fn invalid(loc: Loc) -> Expr {
        Expr {
            kind: ExprKind::Invalid,
            loc,
        }
    }
}

#[derive(Debug)]
pub(crate) enum ExprKind {
    /// A number literal, with any leading `-` folded in.
    Const(f32),
    /// A single identifier used as a value.
    Name(Ident),
    /// `tensor[i][j]...`; `None` for an index that is not a plain name.
    Load {
        tensor: Ident,
        indices: Vec<Option<Ident>>,
    },
    Neg(Box<Expr>),
    Not(Box<Expr>),
    Binary {
        op: BinOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
    Cast {
        value: Box<Expr>,
        dtype: DType,
    },
    /// `func(args...)`, no argument being a closure.
    Call {
        func: Ident,
        args: Vec<Expr>,
    },
    /// `func(dim, |var| body)`.
    Reduce {
        func: Ident,
        dim: Ident,
        var: Ident,
        body: Box<Expr>,
    },
    /// A construct outside the language, already reported.
    Invalid,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum BinOp {
    Arith(BinaryOp),
    Cmp(CmpOp),
    Logic(LogicOp),
}

impl BinOp {
    pub(crate) fn symbol(self) -> &'static str {
        match self {
            BinOp::Arith(BinaryOp::Add) => "+",
            BinOp::Arith(BinaryOp::Sub) => "-",
            BinOp::Arith(BinaryOp::Mul) => "*",
            BinOp::Arith(BinaryOp::Div) => "/",
            BinOp::Arith(BinaryOp::Min) => "min",
            BinOp::Arith(BinaryOp::Max) => "max",
            BinOp::Cmp(CmpOp::Lt) => "<",
            BinOp::Cmp(CmpOp::Le) => "<=",
            BinOp::Cmp(CmpOp::Gt) => ">",
            BinOp::Cmp(CmpOp::Ge) => ">=",
            BinOp::Cmp(CmpOp::Eq) => "==",
            BinOp::Cmp(CmpOp::Ne) => "!=",
            BinOp::Logic(LogicOp::And) => "&&",
            BinOp::Logic(LogicOp::Or) => "||",
        }
    }
}
