use ktune::prelude::*;

#[tuned_kernel(shape(N = 1024))]
pub fn scale(x: Tensor<f32, N>) -> Tensor<f32, N> {
    compute(|i| square!(x[i] * 2.0))
}

fn main() {}
