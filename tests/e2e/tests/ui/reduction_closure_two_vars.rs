use ktune::prelude::*;

#[tuned_kernel(shape(N = 8, R = 64, C = 100))]
pub fn total(x: Tensor<f32, (N, R, C)>) -> Tensor<f32, (N,)> {
    compute(|n| sum(R, |r, c| x[n][r][c]))
}

fn main() {}
