//! Sorts a kernel into the op class whose schedules fit it.
//!
//! - **Elementwise**: no reduction anywhere.
//! - **Rows**: every reduction can be computed once per *row* and shared by
//!   the row's output elements. The row variables are the output variables
//!   some reduction depends on; the others (the inner variables) index the
//!   elements of a row. Softmax over `(R, C)` has rows `{r}` and inner `{c}`;
//!   a row sum has rows `{r}` and no inner variable.
//! - **Matmul**: contractions, as recognized by [`super::matmul::detect`]
//!   (asked first).
//! - **Generic**: everything else (one thread per output element).

use std::collections::HashSet;

use super::matmul::{self, MatmulPlan};
use crate::ir::{Expr, ExprId, Kernel, LetId, VarId};

/// The op class of a kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpClass {
    Elementwise,
    Rows(RowPlan),
    Matmul(MatmulPlan),
    Generic,
}

impl OpClass {
    /// The name of the schedule class that fits, as in [`crate::schedule::Schedule::class`].
    pub fn name(&self) -> &'static str {
        match self {
            OpClass::Elementwise => "elementwise",
            OpClass::Rows(_) => "rows",
            OpClass::Matmul(_) => "matmul",
            OpClass::Generic => "generic",
        }
    }

    /// What makes a kernel this class, for error messages.
    pub fn describe(&self) -> &'static str {
        match self {
            OpClass::Elementwise => "elementwise (it has no reduction)",
            OpClass::Rows(_) => "a row reduction (use a `rows` schedule)",
            OpClass::Matmul(_) => "a contraction (use a `matmul` schedule)",
            OpClass::Generic => {
                "neither elementwise nor a row reduction (only a `generic` schedule applies)"
            }
        }
    }
}

/// How a kernel splits into rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowPlan {
    /// Output variables that select a row, in output order.
    pub row_vars: Vec<VarId>,
    /// Output variables that select an element within a row, in output order.
    pub inner_vars: Vec<VarId>,
    /// What a row computes before its elements, in an order where every
    /// step's inputs come first: each let's reductions (inner ones first),
    /// then the let itself when it depends on row variables only; then the
    /// root's reductions.
    pub steps: Vec<RowStep>,
}

/// One per-row computation of a [`RowPlan`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowStep {
    /// A reduction, computed cooperatively by the row's threads.
    Reduce(ExprId),
    /// A let whose value depends on row variables only, evaluated once.
    Let(LetId),
}

impl RowPlan {
    /// The reductions, in the order they are computed.
    pub fn reductions(&self) -> impl Iterator<Item = ExprId> + '_ {
        self.steps.iter().filter_map(|s| match s {
            RowStep::Reduce(id) => Some(*id),
            RowStep::Let(_) => None,
        })
    }

    /// How many rows there are.
    pub fn rows(&self, kernel: &Kernel) -> u32 {
        self.row_vars.iter().map(|v| kernel.extent(*v)).product()
    }

    /// The extents the reductions run over, in the order they are computed.
    pub fn reduced_extents<'a>(&'a self, kernel: &'a Kernel) -> impl Iterator<Item = u32> + 'a {
        self.reductions().filter_map(|r| match kernel.expr(r) {
            Expr::Reduce { var, .. } => Some(kernel.extent(*var)),
            _ => None,
        })
    }

    /// A row's length: its longest reduction, or its element count when
    /// that is longer.
    pub fn length(&self, kernel: &Kernel) -> u32 {
        let elements: u32 = self.inner_vars.iter().map(|v| kernel.extent(*v)).product();
        self.reduced_extents(kernel)
            .chain([elements])
            .max()
            .unwrap_or(1)
    }
}

/// The op class of `kernel`.
pub fn classify(kernel: &Kernel) -> OpClass {
    // MATMUL: the matmul lowering decides first what is a contraction; what
    // it declines and still reuses data across rows falls to Generic through
    // `streams_its_rows` below.
    if let Some(plan) = matmul::detect(kernel) {
        return OpClass::Matmul(plan);
    }
    let mut reductions = Vec::new();
    let mut seen = HashSet::new();
    let mut steps = Vec::new();
    for (i, l) in kernel.lets.iter().enumerate() {
        let start = reductions.len();
        post_order_reductions(kernel, l.value, &mut seen, &mut reductions);
        steps.extend(reductions[start..].iter().map(|r| RowStep::Reduce(*r)));
        steps.push(RowStep::Let(LetId(i)));
    }
    let start = reductions.len();
    post_order_reductions(kernel, kernel.root, &mut seen, &mut reductions);
    steps.extend(reductions[start..].iter().map(|r| RowStep::Reduce(*r)));

    if reductions.is_empty() {
        return OpClass::Elementwise;
    }
    let mut row_set: HashSet<VarId> = HashSet::new();
    for r in &reductions {
        row_set.extend(kernel.free_vars(*r));
    }
    for r in &reductions {
        if depends_on_outer(kernel, *r) || !streams_its_rows(kernel, *r) {
            return OpClass::Generic;
        }
    }
    let (row_vars, inner_vars): (Vec<VarId>, Vec<VarId>) = kernel
        .output_vars()
        .into_iter()
        .partition(|v| row_set.contains(v));
    steps.retain(|s| match s {
        RowStep::Reduce(_) => true,
        RowStep::Let(l) => kernel.let_(*l).deps.iter().all(|v| row_set.contains(v)),
    });
    OpClass::Rows(RowPlan {
        row_vars,
        inner_vars,
        steps,
    })
}

/// Appends the reductions inside `id` (not looking through lets), inner ones
/// before the reductions that contain them; `seen` holds the nodes already
/// visited, so each reduction comes once.
fn post_order_reductions(
    kernel: &Kernel,
    id: ExprId,
    seen: &mut HashSet<ExprId>,
    out: &mut Vec<ExprId>,
) {
    if !seen.insert(id) {
        return;
    }
    for c in kernel.children(id) {
        post_order_reductions(kernel, c, seen, out);
    }
    if matches!(kernel.expr(id), Expr::Reduce { .. }) {
        out.push(id);
    }
}

/// Whether a reduction nested inside `reduce` reads `reduce`'s variable, so
/// that it cannot be computed once per row before `reduce`.
fn depends_on_outer(kernel: &Kernel, reduce: ExprId) -> bool {
    let Expr::Reduce { var, body, .. } = kernel.expr(reduce) else {
        return false;
    };
    let mut nested = Vec::new();
    post_order_reductions(kernel, *body, &mut HashSet::new(), &mut nested);
    nested
        .into_iter()
        .any(|n| kernel.free_vars(n).contains(var))
}

/// Whether some tensor read along the reduced variable in `reduce`'s body is
/// also indexed by every row variable the reduction depends on, so that each
/// row streams data of its own.
///
/// A reduction whose streamed loads all miss some of its row variables reuses
/// that data across rows (a contraction: a matrix product, a pairwise
/// distance); a thread group per row would read each input many times over,
/// so such kernels are not rows. A body that reads nothing along the reduced
/// variable is fine.
fn streams_its_rows(kernel: &Kernel, reduce: ExprId) -> bool {
    let Expr::Reduce { var, body, .. } = kernel.expr(reduce) else {
        return true;
    };
    let free = kernel.free_vars(reduce);
    let mut loads = Vec::new();
    direct_loads(kernel, *body, &mut loads);
    loads.retain(|index| index.contains(var));
    loads.is_empty()
        || loads
            .iter()
            .any(|index| free.iter().all(|v| index.contains(v)))
}

/// The index lists of the loads inside `id`, not looking through lets or
/// into nested reductions (computed separately).
fn direct_loads<'k>(kernel: &'k Kernel, id: ExprId, out: &mut Vec<&'k [VarId]>) {
    match kernel.expr(id) {
        Expr::Load { index, .. } => out.push(index),
        Expr::Reduce { .. } => {}
        _ => {
            for c in kernel.children(id) {
                direct_loads(kernel, c, out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::*;
    use crate::ir::{Kernel, VarId};
    use crate::syntax::parse_kernel;

    fn kernel(attr: proc_macro2::TokenStream, item: proc_macro2::TokenStream) -> Kernel {
        parse_kernel(attr, item).unwrap_or_else(|e| panic!("test kernel rejected: {e}"))
    }

    fn names(k: &Kernel, vars: &[VarId]) -> Vec<String> {
        vars.iter().map(|v| k.var(*v).name.clone()).collect()
    }

    fn rows(k: &Kernel) -> RowPlan {
        match classify(k) {
            OpClass::Rows(plan) => plan,
            other => panic!("`{}` classified {other:?}", k.name),
        }
    }

    #[test]
    fn elementwise_has_no_reduction() {
        let k = kernel(
            quote!(shape(R = 4, C = 6)),
            quote! {
                fn bias_gelu(x: Tensor<f32, (R, C)>, b: Tensor<f32, (C,)>) -> Tensor<f32, (R, C)> {
                    compute(|r, c| { let y = x[r][c] + b[c]; gelu(y) })
                }
            },
        );
        assert_eq!(classify(&k), OpClass::Elementwise);
    }

    #[test]
    fn softmax_rows_are_its_first_variable() {
        let k = kernel(
            quote!(shape(R = 8, C = 1000)),
            quote! {
                fn softmax(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
                    compute(|r, c| {
                        let mx = max(C, |j| x[r][j]);
                        let s = sum(C, |j| exp(x[r][j] - mx));
                        exp(x[r][c] - mx) / s
                    })
                }
            },
        );
        let plan = rows(&k);
        assert_eq!(names(&k, &plan.row_vars), ["r"]);
        assert_eq!(names(&k, &plan.inner_vars), ["c"]);
        assert_eq!(plan.reductions().count(), 2);
        assert!(matches!(plan.steps[1], RowStep::Let(LetId(0))));
        assert!(matches!(plan.steps[3], RowStep::Let(LetId(1))));
    }

    #[test]
    fn row_sum_and_column_sum() {
        let k = kernel(
            quote!(shape(R = 8, C = 7)),
            quote! {
                fn row_sum(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R,)> {
                    compute(|r| sum(C, |c| x[r][c]))
                }
            },
        );
        let plan = rows(&k);
        assert_eq!(names(&k, &plan.row_vars), ["r"]);
        assert!(plan.inner_vars.is_empty());
        let k = kernel(
            quote!(shape(R = 8, C = 7)),
            quote! {
                fn col_sum(x: Tensor<f32, (R, C)>) -> Tensor<f32, (C,)> {
                    compute(|c| sum(R, |r| x[r][c]))
                }
            },
        );
        assert_eq!(names(&k, &rows(&k).row_vars), ["c"]);
    }

    #[test]
    fn layernorm_evaluates_row_lets_between_reductions() {
        let k = kernel(
            quote!(shape(R = 8, C = 1025)),
            quote! {
                fn layernorm(x: Tensor<f32, (R, C)>, g: Tensor<f32, (C,)>) -> Tensor<f32, (R, C)> {
                    compute(|r, c| {
                        let mu = mean(C, |j| x[r][j]);
                        let var = mean(C, |j| (x[r][j] - mu) * (x[r][j] - mu));
                        let centered = x[r][c] - mu;
                        centered * rsqrt(var + 0.00001) * g[c]
                    })
                }
            },
        );
        let plan = rows(&k);
        let kinds: Vec<&str> = plan
            .steps
            .iter()
            .map(|s| match s {
                RowStep::Reduce(_) => "reduce",
                RowStep::Let(_) => "let",
            })
            .collect();
        // `centered` depends on `c`: evaluated per element, not per row.
        assert_eq!(kinds, ["reduce", "let", "reduce", "let"]);
        assert_eq!(names(&k, &plan.inner_vars), ["c"]);
    }

    #[test]
    fn transposed_output_and_global_reduction() {
        let k = kernel(
            quote!(shape(R = 5, C = 3)),
            quote! {
                fn t(x: Tensor<f32, (R, C)>) -> Tensor<f32, (C, R)> {
                    compute(|c, r| x[r][c] / sum(C, |j| x[r][j]))
                }
            },
        );
        let plan = rows(&k);
        assert_eq!(names(&k, &plan.row_vars), ["r"]);
        assert_eq!(names(&k, &plan.inner_vars), ["c"]);
        let k = kernel(
            quote!(shape(N = 33)),
            quote! {
                fn normalize(x: Tensor<f32, N>) -> Tensor<f32, N> {
                    compute(|i| x[i] / sum(N, |j| x[j]))
                }
            },
        );
        let plan = rows(&k);
        assert!(plan.row_vars.is_empty());
        assert_eq!(names(&k, &plan.inner_vars), ["i"]);
    }

    #[test]
    fn independent_nested_reduction_comes_first() {
        let k = kernel(
            quote!(shape(R = 4, C = 9)),
            quote! {
                fn nested(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R,)> {
                    compute(|r| sum(C, |j| x[r][j] - max(C, |k| x[r][k])))
                }
            },
        );
        let plan = rows(&k);
        let order: Vec<ExprId> = plan.reductions().collect();
        assert_eq!(order.len(), 2);
        assert!(order[0] < order[1]);
    }

    #[test]
    fn contractions_and_dependent_nesting_are_generic() {
        let matmul = kernel(
            quote!(shape(M = 4, N = 5, K = 6)),
            quote! {
                fn mm(a: Tensor<f32, (M, K)>, b: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
                    compute(|m, n| sum(K, |k| a[m][k] * b[k][n]))
                }
            },
        );
        let pairwise = kernel(
            quote!(shape(M = 4, N = 5, K = 6)),
            quote! {
                fn dist(a: Tensor<f32, (M, K)>, b: Tensor<f32, (N, K)>) -> Tensor<f32, (M, N)> {
                    compute(|i, j| sum(K, |k| (a[i][k] - b[j][k]) * (a[i][k] - b[j][k])))
                }
            },
        );
        let dependent = kernel(
            quote!(shape(R = 4, J = 5, K = 6)),
            quote! {
                fn dep(x: Tensor<f32, (R, J, K)>) -> Tensor<f32, (R,)> {
                    compute(|r| sum(J, |j| max(K, |k| x[r][j][k])))
                }
            },
        );
        let outer = kernel(
            quote!(shape(R = 4, C = 5)),
            quote! {
                fn outer(x: Tensor<f32, (R, C)>, y: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
                    compute(|r, c| sum(C, |j| x[r][j] * y[r][c]))
                }
            },
        );
        assert_eq!(classify(&outer), OpClass::Generic);
        assert!(matches!(classify(&matmul), OpClass::Matmul(_)));
        assert_eq!(classify(&pairwise), OpClass::Generic);
        assert_eq!(classify(&dependent), OpClass::Generic);
    }

    #[test]
    fn matrix_vector_product_is_rows() {
        let k = kernel(
            quote!(shape(M = 4, K = 6)),
            quote! {
                fn gemv(a: Tensor<f32, (M, K)>, x: Tensor<f32, (K,)>) -> Tensor<f32, (M,)> {
                    compute(|m| sum(K, |k| a[m][k] * x[k]))
                }
            },
        );
        assert_eq!(names(&k, &rows(&k).row_vars), ["m"]);
    }
}
