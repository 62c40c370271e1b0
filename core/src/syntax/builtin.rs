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

const UNARY: [(&str, UnaryOp); 12] = [
    ("exp", UnaryOp::Exp),
    ("log", UnaryOp::Log),
    ("sqrt", UnaryOp::Sqrt),
    ("rsqrt", UnaryOp::Rsqrt),
    ("tanh", UnaryOp::Tanh),
    ("abs", UnaryOp::Abs),
    ("relu", UnaryOp::Relu),
    ("sigmoid", UnaryOp::Sigmoid),
    ("silu", UnaryOp::Silu),
    ("gelu", UnaryOp::GeluTanh),
    ("gelu_erf", UnaryOp::GeluErf),
    ("erf", UnaryOp::Erf),
];

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
        _ => UNARY
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, op)| Function::Unary(op)),
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
    UNARY
        .iter()
        .map(|(n, _)| *n)
        .chain(["min", "max", "select", "sum", "mean"])
}

/// The list of what can be called, for messages.
pub(crate) fn catalogue() -> String {
    let unary: Vec<&str> = UNARY.iter().map(|(n, _)| *n).collect();
    format!(
        "{}, min(a, b), max(a, b), select(cond, a, b); reductions: {}",
        unary.join(", "),
        REDUCTIONS_LIST
    )
}

/// The reductions, for messages.
pub(crate) const REDUCTIONS_LIST: &str =
    "sum(D, |v| ...), max(D, |v| ...), min(D, |v| ...), mean(D, |v| ...)";
