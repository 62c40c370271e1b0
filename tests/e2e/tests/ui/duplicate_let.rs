use ktune::prelude::*;

#[tuned_kernel(shape(N = 1024))]
pub fn affine(x: Tensor<f32, N>) -> Tensor<f32, N> {
    compute(|i| {
        let s = x[i] * 2.0;
        let s = s + 1.0;
        s
    })
}

fn main() {}
