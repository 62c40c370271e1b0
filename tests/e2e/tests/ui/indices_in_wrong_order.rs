use ktune::prelude::*;

#[tuned_kernel(shape(M = 128, N = 128, K = 64))]
pub fn matmul(a: Tensor<f32, (M, K)>, b: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
    compute(|m, n| sum(K, |k| a[k][m] * b[k][n]))
}

fn main() {}
