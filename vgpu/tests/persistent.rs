//! Persistent warpgroup blocks (`persistent = 1`) on the virtual GPU: each
//! block walks the grid's tiles `ctaid.x`, `ctaid.x + nctaid.x`, …,
//! filling the ring for its next tile before the current one's epilogue.
//! Checked against the CPU reference with edges along `M`, `N` and `K`,
//! rings of 2 to 4 slots (a held slot included), a grouped walk, a batch and a
//! fused epilogue, and launched with any number of blocks from one to a
//! block per tile; and the points it cannot run rejected by their
//! constraint.

mod common;

use common::{batched_bias_gelu, gemm};
use ktune_core::lower::{Constraint, LowerError, lower, validate};
use ktune_core::schedule::{MmaTiles, Schedule};
use ktune_core::target::SmVersion;
use ktune_vgpu::verify::Reference;

fn tiles((block_m, block_n, block_k): (u32, u32, u32), warp_n: u32, stages: u32) -> MmaTiles {
    MmaTiles {
        block_m,
        block_n,
        block_k,
        warp_m: 64,
        warp_n,
        stages,
        group_m: 1,
        split_k: 1,
        min_blocks: 0,
        swizzle: 1,
        prefetch: 0,
        wgmma: 1,
        tail_split: 1,
        persistent: 1,
        producer: 0,
        tma: 0,
        cluster_m: 1,
    }
}

/// Verifies `t` against `reference` (the virtual GPU launches a
/// persistent kernel with 3 blocks) and checks that it ran as few blocks
/// over `grid` tiles.
fn check(reference: &Reference, t: MmaTiles, grid: u32) {
    let schedule = Schedule::Mma(t);
    let what = format!("{t:?}");
    let lowered = lower(reference.kernel(), &schedule, SmVersion::Sm90)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(lowered.launch.persistent, "{what}");
    assert_eq!(lowered.launch.grid, [grid, 1, 1], "{what}");
    assert_eq!(lowered.launch.grid_for(132), [132, 1, 1], "{what}");
    let verified = reference
        .check(&schedule, SmVersion::Sm90)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(verified.stats.blocks, 3, "{what}");
    assert!(verified.stats.mma_flops > 0, "{what}");
}

#[test]
fn persistent_blocks_compute_every_tile() {
    // 12 × 12 tiles of 64 × 16, the last row and column partial; K's 6
    // tiles of 16, the last partial.
    for (a_t, b_t) in [(false, false), (true, true)] {
        let reference = Reference::new(&gemm("bf16", a_t, b_t, (760, 184, 88)), 7);
        for stages in 2..=4 {
            check(&reference, tiles((64, 16, 16), 16, stages), 144);
        }
    }
    // Two warpgroups a block, K shallower than the ring (2 tiles of 64 in
    // 4 slots); rows walked in groups of 4.
    let reference = Reference::new(&gemm("f16", false, true, (1000, 280, 72)), 7);
    check(&reference, tiles((128, 16, 64), 16, 4), 8 * 18);
    let grouped = MmaTiles {
        group_m: 4,
        ..tiles((64, 32, 32), 32, 3)
    };
    check(&reference, grouped, 16 * 9);
}

#[test]
fn a_fused_epilogue_over_a_batch_runs_persistent() {
    let kernel = batched_bias_gelu();
    // 4 batch elements of 4 × 9 tiles of 64 × 16, the last row and column
    // partial; K's 3 tiles of 32, the last partial.
    check(
        &Reference::new(&kernel, 7),
        tiles((64, 16, 32), 16, 3),
        4 * 4 * 9,
    );
}

#[test]
fn any_number_of_blocks_computes_the_whole_output() {
    let kernel = gemm("bf16", false, true, (760, 184, 88));
    let t = tiles((64, 16, 16), 16, 3);
    common::with_any_number_of_blocks(&kernel, t, 144);
}

#[test]
fn points_that_cannot_loop_over_tiles_are_rejected_by_their_constraint() {
    let kernel = gemm("bf16", false, false, (760, 184, 88));
    let good = tiles((64, 16, 16), 16, 2);
    assert!(validate(&kernel, &Schedule::Mma(good), SmVersion::Sm90).is_ok());
    let rejected = |kernel: &ktune_core::ir::Kernel, t: MmaTiles, want: Constraint| match validate(
        kernel,
        &Schedule::Mma(t),
        SmVersion::Sm90,
    ) {
        Err(LowerError::Invalid {
            constraint, reason, ..
        }) if constraint == want => reason,
        other => panic!("{t:?}: {other:?}, expected a {want:?} rejection"),
    };
    let reason = rejected(
        &kernel,
        MmaTiles {
            persistent: 2,
            ..good
        },
        Constraint::Range,
    );
    assert!(reason.contains("persistent = 2"), "{reason}");
    let reason = rejected(&kernel, MmaTiles { stages: 1, ..good }, Constraint::Range);
    assert!(reason.contains("stages = 1"), "{reason}");
    let warps = MmaTiles {
        wgmma: 0,
        warp_m: 16,
        ..good
    };
    let reason = rejected(&kernel, warps, Constraint::Range);
    assert!(reason.contains("wgmma = 1"), "{reason}");
    for split in [
        MmaTiles { split_k: 2, ..good },
        MmaTiles {
            tail_split: 2,
            ..good
        },
    ] {
        let reason = rejected(&kernel, split, Constraint::Split);
        assert!(reason.contains("whole K"), "{reason}");
    }
    // 2 × 12 tiles: fewer than the 132 SMs.
    let small = gemm("bf16", false, false, (128, 184, 88));
    let reason = rejected(&small, good, Constraint::Tiling);
    assert!(reason.contains("132 SMs"), "{reason}");
}
