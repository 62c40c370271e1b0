//! An example library that ships ktune kernels together with their tuning
//! database, `tuning/ktune.json`, as a library published with measured
//! schedules would.
//!
//! The committed database is a fixture, not a measurement (every record's
//! driver and CUDA version read `fixture`): it holds one record, for
//! `softmax` on the `NVIDIA H200`, whose schedule is not the heuristic
//! default, so that the build embeds it as the H200's variant. The example
//! application `examples/app` overrides that record with its own.

use ktune::prelude::*;

/// Softmax over rows of 1000.
#[tuned_kernel(shape(R = 128, C = 1000))]
pub fn softmax(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
    compute(|r, c| {
        let mx = max(C, |j| x[r][j]);
        let s = sum(C, |j| exp(x[r][j] - mx));
        exp(x[r][c] - mx) / s
    })
}

/// `2x + y`, elementwise.
#[tuned_kernel(shape(N = 65536))]
pub fn axpy(x: Tensor<f32, (N,)>, y: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {
    compute(|n| 2.0 * x[n] + y[n])
}
