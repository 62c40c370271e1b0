//! One pass for two reductions (`online = 1`): a reduction whose body
//! subtracts an earlier reduction's value from the same value that one
//! reduced, computed beside it instead of in a pass of its own. Two shapes
//! pair, both found in the IR, not by name:
//!
//! - **Softmax** (Milakov and Gimelshein's online normaliser): a `max` of
//!   some value `v(j)`, and a later `sum` whose body is `exp(v'(k) − m)`,
//!   where `m` is the maximum (directly, or a let bound to it) and `v'` is
//!   `v` with the sum's variable in place of the maximum's (softmax,
//!   log-softmax, cross-entropy). Each thread keeps a running maximum
//!   `m_t` and a sum `s_t` of `exp(x − m_t)`, which it rescales by
//!   `exp(m_old − m_new)` when a chunk of `vector` values raises the
//!   maximum (once per chunk, not per value). Across the row the maxima
//!   combine first; then each thread rescales its sum to the row's
//!   maximum, and the sums combine. A sum of anything else (`exp(2·x −
//!   m)`) has terms that may overflow where the two-pass form's do not,
//!   and is left to two passes.
//! - **Variance** (the parallel form of Welford's algorithm): a `mean` of
//!   `v(j)`, and a later `sum` or `mean` of `(v'(k) − μ) · (v'(k) − μ)`,
//!   with `μ` the mean (layernorm, standardisation). Each thread shifts its
//!   values by the first of them, `K_t`, and sums `a_t = Σ (x − K_t)` and
//!   `b_t = Σ (x − K_t)²` over its `n_t` values. Across the row, `Σ (n_t
//!   K_t + a_t)` gives the mean `μ`; then with `c_t = K_t − μ`, each
//!   thread's `b_t + c_t (2 a_t + n_t c_t)` is exactly its `Σ (x − μ)²`,
//!   and those combine. The shift keeps the sums of squares small: `K_t`
//!   is one of the thread's own values, so no sum cancels what it adds.
//!
//! Rows too long to keep (more than shared memory holds) are then read
//! once fewer: softmax twice instead of three times, layernorm likewise.
//!
//! **Infinities.** A running maximum of −∞ (a thread whose values so far
//! are all −∞, as in masked scores) is taken as 0 where it is subtracted,
//! so that `exp(−∞ − (−∞))` never makes a NaN: the thread's terms and sum
//! stay 0, as they are in the two-pass form. A maximum of +∞ gives NaN in
//! both forms.

use super::Walk;
use super::combine::Combiner;
use crate::ir::{BinaryOp, Expr, ExprId, Kernel, ReduceOp, UnaryOp, VarId};
use crate::lower::classify::RowPlan;
use crate::lower::elementwise::emit_consecutive_with;
use crate::lower::expr::{self, Env};
use crate::ptx::Builder;
use crate::ptx::inst::{ArithOp, Cmp, Op, Operand, Reg, RegClass, Ty};

/// Two reductions one pass computes together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pair {
    /// The reduction whose value the second subtracts.
    pub first: ExprId,
    pub second: ExprId,
    pub kind: Kind,
}

/// The two shapes that pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A maximum, then a sum of `exp` of differences from it.
    Softmax,
    /// A mean, then a sum or mean of squared differences from it.
    Variance,
}

/// The pairs among `plan`'s reductions, each reduction in at most one.
pub fn pairs(kernel: &Kernel, plan: &RowPlan) -> Vec<Pair> {
    let reductions: Vec<ExprId> = plan.reductions().collect();
    let mut out: Vec<Pair> = Vec::new();
    for (i, &first) in reductions.iter().enumerate() {
        let Expr::Reduce {
            op,
            var: first_var,
            body: value,
        } = *kernel.expr(first)
        else {
            continue;
        };
        let kind = match op {
            ReduceOp::Max => Kind::Softmax,
            ReduceOp::Mean => Kind::Variance,
            ReduceOp::Sum | ReduceOp::Min => continue,
        };
        if kernel.contains_reduce(value) || out.iter().any(|p| p.second == first) {
            continue;
        }
        // The difference of the same value and the first's, in the second's
        // terms.
        let difference = |id: ExprId, var: VarId| match *kernel.expr(id) {
            Expr::Binary(BinaryOp::Sub, term, subtrahend) => {
                names(kernel, subtrahend, first) && same(kernel, (value, first_var), (term, var))
            }
            _ => false,
        };
        let partner = reductions[i + 1..].iter().copied().find(|&second| {
            let Expr::Reduce { op, var, body } = *kernel.expr(second) else {
                return false;
            };
            let shaped = match (kind, op, kernel.expr(body)) {
                (Kind::Softmax, ReduceOp::Sum, &Expr::Unary(UnaryOp::Exp, d)) => difference(d, var),
                (
                    Kind::Variance,
                    ReduceOp::Sum | ReduceOp::Mean,
                    &Expr::Binary(BinaryOp::Mul, d, e),
                ) => difference(d, var) && same(kernel, (d, var), (e, var)),
                _ => false,
            };
            shaped
                && kernel.extent(var) == kernel.extent(first_var)
                && out.iter().all(|p| p.second != second)
        });
        if let Some(second) = partner {
            out.push(Pair {
                first,
                second,
                kind,
            });
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

/// Computes `pair`'s two values in one pass over the row, reading it from
/// global memory; every thread of the row gets both.
pub(super) fn reduce(
    b: &mut Builder,
    kernel: &Kernel,
    env: &Env,
    walk: Walk,
    lane: Reg,
    combiner: &mut Combiner,
    pair: Pair,
) -> (Reg, Reg) {
    let Expr::Reduce { var, body, .. } = *kernel.expr(pair.first) else {
        unreachable!("a reduction")
    };
    let pass = Pass {
        kernel,
        env,
        var,
        body,
        walk,
    };
    match pair.kind {
        Kind::Softmax => softmax(b, &pass, lane, combiner),
        Kind::Variance => {
            let Expr::Reduce { op, .. } = *kernel.expr(pair.second) else {
                unreachable!("a reduction")
            };
            variance(b, &pass, lane, combiner, op)
        }
    }
}

/// The first reduction's loop over the row.
struct Pass<'a> {
    kernel: &'a Kernel,
    env: &'a Env,
    var: VarId,
    body: ExprId,
    walk: Walk,
}

impl Pass<'_> {
    /// Emits the thread's loop over its chunks of the row; `fold` gets each
    /// chunk's values of the first reduction's body.
    fn walk(&self, b: &mut Builder, lane: Reg, mut fold: impl FnMut(&mut Builder, Vec<Reg>)) {
        let extent = self.kernel.extent(self.var);
        self.walk.emit(b, lane, extent, |b, first, width| {
            let values = self.chunk(b, first, width);
            fold(b, values);
        });
    }

    /// The body's values at the `width` positions from `first`.
    fn chunk(&self, b: &mut Builder, first: Reg, width: u32) -> Vec<Reg> {
        let mut element = self.env.clone();
        element.index.insert(self.var, first);
        emit_consecutive_with(
            b,
            self.kernel,
            &mut element,
            self.body,
            Some(self.var),
            width,
            Vec::new(),
        )
    }
}

/// A maximum and its sum of exponentials.
fn softmax(b: &mut Builder, pass: &Pass<'_>, lane: Reg, combiner: &mut Combiner) -> (Reg, Reg) {
    let max = b.f32_imm(f32::NEG_INFINITY);
    let sum = b.f32_imm(0.0);
    pass.walk(b, lane, |b, values| {
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
    });
    let own = copy(b, max);
    let row_max = combiner.combine(b, ReduceOp::Max, max);
    rescale(b, sum, own, row_max);
    let row_sum = combiner.combine(b, ReduceOp::Sum, sum);
    (row_max, row_sum)
}

/// A mean and its sum (`op` `Sum`) or mean of squared differences.
fn variance(
    b: &mut Builder,
    pass: &Pass<'_>,
    lane: Reg,
    combiner: &mut Combiner,
    op: ReduceOp,
) -> (Reg, Reg) {
    let extent = pass.kernel.extent(pass.var);
    // The shift: the thread's first value, or for a thread without chunks
    // (more threads than chunks) the row's last chunk's, whatever it then
    // counts (any shift gives the same sums).
    let first = pass.walk.first_chunk(b, lane, extent);
    let shift = pass.chunk(b, first, pass.walk.vector)[0];
    let (count, sum, squares) = (b.f32_imm(0.0), b.f32_imm(0.0), b.f32_imm(0.0));
    pass.walk(b, lane, |b, values| {
        for v in &values {
            let d = b.f32_op(ArithOp::Sub, *v, shift);
            expr::fold_into(b, ReduceOp::Sum, sum, d);
            b.push(Op::Mad {
                ty: Ty::F32,
                dst: squares,
                a: d.into(),
                b: d.into(),
                c: squares.into(),
            });
        }
        b.push(Op::Arith {
            op: ArithOp::Add,
            ty: Ty::F32,
            dst: count,
            a: count.into(),
            b: Operand::F32(values.len() as f32),
        });
    });
    // Σ (x − K) + n K over the thread's values, then the row's mean.
    let total = b.f32_fma(count, shift, sum);
    let row_total = combiner.combine(b, ReduceOp::Sum, total);
    let mean = expr::finish_reduce(b, ReduceOp::Mean, row_total, extent);
    // Σ (x − μ)² = b + c (2a + n c), c = K − μ.
    let c = b.f32_op(ArithOp::Sub, shift, mean);
    let twice = b.f32_op(ArithOp::Add, sum, sum);
    let inner = b.f32_fma(count, c, twice);
    let own = b.f32_fma(c, inner, squares);
    let row_squares = combiner.combine(b, ReduceOp::Sum, own);
    (mean, expr::finish_reduce(b, op, row_squares, extent))
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

    #[test]
    fn a_mean_pairs_with_a_sum_or_mean_of_squared_differences_from_it() {
        // Layernorm's variance, a sum of squares, a mean of both tensors.
        assert_eq!(
            paired(quote! {
                let mu = mean(C, |j| x[r][j]);
                let var = mean(C, |j| (x[r][j] - mu) * (x[r][j] - mu));
                (x[r][c] - mu) * rsqrt(var + 0.00001)
            }),
            1
        );
        assert_eq!(
            paired(quote! {
                let mu = mean(C, |j| x[r][j] + y[r][j]);
                let ss = sum(C, |k| (x[r][k] + y[r][k] - mu) * (x[r][k] + y[r][k] - mu));
                ss + x[r][c]
            }),
            1
        );
        // Differences of two values, from a sum rather than a mean, a
        // product of the difference with something else, a maximum of the
        // squares.
        for body in [
            quote! {
                let mu = mean(C, |j| x[r][j]);
                mean(C, |j| (x[r][j] - mu) * (y[r][j] - mu)) + x[r][c]
            },
            quote! {
                let s = sum(C, |j| x[r][j]);
                mean(C, |j| (x[r][j] - s) * (x[r][j] - s)) + x[r][c]
            },
            quote! {
                let mu = mean(C, |j| x[r][j]);
                mean(C, |j| (x[r][j] - mu) * x[r][j]) + x[r][c]
            },
            quote! {
                let mu = mean(C, |j| x[r][j]);
                max(C, |j| (x[r][j] - mu) * (x[r][j] - mu)) + x[r][c]
            },
        ] {
            assert_eq!(paired(body.clone()), 0, "{body}");
        }
    }
}
