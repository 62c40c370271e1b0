use ktune::prelude::*;

#[tuned_kernel(shape(R = 64, C = 100))]
pub fn row_mean(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R,)> {
    compute(|r| sum(C, |j| x[r][j]) / C)
}

fn main() {}
