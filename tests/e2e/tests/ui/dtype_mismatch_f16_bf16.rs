use ktune::prelude::*;

#[tuned_kernel(shape(N = 1024))]
pub fn add(a: Tensor<f16, N>, b: Tensor<bf16, N>) -> Tensor<f16, N> {
    compute(|i| a[i] + b[i])
}

fn main() {}
