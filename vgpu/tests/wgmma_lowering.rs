//! The tensor-core lowering on Hopper's warpgroup instructions
//! (`wgmma = 1`) on the virtual GPU: every operand layout (A contiguous
//! along `k` or along `m`, B along `k` or along `n`), 16-bit dtypes, rows
//! of 32, 64 and 128 bytes, tiles contiguous along `m` or `n` of one to
//! four 128-byte panels, one to four warpgroups, one to four stages, `K`
//! whole or split two or four ways, on shapes with edges in every
//! dimension, against the CPU reference; and the schedules `wgmma` cannot
//! run rejected by their constraint.

mod common;

use common::gemm;
use ktune_core::lower::{Constraint, LowerError, validate};
use ktune_core::schedule::{MmaTiles, Schedule};
use ktune_core::syntax::parse_kernel;
use ktune_core::target::SmVersion;
use ktune_vgpu::verify::verify;
use quote::quote;

fn tiles(
    (block_m, block_n, block_k): (u32, u32, u32),
    (warp_m, warp_n): (u32, u32),
    stages: u32,
    split_k: u32,
) -> MmaTiles {
    MmaTiles {
        block_m,
        block_n,
        block_k,
        warp_m,
        warp_n,
        stages,
        group_m: 1,
        split_k,
        min_blocks: 0,
        swizzle: 1,
        prefetch: 0,
        wgmma: 1,
        tail_split: 1,
        persistent: 0,
        producer: 0,
        tma: 0,
        cluster_m: 1,
    }
}

/// Block tile, warpgroup tile, stages and slices of `K`.
type Point = ((u32, u32, u32), (u32, u32), u32, u32);

#[test]
fn warpgroup_tiles_compute_the_product() {
    let target = SmVersion::Sm90;
    let mut checked = 0;
    for dtype in ["bf16", "f16"] {
        for (a_t, b_t) in [(false, false), (false, true), (true, true), (true, false)] {
            // Edges along M (a partial block row), N and K (a partial tile).
            let kernel = gemm(dtype, a_t, b_t, (136, 72, 152));
            // Split two ways, K's 5 tiles of 32 are slices of 3 and 2;
            // four ways, its 10 tiles of 16 are 3, 3, 3 and 1.
            let points: &[Point] = &[
                ((64, 64, 64), (64, 64), 2, 1),
                ((128, 64, 32), (64, 64), 3, 1),
                ((64, 128, 16), (64, 64), 1, 1),
                ((128, 128, 64), (128, 64), 2, 1),
                ((64, 256, 64), (64, 256), 2, 1),
                ((128, 32, 32), (64, 32), 3, 1),
                ((128, 128, 32), (64, 128), 2, 1),
                ((64, 16, 16), (64, 16), 1, 1),
                ((64, 64, 16), (64, 64), 4, 1),
                ((64, 64, 32), (64, 64), 3, 2),
                ((128, 64, 16), (64, 64), 2, 4),
            ];
            for &(block, warp, stages, split_k) in points {
                let t = tiles(block, warp, stages, split_k);
                let schedule = Schedule::Mma(t);
                let what = format!("{dtype} A^T {a_t} B^T {b_t} {t:?}");
                let verified = verify(&kernel, &schedule, target, 11)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                assert!(verified.stats.mma_flops > 0, "{what}");
                assert_eq!(verified.stats.ldmatrix_matrices, 0, "{what}");
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 2 * 4 * 11);
}

#[test]
fn schedules_wgmma_cannot_run_are_rejected_by_their_constraint() {
    let kernel = gemm("bf16", false, false, (128, 128, 128));
    let good = tiles((128, 64, 64), (64, 64), 2, 1);
    assert!(validate(&kernel, &Schedule::Mma(good), SmVersion::Sm90).is_ok());
    let cases = [
        (good, SmVersion::Sm80, Constraint::Range),
        (
            MmaTiles { swizzle: 0, ..good },
            SmVersion::Sm90,
            Constraint::Range,
        ),
        (
            MmaTiles {
                prefetch: 1,
                ..good
            },
            SmVersion::Sm90,
            Constraint::Range,
        ),
        (
            MmaTiles { wgmma: 2, ..good },
            SmVersion::Sm90,
            Constraint::Range,
        ),
        (
            MmaTiles { warp_m: 32, ..good },
            SmVersion::Sm90,
            Constraint::Range,
        ),
        // B is N-major: each warpgroup reads it from a 128-byte panel's
        // start.
        (
            MmaTiles {
                block_n: 128,
                warp_n: 32,
                ..good
            },
            SmVersion::Sm90,
            Constraint::Tiling,
        ),
    ];
    for (t, target, want) in cases {
        match validate(&kernel, &Schedule::Mma(t), target) {
            Err(LowerError::Invalid { constraint, .. }) if constraint == want => {}
            other => panic!("{t:?} on {target}: {other:?}, expected a {want:?} rejection"),
        }
    }
    let f32_kernel = parse_kernel(
        quote!(shape(M = 64, N = 64, K = 64), allow_tf32),
        quote! {
            fn gemm(x: Tensor<f32, (M, K)>, w: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
                compute(|m, n| sum(K, |k| x[m][k] * w[k][n]))
            }
        },
    )
    .expect("valid kernel");
    let tf32 = validate(
        &f32_kernel,
        &Schedule::Mma(MmaTiles {
            block_n: 64,
            swizzle: 0,
            ..good
        }),
        SmVersion::Sm90,
    );
    assert!(
        matches!(
            tf32,
            Err(LowerError::Invalid {
                constraint: Constraint::Operands,
                ..
            })
        ),
        "tf32 on wgmma: {tf32:?}"
    );
}
