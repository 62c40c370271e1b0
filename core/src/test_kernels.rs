//! Kernels, and a schedule edit, shared by this crate's unit tests.

use quote::quote;

use crate::ir::Kernel;
use crate::schedule::Schedule;
use crate::syntax::parse_kernel;

/// The rows point `s` with its `cache` and `tree` replaced, one
/// reduction a pass (`online = 0`) and no cluster; any other point as it
/// is.
pub(crate) fn rows_with(s: Schedule, cache: u32, tree: u32) -> Schedule {
    match s {
        Schedule::Rows {
            threads_per_row,
            rows_per_block,
            vector,
            ..
        } => Schedule::Rows {
            threads_per_row,
            rows_per_block,
            vector,
            cache,
            tree,
            online: 0,
            cluster: 1,
        },
        other => other,
    }
}

/// Row softmax over an `r × c` input.
pub(crate) fn softmax(r: u32, c: u32) -> Kernel {
    parse_kernel(
        quote!(shape(R = #r, C = #c)),
        quote! {
            fn softmax(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
                compute(|r, c| {
                    let mx = max(C, |j| x[r][j]);
                    exp(x[r][c] - mx) / sum(C, |j| exp(x[r][j] - mx))
                })
            }
        },
    )
    .expect("valid kernel")
}

/// `a · b` with `a: (M, K)`, `b: (K, N)`, all f32.
pub(crate) fn matmul(m: u32, n: u32, k: u32) -> Kernel {
    parse_kernel(
        quote!(shape(M = #m, N = #n, K = #k)),
        quote! {
            fn mm(a: Tensor<f32, (M, K)>, b: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
                compute(|m, n| sum(K, |k| a[m][k] * b[k][n]))
            }
        },
    )
    .expect("valid kernel")
}

/// A bf16 matrix product with a bias and GELU (the benchmark's fused
/// case), and the same product alone.
pub(crate) fn matmul_bias_gelu(m: u32, n: u32, k: u32) -> [Kernel; 2] {
    let shape = quote!(shape(M = #m, N = #n, K = #k));
    let fused = quote! {
        fn mm_bias_gelu(a: Tensor<bf16, (M, K)>, w: Tensor<bf16, (K, N)>, bias: Tensor<bf16, (N,)>)
            -> Tensor<bf16, (M, N)>
        {
            compute(|m, n| gelu(sum(K, |k| a[m][k] * w[k][n]) + bias[n]))
        }
    };
    let plain = quote! {
        fn mm(a: Tensor<bf16, (M, K)>, w: Tensor<bf16, (K, N)>) -> Tensor<bf16, (M, N)> {
            compute(|m, n| sum(K, |k| a[m][k] * w[k][n]))
        }
    };
    [fused, plain].map(|source| parse_kernel(shape.clone(), source).expect("valid kernel"))
}

/// Layer normalization over an `t × d` input, with scale and shift (the
/// benchmark's layernorm).
pub(crate) fn layernorm(t: u32, d: u32) -> Kernel {
    parse_kernel(
        quote!(shape(T = #t, D = #d)),
        quote! {
            fn layernorm(x: Tensor<f32, (T, D)>, gamma: Tensor<f32, (D,)>, beta: Tensor<f32, (D,)>) -> Tensor<f32, (T, D)> {
                compute(|t, d| {
                    let mu = mean(D, |i| x[t][i]);
                    let var = mean(D, |i| (x[t][i] - mu) * (x[t][i] - mu));
                    (x[t][d] - mu) * rsqrt(var + 1e-5) * gamma[d] + beta[d]
                })
            }
        },
    )
    .expect("valid kernel")
}
