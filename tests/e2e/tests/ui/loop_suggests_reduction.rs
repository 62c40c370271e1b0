use ktune::prelude::*;

#[tuned_kernel(shape(R = 64, C = 100))]
pub fn row_sum(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R,)> {
    compute(|r| {
        let total = for j in 0..100 { x[r][j] };
        total
    })
}

fn main() {}
