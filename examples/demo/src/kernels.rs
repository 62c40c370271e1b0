//! The kernels of one transformer-style block: 197 tokens (a ViT-B/16 image
//! plus its class token), model width 384, MLP width 1536.

use ktune::prelude::*;

/// Layer normalization over the model dimension, rounded to bf16 for the
/// matmul that follows.
#[tuned_kernel(shape(T = 197, D = 384))]
pub fn layernorm(
    x: Tensor<f32, (T, D)>,
    gamma: Tensor<f32, (D,)>,
    beta: Tensor<f32, (D,)>,
) -> Tensor<bf16, (T, D)> {
    compute(|t, d| {
        let mu = mean(D, |j| x[t][j]);
        let var = mean(D, |j| (x[t][j] - mu) * (x[t][j] - mu));
        (x[t][d] - mu) * rsqrt(var + 1e-5) * gamma[d] + beta[d]
    })
}

/// The MLP's first layer: `gelu(h · w1 + b1)`, bf16 operands, f32 result.
#[tuned_kernel(shape(T = 197, D = 384, F = 1536))]
pub fn ffn_up(
    h: Tensor<bf16, (T, D)>,
    w1: Tensor<bf16, (D, F)>,
    b1: Tensor<f32, (F,)>,
) -> Tensor<f32, (T, F)> {
    compute(|t, f| gelu(sum(D, |d| h[t][d] * w1[d][f]) + b1[f]))
}

/// The MLP's second layer with the residual connection: `g · w2 + b2 + x`.
#[tuned_kernel(shape(T = 197, D = 384, F = 1536))]
pub fn ffn_down(
    g: Tensor<f32, (T, F)>,
    w2: Tensor<f32, (F, D)>,
    b2: Tensor<f32, (D,)>,
    x: Tensor<f32, (T, D)>,
) -> Tensor<f32, (T, D)> {
    compute(|t, d| sum(F, |f| g[t][f] * w2[f][d]) + b2[d] + x[t][d])
}

/// Softmax over each token's features.
#[tuned_kernel(shape(T = 197, D = 384))]
pub fn softmax(y: Tensor<f32, (T, D)>) -> Tensor<f32, (T, D)> {
    compute(|t, d| {
        let mx = max(D, |j| y[t][j]);
        let s = sum(D, |j| exp(y[t][j] - mx));
        exp(y[t][d] - mx) / s
    })
}
