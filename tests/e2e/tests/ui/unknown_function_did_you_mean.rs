use ktune::prelude::*;

#[tuned_kernel(shape(N = 1024))]
pub fn activate(x: Tensor<f32, N>) -> Tensor<f32, N> {
    compute(|i| sigmod(x[i]))
}

fn main() {}
