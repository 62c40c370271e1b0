use ktune::prelude::*;

#[tuned_kernel(shape(N = 1024))]
pub fn exponent(x: Tensor<f32, N>) -> Tensor<f32, N> {
    compute(|i| x[i].exp())
}

fn main() {}
