use ktune::prelude::*;

#[tuned_kernel(shape(R = 64, C = 100))]
pub fn row_scale(x: Tensor<f32, (R, K)>) -> Tensor<f32, (R, C)> {
    compute(|r, c| x[r][c] * 2.0)
}

fn main() {}
