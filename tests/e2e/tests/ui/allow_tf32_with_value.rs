use ktune::prelude::*;

#[tuned_kernel(shape(M = 64, N = 64, K = 64), allow_tf32 = true)]
pub fn mm(a: Tensor<f32, (M, K)>, b: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
    compute(|m, n| sum(K, |k| a[m][k] * b[k][n]))
}

fn main() {}
