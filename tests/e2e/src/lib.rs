//! ktune's end-to-end kernel catalogue: one crate with a real `build.rs`
//! whose kernels cover every op class (elementwise and broadcast, row
//! reductions and normalizations, matmuls with fused epilogues), every
//! dtype and the awkward shapes (rows of 1, 7 and 1025 elements, a 1-row
//! and a 3-column matmul, sizes that are multiples of nothing).
//!
//! Shapes are small so that the debug-build CPU reference stays fast; the
//! tests in `tests/` check the references against independent f64
//! formulas (`reference.rs`), the build's incremental behaviour
//! (`rebuild.rs`) and that ptxas assembles every emitted PTX file
//! (`demo_ptx.rs`).

use ktune::KernelInfo;
use ktune::prelude::*;

// ---------------------------------------------------------------------------
// Elementwise and broadcast
// ---------------------------------------------------------------------------

/// `x + b`, the bias broadcast over the rows.
#[tuned_kernel(shape(R = 13, C = 37))]
pub fn bias_add(x: Tensor<f32, (R, C)>, b: Tensor<f32, (C,)>) -> Tensor<f32, (R, C)> {
    compute(|r, c| x[r][c] + b[c])
}

/// `x + b` in f16, the bias broadcast over the rows.
#[tuned_kernel(shape(R = 5, C = 129))]
pub fn bias_add_f16(x: Tensor<f16, (R, C)>, b: Tensor<f16, (C,)>) -> Tensor<f16, (R, C)> {
    compute(|r, c| x[r][c] + b[c])
}

/// `x + b` in bf16, the bias broadcast over the rows.
#[tuned_kernel(shape(R = 7, C = 63))]
pub fn bias_add_bf16(x: Tensor<bf16, (R, C)>, b: Tensor<bf16, (C,)>) -> Tensor<bf16, (R, C)> {
    compute(|r, c| x[r][c] + b[c])
}

/// A scaled residual connection: `0.7·x + r`.
#[tuned_kernel(shape(N = 1000))]
pub fn scaled_residual(x: Tensor<f32, (N,)>, r: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {
    compute(|n| 0.7 * x[n] + r[n])
}

/// A scaled residual connection in bf16: `0.5·x + r`.
#[tuned_kernel(shape(N = 1023))]
pub fn scaled_residual_bf16(x: Tensor<bf16, (N,)>, r: Tensor<bf16, (N,)>) -> Tensor<bf16, (N,)> {
    compute(|n| x[n] * 0.5 + r[n])
}

/// `silu(x) = x·sigmoid(x)`.
#[tuned_kernel(shape(N = 1025))]
pub fn silu_f32(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {
    compute(|n| silu(x[n]))
}

/// `sigmoid(x) = 1 / (1 + e⁻ˣ)`.
#[tuned_kernel(shape(N = 1025))]
pub fn sigmoid_f32(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {
    compute(|n| sigmoid(x[n]))
}

/// `tanh(x)`.
#[tuned_kernel(shape(N = 1025))]
pub fn tanh_f32(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {
    compute(|n| tanh(x[n]))
}

/// The error function.
#[tuned_kernel(shape(N = 1025))]
pub fn erf_f32(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {
    compute(|n| erf(x[n]))
}

/// GELU, exact form: `0.5·x·(1 + erf(x/√2))`.
#[tuned_kernel(shape(N = 1025))]
pub fn gelu_erf_f32(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {
    compute(|n| gelu_erf(x[n]))
}

/// The natural logarithm (of positive inputs).
#[tuned_kernel(shape(N = 1025))]
pub fn log_f32(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {
    compute(|n| log(x[n]))
}

/// The square root (of positive inputs).
#[tuned_kernel(shape(N = 1025))]
pub fn sqrt_f32(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {
    compute(|n| sqrt(x[n]))
}

/// `|x|`.
#[tuned_kernel(shape(N = 1025))]
pub fn abs_f32(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {
    compute(|n| abs(x[n]))
}

/// `max(x, 0)`.
#[tuned_kernel(shape(N = 1025))]
pub fn relu_f32(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {
    compute(|n| relu(x[n]))
}

/// The elementwise minimum of two tensors.
#[tuned_kernel(shape(N = 1025))]
pub fn min_f32(x: Tensor<f32, (N,)>, y: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {
    compute(|n| min(x[n], y[n]))
}

/// The elementwise maximum of two tensors.
#[tuned_kernel(shape(N = 1025))]
pub fn max_f32(x: Tensor<f32, (N,)>, y: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {
    compute(|n| max(x[n], y[n]))
}

/// `silu` in f16, a 2-D tensor with rows of 7.
#[tuned_kernel(shape(R = 9, C = 7))]
pub fn silu_f16(x: Tensor<f16, (R, C)>) -> Tensor<f16, (R, C)> {
    compute(|r, c| silu(x[r][c]))
}

/// `gelu_erf` in bf16.
#[tuned_kernel(shape(N = 777))]
pub fn gelu_erf_bf16(x: Tensor<bf16, (N,)>) -> Tensor<bf16, (N,)> {
    compute(|n| gelu_erf(x[n]))
}

/// Rounds f32 values to f16 and back: the output holds exactly the values
/// an f16 tensor would.
#[tuned_kernel(shape(N = 1001))]
pub fn round_to_f16(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {
    compute(|n| (x[n] as f16) as f32)
}

/// Mixed precision: an f16 and a bf16 tensor added in f32, rounded to bf16.
#[tuned_kernel(shape(N = 515))]
pub fn mixed_add(a: Tensor<f16, (N,)>, b: Tensor<bf16, (N,)>) -> Tensor<bf16, (N,)> {
    compute(|n| ((a[n] as f32) + b[n]) as bf16)
}

// ---------------------------------------------------------------------------
// Row reductions and normalizations
// ---------------------------------------------------------------------------

/// The sum of each row of 1025.
#[tuned_kernel(shape(R = 9, C = 1025))]
pub fn row_sum(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R,)> {
    compute(|r| sum(C, |c| x[r][c]))
}

/// The maximum of each row of 7, in f16.
#[tuned_kernel(shape(R = 31, C = 7))]
pub fn row_max(x: Tensor<f16, (R, C)>) -> Tensor<f16, (R,)> {
    compute(|r| max(C, |c| x[r][c]))
}

/// The mean of each row of one element (the element itself), bf16 in, f32 out.
#[tuned_kernel(shape(R = 17, C = 1))]
pub fn row_mean(x: Tensor<bf16, (R, C)>) -> Tensor<f32, (R,)> {
    compute(|r| mean(C, |c| x[r][c]))
}

/// The mean of each row of 1025.
#[tuned_kernel(shape(R = 3, C = 1025))]
pub fn row_mean_1025(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R,)> {
    compute(|r| mean(C, |c| x[r][c]))
}

/// Softmax over rows of 1025.
#[tuned_kernel(shape(R = 6, C = 1025))]
pub fn softmax(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
    compute(|r, c| {
        let mx = max(C, |j| x[r][j]);
        let s = sum(C, |j| exp(x[r][j] - mx));
        exp(x[r][c] - mx) / s
    })
}

/// Softmax over rows of 7, in f16.
#[tuned_kernel(shape(R = 13, C = 7))]
pub fn softmax_f16(x: Tensor<f16, (R, C)>) -> Tensor<f16, (R, C)> {
    compute(|r, c| {
        let mx = max(C, |j| x[r][j]);
        let s = sum(C, |j| exp(x[r][j] - mx));
        exp(x[r][c] - mx) / s
    })
}

/// Softmax over rows of 129, in bf16.
#[tuned_kernel(shape(R = 5, C = 129))]
pub fn softmax_bf16(x: Tensor<bf16, (R, C)>) -> Tensor<bf16, (R, C)> {
    compute(|r, c| {
        let mx = max(C, |j| x[r][j]);
        let s = sum(C, |j| exp(x[r][j] - mx));
        exp(x[r][c] - mx) / s
    })
}

/// Softmax over rows of one element: every output is 1.
#[tuned_kernel(shape(R = 4, C = 1))]
pub fn softmax_single(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
    compute(|r, c| {
        let mx = max(C, |j| x[r][j]);
        let s = sum(C, |j| exp(x[r][j] - mx));
        exp(x[r][c] - mx) / s
    })
}

/// Causal attention softmax: query `r` sees keys `0..=r`; masked entries
/// are 0, selected on the index variables.
#[tuned_kernel(shape(R = 19, C = 19))]
pub fn causal_softmax(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
    compute(|r, c| {
        let mx = max(C, |j| select(j > r, -1e30, x[r][j]));
        let s = sum(C, |j| select(j > r, 0.0, exp(x[r][j] - mx)));
        select(c > r, 0.0, exp(x[r][c] - mx) / s)
    })
}

/// Layer normalization over rows of 1025, with scale and shift.
#[tuned_kernel(shape(T = 5, D = 1025))]
pub fn layernorm(
    x: Tensor<f32, (T, D)>,
    gamma: Tensor<f32, (D,)>,
    beta: Tensor<f32, (D,)>,
) -> Tensor<f32, (T, D)> {
    compute(|t, d| {
        let mu = mean(D, |i| x[t][i]);
        let var = mean(D, |i| (x[t][i] - mu) * (x[t][i] - mu));
        (x[t][d] - mu) * rsqrt(var + 1e-5) * gamma[d] + beta[d]
    })
}

/// Layer normalization of bf16 activations with f32 parameters, bf16 result.
#[tuned_kernel(shape(T = 9, D = 37))]
pub fn layernorm_bf16(
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

/// Layer normalization over rows of 7, all f16.
#[tuned_kernel(shape(T = 11, D = 7))]
pub fn layernorm_f16(
    x: Tensor<f16, (T, D)>,
    gamma: Tensor<f16, (D,)>,
    beta: Tensor<f16, (D,)>,
) -> Tensor<f16, (T, D)> {
    compute(|t, d| {
        let mu = mean(D, |i| x[t][i]);
        let var = mean(D, |i| (x[t][i] - mu) * (x[t][i] - mu));
        (x[t][d] - mu) * rsqrt(var + 1e-5) * gamma[d] + beta[d]
    })
}

/// RMS normalization over rows of 129.
#[tuned_kernel(shape(T = 11, D = 129))]
pub fn rmsnorm(x: Tensor<f32, (T, D)>, w: Tensor<f32, (D,)>) -> Tensor<f32, (T, D)> {
    compute(|t, d| {
        let ms = mean(D, |i| x[t][i] * x[t][i]);
        x[t][d] * rsqrt(ms + 1e-6) * w[d]
    })
}

/// RMS normalization over rows of one element, in f16.
#[tuned_kernel(shape(T = 8, D = 1))]
pub fn rmsnorm_single(x: Tensor<f16, (T, D)>, w: Tensor<f16, (D,)>) -> Tensor<f16, (T, D)> {
    compute(|t, d| {
        let ms = mean(D, |i| x[t][i] * x[t][i]);
        x[t][d] * rsqrt(ms + 1e-6) * w[d]
    })
}

// ---------------------------------------------------------------------------
// Contractions
// ---------------------------------------------------------------------------

/// `A·B`, sizes that are multiples of nothing.
#[tuned_kernel(shape(M = 37, N = 41, K = 43))]
pub fn matmul(a: Tensor<f32, (M, K)>, b: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
    compute(|m, n| sum(K, |k| a[m][k] * b[k][n]))
}

/// `A·B` with one row: a vector-matrix product with a long reduction.
#[tuned_kernel(shape(M = 1, N = 7, K = 1025))]
pub fn matmul_row(a: Tensor<f32, (M, K)>, b: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
    compute(|m, n| sum(K, |k| a[m][k] * b[k][n]))
}

/// `A·B`, tall and skinny.
#[tuned_kernel(shape(M = 513, N = 3, K = 5))]
pub fn matmul_tall(a: Tensor<f32, (M, K)>, b: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
    compute(|m, n| sum(K, |k| a[m][k] * b[k][n]))
}

/// `X·Wᵀ`, the weight stored as (N, K) like a linear layer's.
#[tuned_kernel(shape(M = 29, N = 31, K = 33))]
pub fn linear(x: Tensor<f32, (M, K)>, w: Tensor<f32, (N, K)>) -> Tensor<f32, (M, N)> {
    compute(|m, n| sum(K, |k| x[m][k] * w[n][k]))
}

/// Batched `A·B`: (B, M, K) × (B, K, N).
#[tuned_kernel(shape(B = 3, M = 17, N = 23, K = 19))]
pub fn bmm(a: Tensor<f32, (B, M, K)>, b: Tensor<f32, (B, K, N)>) -> Tensor<f32, (B, M, N)> {
    compute(|bb, m, n| sum(K, |k| a[bb][m][k] * b[bb][k][n]))
}

/// `A·B`, all f16.
#[tuned_kernel(shape(M = 37, N = 41, K = 43))]
pub fn matmul_f16(a: Tensor<f16, (M, K)>, b: Tensor<f16, (K, N)>) -> Tensor<f16, (M, N)> {
    compute(|m, n| sum(K, |k| a[m][k] * b[k][n]))
}

/// `X·Wᵀ`, all bf16.
#[tuned_kernel(shape(M = 33, N = 17, K = 65))]
pub fn linear_bf16(x: Tensor<bf16, (M, K)>, w: Tensor<bf16, (N, K)>) -> Tensor<bf16, (M, N)> {
    compute(|m, n| sum(K, |k| x[m][k] * w[n][k]))
}

/// An MLP's first layer: `gelu(x·w + b)`, bf16 operands, f32 bias and result.
#[tuned_kernel(shape(M = 33, N = 47, K = 65))]
pub fn matmul_bias_gelu(
    x: Tensor<bf16, (M, K)>,
    w: Tensor<bf16, (K, N)>,
    b: Tensor<f32, (N,)>,
) -> Tensor<f32, (M, N)> {
    compute(|m, n| gelu(sum(K, |k| x[m][k] * w[k][n]) + b[n]))
}

/// An MLP's second layer with the residual connection: `h·w + b + x`.
#[tuned_kernel(shape(M = 19, N = 25, K = 71))]
pub fn matmul_bias_residual(
    h: Tensor<f32, (M, K)>,
    w: Tensor<f32, (K, N)>,
    b: Tensor<f32, (N,)>,
    x: Tensor<f32, (M, N)>,
) -> Tensor<f32, (M, N)> {
    compute(|m, n| {
        let acc = sum(K, |k| h[m][k] * w[k][n]);
        acc + b[n] + x[m][n]
    })
}

/// Every kernel of the catalogue, in source order.
pub static CATALOGUE: &[&KernelInfo] = &[
    &bias_add::KERNEL,
    &bias_add_f16::KERNEL,
    &bias_add_bf16::KERNEL,
    &scaled_residual::KERNEL,
    &scaled_residual_bf16::KERNEL,
    &silu_f32::KERNEL,
    &sigmoid_f32::KERNEL,
    &tanh_f32::KERNEL,
    &erf_f32::KERNEL,
    &gelu_erf_f32::KERNEL,
    &log_f32::KERNEL,
    &sqrt_f32::KERNEL,
    &abs_f32::KERNEL,
    &relu_f32::KERNEL,
    &min_f32::KERNEL,
    &max_f32::KERNEL,
    &silu_f16::KERNEL,
    &gelu_erf_bf16::KERNEL,
    &round_to_f16::KERNEL,
    &mixed_add::KERNEL,
    &row_sum::KERNEL,
    &row_max::KERNEL,
    &row_mean::KERNEL,
    &row_mean_1025::KERNEL,
    &softmax::KERNEL,
    &softmax_f16::KERNEL,
    &softmax_bf16::KERNEL,
    &softmax_single::KERNEL,
    &causal_softmax::KERNEL,
    &layernorm::KERNEL,
    &layernorm_bf16::KERNEL,
    &layernorm_f16::KERNEL,
    &rmsnorm::KERNEL,
    &rmsnorm_single::KERNEL,
    &matmul::KERNEL,
    &matmul_row::KERNEL,
    &matmul_tall::KERNEL,
    &linear::KERNEL,
    &bmm::KERNEL,
    &matmul_f16::KERNEL,
    &linear_bf16::KERNEL,
    &matmul_bias_gelu::KERNEL,
    &matmul_bias_residual::KERNEL,
];
