use ktune::prelude::*;

#[tuned_kernel(shape(R = 65536, C = 65536))]
pub fn row_sum(x: Tensor<f32, (R, C)>) -> Tensor<f32, R> {
    compute(|r| sum(C, |c| x[r][c]))
}

fn main() {}
