use ktune::prelude::*;

#[tuned_kernel(shape(R = 64, C = 100))]
pub fn scale(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
    compute(|r| x[r][c] * 2.0)
}

fn main() {}
