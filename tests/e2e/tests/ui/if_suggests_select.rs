use ktune::prelude::*;

#[tuned_kernel(shape(N = 1024))]
pub fn relu(x: Tensor<f32, N>) -> Tensor<f32, N> {
    compute(|i| if x[i] > 0.0 { x[i] } else { 0.0 })
}

fn main() {}
