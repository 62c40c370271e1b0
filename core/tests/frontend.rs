//! The kernel language front-end: accepted kernels and their IR, every
//! diagnostic's text, and robustness against arbitrary input.

use std::collections::BTreeSet;
use std::panic::{AssertUnwindSafe, catch_unwind};

use ktune_core::DType;
use ktune_core::ir::{
    BinaryOp, CmpOp, DimId, Expr, ExprId, Kernel, ReduceOp, Type, UnaryOp, VarId, VarKind,
};
use ktune_core::syntax::{is_kernel_attr, parse_kernel, parse_kernel_fn};
use proc_macro2::{Delimiter, Group, Ident, Literal, Punct, Spacing, Span, TokenStream, TokenTree};
use quote::{ToTokens, quote};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

// ---------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------

/// Runs a kernel through both entry points (the macro's, with the attribute
/// split off, and the build helper's, with it in place) and checks that they
/// agree. Panics if either panics.
fn run(item: TokenStream) -> Result<Kernel, Vec<String>> {
    let func: syn::ItemFn = syn::parse2(item).expect("test input is a fn item");
    let attr = func
        .attrs
        .iter()
        .find(|a| is_kernel_attr(a))
        .expect("test input has a #[tuned_kernel] attribute")
        .clone();
    let via_fn = catch_unwind(AssertUnwindSafe(|| parse_kernel_fn(&attr, &func)))
        .expect("parse_kernel_fn panicked");

    let mut stripped = func.clone();
    let position = stripped
        .attrs
        .iter()
        .position(|a| *a == attr)
        .expect("attribute present");
    stripped.attrs.remove(position);
    let attr_tokens = match &attr.meta {
        syn::Meta::List(list) => list.tokens.clone(),
        _ => TokenStream::new(),
    };
    let item_tokens = stripped.to_token_stream();
    let via_macro = catch_unwind(AssertUnwindSafe(|| parse_kernel(attr_tokens, item_tokens)))
        .expect("parse_kernel panicked");

    match (via_fn, via_macro) {
        (Ok(a), Ok(b)) => {
            assert_eq!(a, b, "the two entry points disagree");
            validate(&a);
            Ok(a)
        }
        (Err(a), Err(b)) => {
            let (a, b) = (messages(a), messages(b));
            assert_eq!(a, b, "the two entry points disagree");
            Err(a)
        }
        (a, b) => panic!("the two entry points disagree: {a:?} vs {b:?}"),
    }
}

fn messages(error: syn::Error) -> Vec<String> {
    error.into_iter().map(|e| e.to_string()).collect()
}

#[track_caller]
fn ok(item: TokenStream) -> Kernel {
    match run(item) {
        Ok(kernel) => kernel,
        Err(errors) => panic!(
            "expected the kernel to be accepted, got:\n{}",
            errors.join("\n")
        ),
    }
}

#[track_caller]
fn errors(item: TokenStream) -> Vec<String> {
    match run(item) {
        Ok(kernel) => panic!("expected an error, got a kernel: {kernel:#?}"),
        Err(errors) => errors,
    }
}

/// Asserts that the kernel is rejected with exactly this one message.
#[track_caller]
fn error(item: TokenStream, expected: &str) {
    let errors = errors(item);
    assert_eq!(errors, vec![expected.to_owned()], "diagnostics differ");
}

// ---------------------------------------------------------------------------
// IR invariants, checked on every accepted kernel
// ---------------------------------------------------------------------------

fn validate(k: &Kernel) {
    assert_eq!(k.exprs.len(), k.types.len(), "types parallel exprs");
    assert!(k.root.0 < k.exprs.len());
    assert!(
        matches!(k.types[k.root.0], Type::Num(_)),
        "root is a number"
    );
    assert!(!k.inputs.is_empty());
    assert_eq!(k.output.name, "out");
    for d in &k.dims {
        assert!(d.size > 0);
    }
    for t in k.inputs.iter().chain([&k.output]) {
        assert!(!t.dims.is_empty());
        assert!(t.dims.iter().all(|d| d.0 < k.dims.len()));
    }
    // Output variables: one per output dimension, over that dimension.
    let outputs = k.output_vars();
    assert_eq!(outputs.len(), k.output.dims.len());
    for (pos, v) in outputs.iter().enumerate() {
        assert_eq!(k.var(*v).kind, VarKind::Output(pos));
        assert_eq!(k.var(*v).dim, k.output.dims[pos]);
    }
    // Post-order arena and per-node typing.
    let mut reduce_vars = Vec::new();
    for (i, e) in k.exprs.iter().enumerate() {
        for c in k.children(ExprId(i)) {
            assert!(c.0 < i, "child {c:?} of {i} comes first");
        }
        let ty = k.types[i];
        let child = |id: &ExprId| k.types[id.0];
        let num = |t: Type| match t {
            Type::Num(d) => d,
            Type::Bool => panic!("expected a number at {i}: {e:?}"),
        };
        let join = |a: DType, b: DType| {
            if a == DType::F32 || b == DType::F32 {
                DType::F32
            } else {
                assert_eq!(a, b, "f16 and bf16 never meet");
                a
            }
        };
        let expected = match e {
            Expr::Const(v) => {
                assert!(v.is_finite());
                Type::Num(DType::F32)
            }
            Expr::Index(v) => {
                assert!(v.0 < k.vars.len());
                Type::Num(DType::F32)
            }
            Expr::Load { tensor, index } => {
                let t = k.input(*tensor);
                assert_eq!(index.len(), t.dims.len());
                for (v, d) in index.iter().zip(&t.dims) {
                    assert_eq!(k.var(*v).dim, *d);
                }
                Type::Num(t.dtype)
            }
            Expr::Let(l) => {
                assert!(k.let_(*l).value.0 < i);
                k.types[k.let_(*l).value.0]
            }
            Expr::Unary(_, a) => Type::Num(num(child(a))),
            Expr::Binary(_, a, b) => Type::Num(join(num(child(a)), num(child(b)))),
            Expr::Compare(_, a, b) => {
                join(num(child(a)), num(child(b)));
                Type::Bool
            }
            Expr::Logic(_, a, b) => {
                assert_eq!(child(a), Type::Bool);
                assert_eq!(child(b), Type::Bool);
                Type::Bool
            }
            Expr::Not(a) => {
                assert_eq!(child(a), Type::Bool);
                Type::Bool
            }
            Expr::Select(c, a, b) => {
                assert_eq!(child(c), Type::Bool);
                Type::Num(join(num(child(a)), num(child(b))))
            }
            Expr::Cast(d, a) => {
                num(child(a));
                Type::Num(*d)
            }
            Expr::Reduce { var, body, .. } => {
                assert_eq!(k.var(*var).kind, VarKind::Reduce);
                reduce_vars.push(*var);
                Type::Num(num(child(body)))
            }
        };
        assert_eq!(ty, expected, "type of {i}: {e:?}");
    }
    // Each reduction variable belongs to exactly one reduction.
    let distinct: BTreeSet<VarId> = reduce_vars.iter().copied().collect();
    assert_eq!(distinct.len(), reduce_vars.len());
    let all_reduce = k.vars.iter().filter(|v| v.kind == VarKind::Reduce).count();
    assert_eq!(all_reduce, reduce_vars.len());
    // Scoping: reduction variables are used only inside their reduction.
    let outputs: BTreeSet<VarId> = outputs.into_iter().collect();
    for (i, l) in k.lets.iter().enumerate() {
        scoped(k, l.value, &outputs, i);
        let mut deps = l.deps.clone();
        deps.sort();
        deps.dedup();
        assert_eq!(deps, l.deps, "deps sorted and distinct");
        assert_eq!(k.free_vars(l.value), l.deps, "deps of let `{}`", l.name);
        assert!(l.deps.iter().all(|v| outputs.contains(v)));
    }
    scoped(k, k.root, &outputs, k.lets.len());
}

/// Every variable read under `id` is bound: an output variable or an
/// enclosing reduction's; every let read is an earlier one.
fn scoped(k: &Kernel, id: ExprId, bound: &BTreeSet<VarId>, lets_visible: usize) {
    match k.expr(id) {
        Expr::Index(v) => assert!(bound.contains(v), "{v:?} unbound"),
        Expr::Load { index, .. } => assert!(index.iter().all(|v| bound.contains(v))),
        Expr::Let(l) => assert!(l.0 < lets_visible, "let {l:?} used before definition"),
        Expr::Reduce { var, body, .. } => {
            let mut inner = bound.clone();
            assert!(inner.insert(*var));
            scoped(k, *body, &inner, lets_visible);
        }
        _ => {
            for c in k.children(id) {
                scoped(k, c, bound, lets_visible);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Small accessors for the positive tests
// ---------------------------------------------------------------------------

fn dim(k: &Kernel, name: &str) -> DimId {
    DimId(
        k.dims
            .iter()
            .position(|d| d.name == name)
            .expect("dimension exists"),
    )
}

fn var(k: &Kernel, name: &str) -> VarId {
    VarId(
        k.vars
            .iter()
            .position(|v| v.name == name)
            .expect("variable exists"),
    )
}

fn vars_named(k: &Kernel, name: &str) -> Vec<VarId> {
    (0..k.vars.len())
        .map(VarId)
        .filter(|v| k.var(*v).name == name)
        .collect()
}

fn root(k: &Kernel) -> &Expr {
    k.expr(k.root)
}

fn count(k: &Kernel, pred: impl Fn(&Expr) -> bool) -> usize {
    k.exprs.iter().filter(|e| pred(e)).count()
}

// ---------------------------------------------------------------------------
// Accepted kernels
// ---------------------------------------------------------------------------

#[test]
fn vector_add_with_broadcast() {
    let k = ok(quote! {
        #[tuned_kernel(shape(R = 1024, C = 768))]
        pub fn bias_add(x: Tensor<f32, (R, C)>, bias: Tensor<f32, (C,)>) -> Tensor<f32, (R, C)> {
            compute(|r, c| x[r][c] + bias[c])
        }
    });
    assert_eq!(k.name, "bias_add");
    assert_eq!(k.dims.len(), 2);
    assert_eq!((k.dims[0].name.as_str(), k.dims[0].size), ("R", 1024));
    assert_eq!((k.dims[1].name.as_str(), k.dims[1].size), ("C", 768));
    assert_eq!(k.inputs.len(), 2);
    assert_eq!(k.inputs[0].name, "x");
    assert_eq!(k.inputs[0].dims, vec![DimId(0), DimId(1)]);
    assert_eq!(k.inputs[1].name, "bias");
    assert_eq!(k.inputs[1].dims, vec![DimId(1)]);
    assert_eq!(k.output.name, "out");
    assert_eq!(k.output.dims, vec![DimId(0), DimId(1)]);
    assert_eq!(k.vars.len(), 2);
    assert_eq!(k.vars[0].name, "r");
    assert_eq!(k.vars[0].kind, VarKind::Output(0));
    assert_eq!(k.vars[1].kind, VarKind::Output(1));
    assert_eq!(k.vars[1].dim, DimId(1));
    assert!(k.lets.is_empty());
    assert_eq!(k.exprs.len(), 3);
    assert_eq!(
        k.exprs[0],
        Expr::Load {
            tensor: ktune_core::ir::TensorId(0),
            index: vec![VarId(0), VarId(1)]
        }
    );
    assert_eq!(
        k.exprs[1],
        Expr::Load {
            tensor: ktune_core::ir::TensorId(1),
            index: vec![VarId(1)]
        }
    );
    assert_eq!(*root(&k), Expr::Binary(BinaryOp::Add, ExprId(0), ExprId(1)));
    assert_eq!(k.types[k.root.0], Type::Num(DType::F32));
}

#[test]
fn scaled_residual_add() {
    let k = ok(quote! {
        /// out = x * 0.5 + res
        #[tuned_kernel(shape(N = 1048576))]
        pub(crate) fn residual(x: Tensor<bf16, N>, res: Tensor<bf16, (N)>) -> Tensor<bf16, (N,)> {
            compute(|n| x[n] * 0.5 + res[n])
        }
    });
    assert_eq!(k.inputs[0].dtype, DType::Bf16);
    assert_eq!(k.inputs[1].dims, vec![DimId(0)]);
    assert_eq!(k.output.dtype, DType::Bf16);
    assert!(k.exprs.contains(&Expr::Const(0.5)));
    // A constant is f32, so the sum is computed as f32.
    assert_eq!(k.types[k.root.0], Type::Num(DType::F32));
}

#[test]
fn row_reductions() {
    for (name, op) in [
        ("sum", ReduceOp::Sum),
        ("max", ReduceOp::Max),
        ("min", ReduceOp::Min),
        ("mean", ReduceOp::Mean),
    ] {
        let func = Ident::new(name, Span::call_site());
        let k = ok(quote! {
            #[tuned_kernel(shape(R = 4096, C = 1000))]
            fn row_reduce(x: Tensor<f16, (R, C)>) -> Tensor<f32, R> {
                compute(|r| #func(C, |c| x[r][c]))
            }
        });
        assert_eq!(k.output.dims, vec![dim(&k, "R")]);
        let c = var(&k, "c");
        assert_eq!(k.var(c).kind, VarKind::Reduce);
        assert_eq!(k.var(c).dim, dim(&k, "C"));
        assert_eq!(k.extent(c), 1000);
        match root(&k) {
            Expr::Reduce {
                op: o,
                var: v,
                body,
            } => {
                assert_eq!(*o, op);
                assert_eq!(*v, c);
                assert_eq!(
                    *k.expr(*body),
                    Expr::Load {
                        tensor: ktune_core::ir::TensorId(0),
                        index: vec![var(&k, "r"), c]
                    }
                );
            }
            other => panic!("{name}: expected a reduction, got {other:?}"),
        }
        assert_eq!(k.types[k.root.0], Type::Num(DType::F16));
    }
}

#[test]
fn softmax() {
    let k = ok(quote! {
        #[tuned_kernel(shape(R = 8192, C = 1000))]
        pub fn softmax(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
            compute(|r, c| {
                let mx = max(C, |j| x[r][j]);
                let s = sum(C, |j| exp(x[r][j] - mx));
                exp(x[r][c] - mx) / s
            })
        }
    });
    let r = var(&k, "r");
    assert_eq!(k.lets.len(), 2);
    assert_eq!(k.lets[0].name, "mx");
    assert_eq!(k.lets[1].name, "s");
    assert_eq!(k.lets[0].deps, vec![r]);
    assert_eq!(k.lets[1].deps, vec![r]);
    // `j` is bound twice, by two sibling reductions: two distinct variables.
    let js = vars_named(&k, "j");
    assert_eq!(js.len(), 2);
    assert!(
        js.iter()
            .all(|j| k.var(*j).kind == VarKind::Reduce && k.var(*j).dim == dim(&k, "C"))
    );
    assert!(matches!(
        k.expr(k.lets[0].value),
        Expr::Reduce {
            op: ReduceOp::Max,
            ..
        }
    ));
    assert!(matches!(
        k.expr(k.lets[1].value),
        Expr::Reduce {
            op: ReduceOp::Sum,
            ..
        }
    ));
    assert!(matches!(root(&k), Expr::Binary(BinaryOp::Div, _, _)));
    assert_eq!(count(&k, |e| matches!(e, Expr::Unary(UnaryOp::Exp, _))), 2);
    assert_eq!(count(&k, |e| matches!(e, Expr::Let(_))), 3);
    assert_eq!(k.free_vars(k.root), vec![var(&k, "r"), var(&k, "c")]);
}

#[test]
fn layernorm() {
    let k = ok(quote! {
        #[tuned_kernel(shape(T = 2048, D = 4096))]
        pub fn layernorm(
            x: Tensor<bf16, (T, D)>,
            gamma: Tensor<f32, (D,)>,
            beta: Tensor<f32, (D,)>,
        ) -> Tensor<bf16, (T, D)> {
            compute(|t, d| {
                let mu = mean(D, |i| x[t][i]);
                let var = mean(D, |i| (x[t][i] - mu) * (x[t][i] - mu));
                let inv = rsqrt(var + 1e-5);
                (x[t][d] - mu) * inv * gamma[d] + beta[d]
            })
        }
    });
    let t = var(&k, "t");
    assert_eq!(k.lets.len(), 3);
    for l in &k.lets {
        assert_eq!(l.deps, vec![t], "let `{}`", l.name);
    }
    assert!(matches!(
        k.expr(k.lets[0].value),
        Expr::Reduce {
            op: ReduceOp::Mean,
            ..
        }
    ));
    // The variance reads the mean through a let.
    let variance = k.lets[1].value;
    let mut reads_mean = false;
    let mut stack = vec![variance];
    while let Some(id) = stack.pop() {
        reads_mean |= *k.expr(id) == Expr::Let(ktune_core::ir::LetId(0));
        stack.extend(k.children(id));
    }
    assert!(reads_mean);
    assert!(k.exprs.contains(&Expr::Const(1e-5)));
    assert_eq!(k.types[k.lets[0].value.0], Type::Num(DType::Bf16));
}

#[test]
fn rmsnorm() {
    let k = ok(quote! {
        #[tuned_kernel(shape(T = 1024, D = 4096))]
        pub fn rmsnorm(x: Tensor<f16, (T, D)>, w: Tensor<f16, (D,)>) -> Tensor<f16, (T, D)> {
            compute(|t, d| {
                let ms = mean(D, |i| x[t][i] * x[t][i]);
                x[t][d] * rsqrt(ms + 1e-6) * w[d]
            })
        }
    });
    assert_eq!(k.lets[0].deps, vec![var(&k, "t")]);
    assert_eq!(
        count(&k, |e| matches!(e, Expr::Unary(UnaryOp::Rsqrt, _))),
        1
    );
}

#[test]
fn matmul() {
    let k = ok(quote! {
        #[tuned_kernel(shape(M = 4096, N = 4096, K = 4096))]
        pub fn matmul(a: Tensor<f16, (M, K)>, b: Tensor<f16, (K, N)>) -> Tensor<f16, (M, N)> {
            compute(|m, n| sum(K, |k| a[m][k] * b[k][n]))
        }
    });
    let (m, n, kk) = (var(&k, "m"), var(&k, "n"), var(&k, "k"));
    assert_eq!(k.var(kk).kind, VarKind::Reduce);
    assert_eq!(k.var(kk).dim, dim(&k, "K"));
    assert_eq!(k.vars.len(), 3);
    assert_eq!(k.free_vars(k.root), vec![m, n]);
    assert_eq!(k.types[k.root.0], Type::Num(DType::F16));
    assert_eq!(k.flops(), 4096 * 4096 * 4096 * 2);
}

#[test]
fn matmul_transposed() {
    let k = ok(quote! {
        #[tuned_kernel(shape(M = 512, N = 1024, K = 256))]
        fn linear(x: Tensor<bf16, (M, K)>, w: Tensor<bf16, (N, K)>) -> Tensor<bf16, (M, N)> {
            compute(|m, n| sum(K, |k| x[m][k] * w[n][k]))
        }
    });
    let loads: Vec<&Expr> = k
        .exprs
        .iter()
        .filter(|e| matches!(e, Expr::Load { .. }))
        .collect();
    assert_eq!(
        *loads[1],
        Expr::Load {
            tensor: ktune_core::ir::TensorId(1),
            index: vec![var(&k, "n"), var(&k, "k")]
        }
    );
}

#[test]
fn batched_matmul() {
    let k = ok(quote! {
        #[tuned_kernel(shape(B = 16, M = 128, N = 64, K = 256))]
        fn bmm(a: Tensor<f32, (B, M, K)>, b: Tensor<f32, (B, K, N)>) -> Tensor<f32, (B, M, N)> {
            compute(|bb, m, n| sum(K, |k| a[bb][m][k] * b[bb][k][n]))
        }
    });
    assert_eq!(k.output.dims.len(), 3);
    assert_eq!(
        k.output_vars(),
        vec![var(&k, "bb"), var(&k, "m"), var(&k, "n")]
    );
    assert_eq!(k.len_of(&k.output), 16 * 128 * 64);
}

#[test]
fn matmul_bias_gelu() {
    let k = ok(quote! {
        #[tuned_kernel(shape(M = 4096, N = 11008, K = 4096))]
        pub fn ffn_up(x: Tensor<bf16, (M, K)>, w: Tensor<bf16, (K, N)>, b: Tensor<f32, (N,)>) -> Tensor<bf16, (M, N)> {
            compute(|m, n| gelu(sum(K, |k| x[m][k] * w[k][n]) + b[n]))
        }
    });
    assert!(matches!(root(&k), Expr::Unary(UnaryOp::GeluTanh, _)));
    let reduce = k
        .exprs
        .iter()
        .position(|e| matches!(e, Expr::Reduce { .. }))
        .expect("a reduction");
    assert_eq!(k.types[reduce], Type::Num(DType::Bf16));
    assert_eq!(k.types[k.root.0], Type::Num(DType::F32));
}

#[test]
fn matmul_bias_residual() {
    let k = ok(quote! {
        #[tuned_kernel(shape(M = 2048, N = 4096, K = 11008))]
        pub fn ffn_down(
            h: Tensor<bf16, (M, K)>,
            w: Tensor<bf16, (K, N)>,
            bias: Tensor<bf16, (N,)>,
            residual: Tensor<bf16, (M, N)>,
        ) -> Tensor<bf16, (M, N)> {
            compute(|m, n| {
                let acc = sum(K, |k| h[m][k] * w[k][n]);
                acc + bias[n] + residual[m][n]
            })
        }
    });
    assert_eq!(k.lets[0].deps, vec![var(&k, "m"), var(&k, "n")]);
    assert_eq!(k.types[k.root.0], Type::Num(DType::Bf16));
}

#[test]
fn causal_mask_with_select() {
    let k = ok(quote! {
        #[tuned_kernel(shape(R = 2048, C = 2048))]
        fn causal_mask(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
            compute(|r, c| select(c > r, -1e9, x[r][c]))
        }
    });
    let (r, c) = (var(&k, "r"), var(&k, "c"));
    let Expr::Select(cond, then, otherwise) = root(&k).clone() else {
        panic!("expected select, got {:?}", root(&k));
    };
    let Expr::Compare(CmpOp::Gt, a, b) = k.expr(cond).clone() else {
        panic!("expected a comparison");
    };
    assert_eq!(*k.expr(a), Expr::Index(c));
    assert_eq!(*k.expr(b), Expr::Index(r));
    assert_eq!(k.types[cond.0], Type::Bool);
    // `-1e9` is one constant, not a negation.
    assert_eq!(*k.expr(then), Expr::Const(-1e9));
    assert!(matches!(k.expr(otherwise), Expr::Load { .. }));
    assert_eq!(count(&k, |e| matches!(e, Expr::Unary(UnaryOp::Neg, _))), 0);
}

#[test]
fn casts_and_mixed_precision() {
    let k = ok(quote! {
        #[tuned_kernel(shape(N = 4096))]
        fn mixed(a: Tensor<f16, (N,)>, b: Tensor<bf16, (N,)>) -> Tensor<bf16, (N,)> {
            compute(|n| ((a[n] as f32) + b[n]) as bf16)
        }
    });
    let Expr::Cast(DType::Bf16, inner) = root(&k).clone() else {
        panic!("expected a cast to bf16, got {:?}", root(&k));
    };
    assert_eq!(k.types[k.root.0], Type::Num(DType::Bf16));
    assert_eq!(k.types[inner.0], Type::Num(DType::F32));
    assert_eq!(count(&k, |e| matches!(e, Expr::Cast(DType::F32, _))), 1);
}

#[test]
fn operators_functions_and_negation() {
    let k = ok(quote! {
        #[tuned_kernel(shape(N = 64))]
        fn everything(x: Tensor<f32, (N,)>, y: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {
            compute(|n| {
                let a = -x[n];
                let keep = (x[n] >= 0.0 && y[n] != 1.0) || !(x[n] < y[n]);
                let b = min(abs(a), max(y[n], 2)) - -(3.0);
                let c = sigmoid(a) + silu(b) + relu(a) + tanh(b) + erf(a) + gelu_erf(b) + log(sqrt(b)) + exp(a);
                select(keep, c / b * n, -(n as f32)) - 1e-3
            })
        }
    });
    assert_eq!(k.lets.len(), 4);
    assert_eq!(k.types[k.lets[1].value.0], Type::Bool);
    assert_eq!(count(&k, |e| matches!(e, Expr::Unary(UnaryOp::Neg, _))), 2);
    assert!(k.exprs.contains(&Expr::Const(-3.0)));
    assert!(k.exprs.contains(&Expr::Const(2.0)));
    assert_eq!(count(&k, |e| matches!(e, Expr::Not(_))), 1);
    assert_eq!(count(&k, |e| matches!(e, Expr::Logic(..))), 2);
    assert_eq!(
        count(&k, |e| matches!(e, Expr::Binary(BinaryOp::Min, ..))),
        1
    );
    assert_eq!(
        count(&k, |e| matches!(e, Expr::Binary(BinaryOp::Max, ..))),
        1
    );
    for l in &k.lets {
        assert_eq!(l.deps, vec![var(&k, "n")]);
    }
}

#[test]
fn nested_reductions_and_let_deps() {
    let k = ok(quote! {
        #[tuned_kernel(shape(B = 8, R = 64, C = 32))]
        fn nested(x: Tensor<f32, (B, R, C)>, s: Tensor<f32, (C,)>) -> Tensor<f32, (B, C)> {
            compute(|b, c| {
                let total = sum(R, |r| max(C, |j| x[b][r][j]));
                let scale = s[c] * 2.0;
                let both = total * scale;
                let constant = 3.0;
                both + constant + sum(R, |r| x[b][r][c])
            })
        }
    });
    let (b, c) = (var(&k, "b"), var(&k, "c"));
    assert_eq!(k.lets[0].deps, vec![b]);
    assert_eq!(k.lets[1].deps, vec![c]);
    assert_eq!(k.lets[2].deps, vec![b, c]);
    assert_eq!(k.lets[3].deps, Vec::<VarId>::new());
    assert_eq!(vars_named(&k, "r").len(), 2);
}

#[test]
fn path_attribute_and_single_dimension_forms() {
    let k = ok(quote! {
        #[doc = "scales"]
        #[ktune::tuned_kernel(shape(N = 7))]
        pub fn scale(x: Tensor<f32, N>) -> Tensor<f32, N> {
            compute(|n| { x[n] * 2.0 })
        }
    });
    assert_eq!(k.output.dims, vec![DimId(0)]);
    assert_eq!(k.dims[0].size, 7);
}

#[test]
fn unused_dimensions_inputs_and_broadcast_outputs() {
    let k = ok(quote! {
        #[tuned_kernel(shape(R = 4, C = 5, Z = 9))]
        fn broadcast(v: Tensor<f32, (C,)>, unused: Tensor<f16, (Z,)>) -> Tensor<f32, (R, C)> {
            compute(|r, c| v[c])
        }
    });
    assert_eq!(k.inputs.len(), 2);
    assert_eq!(k.dims.len(), 3);
    assert_eq!(k.free_vars(k.root), vec![var(&k, "c")]);
    let unread = |k: &Kernel| {
        k.unread_inputs()
            .iter()
            .map(|t| t.name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(unread(&k), ["unused"]);
    // Read through a let, or not at all.
    let k = ok(quote! {
        #[tuned_kernel(shape(R = 4, C = 5))]
        fn norm(x: Tensor<f32, (R, C)>, w: Tensor<f32, (C,)>, b: Tensor<f32, (C,)>) -> Tensor<f32, (R, C)> {
            compute(|r, c| {
                let s = sum(C, |j| x[r][j] * w[j]);
                x[r][c] / s
            })
        }
    });
    assert_eq!(unread(&k), ["b"]);
}

/// A dimension's size fits in u32; a tensor has at most 2^31 - 1
/// elements (`tensors_beyond_2_31_elements_are_rejected_at_their_types`).
#[test]
fn maximum_sizes() {
    let k = ok(quote! {
        #[tuned_kernel(shape(N = 2147483647, M = 1, Z = 4294967295))]
        fn big(x: Tensor<f32, (N,)>) -> Tensor<f32, (M, N)> {
            compute(|m, n| x[n])
        }
    });
    assert_eq!(k.dims[0].size, i32::MAX as u32);
    assert_eq!(k.dims[2].size, u32::MAX);
}

// ---------------------------------------------------------------------------
// Diagnostics: attribute
// ---------------------------------------------------------------------------

const SHAPE_EXAMPLE: &str = "`#[tuned_kernel(shape(M = 1024, N = 1024))]`";

#[test]
fn missing_shape() {
    let expected =
        format!("missing `shape(...)`: declare the kernel's dimensions, e.g. {SHAPE_EXAMPLE}");
    // Types using the undeclared dimensions are not reported again.
    error(
        quote! {
            #[tuned_kernel]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| x[n]) }
        },
        &expected,
    );
    error(
        quote! {
            #[tuned_kernel()]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| x[n]) }
        },
        &expected,
    );
}

#[test]
fn unknown_argument() {
    error(
        quote! {
            #[tuned_kernel(shape(N = 4), targets = "sm_90")]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| x[n]) }
        },
        "unknown argument `targets`; expected `shape(...)` or `allow_tf32`",
    );
    error(
        quote! {
            #[tuned_kernel(foo(bar), shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| x[n]) }
        },
        "unknown argument `foo`; expected `shape(...)` or `allow_tf32`",
    );
}

#[test]
fn bad_sizes_are_all_reported() {
    let errors = errors(quote! {
        #[tuned_kernel(shape(A = 0, B = 5000000000, C = -3, D = X, E = 2.5))]
        fn f(x: Tensor<f32, (A, B, C, D, E)>) -> Tensor<f32, (A, B, C, D, E)> { compute(|a, b, c, d, e| x[a][b][c][d][e]) }
    });
    assert_eq!(
        errors,
        vec![
            "size of `A` must be positive, found 0",
            "size of `B` does not fit in u32; the largest size is 4294967295",
            "size of `C` must be positive, found a negative number",
            "size of `D` must be an integer literal, like `D = 1024`",
            "size of `E` must be an integer literal, like `E = 1024`",
        ]
    );
}

/// Lowerings index tensors with 32-bit signed offsets: a tensor of more
/// elements is the kernel's error, named at its type, before anything
/// (a heuristic's arithmetic, a space's values) sizes itself by it.
#[test]
fn tensors_beyond_2_31_elements_are_rejected_at_their_types() {
    let square = errors(quote! {
        #[tuned_kernel(shape(R = 65536, C = 65536))]
        fn f(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> { compute(|r, c| x[r][c] + 1.0) }
    });
    let limit = "; ktune supports at most 2^31 - 1 (2147483647) elements a tensor";
    assert_eq!(
        square,
        vec![
            format!("tensor `x` has 4294967296 elements (R × C = 65536 × 65536){limit}"),
            format!("the output has 4294967296 elements (R × C = 65536 × 65536){limit}"),
        ]
    );
    let matmul = errors(quote! {
        #[tuned_kernel(shape(A = 4294967295, B = 4294967295, K = 4294967295))]
        fn f(x: Tensor<f32, (A, K)>, y: Tensor<f32, (K, B)>) -> Tensor<f32, (A, B)> {
            compute(|a, b| sum(K, |k| x[a][k] * y[k][b]))
        }
    });
    assert_eq!(matmul.len(), 3, "{matmul:?}");
    assert!(
        matmul[0].starts_with(
            "tensor `x` has 18446744065119617025 elements (A × K = 4294967295 × 4294967295)"
        ),
        "{matmul:?}"
    );
    assert!(matmul[1].starts_with("tensor `y` has"), "{matmul:?}");
    assert!(matmul[2].starts_with("the output has"), "{matmul:?}");
    let cube = errors(quote! {
        #[tuned_kernel(shape(A = 2, B = 4294967295, C = 4294967295))]
        fn f(x: Tensor<f32, (A, B, C)>) -> Tensor<f32, (A,)> { compute(|a| sum(B, |b| sum(C, |c| x[a][b][c]))) }
    });
    assert_eq!(
        cube,
        vec![format!(
            "tensor `x` has more than 2^64 elements (A × B × C = 2 × 4294967295 × 4294967295){limit}"
        )]
    );
}

#[test]
fn duplicate_dimension() {
    error(
        quote! {
            #[tuned_kernel(shape(N = 4, N = 8))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| x[n]) }
        },
        "dimension `N` is declared twice in `shape(...)`; remove one",
    );
}

#[test]
fn shape_forms() {
    error(
        quote! {
            #[tuned_kernel(shape())]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| x[n]) }
        },
        "`shape(...)` declares no dimensions; add at least one, e.g. `shape(N = 1024)`",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| x[n]) }
        },
        "dimension `N` needs a size: write `N = 1024`",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4), shape(M = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| x[n]) }
        },
        "duplicate argument `shape`; declare all dimensions in one `shape(...)`",
    );
    error(
        quote! {
            #[tuned_kernel(shape = 4)]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| x[n]) }
        },
        "expected `shape(NAME = SIZE, ...)`, e.g. `shape(M = 1024, N = 1024)`",
    );
    error(
        quote! {
            #[tuned_kernel(shape(a::b = 4, N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| x[n]) }
        },
        "dimension names must be plain identifiers, like `M`",
    );
}

#[test]
fn allow_tf32_is_a_flag() {
    let mm = |attr: TokenStream| {
        quote! {
            #[tuned_kernel(#attr)]
            fn mm(a: Tensor<f32, (M, K)>, b: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
                compute(|m, n| sum(K, |k| a[m][k] * b[k][n]))
            }
        }
    };
    assert!(!ok(mm(quote!(shape(M = 4, N = 4, K = 4)))).allow_tf32);
    assert!(ok(mm(quote!(shape(M = 4, N = 4, K = 4), allow_tf32))).allow_tf32);
    assert!(ok(mm(quote!(allow_tf32, shape(M = 4, N = 4, K = 4)))).allow_tf32);
    error(
        mm(quote!(shape(M = 4, N = 4, K = 4), allow_tf32, allow_tf32)),
        "duplicate argument `allow_tf32`; remove one",
    );
    let no_value = "`allow_tf32` is a flag and takes no value: write `allow_tf32`, or leave it out";
    error(
        mm(quote!(shape(M = 4, N = 4, K = 4), allow_tf32 = true)),
        no_value,
    );
    error(
        mm(quote!(shape(M = 4, N = 4, K = 4), allow_tf32(yes))),
        no_value,
    );
    error(
        mm(quote!(allow_tf32)),
        &format!("missing `shape(...)`: declare the kernel's dimensions, e.g. {SHAPE_EXAMPLE}"),
    );
}

// ---------------------------------------------------------------------------
// Diagnostics: signature
// ---------------------------------------------------------------------------

#[test]
fn function_modifiers() {
    let errors = errors(quote! {
        #[tuned_kernel(shape(N = 4))]
        const async unsafe extern "C" fn f<T>(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> where T: Copy { compute(|n| x[n]) }
    });
    assert_eq!(
        errors,
        vec![
            "`const fn` is not supported in a ktune kernel; remove `const`",
            "`async fn` is not supported in a ktune kernel; remove `async`",
            "`unsafe fn` is not supported in a ktune kernel; remove `unsafe`",
            "`extern` functions are not supported in a ktune kernel; remove the `extern` ABI",
            "generic parameters are not supported in a ktune kernel; declare dimensions in `shape(...)` instead",
            "`where` clauses are not supported in a ktune kernel; remove it",
        ]
    );
}

#[test]
fn self_parameter() {
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(&self, x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| x[n]) }
        },
        "`self` parameters are not supported in a ktune kernel; a kernel is a free function over tensors: remove `self`",
    );
}

#[test]
fn parameter_patterns() {
    // The unnamed parameter is reported once; its uses are not "unknown".
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f((x, y): Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| x[n] + y[n]) }
        },
        "patterns are not supported in a ktune kernel; parameters must be plain names, like `x: Tensor<f32, (N,)>`",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(mut x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| x[n]) }
        },
        "`mut` is not supported: kernel values are immutable; parameters must be plain names, like `x: Tensor<f32, (N,)>`",
    );
}

#[test]
fn parameter_types() {
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>, alpha: f32) -> Tensor<f32, (N,)> { compute(|n| x[n] * alpha) }
        },
        "parameter `alpha` has type `f32`, but kernel parameters and results are tensors: `Tensor<DTYPE, (D1, D2, ...)>` with DTYPE f32, f16 or bf16",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: &Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| x[n]) }
        },
        "parameter `x`: tensors are passed by value; remove the `&`",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32>) -> Tensor<f32, (N,)> { compute(|n| x[n]) }
        },
        "`Tensor` takes an element type and a shape, like `Tensor<f32, (M, N)>`",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Vec<f32> { compute(|n| x[n]) }
        },
        "the return type must be a tensor: `Tensor<DTYPE, (D1, D2, ...)>` with DTYPE f32, f16 or bf16",
    );
    // Two independent mistakes, two errors.
    let shapes = "tensor shapes are written with dimension names from `shape(...)`, like `(M, N)`";
    assert_eq!(
        errors(quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, 4>) -> Tensor<f32, (N, &str)> { compute(|n| x[n]) }
        }),
        vec![shapes, shapes]
    );
}

#[test]
fn unsupported_dtype() {
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f64, (N,)>) -> Tensor<f32, (N,)> { compute(|n| x[n]) }
        },
        "unsupported element type `f64`; expected f32, f16 or bf16",
    );
}

#[test]
fn rank_zero() {
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, ()>) -> Tensor<f32, (N,)> { compute(|n| x[n]) }
        },
        "rank-0 tensors are not supported; give the tensor at least one dimension, like `Tensor<f32, (N,)>`",
    );
}

#[test]
fn unknown_dimension_in_type() {
    error(
        quote! {
            #[tuned_kernel(shape(M = 4, N = 4, K = 4))]
            fn f(x: Tensor<f32, (M, Q)>) -> Tensor<f32, (M,)> { compute(|m| x[m][m]) }
        },
        "unknown dimension `Q`; dimensions declared in `shape(...)`: M, N, K",
    );
    error(
        quote! {
            #[tuned_kernel(shape(Rows = 4))]
            fn f(x: Tensor<f32, (Rowz,)>) -> Tensor<f32, (Rows,)> { compute(|r| x[r]) }
        },
        "unknown dimension `Rowz` (did you mean `Rows`?); dimensions declared in `shape(...)`: Rows",
    );
}

#[test]
fn missing_return_type() {
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) { compute(|n| x[n]) }
        },
        "a ktune kernel returns its output tensor: add `-> Tensor<DTYPE, (D1, D2, ...)>` (DTYPE f32, f16 or bf16)",
    );
}

#[test]
fn no_inputs() {
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f() -> Tensor<f32, (N,)> { compute(|n| 1.0) }
        },
        "a ktune kernel needs at least one input tensor, like `x: Tensor<f32, (N,)>`",
    );
}

#[test]
fn reserved_output_name() {
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(out: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| out[n]) }
        },
        "`out` names the kernel's output; rename this parameter",
    );
}

#[test]
fn other_attributes() {
    error(
        quote! {
            #[inline]
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| x[n]) }
        },
        "attribute `#[inline]` is not supported on a ktune kernel; only doc comments are allowed",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            #[ktune::tuned_kernel(shape(N = 8))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| x[n]) }
        },
        "duplicate `#[tuned_kernel]` attribute; a kernel has exactly one",
    );
}

#[test]
fn not_a_function() {
    let result =
        catch_unwind(|| parse_kernel(quote!(shape(N = 4)), quote! { struct S; }).map_err(messages))
            .expect("no panic");
    assert_eq!(
        result.unwrap_err(),
        vec![
            "`#[tuned_kernel]` applies to a function: `fn name(x: Tensor<...>) -> Tensor<...> { compute(...) }`"
        ]
    );
}

// ---------------------------------------------------------------------------
// Diagnostics: body shape
// ---------------------------------------------------------------------------

#[test]
fn body_must_be_compute() {
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { x[0] }
        },
        "a kernel body is `compute(|i, j, ...| value)`, with one index variable per output dimension",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { map(|n| x[n]) }
        },
        "expected `compute(|i, j, ...| value)`, with one index variable per output dimension",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { }
        },
        "the kernel body is empty; write `compute(|i, j, ...| value)`, with one index variable per output dimension",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| x[n]); }
        },
        "remove this `;`: the kernel body is the `compute(...)` expression",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {
                let two = 2.0;
                compute(|n| x[n] * 2.0)
            }
        },
        "a kernel body holds only the `compute(...)` expression; put `let` bindings inside the `compute` closure",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(x) }
        },
        "`compute` takes one closure: `compute(|i, j, ...| value)`, with one index variable per output dimension",
    );
}

#[test]
fn compute_index_count() {
    error(
        quote! {
            #[tuned_kernel(shape(R = 4, C = 8))]
            fn f(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> { compute(|r| x[r][c]) }
        },
        "`compute` binds 1 index variable but the output `Tensor<f32, (R, C)>` has 2 dimensions; write `compute(|r, c| ...)`",
    );
    error(
        quote! {
            #[tuned_kernel(shape(R = 4, C = 8))]
            fn f(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R,)> { compute(|i, j| x[i][j]) }
        },
        "`compute` binds 2 index variables but the output `Tensor<f32, (R,)>` has 1 dimension; write `compute(|i| ...)`",
    );
}

#[test]
fn closure_body_shape() {
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| { let y = x[n]; }) }
        },
        "the `compute` closure must end with the output value, an expression after the last `let`",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(move |n| x[n]) }
        },
        "`move` closures are not supported in a ktune kernel; remove `move`",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n: usize| x[n]) }
        },
        "index variables take no type annotation; write just the name, like `|i| ...`",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| { x[n]; x[n] }) }
        },
        "only `let` bindings may come before the output value; bind this with `let name = ...;` or remove it",
    );
}

#[test]
fn let_forms() {
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| { let y: f32 = x[n]; y }) }
        },
        "type annotations on `let` are not supported; the type is inferred: write `let s = ...;`",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| { let mut y = x[n]; y }) }
        },
        "`mut` is not supported: kernel values are immutable; `let` must bind a plain name, like `let s = ...;`",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| { let y; y }) }
        },
        "`let` needs a value: write `let y = ...;`",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| { let (a, b) = (x[n], x[n]); a + b }) }
        },
        "patterns are not supported in a ktune kernel; `let` must bind a plain name, like `let s = ...;`",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4, K = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| sum(K, |k| { let t = x[n]; t })) }
        },
        "`let` inside a nested block is not supported in a ktune kernel; `let` bindings go at the top of the `compute` closure; inline this value instead",
    );
}

// ---------------------------------------------------------------------------
// Diagnostics: names
// ---------------------------------------------------------------------------

#[test]
fn unknown_name() {
    error(
        quote! {
            #[tuned_kernel(shape(M = 4, N = 4, K = 4))]
            fn f(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>, b: Tensor<f32, (N,)>) -> Tensor<f32, (M, N)> {
                compute(|m, n| b[n] + y)
            }
        },
        "unknown name `y`; expected a tensor, index variable or let binding — tensors here: x, w, b; index variables: m, n",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {
                compute(|n| { let scale = 2.0; x[n] * scael })
            }
        },
        "unknown name `scael` (did you mean `scale`?); expected a tensor, index variable or let binding — tensors here: x; index variables: n; let bindings: scale",
    );
}

#[test]
fn one_mistake_one_error() {
    // The unknown name poisons `a`, whose three uses say nothing more.
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {
                compute(|n| { let a = y * 2.0; exp(a) + a * a })
            }
        },
        "unknown name `y`; expected a tensor, index variable or let binding — tensors here: x; index variables: n",
    );
    // A rejected parameter type: its loads are not reported.
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f64, (N,)>, y: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {
                compute(|n| x[n] + y[n] * x[n])
            }
        },
        "unsupported element type `f64`; expected f32, f16 or bf16",
    );
    // Independent mistakes are all reported.
    let errors = errors(quote! {
        #[tuned_kernel(shape(N = 4))]
        fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {
            compute(|n| foo(x[n]) + y + x[n][n] + if true { 1.0 } else { 2.0 })
        }
    });
    assert_eq!(errors.len(), 4, "{errors:#?}");
}

#[test]
fn duplicate_names() {
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|x| x) }
        },
        "duplicate name `x`: already declared as a tensor parameter; pick another name",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(N: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| N[n]) }
        },
        "duplicate name `N`: already declared as a dimension in `shape(...)`; pick another name",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| { let s = x[n]; let s = s * 2.0; s }) }
        },
        "duplicate name `s`: already declared as a `let` binding; pick another name",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4, K = 4))]
            fn f(x: Tensor<f32, (N, K)>) -> Tensor<f32, (N,)> { compute(|n| sum(K, |n| x[n][n])) }
        },
        "duplicate name `n`: already declared as an index variable; pick another name",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>, x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| x[n]) }
        },
        "duplicate name `x`: already declared as a tensor parameter; pick another name",
    );
}

#[test]
fn unknown_function() {
    let catalogue = "exp, log, sqrt, rsqrt, tanh, abs, relu, sigmoid, silu, gelu, gelu_erf, erf, min(a, b), max(a, b), select(cond, a, b); reductions: sum(D, |v| ...), max(D, |v| ...), min(D, |v| ...), mean(D, |v| ...)";
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| sigmod(x[n])) }
        },
        &format!(
            "unknown function `sigmod` (did you mean `sigmoid`?); supported functions: {catalogue}"
        ),
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| softplus(x[n])) }
        },
        &format!("unknown function `softplus`; supported functions: {catalogue}"),
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| x(n)) }
        },
        "`x` is a tensor, not a function; index it, like `x[n]`",
    );
}

#[test]
fn wrong_index_count() {
    error(
        quote! {
            #[tuned_kernel(shape(R = 4, C = 8))]
            fn f(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R,)> { compute(|r| x[r]) }
        },
        "`x` has 2 dimensions (R, C) but is indexed with 1; write `x[r][c]`",
    );
}

#[test]
fn wrong_index_dimension() {
    error(
        quote! {
            #[tuned_kernel(shape(M = 4, N = 4, K = 4))]
            fn f(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
                compute(|m, n| sum(K, |k| x[m][n] * w[k][n]))
            }
        },
        "index `n` ranges over N but dimension 1 of `x` is K; index it with a variable over K, such as `k`",
    );
    error(
        quote! {
            #[tuned_kernel(shape(M = 4, N = 4))]
            fn f(x: Tensor<f32, (M, N)>, y: Tensor<f32, (M,)>) -> Tensor<f32, (M, N)> { compute(|m, n| x[m][n] + y[n]) }
        },
        "index `n` ranges over N but dimension 0 of `y` is M; index it with a variable over M, such as `m`",
    );
    error(
        quote! {
            #[tuned_kernel(shape(M = 4, N = 4))]
            fn f(x: Tensor<f32, (M,)>) -> Tensor<f32, (N,)> { compute(|n| x[n]) }
        },
        "index `n` ranges over N but dimension 0 of `x` is M; index it with a variable over M, like `m` in `sum(M, |m| ...)`",
    );
    // Right indices in the wrong order: one mistake.
    error(
        quote! {
            #[tuned_kernel(shape(M = 4, N = 4, K = 4))]
            fn f(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
                compute(|m, n| sum(K, |k| x[k][m] * w[k][n]))
            }
        },
        "indices of `x` are in the wrong order for its dimensions (M, K); write `x[m][k]`",
    );
    // Variables named after other dimensions than theirs: what each ranges
    // over says why.
    error(
        quote! {
            #[tuned_kernel(shape(R = 4, C = 8))]
            fn t(x: Tensor<f32, (R, C)>) -> Tensor<f32, (C, R)> {
                compute(|r, c| x[r][c])
            }
        },
        "indices of `x` are in the wrong order for its dimensions (R, C): `r` ranges over C, `c` ranges over R; write `x[c][r]`",
    );
}

#[test]
fn index_must_be_a_variable() {
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| x[n + 1]) }
        },
        "only index variables may index a tensor; offsets and index arithmetic are not supported in a ktune kernel",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| x[0]) }
        },
        "only index variables may index a tensor, not constants; a fixed position would need its own input tensor",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4, K = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| x[K]) }
        },
        "`K` is a dimension, not an index variable; index with a variable that ranges over it, like `k` in `sum(K, |k| ...)`",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| { let i = 2.0; x[i] }) }
        },
        "only index variables may index a tensor, and `i` is a `let` binding",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| { let s = x[n]; s[n] }) }
        },
        "`s` is a `let` binding, not a tensor; only tensor parameters can be indexed",
    );
    error(
        quote! {
            #[tuned_kernel(shape(R = 4, C = 4))]
            fn f(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> { compute(|r, c| x[(r, c)]) }
        },
        "only index variables may index a tensor; write one `[...]` per dimension, like `x[i][j]`",
    );
}

#[test]
fn reduction_variable_scope() {
    error(
        quote! {
            #[tuned_kernel(shape(M = 4, K = 4))]
            fn f(x: Tensor<f32, (M, K)>) -> Tensor<f32, (M,)> { compute(|m| sum(K, |k| x[m][k]) + x[m][k]) }
        },
        "unknown index variable `k`; index variables here: m",
    );
}

#[test]
fn reduction_dimension() {
    error(
        quote! {
            #[tuned_kernel(shape(M = 4, K = 4))]
            fn f(x: Tensor<f32, (M, K)>) -> Tensor<f32, (M,)> { compute(|m| sum(Q, |k| x[m][k])) }
        },
        "unknown dimension `Q`; dimensions declared in `shape(...)`: M, K",
    );
    error(
        quote! {
            #[tuned_kernel(shape(M = 4, K = 4))]
            fn f(x: Tensor<f32, (M, K)>) -> Tensor<f32, (M,)> { compute(|m| sum(m, |k| x[m][k])) }
        },
        "`m` is an index variable, not a dimension; `sum` ranges over a dimension declared in `shape(...)`: M, K",
    );
    error(
        quote! {
            #[tuned_kernel(shape(M = 4, K = 4))]
            fn f(x: Tensor<f32, (M, K)>) -> Tensor<f32, (M,)> { compute(|m| sum(4, |k| x[m][k])) }
        },
        "the first argument of `sum` must be a dimension name from `shape(...)`, like `sum(K, |k| ...)`",
    );
    error(
        quote! {
            #[tuned_kernel(shape(M = 4, K = 4))]
            fn f(x: Tensor<f32, (M, K)>) -> Tensor<f32, (M,)> { compute(|m| sum(K, |k, j| x[m][k])) }
        },
        "a reduction's closure binds exactly one index variable, like `sum(K, |k| ...)`",
    );
}

#[test]
fn names_that_are_not_values() {
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| x[n] / N) }
        },
        "dimension `N` cannot be used as a value; bind an index variable over it with `sum(N, |n| ...)`, or average with `mean(N, |n| ...)`",
    );
    error(
        quote! {
            #[tuned_kernel(shape(R = 4, C = 4))]
            fn f(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> { compute(|r, c| x * 2.0) }
        },
        "`x` is a tensor, not a value; read an element by indexing it, like `x[r][c]`",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| exp) }
        },
        "`exp` is a function, not a value; call it, like `exp(...)`",
    );
}

// ---------------------------------------------------------------------------
// Diagnostics: calls
// ---------------------------------------------------------------------------

#[test]
fn call_arity() {
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| exp(x[n], 2.0)) }
        },
        "`exp` takes 1 argument but 2 were given; write `exp(x)`",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| max(x[n])) }
        },
        "`max` takes 2 arguments but 1 was given; write `max(a, b)`, or `max(D, |v| ...)` to reduce over a dimension",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| select(x[n] > 0.0, x[n])) }
        },
        "`select` takes 3 arguments but 2 were given; write `select(cond, a, b)`",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| sum(x[n])) }
        },
        "`sum` is a reduction; write `sum(D, |v| ...)` with `D` a dimension from `shape(...)`",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4, K = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| exp(K, |k| x[n])) }
        },
        "`exp` is not a reduction, so it takes no closure; reductions: sum(D, |v| ...), max(D, |v| ...), min(D, |v| ...), mean(D, |v| ...)",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| compute(|m| x[m])) }
        },
        "`compute` appears once, as the whole kernel body; inside it, loop over a dimension with a reduction like `sum(K, |k| ...)`",
    );
}

// ---------------------------------------------------------------------------
// Diagnostics: types
// ---------------------------------------------------------------------------

#[test]
fn dtype_mismatch() {
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(a: Tensor<f16, (N,)>, b: Tensor<bf16, (N,)>) -> Tensor<f32, (N,)> { compute(|n| a[n] + b[n]) }
        },
        "dtype mismatch: `+` combines f16 with bf16; cast one side with `as f32`",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(a: Tensor<f16, (N,)>, b: Tensor<bf16, (N,)>) -> Tensor<f32, (N,)> { compute(|n| max(a[n], b[n])) }
        },
        "dtype mismatch: `max` combines f16 with bf16; cast one side with `as f32`",
    );
}

#[test]
fn boolean_where_number() {
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| (x[n] > 0.0) * x[n]) }
        },
        "mismatched types: the left operand of `*` must be a number, found a boolean; to turn a condition into a number write `select(cond, 1.0, 0.0)`",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| x[n] > 0.0) }
        },
        "mismatched types: the output value must be a number, found a boolean; to turn a condition into a number write `select(cond, 1.0, 0.0)`",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4, K = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| sum(K, |k| x[n] < 1.0)) }
        },
        "mismatched types: the body of `sum` must be a number, found a boolean; to turn a condition into a number write `select(cond, 1.0, 0.0)`",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| (x[n] < 1.0) as f32) }
        },
        "mismatched types: cannot cast a boolean to `f32`; to turn a condition into a number write `select(cond, 1.0, 0.0)`",
    );
}

#[test]
fn number_where_boolean() {
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| select(x[n], 1.0, 0.0)) }
        },
        "mismatched types: the condition of `select` must be a boolean, found a number (f32); compare it to get a boolean, like `a > 0.0`",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<bf16, (N,)>) -> Tensor<f32, (N,)> { compute(|n| select(x[n] > 0.0 && x[n], 1.0, 0.0)) }
        },
        "mismatched types: the right operand of `&&` must be a boolean, found a number (bf16); compare it to get a boolean, like `a > 0.0`",
    );
}

#[test]
fn bad_casts_and_literals() {
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| x[n] as i32) }
        },
        "cannot cast to `i32`; kernel values can be cast to f32, f16 or bf16",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| x[n] * 2u32) }
        },
        "literal suffix `u32` is not supported; kernel constants are f32: write `2`",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| x[n] * 1e39) }
        },
        "`1e39` is out of range for f32, whose largest finite value is about 3.4e38",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| select(true, x[n], 0.0)) }
        },
        "boolean literals are not supported in a ktune kernel; write a comparison, like `r < c`",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| x[n] * "2") }
        },
        "this literal is not supported in a ktune kernel; kernel values are numbers, like `1.0`",
    );
}

// ---------------------------------------------------------------------------
// Diagnostics: unsupported constructs
// ---------------------------------------------------------------------------

#[test]
fn unsupported_constructs() {
    let cases: Vec<(TokenStream, &str)> = vec![
        (
            quote!(if x[n] > 0.0 { x[n] } else { 0.0 }),
            "`if` is not supported in a ktune kernel; use `select(cond, then_value, else_value)`",
        ),
        (
            quote!(match n {
                _ => x[n],
            }),
            "`match` is not supported in a ktune kernel; use `select(cond, then_value, else_value)`",
        ),
        (
            quote!(x[n].exp()),
            "method calls are not supported in a ktune kernel; write `exp(x[n])`",
        ),
        (
            quote!(x[n].max(0.0)),
            "method calls are not supported in a ktune kernel; write `max(x[n], 0.0)`",
        ),
        (
            quote!(x[n].powf(2.0)),
            "method calls are not supported in a ktune kernel; call a built-in function instead, like `exp(x)`",
        ),
        (
            quote!(relu(|m| x[m])),
            "closures are only supported as the second argument of a reduction, like `sum(K, |k| ...)`",
        ),
        (
            quote!(println!("{}", x[n])),
            "macros are not supported in a ktune kernel; write the value with the kernel language's operators and functions, like `exp(x[i]) * 2.0`",
        ),
        (
            quote!(for i in 0..4 {}),
            "loops are not supported in a ktune kernel; reduce over a dimension with `sum(K, |k| ...)`, `max`, `min` or `mean`",
        ),
        (
            quote!(x[n] % 2.0),
            "the `%` operator is not supported in a ktune kernel",
        ),
        (
            quote!(std::f32::consts::PI * x[n]),
            "paths are not supported in a ktune kernel; write the constant as a literal: `3.1415927`",
        ),
        (
            quote!(f32::exp(x[n])),
            "paths are not supported in a ktune kernel; call built-in functions by name: `exp(...)`",
        ),
        (
            quote!(ktune::foo * x[n]),
            "paths with `::` are not supported in a ktune kernel; refer to tensors, index variables and `let` bindings by their plain name",
        ),
        (
            quote!(x[n].0),
            "field access is not supported in a ktune kernel; kernel values are plain numbers",
        ),
        (
            quote!(&x[n]),
            "references are not supported in a ktune kernel; use the value directly",
        ),
        (
            quote!(0.0..1.0),
            "ranges are not supported in a ktune kernel; a reduction covers a whole dimension: `sum(K, |k| ...)`",
        ),
        (
            quote!(x[0..2]),
            "slicing is not supported in a ktune kernel; only index variables may index a tensor",
        ),
        (
            quote!([x[n], 1.0]),
            "arrays are not supported in a ktune kernel; kernel values are plain numbers; pass data as an input tensor",
        ),
        (
            quote!((x[n], 1.0)),
            "tuples are not supported in a ktune kernel; kernel values are plain numbers; bind each with `let`",
        ),
        (
            quote!(x[n] & 1.0),
            "the bitwise operator `&` is not supported in a ktune kernel; for conditions use `&&` and `||`",
        ),
        (
            quote!(return x[n]),
            "`return` is not supported in a ktune kernel; the last expression of the `compute` closure is the output value",
        ),
        (
            quote!(unsafe { x[n] }),
            "`unsafe` blocks are not supported in a ktune kernel",
        ),
        (
            quote!(*x[n]),
            "dereferencing (`*`) is not supported in a ktune kernel; use the value directly",
        ),
        (
            quote!(x[n]?),
            "the `?` operator is not supported in a ktune kernel",
        ),
        (
            quote!(
                {
                    let a = 1.0;
                    a
                } + x[n]
            ),
            "`let` inside a nested block is not supported in a ktune kernel; `let` bindings go at the top of the `compute` closure; inline this value instead",
        ),
        (
            quote!((|m| 1.0)(n)),
            "only built-in functions can be called, by name, like `exp(x)`",
        ),
    ];
    for (body, expected) in cases {
        error(
            quote! {
                #[tuned_kernel(shape(N = 4))]
                fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| #body) }
            },
            expected,
        );
    }
}

#[test]
fn assignment() {
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| { let a = x[n]; a += 1.0; a }) }
        },
        "only `let` bindings may come before the output value; bind this with `let name = ...;` or remove it",
    );
    error(
        quote! {
            #[tuned_kernel(shape(N = 4))]
            fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| { let a = x[n]; a = 1.0 }) }
        },
        "assignment is not supported in a ktune kernel; bind a new name with `let name = ...;`",
    );
}

#[test]
fn deep_nesting_is_rejected_not_overflowed() {
    // Long flat sums are fine...
    let terms = (0..250).map(|_| quote!(x[n]));
    ok(quote! {
        #[tuned_kernel(shape(N = 4))]
        fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| #(#terms)+*) }
    });
    // ...but nesting is bounded, so no input exhausts the stack.
    let mut body = quote!(x[n]);
    for _ in 0..400 {
        body = quote!((#body + 1.0));
    }
    let errors = errors(quote! {
        #[tuned_kernel(shape(N = 4))]
        fn f(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> { compute(|n| #body) }
    });
    assert_eq!(
        errors,
        vec!["expression nests more than 256 levels deep; split it with `let` bindings"]
    );
}

// ---------------------------------------------------------------------------
// Robustness: arbitrary and mangled input never panics
// ---------------------------------------------------------------------------

fn seeds() -> Vec<TokenStream> {
    vec![
        quote! {
            #[tuned_kernel(shape(M = 4096, N = 11008, K = 4096))]
            pub fn ffn_up(x: Tensor<bf16, (M, K)>, w: Tensor<bf16, (K, N)>, b: Tensor<f32, (N,)>) -> Tensor<bf16, (M, N)> {
                compute(|m, n| gelu(sum(K, |k| x[m][k] * w[k][n]) + b[n]))
            }
        },
        quote! {
            #[tuned_kernel(shape(R = 8192, C = 1000))]
            pub fn softmax(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
                compute(|r, c| {
                    let mx = max(C, |j| x[r][j]);
                    let s = sum(C, |j| exp(x[r][j] - mx));
                    exp(x[r][c] - mx) / s
                })
            }
        },
        quote! {
            #[tuned_kernel(shape(T = 2048, D = 4096))]
            pub fn layernorm(x: Tensor<bf16, (T, D)>, g: Tensor<f32, (D,)>, b: Tensor<f32, D>) -> Tensor<bf16, (T, D)> {
                compute(|t, d| {
                    let mu = mean(D, |i| x[t][i]);
                    let var = mean(D, |i| (x[t][i] - mu) * (x[t][i] - mu));
                    (x[t][d] - mu) * rsqrt(var + 1e-5) * g[d] + b[d]
                })
            }
        },
        quote! {
            #[tuned_kernel(shape(R = 2048, C = 2048))]
            fn mask(x: Tensor<f16, (R, C)>, y: Tensor<bf16, (C,)>) -> Tensor<f32, (R, C)> {
                compute(|r, c| select(c > r && !(r == c) || x[r][c] >= 0.0, -1e9, (x[r][c] as f32) + y[c] as f32))
            }
        },
    ]
}

/// Tokens to splice in: the language's own vocabulary plus some noise.
fn vocabulary(rng: &mut StdRng) -> TokenTree {
    const IDENTS: [&str; 22] = [
        "x", "y", "r", "c", "k", "K", "C", "N", "sum", "max", "exp", "select", "compute", "let",
        "as", "f32", "bf16", "Tensor", "if", "fn", "self", "out",
    ];
    const PUNCTS: [char; 12] = ['+', '-', '*', '/', '<', '>', '=', '!', '|', ',', ';', '&'];
    match rng.random_range(0..6) {
        0 | 1 => TokenTree::Ident(Ident::new(
            IDENTS[rng.random_range(0..IDENTS.len())],
            Span::call_site(),
        )),
        2 => TokenTree::Punct(Punct::new(
            PUNCTS[rng.random_range(0..PUNCTS.len())],
            Spacing::Alone,
        )),
        3 => TokenTree::Literal(match rng.random_range(0..4) {
            0 => Literal::f32_unsuffixed(1.5),
            1 => Literal::u32_unsuffixed(0),
            2 => Literal::string("s"),
            _ => Literal::u64_unsuffixed(u64::MAX),
        }),
        4 => TokenTree::Group(Group::new(Delimiter::Parenthesis, TokenStream::new())),
        _ => TokenTree::Group(Group::new(Delimiter::Bracket, quote!(k))),
    }
}

/// Randomly deletes, duplicates, replaces or inserts tokens, at every depth.
fn mangle(tokens: TokenStream, rng: &mut StdRng, rate: f64) -> TokenStream {
    let mut out = Vec::new();
    for tree in tokens {
        if rng.random_bool(rate) {
            match rng.random_range(0..4) {
                0 => continue,
                1 => {
                    out.push(tree.clone());
                    out.push(tree);
                    continue;
                }
                2 => {
                    out.push(vocabulary(rng));
                    continue;
                }
                _ => out.push(vocabulary(rng)),
            }
        }
        match tree {
            TokenTree::Group(group) => {
                let mut mangled = Group::new(group.delimiter(), mangle(group.stream(), rng, rate));
                mangled.set_span(group.span());
                out.push(TokenTree::Group(mangled));
            }
            other => out.push(other),
        }
    }
    if rng.random_bool(rate / 2.0) && !out.is_empty() {
        let keep = rng.random_range(0..out.len());
        out.truncate(keep);
    }
    out.into_iter().collect()
}

/// Splits a seed into the attribute's argument tokens and the bare item.
fn split(seed: &TokenStream) -> (TokenStream, TokenStream) {
    let mut func: syn::ItemFn = syn::parse2(seed.clone()).expect("seed is a fn");
    let attr = func.attrs.remove(0);
    let args = match attr.meta {
        syn::Meta::List(list) => list.tokens,
        _ => TokenStream::new(),
    };
    (args, func.to_token_stream())
}

#[test]
fn mangled_token_streams_never_panic() {
    let mut rng = StdRng::seed_from_u64(0x006b_7475_6e65);
    let seeds: Vec<(TokenStream, TokenStream)> = seeds().iter().map(split).collect();
    let (mut accepted, mut rejected) = (0, 0);
    for round in 0..1200 {
        let (args, item) = &seeds[round % seeds.len()];
        let rate = [0.01, 0.03, 0.08, 0.2][round % 4];
        let args = if round % 5 == 0 {
            mangle(args.clone(), &mut rng, 0.3)
        } else {
            args.clone()
        };
        let item = mangle(item.clone(), &mut rng, rate);
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            parse_kernel(args.clone(), item.clone())
        }));
        match outcome {
            Ok(Ok(kernel)) => {
                validate(&kernel);
                accepted += 1;
            }
            Ok(Err(error)) => {
                for message in messages(error) {
                    assert!(!message.is_empty());
                    assert!(!message.ends_with('.'), "{message}");
                }
                rejected += 1;
            }
            Err(_) => panic!("front-end panicked on:\n#[tuned_kernel({args})]\n{item}"),
        }
    }
    // Both outcomes were exercised, so the mangling reached the checker.
    assert!(accepted > 10, "accepted {accepted}");
    assert!(rejected > 100, "rejected {rejected}");
}

/// A random expression over a small vocabulary, valid or not.
fn random_expr(rng: &mut StdRng, depth: u32) -> String {
    const ATOMS: [&str; 16] = [
        "x[r][c]", "x[r][j]", "x[c][r]", "y[c]", "y[j]", "z[r]", "r", "c", "1.5", "-2", "mx", "C",
        "x", "q", "true", "x[r]",
    ];
    if depth == 0 || rng.random_bool(0.25) {
        return ATOMS[rng.random_range(0..ATOMS.len())].to_owned();
    }
    let a = random_expr(rng, depth - 1);
    let b = random_expr(rng, depth - 1);
    match rng.random_range(0..16) {
        0 => format!("{a} + {b}"),
        1 => format!("({a}) * ({b})"),
        2 => format!("({a}) < ({b})"),
        3 => format!("({a}) && ({b})"),
        4 => format!("!({a})"),
        5 => format!("-({a})"),
        6 => format!("exp({a})"),
        7 => format!("max({a}, {b})"),
        8 => format!("select({a}, {b}, {})", random_expr(rng, depth - 1)),
        9 => format!("sum(C, |j| {a})"),
        10 => format!("max(R, |j| {a})"),
        11 => format!("(({a}) as bf16)"),
        12 => format!("(({a}) as f16)"),
        13 => format!("mean(C, |c| {a})"),
        14 => format!("sigmod({a})"),
        _ => format!("min({a}, {b})"),
    }
}

#[test]
fn random_kernels_never_panic_and_accepted_ones_are_well_formed() {
    let mut rng = StdRng::seed_from_u64(42);
    let (mut accepted, mut rejected) = (0, 0);
    for _ in 0..600 {
        let lets: Vec<String> = (0..rng.random_range(0..3))
            .map(|i| {
                let name = ["mx", "s", "t"][i];
                format!("let {name} = {};", random_expr(&mut rng, 3))
            })
            .collect();
        let source = format!(
            "#[tuned_kernel(shape(R = 16, C = 32))]
             fn random(x: Tensor<f32, (R, C)>, y: Tensor<f16, (C,)>, z: Tensor<bf16, (R,)>) -> Tensor<f32, (R, C)> {{
                 compute(|r, c| {{ {} {} }})
             }}",
            lets.join(" "),
            random_expr(&mut rng, 4)
        );
        let tokens: TokenStream = source.parse().expect("generated source tokenizes");
        match catch_unwind(AssertUnwindSafe(|| run(tokens))) {
            Ok(Ok(_)) => accepted += 1,
            Ok(Err(errors)) => {
                assert!(!errors.is_empty());
                rejected += 1;
            }
            Err(_) => panic!("front-end panicked on:\n{source}"),
        }
    }
    assert!(accepted > 20, "accepted {accepted}");
    assert!(rejected > 20, "rejected {rejected}");
}

#[test]
fn message_style() {
    // Every diagnostic in this file's negative tests follows rustc's style;
    // spot-check the style rules on a kernel with many mistakes at once.
    let errors = errors(quote! {
        #[tuned_kernel(shape(N = 0, M = 4), bogus)]
        async fn f<T>(x: Tensor<f64, (N,)>, y: Tensor<f32, (Q,)>, z: f32) -> Tensor<f32, (N, M)> {
            compute(|n| {
                let a: f32 = y[n];
                if a > 0.0 { a } else { b }
            })
        }
    });
    assert!(errors.len() >= 7, "{errors:#?}");
    for message in &errors {
        let first = message.chars().next().expect("non-empty");
        assert!(!first.is_uppercase(), "{message}");
        assert!(!message.ends_with('.'), "{message}");
    }
}
