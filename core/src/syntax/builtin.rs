//! The built-in functions and reductions of the kernel language.

use crate::ir::{BinaryOp, ReduceOp, UnaryOp};

#[derive(Debug, Clone, Copy)]
pub(crate) enum Function {
    Unary(UnaryOp),
    Binary(BinaryOp),
    Select,
}

impl Function {
    pub(crate) fn arity(self) -> usize {
        match self {
            Function::Unary(_) => 1,
            Function::Binary(_) => 2,
            Function::Select => 3,
        }
    }
}

const REDUCTIONS: [(&str, ReduceOp); 4] = [
    ("sum", ReduceOp::Sum),
    ("max", ReduceOp::Max),
    ("min", ReduceOp::Min),
    ("mean", ReduceOp::Mean),
];

/// A function called with plain arguments (no closure).
pub(crate) fn function(name: &str) -> Option<Function> {
    match name {
        "min" => Some(Function::Binary(BinaryOp::Min)),
        "max" => Some(Function::Binary(BinaryOp::Max)),
        "select" => Some(Function::Select),
        _ => UnaryOp::FUNCTIONS
            .into_iter()
            .find(|op| op.name() == name)
            .map(Function::Unary),
    }
}

/// A function called as `name(dim, |var| body)`.
pub(crate) fn reduction(name: &str) -> Option<ReduceOp> {
    REDUCTIONS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|&(_, op)| op)
}

/// Every callable name, for suggestions.
pub(crate) fn names() -> impl Iterator<Item = &'static str> {
    UnaryOp::FUNCTIONS
        .into_iter()
        .map(UnaryOp::name)
        .chain(["min", "max", "select", "sum", "mean"])
}

/// The list of what can be called, for messages.
pub(crate) fn catalogue() -> String {
    let unary: Vec<&str> = UnaryOp::FUNCTIONS.into_iter().map(UnaryOp::name).collect();
    format!(
        "{}, min(a, b), max(a, b), select(cond, a, b); reductions: {}",
        unary.join(", "),
        REDUCTIONS_LIST
    )
}

/// The reductions, for messages.
pub(crate) const REDUCTIONS_LIST: &str =
    "sum(D, |v| ...), max(D, |v| ...), min(D, |v| ...), mean(D, |v| ...)";
