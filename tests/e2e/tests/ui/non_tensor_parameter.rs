use ktune::prelude::*;

#[tuned_kernel(shape(N = 1024))]
pub fn scale(x: Tensor<f32, N>, alpha: f32) -> Tensor<f32, N> {
    compute(|i| x[i] * alpha)
}

fn main() {}
