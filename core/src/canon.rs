//! The canonical form of a kernel and its checksum.
//!
//! The canonical form is a normalized text of the computation: it changes
//! when the computation changes and never with whitespace, comments or
//! dimension sizes (those are part of the shape, keyed separately). The
//! checksum keys tuning records to the computation they were measured for.
//!
//! `allow_tf32` changes the numerics a schedule may have, so it is part of
//! the form (one line, only when set: kernels without it keep their
//! checksums), and a record measured without it is stale for the kernel
//! with it, and the other way round.

use std::fmt::Write;

use sha2::{Digest, Sha256};

use crate::ir::{BinaryOp, CmpOp, Expr, ExprId, Kernel, LogicOp, ReduceOp, Tensor};

/// The canonical text of a kernel's computation.
pub fn canonical_form(k: &Kernel) -> String {
    let mut out = format!("kernel {}\n", k.name);
    if k.allow_tf32 {
        out.push_str("allow tf32\n");
    }
    for t in &k.inputs {
        let _ = writeln!(out, "in {}", tensor(k, t));
    }
    let _ = writeln!(out, "out {}", tensor(k, &k.output));
    let vars: Vec<&str> = k
        .output_vars()
        .iter()
        .map(|v| k.var(*v).name.as_str())
        .collect();
    let _ = writeln!(out, "compute |{}|", vars.join(", "));
    for l in &k.lets {
        let _ = writeln!(out, "let {} = {}", l.name, expr(k, l.value));
    }
    let _ = writeln!(out, "= {}", expr(k, k.root));
    out
}

/// A hex checksum (128 bits of SHA-256) of the canonical form.
pub fn checksum(k: &Kernel) -> String {
    let digest = Sha256::digest(canonical_form(k).as_bytes());
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

fn tensor(k: &Kernel, t: &Tensor) -> String {
    let dims: Vec<&str> = t.dims.iter().map(|d| k.dim(*d).name.as_str()).collect();
    format!("{}: {}[{}]", t.name, t.dtype, dims.join(", "))
}

fn expr(k: &Kernel, id: ExprId) -> String {
    match k.expr(id) {
        Expr::Const(c) => format!("{c:?}"),
        Expr::Index(v) => format!("#{}", k.var(*v).name),
        Expr::Load { tensor, index } => {
            let mut s = k.input(*tensor).name.clone();
            for v in index {
                let _ = write!(s, "[{}]", k.var(*v).name);
            }
            s
        }
        Expr::Let(l) => k.let_(*l).name.clone(),
        Expr::Unary(op, a) => format!("{}({})", op.name(), expr(k, *a)),
        Expr::Binary(op, a, b) => format!("{}({}, {})", binary(*op), expr(k, *a), expr(k, *b)),
        Expr::Compare(op, a, b) => format!("{}({}, {})", compare(*op), expr(k, *a), expr(k, *b)),
        Expr::Logic(op, a, b) => {
            let name = match op {
                LogicOp::And => "and",
                LogicOp::Or => "or",
            };
            format!("{name}({}, {})", expr(k, *a), expr(k, *b))
        }
        Expr::Not(a) => format!("not({})", expr(k, *a)),
        Expr::Select(c, a, b) => {
            format!("select({}, {}, {})", expr(k, *c), expr(k, *a), expr(k, *b))
        }
        Expr::Cast(d, a) => format!("cast_{d}({})", expr(k, *a)),
        Expr::Reduce { op, var, body } => {
            let v = k.var(*var);
            format!(
                "{}({}, |{}| {})",
                reduce(*op),
                k.dim(v.dim).name,
                v.name,
                expr(k, *body)
            )
        }
    }
}

fn binary(op: BinaryOp) -> &'static str {
    match op {
        BinaryOp::Add => "add",
        BinaryOp::Sub => "sub",
        BinaryOp::Mul => "mul",
        BinaryOp::Div => "div",
        BinaryOp::Min => "min",
        BinaryOp::Max => "max",
    }
}

fn compare(op: CmpOp) -> &'static str {
    match op {
        CmpOp::Lt => "lt",
        CmpOp::Le => "le",
        CmpOp::Gt => "gt",
        CmpOp::Ge => "ge",
        CmpOp::Eq => "eq",
        CmpOp::Ne => "ne",
    }
}

fn reduce(op: ReduceOp) -> &'static str {
    match op {
        ReduceOp::Sum => "sum",
        ReduceOp::Max => "max",
        ReduceOp::Min => "min",
        ReduceOp::Mean => "mean",
    }
}
