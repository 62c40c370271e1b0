//! A crate whose committed tuning database, `tuning/ktune.json`, is a test
//! fixture (every record's driver is `fixture`; none is a real
//! measurement). It holds, for `softmax`:
//!
//! - a winner for `NVIDIA H200` (compute capability 9.0) with a schedule
//!   that is not the heuristic default: embedded as the H200's variant;
//! - a record measured on the virtual GPU for `NVIDIA L4`: never embedded;
//! - a record whose checksum is not the kernel's: stale, so the build
//!   warns once (`1 tuning record is stale`) and does not embed it.
//!
//! `tests/select.rs` checks the embedded table and the runtime's dispatch.

use ktune::prelude::*;

/// Softmax over rows of 1025.
#[tuned_kernel(shape(R = 6, C = 1025))]
pub fn softmax(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
    compute(|r, c| {
        let mx = max(C, |j| x[r][j]);
        let s = sum(C, |j| exp(x[r][j] - mx));
        exp(x[r][c] - mx) / s
    })
}
