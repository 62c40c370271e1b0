use ktune::prelude::*;

#[tuned_kernel(shape(N = 1024))]
pub fn shift(x: Tensor<f32, N>) -> Tensor<f32, N> {
    compute(|i| x[i + 1] - x[i])
}

fn main() {}
