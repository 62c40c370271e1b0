//! The generic lowering, run on the virtual GPU, against the same
//! computation written directly in Rust.

mod common;

use ktune_core::DType;
use ktune_core::SmVersion;
use ktune_core::interp::round;
use ktune_core::lower::{Lowered, lower};
use ktune_core::schedule::Schedule;
use ktune_vgpu::verify::{decode, encode};

fn generic(kernel: &ktune_core::ir::Kernel) -> Lowered {
    lower(kernel, &Schedule::Generic { block: 128 }, SmVersion::Sm80)
        .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn bias_add_matches_rust_in_every_dtype_and_odd_shapes() {
    for dtype in DType::ALL {
        for (rows, cols) in [(1, 1), (7, 13), (33, 64), (5, 300)] {
            let lowered = generic(&common::add_bias(rows, cols, dtype));
            let x: Vec<f32> = common::values((rows * cols) as usize, 1)
                .into_iter()
                .map(|v| round(dtype, v))
                .collect();
            let b: Vec<f32> = common::values(cols as usize, 2)
                .into_iter()
                .map(|v| round(dtype, v))
                .collect();
            let n = (rows * cols) as usize;
            let (out, stats) = ktune_vgpu::run_bytes(
                &lowered.ptx,
                &lowered.launch,
                &[&encode(dtype, &x), &encode(dtype, &b)],
                ktune_vgpu::poisoned(dtype, n),
            )
            .unwrap_or_else(|f| panic!("{dtype} {rows}x{cols}: {f}"));
            assert_eq!(ktune_vgpu::first_poisoned(dtype, &out), None);
            let got = decode(dtype, &out);
            for (i, (got, x)) in got.iter().zip(&x).enumerate() {
                let (r, c) = (i / cols as usize, i % cols as usize);
                let want = round(dtype, x + b[c]);
                assert_eq!(*got, want, "{dtype} {rows}x{cols} [{r}][{c}]");
            }
            assert_eq!(stats.global_store_bytes, n as u64 * u64::from(dtype.size()));
        }
    }
}

#[test]
fn row_sum_matches_a_sequential_rust_sum() {
    for (rows, cols) in [(1, 1), (3, 100), (130, 17)] {
        let lowered = generic(&common::row_sum(rows, cols));
        let x = common::values((rows * cols) as usize, 3);
        let (got, _) = ktune_vgpu::run_f32(&lowered.ptx, &lowered.launch, &[&x], rows as usize)
            .unwrap_or_else(|f| panic!("{rows}x{cols}: {f}"));
        for r in 0..rows as usize {
            // The generic schedule adds in index order, as this does.
            let want = x[r * cols as usize..][..cols as usize]
                .iter()
                .fold(0.0f32, |acc, v| acc + v);
            assert_eq!(got[r], want, "{rows}x{cols} row {r}");
        }
    }
}
