//! Online softmax (`online = 1`): a row's maximum and its sum of
//! exponentials of differences from that maximum, computed in one pass
//! over the row instead of two.
//!
//! Softmax with `cache = 0` reads a row three times: for its maximum `m`,
//! for `s = Σ exp(x − m)`, and for its outputs. The first two fold into one
//! pass (Milakov and Gimelshein's online normaliser): each thread keeps a
//! running maximum `m_t` and a sum `s_t` of `exp(x − m_t)`, which it
//! rescales by `exp(m_old − m_new)` when a chunk of `vector` values raises
//! the maximum (once per chunk, not per value). Across the row the maxima
//! combine first; then each thread rescales its sum to the row's maximum,
//! and the sums combine. Rows too long to keep (more than shared memory
//! holds) are then read twice, the second time from L2 while the rows in
//! flight fit it.
//!
//! **What pairs.** A `max` of some value `v(j)`, and a later `sum` whose
//! body is `exp(v'(k) − m)`, where `m` is the maximum (directly, or a let
//! bound to it) and `v'` is `v` with the sum's variable in place of the
//! maximum's: the shape of softmax, log-softmax and cross-entropy, found
//! in the IR, not by name. A sum of anything else (`exp(2·x − m)`) has
//! terms that may overflow where the two-pass form's do not, and is left
//! to two passes.
//!
//! **Infinities.** A running maximum of −∞ (a thread whose values so far
//! are all −∞, as in masked scores) is taken as 0 where it is subtracted,
//! so that `exp(−∞ − (−∞))` never makes a NaN: the thread's terms and sum
//! stay 0, as they are in the two-pass form. A maximum of +∞ gives NaN in
//! both forms.

use super::combine::Combiner;
use super::{Shape, chunk_start, strided_loop};
use crate::ir::{BinaryOp, Expr, ExprId, Kernel, ReduceOp, UnaryOp, VarId};
use crate::lower::classify::RowPlan;
use crate::lower::elementwise::emit_consecutive_with;
use crate::lower::expr::{self, Env};
use crate::ptx::Builder;
use crate::ptx::inst::{ArithOp, Cmp, Op, Operand, Reg, RegClass, Ty};

/// A maximum and the sum of exponentials that one pass computes with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pair {
    pub max: ExprId,
    pub sum: ExprId,
}

/// The pairs among `plan`'s reductions, each reduction in at most one.
pub fn pairs(kernel: &Kernel, plan: &RowPlan) -> Vec<Pair> {
    let reductions: Vec<ExprId> = plan.reductions().collect();
    let mut out: Vec<Pair> = Vec::new();
    for (i, &max) in reductions.iter().enumerate() {
        let Expr::Reduce {
            op: ReduceOp::Max,
            var: max_var,
            body: value,
        } = *kernel.expr(max)
        else {
            continue;
        };
        if kernel.contains_reduce(value) {
            continue;
        }
        let partner = reductions[i + 1..].iter().copied().find(|&sum| {
            let Expr::Reduce {
                op: ReduceOp::Sum,
                var: sum_var,
                body,
            } = *kernel.expr(sum)
            else {
                return false;
            };
            let Expr::Unary(UnaryOp::Exp, difference) = *kernel.expr(body) else {
                return false;
            };
            let Expr::Binary(BinaryOp::Sub, term, subtrahend) = *kernel.expr(difference) else {
                return false;
            };
            kernel.extent(sum_var) == kernel.extent(max_var)
                && names(kernel, subtrahend, max)
                && same(kernel, (value, max_var), (term, sum_var))
                && out.iter().all(|p| p.sum != sum)
        });
        if let Some(sum) = partner {
            out.push(Pair { max, sum });
        }
    }
    out
}

/// Whether `id` is reduction `target`'s value: the reduction itself, or a
/// let bound to it (through lets of lets).
fn names(kernel: &Kernel, id: ExprId, target: ExprId) -> bool {
    match *kernel.expr(id) {
        _ if id == target => true,
        Expr::Let(l) => names(kernel, kernel.let_(l).value, target),
        _ => false,
    }
}

/// Whether `a` and `b` compute the same value, `a`'s variable `va` standing
/// for `b`'s `vb`.
fn same(kernel: &Kernel, (a, va): (ExprId, VarId), (b, vb): (ExprId, VarId)) -> bool {
    let var = |x: VarId, y: VarId| x == y || (x == va && y == vb);
    let both = |x: ExprId, y: ExprId| same(kernel, (x, va), (y, vb));
    match (kernel.expr(a), kernel.expr(b)) {
        (Expr::Const(x), Expr::Const(y)) => x.to_bits() == y.to_bits(),
        (Expr::Index(x), Expr::Index(y)) => var(*x, *y),
        (
            Expr::Load {
                tensor: s,
                index: i,
            },
            Expr::Load {
                tensor: t,
                index: j,
            },
        ) => s == t && i.len() == j.len() && i.iter().zip(j).all(|(x, y)| var(*x, *y)),
        (Expr::Let(x), Expr::Let(y)) => x == y,
        (Expr::Unary(o, x), Expr::Unary(p, y)) => o == p && both(*x, *y),
        (Expr::Binary(o, x, y), Expr::Binary(p, z, w)) => o == p && both(*x, *z) && both(*y, *w),
        (Expr::Compare(o, x, y), Expr::Compare(p, z, w)) => o == p && both(*x, *z) && both(*y, *w),
        (Expr::Logic(o, x, y), Expr::Logic(p, z, w)) => o == p && both(*x, *z) && both(*y, *w),
        (Expr::Not(x), Expr::Not(y)) => both(*x, *y),
        (Expr::Select(c, x, y), Expr::Select(d, z, w)) => {
            both(*c, *d) && both(*x, *z) && both(*y, *w)
        }
        (Expr::Cast(s, x), Expr::Cast(t, y)) => s == t && both(*x, *y),
        _ => false,
    }
}

/// Computes `pair`'s maximum and sum in one pass over the row, reading it
/// from global memory; every thread of the row gets both.
pub(super) fn reduce(
    b: &mut Builder,
    kernel: &Kernel,
    env: &Env,
    shape: &Shape,
    lane: Reg,
    combiner: &mut Combiner,
    pair: Pair,
) -> (Reg, Reg) {
    let Expr::Reduce { var, body, .. } = *kernel.expr(pair.max) else {
        unreachable!("a maximum")
    };
    let vector = shape.vector;
    let max = b.f32_imm(f32::NEG_INFINITY);
    let sum = b.f32_imm(0.0);
    strided_loop(
        b,
        lane,
        kernel.extent(var) / vector,
        shape.threads_per_row,
        |b, chunk| {
            let mut element = env.clone();
            let first = chunk_start(b, chunk, vector);
            element.index.insert(var, first);
            let values =
                emit_consecutive_with(b, kernel, &mut element, body, Some(var), vector, Vec::new());
            let raised = copy(b, max);
            for &v in &values {
                expr::fold_into(b, ReduceOp::Max, raised, v);
            }
            rescale(b, sum, max, raised);
            let origin = finite_or_zero(b, raised);
            for v in values {
                let shifted = b.f32_op(ArithOp::Sub, v, origin);
                let term = expr::exp(b, shifted);
                expr::fold_into(b, ReduceOp::Sum, sum, term);
            }
            b.push(Op::Mov {
                ty: Ty::F32,
                dst: max,
                src: raised.into(),
            });
        },
    );
    let own = copy(b, max);
    let row_max = combiner.combine(b, ReduceOp::Max, max);
    rescale(b, sum, own, row_max);
    let row_sum = combiner.combine(b, ReduceOp::Sum, sum);
    (row_max, row_sum)
}

/// `sum ← sum · exp(old − new)`: a sum of exponentials relative to maximum
/// `old`, made relative to `new` (at least `old`).
fn rescale(b: &mut Builder, sum: Reg, old: Reg, new: Reg) {
    let origin = finite_or_zero(b, new);
    let shift = b.f32_op(ArithOp::Sub, old, origin);
    let factor = expr::exp(b, shift);
    b.push(Op::Arith {
        op: ArithOp::Mul,
        ty: Ty::F32,
        dst: sum,
        a: sum.into(),
        b: factor.into(),
    });
}

/// A new register holding `src`'s value.
fn copy(b: &mut Builder, src: Reg) -> Reg {
    let dst = b.reg(RegClass::F32);
    b.push(Op::Mov {
        ty: Ty::F32,
        dst,
        src: src.into(),
    });
    dst
}

/// `max`, or 0 when it is −∞.
fn finite_or_zero(b: &mut Builder, max: Reg) -> Reg {
    let empty = b.setp(Cmp::Eq, Ty::F32, max, Operand::F32(f32::NEG_INFINITY));
    b.f32_select(empty, Operand::F32(0.0), max)
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::pairs;
    use crate::ir::Kernel;
    use crate::lower::classify::{OpClass, RowPlan, classify};
    use crate::syntax::parse_kernel;

    fn rows(body: proc_macro2::TokenStream) -> (Kernel, RowPlan) {
        let kernel = parse_kernel(
            quote!(shape(R = 4, C = 64)),
            quote! {
                fn k(x: Tensor<f32, (R, C)>, y: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
                    compute(|r, c| { #body })
                }
            },
        )
        .expect("valid kernel");
        let OpClass::Rows(plan) = classify(&kernel) else {
            panic!("a rows kernel")
        };
        (kernel, plan)
    }

    fn paired(body: proc_macro2::TokenStream) -> usize {
        let (kernel, plan) = rows(body);
        pairs(&kernel, &plan).len()
    }

    #[test]
    fn a_maximum_pairs_with_a_sum_of_exponentials_of_the_same_value_minus_it() {
        // Softmax, log-softmax, and the maximum written inside the sum.
        assert_eq!(
            paired(quote! {
                let m = max(C, |j| x[r][j]);
                let s = sum(C, |j| exp(x[r][j] - m));
                exp(x[r][c] - m) / s
            }),
            1
        );
        assert_eq!(
            paired(quote! {
                let m = max(C, |j| x[r][j] * 0.5 + y[r][j]);
                let s = sum(C, |k| exp(x[r][k] * 0.5 + y[r][k] - m));
                x[r][c] - m - log(s)
            }),
            1
        );
        assert_eq!(
            paired(quote! {
                x[r][c] / sum(C, |j| exp(x[r][j] - max(C, |k| x[r][k])))
            }),
            1
        );
        // Another value, another tensor, a scaled difference, a mean.
        assert_eq!(
            paired(quote! {
                let m = max(C, |j| x[r][j]);
                exp(x[r][c] - m) / sum(C, |j| exp(y[r][j] - m))
            }),
            0
        );
        assert_eq!(
            paired(quote! {
                let m = max(C, |j| x[r][j]);
                exp(x[r][c] - m) / sum(C, |j| exp(2.0 * x[r][j] - m))
            }),
            0
        );
        assert_eq!(
            paired(quote! {
                let m = max(C, |j| x[r][j]);
                exp(x[r][c] - m) / mean(C, |j| exp(x[r][j] - m))
            }),
            0
        );
        // A sum of a minimum's differences is not one.
        assert_eq!(
            paired(quote! {
                let m = min(C, |j| x[r][j]);
                exp(x[r][c] - m) / sum(C, |j| exp(x[r][j] - m))
            }),
            0
        );
    }
}
