use ktune::prelude::*;

#[tuned_kernel(shape(N = 1024))]
pub fn total(x: Tensor<f32, N>) -> Tensor<f32, ()> {
    compute(|| sum(N, |i| x[i]))
}

fn main() {}
