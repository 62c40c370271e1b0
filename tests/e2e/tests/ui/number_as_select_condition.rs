use ktune::prelude::*;

#[tuned_kernel(shape(N = 1024))]
pub fn gate(x: Tensor<f32, N>, mask: Tensor<f32, N>) -> Tensor<f32, N> {
    compute(|i| select(mask[i], x[i], 0.0))
}

fn main() {}
