//! Recognizes contractions: a kernel whose value is an elementwise epilogue
//! of one `sum(K, |k| a · b)`, `a` and `b` each a load (or an elementwise
//! prologue of one load) indexed by `k` and output variables.

use std::collections::HashSet;

use super::{MatmulOperand, MatmulPlan};
use crate::ir::{BinaryOp, Expr, ExprId, Kernel, ReduceOp, TensorId, VarId};

pub(super) fn detect(kernel: &Kernel) -> Option<MatmulPlan> {
    let mut reductions = Vec::new();
    reachable_reductions(kernel, kernel.root, &mut HashSet::new(), &mut reductions);
    let [reduce] = reductions[..] else {
        return None;
    };
    let Expr::Reduce { op, var: k, body } = *kernel.expr(reduce) else {
        return None;
    };
    if !matches!(op, ReduceOp::Sum | ReduceOp::Mean) {
        return None;
    }
    let Expr::Binary(BinaryOp::Mul, x, y) = *kernel.expr(body) else {
        return None;
    };
    let x = Factor::of(kernel, x, k)?;
    let y = Factor::of(kernel, y, k)?;

    let outputs = kernel.output_vars();
    let only = |this: &Factor, other: &Factor| -> Vec<VarId> {
        outputs
            .iter()
            .copied()
            .filter(|v| this.vars.contains(v) && !other.vars.contains(v))
            .collect()
    };
    let (only_x, only_y) = (only(&x, &y), only(&y, &x));
    // The output's contiguous variable should be `n`, which threads walk
    // fastest, so that stores coalesce.
    let last = outputs.last().copied();
    let (a, b, only_a, only_b) = if last.is_some_and(|v| only_x.contains(&v)) {
        (y, x, only_y, only_x)
    } else {
        (x, y, only_x, only_y)
    };
    let m = pick(kernel, &only_a, last)?;
    let n = pick(kernel, &only_b, last)?;
    let batch: Vec<VarId> = outputs
        .iter()
        .copied()
        .filter(|v| *v != m && *v != n)
        .collect();

    Some(MatmulPlan {
        reduce,
        mean: op == ReduceOp::Mean,
        m,
        n,
        k,
        batch: batch.clone(),
        a: a.operand(kernel, m, k, &batch),
        b: b.operand(kernel, n, k, &batch),
    })
}

/// The variable a tile dimension walks: the output's contiguous variable if
/// it is a candidate, else the one with the largest extent (the last one on
/// a tie); the other candidates become batch variables.
fn pick(kernel: &Kernel, candidates: &[VarId], last: Option<VarId>) -> Option<VarId> {
    last.filter(|v| candidates.contains(v))
        .or_else(|| candidates.iter().copied().max_by_key(|v| kernel.extent(*v)))
}

/// Collects the distinct reductions reachable from `id`, looking through lets.
fn reachable_reductions(
    kernel: &Kernel,
    id: ExprId,
    seen: &mut HashSet<ExprId>,
    out: &mut Vec<ExprId>,
) {
    if !seen.insert(id) {
        return;
    }
    match kernel.expr(id) {
        Expr::Reduce { .. } => out.push(id),
        Expr::Let(l) => reachable_reductions(kernel, kernel.let_(*l).value, seen, out),
        _ => {}
    }
    for c in kernel.children(id) {
        reachable_reductions(kernel, c, seen, out);
    }
}

/// One factor of the reduction's product.
struct Factor {
    value: ExprId,
    load: ExprId,
    tensor: TensorId,
    index: Vec<VarId>,
    /// The distinct variables of `index`, sorted.
    vars: Vec<VarId>,
}

impl Factor {
    /// A factor made of exactly one load indexed by `k`, plus elementwise
    /// operations on it and on constants.
    fn of(kernel: &Kernel, value: ExprId, k: VarId) -> Option<Factor> {
        let mut loads = Vec::new();
        if !prologue_loads(kernel, value, &mut loads) {
            return None;
        }
        let [load] = loads[..] else {
            return None;
        };
        let Expr::Load { tensor, index } = kernel.expr(load) else {
            return None;
        };
        if !index.contains(&k) {
            return None;
        }
        let mut vars = index.clone();
        vars.sort();
        vars.dedup();
        Some(Factor {
            value,
            load,
            tensor: *tensor,
            index: index.clone(),
            vars,
        })
    }

    fn operand(&self, kernel: &Kernel, x: VarId, k: VarId, batch: &[VarId]) -> MatmulOperand {
        let strides = kernel.strides_of(kernel.input(self.tensor));
        // A variable may index several dimensions (`x[i][i]`): strides add.
        let stride = |var: VarId| -> u64 {
            self.index
                .iter()
                .zip(&strides)
                .filter(|(v, _)| **v == var)
                .map(|(_, s)| *s)
                .sum()
        };
        MatmulOperand {
            tensor: self.tensor,
            load: self.load,
            value: self.value,
            stride_x: stride(x),
            // With `K = 1` the tiles' rows past `k = 0` are zero-filled, and
            // a `cp.async` that fills them still takes an address, which
            // must stay aligned: every such row points at the first.
            stride_k: if kernel.extent(k) > 1 { stride(k) } else { 0 },
            stride_batch: batch.iter().map(|v| stride(*v)).collect(),
        }
    }
}

/// Appends the loads of an elementwise expression; false if it reads
/// anything else than loads and constants (an index, a let, a reduction).
fn prologue_loads(kernel: &Kernel, id: ExprId, out: &mut Vec<ExprId>) -> bool {
    match kernel.expr(id) {
        Expr::Load { .. } => {
            out.push(id);
            true
        }
        Expr::Index(_) | Expr::Let(_) | Expr::Reduce { .. } => false,
        _ => kernel
            .children(id)
            .into_iter()
            .all(|c| prologue_loads(kernel, c, out)),
    }
}
