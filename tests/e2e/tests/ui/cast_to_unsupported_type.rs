use ktune::prelude::*;

#[tuned_kernel(shape(N = 1024))]
pub fn widen(x: Tensor<f32, N>) -> Tensor<f32, N> {
    compute(|i| x[i] as f64)
}

fn main() {}
