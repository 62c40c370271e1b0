use ktune::prelude::*;

#[tuned_kernel(shape(N = 1024))]
pub fn relu_by_mask(x: Tensor<f32, N>) -> Tensor<f32, N> {
    compute(|i| (x[i] > 0.0) * x[i])
}

fn main() {}
