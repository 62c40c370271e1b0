//! Tensor-core contractions (`Schedule::Mma`), per `block_k` step of the
//! blocks an SM holds: the `mma` work at
//! [`Hardware::tensor_flops_per_sm_clock`] (tf32:
//! [`Hardware::tf32_flops_per_sm_clock`], half of it; derated on sm_90,
//! whose peak needs `wgmma`: `mma.sync` reaches about `MMA_SYNC_SM90` of
//! it there, which is why cuBLAS outruns this path on H100; and there only
//! with `MMA_WARPS_PER_SCHEDULER` warps a scheduler; a warpgroup's
//! `wgmma`, `wgmma = 1`, is taken at the full rate, from the published
//! peak: on the H200 (2026-12-04) the measured warpgroup points ran 1.2
//! to 1.8 times their estimates, the `mma.sync` ones 1.4 to 2.2 times, so
//! the model ranks the two paths as the GPU does), the shared-memory
//! bytes the fragment reads (`ldmatrix`, or tf32's 32-bit loads) and
//! `cp.async` writes, instruction issue (tf32 adds a load and a `cvt` per
//! fragment register), and the global-memory latency of a step, which
//! `stages - 1` tiles in flight (and the other resident blocks) hide, one
//! fewer where a `wgmma` ring holds a slot for the tile before
//! ([`MmaTiles::held`]); then the traffic and waves every contraction has
//! (`super`).
//!
//! - With `min_blocks = 1` (`.minnctapersm 1`), a thread is assumed to
//!   take all the registers it may have, and the blocks an SM holds
//!   follow; what ptxas does with them (fragments loaded further ahead of
//!   their `mma`s) the model does not see, so it never ranks such a point
//!   above the same tiles without the hint: measurement decides.
//! - Padded rows (`swizzle = 0`) cost a 16-bit `mma.sync` tile's k-step
//!   `PADDED_ROWS_SLOWDOWN` on sm_90: a ratio measured between the same
//!   tiles in both layouts, which the layouts' bank arithmetic does not
//!   explain; besides it, they differ by the padding's shared memory and a
//!   few lane-address registers.
//! - Fragments loaded one k-step ahead (`prefetch = 1`) change when the
//!   loads' latency is paid, not the bytes, instructions or (beyond the
//!   layout's register estimate for a tile of one k-step) the blocks an SM
//!   holds, and the model has no latency of shared-memory results to
//!   hide: both settings score alike, and measurement decides.
//! - A producer warpgroup (`producer` 1, or 2 beside two sets of
//!   warpgroups taking tiles in turn) issues the copies in place of the
//!   warpgroups that multiply, and its threads count in the block's (one
//!   block an SM: `min_blocks = 1`). The products never waiting at a
//!   barrier for another warp's copies, and on persistent blocks the ring
//!   filling during the epilogue, the model does not see: the copies being
//!   the same instructions issued by other warps, such points score about
//!   like the same tiles without a producer, save ping-pong's hidden
//!   epilogue, and measurement decides. With `tma = 1` one thread issues a
//!   copy per tile (per 128-byte panel) in place of the warpgroup's
//!   16-byte ones.
//!
//! [`Hardware::tensor_flops_per_sm_clock`]: crate::target::Hardware::tensor_flops_per_sm_clock
//! [`Hardware::tf32_flops_per_sm_clock`]: crate::target::Hardware::tf32_flops_per_sm_clock

use crate::lower::matmul::mma::{MmaLayout, MmaTiles};
use crate::occupancy::BlockUsage;
use crate::ptx::inst::MmaKind;
use crate::target::SmVersion;

use super::{Block, Product, Walk};
use crate::model::{
    BARRIER_CYCLES, Bound, Estimate, ISSUE_PER_CLOCK, SCHEDULERS, SHARED_BYTES_PER_CLOCK,
};

/// The fraction of sm_90's tensor peak `mma.sync` reaches (the rest needs
/// `wgmma`).
const MMA_SYNC_SM90: f64 = 0.6;

/// Warps a scheduler needs to keep sm_90's tensor cores fed with
/// `mma.sync`: with fewer, the `mma` rate falls in proportion. Only on
/// sm_90, where it was measured: the other targets' tensor cores are
/// slower against the same fragment loads, and no run says how many warps
/// they need. Fitted to the H200
/// visits (`ktune-bench --fit`): with 2, the model's pick among the
/// measured points of `llm_4096x11008x4096` goes from 1.51× and 1.50× the
/// fastest to 1.22× (second and third visits), `matmul_bias_gelu_bf16`'s
/// from 1.54× and 1.53× to 1.11× and 1.10×, the batched product's from
/// 1.17× and 1.27× to 1.04× and 1.14×, the demo's `ffn_up` from 1.75× to
/// 1.24×, with the first visit unchanged (its fastest tiles had 8 warps an
/// SM and more); with 4, the first visit's bf16 pick falls to 1.71×.
const MMA_WARPS_PER_SCHEDULER: f64 = 2.0;
/// How much longer a k-step of `mma.sync` tiles takes with operand rows
/// padded by 16 bytes than with the same tiles swizzled (`swizzle = 1`).
/// Measured, not derived: on the H200 (2026-12-04, call 1, the tensor-core
/// defaults' screened alternatives), 27 pairs of points differing only in
/// `swizzle`, over eight cases, ran padded 1.19 times slower (geometric
/// mean; 25 of the 27 slower, 0.96 to 1.41), and ncu counted 42% of a
/// padded bf16 product's shared-memory wavefronts as excess (2026-11-30).
/// The bank arithmetic of the padded rows' `ldmatrix` reads and copies
/// accounts for far less of that excess, so the model does not derive it
/// from the layout. Without it the two layouts scored alike and a
/// build's bounded search spent candidates on padded twins of its
/// swizzled ones; with it the mean rank correlation over the 51
/// case-visits of tensor-core cases (`ktune-bench --fit`) goes from 0.73
/// to 0.77, and the model's pick among the measured points from 1.15 to
/// 1.13 times the fastest (geometric mean).
const PADDED_ROWS_SLOWDOWN: f64 = 1.19;

pub(in crate::model) fn estimate(product: &Product<'_>, tiles: MmaTiles) -> Estimate {
    let target = product.target;
    let layout = MmaLayout::new(product.kernel, product.plan, tiles, target).expect("validated");
    // With `min_blocks = 1` ptxas may give a thread as many registers as
    // one block leaves it, and takes most (202 to 246 on sm_90 for tiles
    // whose layout estimate is 140 to 208): assume all of them.
    let limits = target.limits();
    let registers = match tiles.min_blocks {
        0 => layout.registers,
        _ => limits
            .max_registers_per_thread
            .min(limits.registers_per_sm / layout.threads),
    };
    let block = Block::new(
        product,
        BlockUsage {
            threads: layout.threads,
            registers,
            shared_bytes: layout.shared_bytes,
        },
        Walk {
            block_m: tiles.block_m,
            block_n: tiles.block_n,
            block_k: tiles.block_k,
            group_m: tiles.group_m,
            split: layout.split,
            k_tiles: layout.k_tiles(),
            fill: tiles.stages > 1,
            persistent: tiles.persistent == 1,
            ping_pong: tiles.producer == 2,
            shares_b: tiles.cluster_m,
        },
    );
    let hw = &block.hw;
    let (bm, bn, bk) = (
        f64::from(tiles.block_m),
        f64::from(tiles.block_n),
        f64::from(tiles.block_k),
    );
    let (wm, wn) = (f64::from(tiles.warp_m), f64::from(tiles.warp_n));
    let warpgroups = tiles.wgmma == 1;
    // Warps, or with `wgmma` warpgroups: the readers of operand tiles.
    let readers = f64::from(tiles.warps());
    let warps = f64::from(layout.threads / 32);

    // One block_k step of one block.
    let peak = match layout.kind {
        MmaKind::F16 | MmaKind::Bf16 => hw.tensor_flops_per_sm_clock,
        MmaKind::Tf32 => hw.tf32_flops_per_sm_clock,
    };
    let mma_rate = f64::from(peak)
        * if target == SmVersion::Sm90 && !warpgroups {
            MMA_SYNC_SM90
        } else {
            1.0
        };
    let mma_cycles = 2.0 * bm * bn * bk / mma_rate;
    // Every warp (warpgroup) reads its A rows and B columns; the copies
    // write both tiles.
    let element = f64::from(layout.a.element_bytes);
    let shared_bytes = (readers * (wm + wn) + bm + bn) * bk * element;
    let shared_cycles = shared_bytes / SHARED_BYTES_PER_CLOCK;
    let k_steps = bk / f64::from(layout.kind.k());
    let copies = f64::from(layout.a.passes + layout.b.passes);
    let issued = if tiles.producer >= 1 {
        // The consumers' warps issue their warpgroup's `wgmma`s and
        // descriptors, the producer's four the copies; in ping-pong one
        // set of consumers a tile.
        let consumers = f64::from((layout.threads - 128) / 32 / tiles.consumer_sets());
        // With `tma = 1` one thread issues a copy a tile or panel.
        let producer = if tiles.tma == 1 {
            3.0 * f64::from(layout.a.panels + layout.b.panels) + 16.0
        } else {
            4.0 * (3.0 * copies + 16.0)
        };
        consumers * ((wm / 64.0) * k_steps * 2.0 + 24.0) + producer
    } else if warpgroups {
        // Each warp issues its warpgroup's `wgmma`s (64 rows each) and
        // their descriptors; no fragments.
        warps * ((wm / 64.0) * k_steps * 2.0 + 3.0 * copies + 24.0)
    } else {
        let mmas = (wm / 16.0) * (wn / 8.0) * k_steps;
        // Fragment reads per k-step: an `ldmatrix.x4` per 16×16 of A and
        // of B, or for tf32 a 32-bit load and a `cvt` per fragment
        // register.
        let fragment_reads = match layout.kind {
            MmaKind::F16 | MmaKind::Bf16 => wm / 16.0 + wn / 16.0,
            MmaKind::Tf32 => 2.0 * (wm / 16.0 * 4.0 + wn / 8.0 * 2.0),
        } * k_steps;
        warps * (mmas + fragment_reads + 3.0 * copies + 16.0)
    };
    let issue_cycles = issued / ISSUE_PER_CLOCK;

    // On sm_90, a scheduler with fewer than `MMA_WARPS_PER_SCHEDULER` warps
    // waits out its fragment loads between `mma`s (`wgmma` loads none).
    let sm_blocks = f64::from(block.resident);
    let per_scheduler = sm_blocks * warps / SCHEDULERS;
    let fed = match target {
        SmVersion::Sm90 if !warpgroups => (per_scheduler / MMA_WARPS_PER_SCHEDULER).min(1.0),
        _ => 1.0,
    };
    let compute = sm_blocks * mma_cycles.max(issue_cycles) / fed;
    let shared = sm_blocks * shared_cycles;
    // `stages - 1` tiles are in flight while one is computed, one fewer
    // when a slot is held for `wgmma`s in flight; with one stage nothing
    // overlaps the copies.
    let memory = block.memory_cycles();
    let latency = match tiles.stages {
        1 => 0.0,
        _ => memory / f64::from(tiles.tiles_in_flight()),
    } + BARRIER_CYCLES;
    let (busy, mut bound) = [
        (compute, Bound::Compute),
        (shared, Bound::SharedMemory),
        (latency, Bound::Latency),
    ]
    .into_iter()
    .fold(
        (0.0, Bound::Compute),
        |best, c| if c.0 > best.0 { c } else { best },
    );
    let step_cycles = if tiles.stages == 1 {
        bound = Bound::Latency;
        busy + memory
    } else {
        busy
    } * padded_rows_slowdown(&layout, target);
    block.estimate(product, (step_cycles, bound))
}

/// [`PADDED_ROWS_SLOWDOWN`] for `mma.sync` tiles of 16-bit operands in
/// padded rows on sm_90, where it was measured; 1 otherwise (tf32 tiles
/// are always padded, `wgmma`'s always swizzled).
fn padded_rows_slowdown(layout: &MmaLayout, target: SmVersion) -> f64 {
    let padded = !layout.a.swizzled && matches!(layout.kind, MmaKind::F16 | MmaKind::Bf16);
    if padded && target == SmVersion::Sm90 {
        PADDED_ROWS_SLOWDOWN
    } else {
        1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Kernel;
    use crate::model::rank;
    use crate::model::tests::{bf16_matmul, mm, tc};
    use crate::model::{Bound, estimate};
    use crate::schedule::Schedule;
    use crate::space::candidates;

    /// `edit` of warpgroup tiles of 128 × 256 (two warpgroups of 64 × 128,
    /// 4 slots of 64-deep tiles: one block an SM), estimated on `k` on
    /// sm_90.
    fn wide_warpgroups(k: &Kernel, edit: impl FnOnce(MmaTiles) -> MmaTiles) -> Estimate {
        let t = MmaTiles {
            block_n: 256,
            block_k: 64,
            warp_n: 128,
            stages: 4,
            swizzle: 1,
            wgmma: 1,
            ..MmaTiles::from_schedule(&tc(128, 64, 3)).expect("an mma point")
        };
        estimate(k, &Schedule::Mma(edit(t)), SmVersion::Sm90).expect("valid")
    }

    #[test]
    fn tensor_cores_beat_simt_tiles_and_stages_hide_latency() {
        let k = bf16_matmul(4096, 4096, 4096);
        for target in [SmVersion::Sm80, SmVersion::Sm90] {
            let simt = estimate(&k, &mm(128, 8, 16), target).expect("valid");
            let tensor = estimate(&k, &tc(128, 64, 3), target).expect("valid");
            assert!(tensor.seconds < simt.seconds / 2.0, "{target}");
            let serial = estimate(&k, &tc(128, 64, 1), target).expect("valid");
            assert_eq!(serial.bound, Bound::Latency);
            assert!(tensor.seconds < serial.seconds);
        }
        // mma.sync reaches only part of sm_90's tensor peak: less than the
        // 2.8× the peaks and clocks promise over sm_80.
        let a100 = estimate(&k, &tc(128, 64, 3), SmVersion::Sm80).expect("valid");
        let h100 = estimate(&k, &tc(128, 64, 3), SmVersion::Sm90).expect("valid");
        assert!(a100.seconds / h100.seconds < 2.8);
        // The register hint costs a 64×128 tile of 8 warps its second
        // block an SM, and is never estimated faster.
        let tile = |min_blocks| {
            Schedule::Mma(MmaTiles {
                block_m: 64,
                block_n: 128,
                warp_m: 32,
                warp_n: 32,
                min_blocks,
                ..MmaTiles::from_schedule(&tc(128, 64, 3)).expect("an mma point")
            })
        };
        let free = estimate(&k, &tile(0), SmVersion::Sm90).expect("valid");
        let hinted = estimate(&k, &tile(1), SmVersion::Sm90).expect("valid");
        assert_eq!(
            (free.occupancy.blocks_per_sm, hinted.occupancy.blocks_per_sm),
            (2, 1)
        );
        assert_eq!(hinted.registers, 255);
        assert!(hinted.seconds > free.seconds);
        let small = bf16_matmul(65, 40, 40);
        for target in SmVersion::ALL {
            let points = candidates(&small, target);
            assert!(points.iter().any(|p| matches!(p, Schedule::Mma(_))));
            assert_eq!(rank(&small, target, &points).len(), points.len());
        }
    }

    #[test]
    fn padded_rows_cost_measured_time_on_sm90_only() {
        let k = bf16_matmul(4096, 4096, 4096);
        let swizzled = Schedule::Mma(MmaTiles {
            swizzle: 1,
            ..MmaTiles::from_schedule(&tc(128, 64, 3)).expect("an mma point")
        });
        let ratio = |target| {
            let padded = estimate(&k, &tc(128, 64, 3), target).expect("valid");
            let swizzled = estimate(&k, &swizzled, target).expect("valid");
            assert_eq!(
                padded.occupancy.blocks_per_sm, swizzled.occupancy.blocks_per_sm,
                "{target}"
            );
            padded.seconds / swizzled.seconds
        };
        // The slowdown applies to the steps, not the launch.
        let hopper = ratio(SmVersion::Sm90);
        assert!(hopper > 1.15 && hopper <= PADDED_ROWS_SLOWDOWN, "{hopper}");
        assert_eq!(ratio(SmVersion::Sm80), 1.0);
    }

    #[test]
    fn a_tail_split_shortens_the_last_wave_of_a_grid_bound_by_its_steps() {
        // 17 × 8 warpgroup tiles of 128 × 256, one block an SM, over a long
        // K: 132 whole tiles, then 4 on 4 of the 132 SMs.
        let k = bf16_matmul(17 * 128, 8 * 256, 16384);
        let point = |tail_split| wide_warpgroups(&k, |t| MmaTiles { tail_split, ..t });
        let [whole, two, four] = [1, 2, 4].map(point);
        // Bound by its steps, which come in waves (not by traffic).
        assert!(
            !matches!(whole.bound, Bound::L2 | Bound::Memory),
            "{whole:?}"
        );
        assert_eq!(whole.occupancy.blocks_per_sm, 1);
        assert_eq!((whole.blocks, two.blocks, four.blocks), (136, 140, 148));
        // Two waves of whole tiles, against one and a half or a quarter,
        // less the reduction's traffic and serial tail.
        let (r2, r4) = (whole.seconds / two.seconds, whole.seconds / four.seconds);
        assert!((1.2..1.34).contains(&r2), "{r2}");
        assert!(r4 > r2 && r4 < 1.6, "{r4}");
    }

    #[test]
    fn persistent_blocks_wait_for_their_rings_first_copies_once() {
        // 34 × 16 warpgroup tiles of 128 × 256, one block an SM: 5 waves
        // over 132 SMs of 8 steps of 64 each.
        let k = bf16_matmul(34 * 128, 16 * 256, 512);
        let point = |persistent| wide_warpgroups(&k, |t| MmaTiles { persistent, ..t });
        let [tile_each, looping] = [0, 1].map(point);
        assert!(
            !matches!(tile_each.bound, Bound::L2 | Bound::Memory),
            "{tile_each:?}"
        );
        assert_eq!((tile_each.blocks, looping.blocks), (544, 544));
        // Four of five fills hidden: about a latency a wave of 8 steps.
        let saved = tile_each.seconds / looping.seconds;
        assert!((1.02..1.15).contains(&saved), "{saved}");
    }

    #[test]
    fn a_wgmma_ring_holding_a_slot_keeps_one_tile_fewer_in_flight() {
        let k = bf16_matmul(4096, 4096, 4096);
        let warpgroup = |stages| {
            Schedule::Mma(MmaTiles {
                block_m: 64,
                block_n: 64,
                warp_m: 64,
                warp_n: 64,
                swizzle: 1,
                wgmma: 1,
                tail_split: 1,
                ..MmaTiles::from_schedule(&tc(64, 64, stages)).expect("an mma point")
            })
        };
        let [two, three, four] =
            [2, 3, 4].map(|s| estimate(&k, &warpgroup(s), SmVersion::Sm90).expect("valid"));
        // Three slots, one held for the tile before's `wgmma`s: one tile in
        // flight, as with two, for more shared memory.
        assert_eq!(two.bound, Bound::Latency);
        assert!(three.seconds >= two.seconds, "{three:?} {two:?}");
        assert!(four.seconds < three.seconds, "{four:?} {three:?}");
        // On warps nothing is held: the third slot is a second tile in
        // flight.
        let [two, three] =
            [2, 3].map(|s| estimate(&k, &tc(64, 32, s), SmVersion::Sm90).expect("valid"));
        assert!(three.seconds < two.seconds, "{three:?} {two:?}");
    }
}
