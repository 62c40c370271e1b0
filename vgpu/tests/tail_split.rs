//! The tail split (`tail_split`) on the virtual GPU: a grid whose last wave
//! over the target's SMs is partial computes its first tiles whole and
//! splits the rest along `K`, on `mma.sync` warps and on `wgmma`
//! warpgroups, with edges along `M`, `N` and `K`, against the CPU
//! reference (the blocks run in a shuffled order, so the split tiles'
//! slices arrive in any order); and the points it cannot run rejected by
//! their constraint.

mod common;

use common::gemm;
use ktune_core::lower::{Constraint, LowerError, lower, validate};
use ktune_core::schedule::{MmaTiles, Schedule};
use ktune_core::target::SmVersion;
use ktune_vgpu::verify::verify;

fn tiles(
    (block_m, block_n, block_k): (u32, u32, u32),
    stages: u32,
    wgmma: u32,
    tail_split: u32,
) -> MmaTiles {
    MmaTiles {
        block_m,
        block_n,
        block_k,
        warp_m: block_m,
        warp_n: block_n,
        stages,
        group_m: 1,
        split_k: 1,
        min_blocks: 0,
        swizzle: 1,
        prefetch: 0,
        wgmma,
        tail_split,
        persistent: 0,
        producer: 0,
        tma: 0,
        cluster_m: 1,
    }
}

/// Verifies `t` and checks its grid: the whole tiles, then `tail_split`
/// blocks for each of the last `split` tiles.
fn check(
    kernel: &ktune_core::ir::Kernel,
    t: MmaTiles,
    target: SmVersion,
    (whole, split): (u32, u32),
) {
    let schedule = Schedule::Mma(t);
    let what = format!("{target} {t:?}");
    let lowered = lower(kernel, &schedule, target).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(
        lowered.launch.grid,
        [whole + t.tail_split * split, 1, 1],
        "{what}"
    );
    assert!(lowered.launch.workspace_bytes > 0, "{what}");
    let verified = verify(kernel, &schedule, target, 5).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(verified.stats.mma_flops > 0, "{what}");
}

#[test]
fn the_last_waves_tiles_are_split_and_added_up() {
    // 13 × 11 tiles of 16 × 16 (the last row and column partial): 143, a
    // whole wave and 11 more over sm_90's 132 SMs, 35 more over sm_80's
    // 108. K's 8 tiles of 16 (the last partial) are slices of 4 or of 2.
    let warps = gemm("bf16", false, true, (200, 170, 120));
    for (target, counts) in [(SmVersion::Sm90, (132, 11)), (SmVersion::Sm80, (108, 35))] {
        for ways in [2, 4] {
            check(&warps, tiles((16, 16, 16), 2, 0, ways), target, counts);
        }
        check(&warps, tiles((16, 16, 16), 1, 0, 4), target, counts);
    }
    // Warpgroups: 12 × 12 tiles of 64 × 32, 144; K's 9 tiles of 32 (the
    // last partial) are slices of 5 and 4, deeper than the 3 slots.
    let warpgroups = gemm("f16", true, false, (760, 384, 264));
    check(
        &warpgroups,
        tiles((64, 32, 32), 3, 1, 2),
        SmVersion::Sm90,
        (132, 12),
    );
}

#[test]
fn a_tail_split_needs_a_partial_wave_deep_slices_and_no_split_k() {
    let rejected = |kernel: &ktune_core::ir::Kernel, t: MmaTiles| match validate(
        kernel,
        &Schedule::Mma(t),
        SmVersion::Sm90,
    ) {
        Err(LowerError::Invalid {
            constraint: Constraint::Split,
            reason,
            ..
        }) => reason,
        other => panic!("{t:?}: {other:?}"),
    };
    // 12 × 11 tiles: exactly one wave over 132 SMs.
    let whole = gemm("bf16", false, false, (192, 176, 128));
    let reason = rejected(&whole, tiles((16, 16, 16), 2, 0, 2));
    assert!(reason.contains("no partial wave"), "{reason}");
    // 8 × 31 tiles: 116 after a wave, which split 2 or 4 ways fill 2 or 4
    // waves of half or quarter tiles, no shorter than one of whole tiles.
    let crowded = gemm("bf16", false, false, (128, 496, 128));
    for ways in [2, 4] {
        let reason = rejected(&crowded, tiles((16, 16, 16), 2, 0, ways));
        assert!(reason.contains("no shorter"), "{reason}");
    }
    // Fewer tiles than SMs: split_k's case.
    let small = gemm("bf16", false, false, (64, 64, 128));
    let reason = rejected(&small, tiles((16, 16, 16), 2, 0, 2));
    assert!(reason.contains("132 SMs"), "{reason}");
    // K's 8 tiles four ways are slices of 2, shallower than 3 slots.
    let tall = gemm("bf16", false, false, (200, 170, 128));
    let reason = rejected(&tall, tiles((16, 16, 16), 3, 0, 4));
    assert!(reason.contains("shallower"), "{reason}");
    let both = MmaTiles {
        split_k: 2,
        ..tiles((16, 16, 16), 2, 0, 2)
    };
    let reason = rejected(&tall, both);
    assert!(reason.contains("split_k"), "{reason}");
}
