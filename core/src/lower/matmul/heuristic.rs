//! The default contraction schedule, chosen from the problem's shape and the
//! target without measuring anything.
//!
//! # Tensor cores
//!
//! A contraction of plain f16 or bf16 operands, or of f32 ones in a kernel
//! with `allow_tf32` ([`mma::applies`]), on sm_80 or newer gets a
//! [`Schedule::Mma`] point when one validates and, for tf32 (half the
//! 16-bit rate), when the model ([`crate::model`]) estimates it faster than
//! the SIMT default (on large problems by far: tf32 `mma` does about eight
//! times the FFMA work per clock on sm_80):
//! 1. **Block and warp tiles**: the first of 128×128 (64×64 per warp, 4
//!    warps), 128×64 and 64×128 (64×32, 32×64), 64×64 (32×32), 64×32,
//!    32×64, 32×32 (2–4 warps of 16–32 outputs a side), then the narrow
//!    tiles 16×128, 128×16, 16×64, 64×16, 16×32, 32×16, 16×16 (one 16-row
//!    side: decode shapes), that is no larger than the problem rounded up
//!    to a power of two (at least 16) along `m` and `n` and whose grid
//!    fills at least one wave; the last fitting one when none does.
//! 2. **Depth and pipeline**: `block_k` 32 (16 when `K ≤ 16`); 3 stages,
//!    fewer when `K` has fewer tiles (a stage beyond the tile count only
//!    costs shared memory).
//! 3. **Shared-memory layout**: 16-bit operands' tiles XOR-swizzled
//!    (`swizzle = 1`), whose rows start on 128-byte lines so that a warp's
//!    `cp.async` copies fill whole lines. Profiled on an H200 (third
//!    visit), the padded layout's copies took 3.2 times the ideal
//!    shared-memory wavefronts, more than all the `ldmatrix` reads
//!    together, while warps stalled most on shared-memory results. tf32
//!    tiles, read word by word, keep padded rows.
//! 4. **Fragment loads**: one k-step ahead (`prefetch = 1`) whenever the
//!    ring has a second slot. On sm_90 ptxas then schedules the bf16
//!    128×128 tile's loop as one block of `mma`s with the barrier among
//!    them and each `ldmatrix` beside an `mma` of the step before, with as
//!    many blocks an SM; loading as needed, every tile starts with the
//!    barrier, the next copies and a dozen `ldmatrix` before its first
//!    `mma`, where the H200 profile found warps waiting most (on
//!    shared-memory results, at the first `mma` after each load). Not yet
//!    measured; the benchmark times the default beside its flip.
//! 5. If the choice does not validate (an operand not 16-byte aligned, as
//!    when `K` is not a multiple of 8, or 4 for f32, for `x[m][k]`), the next tile is
//!    tried; when none validates, the SIMT rules below apply.
//!
//! # Warpgroups (sm_90)
//!
//! On sm_90, where Hopper's `wgmma.mma_async` reaches the tensor cores'
//! peak and `mma.sync` does not, a 16-bit contraction of at least 64 rows
//! gets a warpgroup point (`wgmma = 1`, an `sm_90a` module) instead of
//! the tensor-core default above when the model estimates one faster: the
//! tiles of [`WGMMA_TILES`] that fit the problem, 64 deep (a 128-byte
//! swizzled row per operand row), on the deepest ring of up to 4 slots,
//! each walked like the default and row by row, whole or split along `K`
//! where the space offers it, whose grid fills a wave. On the H200 (2026-12-04) the model's choice
//! for the 4096³ bf16 product, 128×256×64 tiles of four 64×128
//! warpgroups on 4 slots, ran 1.65 times as fast as the `mma.sync`
//! default (0.194 ms against 0.321; cuBLAS 0.169), and as fast as the
//! fastest of the seven warpgroup points measured. Such a default runs on
//! Hopper only: [`portable`] is the default without it, which a build
//! embeds beside it for newer GPUs.
//!
//! # SIMT
//!
//! Rules, in order:
//! 1. **Block tile.** When both `M` and `N` are above 16, the first of
//!    128×128 (8×8 per thread), 128×64, 64×128, 64×64 (4×4), 64×32, 32×64,
//!    32×32 (2×2) — all 256 threads — that is no larger than the problem
//!    rounded up to a power of two along `m` and `n` and whose grid fills at
//!    least one wave (`blocks ≥ sm_count`); the smallest fitting one when
//!    none fills a wave. When one of `M`, `N` is at most 16 (decode-style
//!    shapes), that side's tile is the extent rounded up to a power of two
//!    (never split: splitting it rereads the other operand) and the other
//!    side takes the largest of 128, 64, 32 that fills a wave (else 32),
//!    about 128 threads per block. When both are at most 16, one tile
//!    covers the product, grown along `n` to the 32 threads of a warp.
//! 2. **Depth.** `block_k` is the largest power of two up to 64 for which
//!    each thread stages at most 32 elements of A and B per step (up to 4
//!    outputs per thread), 16 (up to 16 outputs) or 8 (more: registers go
//!    to accumulators), and no deeper than `K` rounded up to a power of
//!    two. Deep steps keep more loads in flight for the small tiles of
//!    narrow problems.
//! 3. **Vectors.** Each operand's global loads are as wide (up to 16 bytes)
//!    as its layout and alignment allow.
//! 4. **Stages.** One: tiles go through registers (the polish below may
//!    pipeline them).
//! 5. If a choice fails validation (it should not), smaller tiles are tried,
//!    down to a 1×32 tile that fits every target.
//! 6. **The model's polish.** After the walk and the split below, the
//!    model descends from the rules' point over the space's knobs, one or
//!    two at a time, and its end replaces the rules' point where the model
//!    rates it at least [`POLISH_MARGIN`] times faster: on odd shapes,
//!    where the rules' fixed tiles fit badly (on the H200, 2026-12-04:
//!    1.00–1.21 times the fastest point measured, against the rules'
//!    1.34–2.37), not on the square products they were made for.
//!
//! # The grid's walk
//!
//! Both paths walk the grid row by row (`group_m = 1`) unless the grid has
//! more than [`GROUP_M`] block rows and the model ([`crate::model`])
//! estimates groups of [`GROUP_M`] rows faster: only when an operand is
//! larger than half of L2 and its DRAM re-reads bound the time, as for a
//! wide product whose every row of blocks would read all of B again.
//!
//! # Split-K
//!
//! Either default is then split along `K` when the space offers it
//! ([`split_k_values`]: only where even the coarsest tiles leave SMs idle)
//! and the model estimates a split faster than one slice, the fastest of
//! 2, 4, 8 and 16: decode shapes (`M` up to 16) with a long `K`, never a
//! grid that fills the GPU, where splitting would only trade wave
//! quantization against the partial tiles' traffic. For a decode shape
//! (one side at most 16) the model chooses the tile and the split
//! together: the rules' tile and every other tile of its path that keeps
//! the narrow side (the tensor-core tiles with the same 16-wide side, the
//! SIMT narrow tiles 32, 64 and 128 wide), each whole or in slices; a
//! wider tile in more slices reads the other operand in longer rows,
//! which the model counts as cheaper from DRAM. So does a tensor-core
//! product whose blocks would all be resident at once (under one wave):
//! there every fitting tile sharing a side with the rules' one, each whole
//! or in slices, and larger tiles in more slices read the operands fewer
//! times.

use super::mma::{self, MmaLayout, MmaTiles};
use super::{Layout, MatmulPlan, Tiles, split_k_values};
use crate::dtype::DType;
use crate::ir::Kernel;
use crate::model::{Model, estimate};
use crate::ptx::inst::MmaKind;
use crate::schedule::{Class, Schedule};
use crate::space::Space;
use crate::target::SmVersion;

/// The 256-thread tiles for large problems, preferred first:
/// `(block_m, block_n, thread_m, thread_n)`.
const LARGE: [(u32, u32, u32, u32); 7] = [
    (128, 128, 8, 8),
    (128, 64, 8, 4),
    (64, 128, 4, 8),
    (64, 64, 4, 4),
    (64, 32, 4, 2),
    (32, 64, 2, 4),
    (32, 32, 2, 2),
];

/// Tensor-core tiles, preferred first: `(block_m, block_n, warp_m, warp_n)`.
const MMA_TILES: [(u32, u32, u32, u32); 14] = [
    (128, 128, 64, 64),
    (128, 64, 64, 32),
    (64, 128, 32, 64),
    (64, 64, 32, 32),
    (64, 32, 32, 16),
    (32, 64, 16, 32),
    (32, 32, 16, 16),
    (16, 128, 16, 32),
    (128, 16, 32, 16),
    (16, 64, 16, 16),
    (64, 16, 16, 16),
    (16, 32, 16, 16),
    (32, 16, 16, 16),
    (16, 16, 16, 16),
];

/// Tensor-core pipeline depth when `K` has enough tiles.
const MMA_STAGES: u32 = 3;

/// Warpgroup tiles on sm_90, preferred first: `(block_m, block_n, warp_m,
/// warp_n)`, each warpgroup a `warp_m × warp_n` sub-tile.
const WGMMA_TILES: [(u32, u32, u32, u32); 12] = [
    (128, 256, 64, 128),
    (256, 128, 64, 128),
    (128, 128, 64, 128),
    (128, 128, 64, 64),
    (64, 256, 64, 256),
    (64, 128, 64, 128),
    (64, 128, 64, 64),
    (128, 64, 64, 64),
    (64, 64, 64, 64),
    (128, 32, 64, 32),
    (64, 32, 64, 32),
    (64, 16, 64, 16),
];

/// A warpgroup's rows: one `wgmma` computes 64 rows of its tile.
const WGMMA_ROWS: u32 = 64;

/// `block_k` of the warpgroup defaults: a 128-byte row of 16-bit values,
/// one swizzle atom.
const WGMMA_DEPTH: u32 = 64;

/// The deepest ring a warpgroup default takes.
const WGMMA_STAGES: u32 = 4;

/// A narrow side's extent at or below which its tile is never split.
const NARROW: u32 = 16;

/// Block rows per group when the default walks the grid in groups.
const GROUP_M: u32 = 8;

/// The default schedule for a contraction on GPUs of `target`: the
/// [`portable`] one, or on sm_90 a warpgroup one where the model estimates
/// it faster (see the module docs).
pub fn heuristic(kernel: &Kernel, plan: &MatmulPlan, target: SmVersion) -> Schedule {
    let portable = portable(kernel, plan, target);
    match portable {
        Schedule::Mma(t) if target == SmVersion::Sm90 => {
            let options = warpgroup_options(kernel, plan, target, t);
            fastest(kernel, target, portable, options)
        }
        _ => portable,
    }
}

/// The warpgroup points the sm_90 default chooses among, beside the
/// portable tensor-core default `t`: every [`WGMMA_TILES`] tile no larger
/// than the problem rounded up to a power of two, 64 deep, on the deepest
/// ring of at most [`WGMMA_STAGES`] slots that validates, walked as `t`
/// and row by row, whole and (where the space offers a split) in each
/// slice count, whose grid fills a wave: the model does not see a large
/// tile's serial start and end, which few blocks cannot hide (on the
/// H200, the demo's `ffn_up`, 197×1536×384, took 23.9 µs on 24 blocks of
/// 128×128 and 10.1 µs on 192 of 64×32, which the model rated alike).
/// None for tf32, or for products of fewer than 64 rows
/// (decode shapes, whose 64-row warpgroups would compute mostly padding;
/// no GPU has measured them).
fn warpgroup_options(
    kernel: &Kernel,
    plan: &MatmulPlan,
    target: SmVersion,
    t: MmaTiles,
) -> Vec<Schedule> {
    let s = Shape::of(kernel, plan, target);
    let sixteen_bit = matches!(
        mma::layout::operand_kind(kernel, plan),
        Ok(MmaKind::F16 | MmaKind::Bf16)
    );
    if !sixteen_bit || s.m < WGMMA_ROWS {
        return Vec::new();
    }
    let (pm, pn) = (s.m.next_power_of_two(), s.n.next_power_of_two());
    let splits: Vec<u32> = split_k_values(kernel, plan, target);
    let walks: Vec<u32> = if t.group_m > 1 {
        vec![t.group_m, 1]
    } else {
        vec![1]
    };
    let k_tiles = s.k.div_ceil(WGMMA_DEPTH);
    let mut out = Vec::new();
    for &(block_m, block_n, warp_m, warp_n) in &WGMMA_TILES {
        if block_m > pm.max(WGMMA_ROWS) || block_n > pn.max(16) {
            continue;
        }
        let ring = (1..=WGMMA_STAGES.min(k_tiles).max(1))
            .rev()
            .find_map(|stages| {
                let tiles = MmaTiles {
                    block_m,
                    block_n,
                    block_k: WGMMA_DEPTH,
                    warp_m,
                    warp_n,
                    stages,
                    group_m: 1,
                    split_k: 1,
                    min_blocks: 0,
                    swizzle: 1,
                    prefetch: 0,
                    wgmma: 1,
                    tail_split: 1,
                    persistent: 0,
                    producer: 0,
                    tma: 0,
                    cluster_m: 1,
                };
                MmaLayout::new(kernel, plan, tiles, target)
                    .is_ok()
                    .then_some(tiles)
            });
        let Some(tiles) = ring else {
            continue;
        };
        for &group_m in &walks {
            for &split_k in &splits {
                let blocks = s.blocks((block_m, block_n, warp_m, warp_n)) * u64::from(split_k);
                if blocks < u64::from(s.sm_count) {
                    continue;
                }
                out.push(
                    MmaTiles {
                        group_m,
                        split_k,
                        ..tiles
                    }
                    .to_schedule(),
                );
            }
        }
    }
    out
}

/// The default schedule for a contraction that runs on `target` and every
/// newer GPU: no instruction only `target`'s architecture has (no
/// `wgmma`).
pub fn portable(kernel: &Kernel, plan: &MatmulPlan, target: SmVersion) -> Schedule {
    match by_rules(kernel, plan, target) {
        simt @ Schedule::Matmul(_) => polished(kernel, target, simt),
        tensor => tensor,
    }
}

/// The portable default as the rules choose it, before the model's
/// polish of a SIMT one ([`polished`]).
pub(super) fn by_rules(kernel: &Kernel, plan: &MatmulPlan, target: SmVersion) -> Schedule {
    let rows = heuristic_tiles(kernel, plan, target);
    let walked = match rows {
        Schedule::Matmul(Tiles { block_m, .. }) | Schedule::Mma(MmaTiles { block_m, .. })
            if plan.m_extent(kernel).div_ceil(block_m) > GROUP_M =>
        {
            let grouped = with_knob(&rows, "group_m", GROUP_M);
            fastest(kernel, target, rows, [grouped])
        }
        _ => rows,
    };
    if !matches!(walked, Schedule::Matmul(_) | Schedule::Mma(_)) {
        return walked;
    }
    let splits: Vec<u32> = split_k_values(kernel, plan, target)
        .into_iter()
        .filter(|split| *split > 1)
        .collect();
    let split = |tile: &Schedule| -> Vec<Schedule> {
        splits
            .iter()
            .map(|split| with_knob(tile, "split_k", *split))
            .collect()
    };
    // For a decode-style product (one side at most 16) that leaves SMs
    // idle even in the coarsest tiles, a wider tile in more slices fills
    // the GPU as well as the narrowest one, with longer rows of the other
    // operand: the model chooses the tile and the split together. (On the
    // H200 run, `decode_m16`'s 16×16 tensor-core tile in 8 slices took
    // 28 µs, a 16×64 one in 16 slices 20 µs.)
    //
    // So does a tensor-core product whose blocks all fit on the GPU at once
    // (under one wave): there, larger tiles in more slices read each
    // operand fewer times (`decode_m128`, 128×4096×4096: the 64×32 tile in
    // 2 slices took 57 µs, 64×128 in 4 slices 29 µs).
    let decode = plan.m_extent(kernel) <= NARROW || plan.n_extent(kernel) <= NARROW;
    let under_filled = matches!(walked, Schedule::Mma(_))
        && estimate(kernel, &walked, target).is_ok_and(|e| e.waves < 1.0);
    let others = if splits.is_empty() || !(decode || under_filled) {
        Vec::new()
    } else {
        other_tiles(kernel, plan, target, &walked)
    };
    let options: Vec<Schedule> = split(&walked)
        .into_iter()
        .chain(
            others
                .iter()
                .flat_map(|t| std::iter::once(t.clone()).chain(split(t))),
        )
        .collect();
    fastest(kernel, target, walked, options)
}

/// How many times faster than the rules' SIMT default the model must rate
/// the point its descent reaches to replace the default. Of two SIMT
/// contractions the model rated at least 20% apart, the one it rated
/// faster ran faster on the H200 in 5,164 of 5,977 pairs (86%; the points
/// of the five results files of 2026-11-30 and 2026-12-04); of two rated
/// within 5%, in 521 of 924 (56%): it cannot tell such points apart.
const POLISH_MARGIN: f64 = 1.2;

/// The rules' SIMT default `rules`, or the point the model reaches from
/// it by coordinate descent over the space's knobs, where it rates that
/// [`POLISH_MARGIN`] times faster. The descent moves to the point of
/// lowest estimate that differs in one or two knobs, until no move lowers
/// it; of points the model rates alike it keeps the one with fewer knobs
/// changed from the rules' (where the model has no opinion, the rules'
/// choice stands), then the lower knob values in the knobs' order (the
/// order in which a ranking of the whole space breaks ties). On the H200
/// (2026-12-04) that point, the model's favourite of the whole space for
/// the odd shapes measured, ran 1.00–1.21 times the fastest point
/// measured, where the rules' tiles ran 1.34–2.37 times it (`32×8192×8192`,
/// `777×3000×513`, `1000×1000×999`, the demo's `ffn_down`); on `4096³` it
/// rates its point 1% faster and the rules' default stays.
pub(super) fn polished(kernel: &Kernel, target: SmVersion, rules: Schedule) -> Schedule {
    let space = Space::of(kernel, target);
    let Some(family) = space.family(Class::Matmul) else {
        return rules;
    };
    let model = Model::new(kernel, target);
    let seconds = |s: &Schedule| {
        if space.rejection(model.lowering(), s).is_some() {
            return None;
        }
        model.estimate(s).ok().map(|e| e.seconds)
    };
    let origin = rules.knob_values();
    let key = |s: &Schedule| {
        let values = s.knob_values();
        let changed = values.iter().zip(&origin).filter(|(a, b)| a != b).count();
        (seconds(s).unwrap_or(f64::INFINITY), changed, values)
    };
    let start = key(&rules);
    let (mut best, mut best_key) = (rules.clone(), start.clone());
    loop {
        let mut moved = false;
        for (i, a) in family.knobs.iter().enumerate() {
            for b in &family.knobs[i..] {
                for &va in &a.values {
                    for &vb in &b.values {
                        if a.name == b.name && va != vb {
                            continue;
                        }
                        let Some(next) = best
                            .with_knob(a.name, va)
                            .and_then(|s| s.with_knob(b.name, vb))
                        else {
                            continue;
                        };
                        let next_key = key(&next);
                        if next_key < best_key {
                            (best, best_key) = (next, next_key);
                            moved = true;
                        }
                    }
                }
            }
        }
        if !moved {
            break;
        }
    }
    if start.0 >= POLISH_MARGIN * best_key.0 {
        best
    } else {
        rules
    }
}

/// The other tiles of `chosen`'s path the rules would consider for this
/// shape, completed as the rules complete theirs: for tensor cores every
/// fitting tile of the preference list, for SIMT the narrow side's three
/// widths or the fitting 256-thread tiles.
fn other_tiles(
    kernel: &Kernel,
    plan: &MatmulPlan,
    target: SmVersion,
    chosen: &Schedule,
) -> Vec<Schedule> {
    let s = Shape::of(kernel, plan, target);
    let (pm, pn) = (s.m.next_power_of_two(), s.n.next_power_of_two());
    match *chosen {
        Schedule::Mma(t) => MMA_TILES
            .iter()
            .filter(|(bm, bn, _, _)| {
                *bm <= pm.max(16) && *bn <= pn.max(16) && (*bm, *bn) != (t.block_m, t.block_n)
            })
            .filter(|(bm, bn, _, _)| (*bm == t.block_m) || (*bn == t.block_n))
            .map(|&(block_m, block_n, warp_m, warp_n)| MmaTiles {
                block_m,
                block_n,
                warp_m,
                warp_n,
                ..t
            })
            .filter(|o| MmaLayout::new(kernel, plan, *o, target).is_ok())
            .map(MmaTiles::to_schedule)
            .collect(),
        Schedule::Matmul(t) => {
            let tiles: Vec<(u32, u32, u32, u32)> = if s.m <= NARROW && s.n > NARROW {
                narrow_options(pm, |wide, narrow_tile, t_wide, t_narrow| {
                    (narrow_tile, wide, t_narrow, t_wide)
                })
            } else if s.n <= NARROW && s.m > NARROW {
                narrow_options(pn, |wide, narrow_tile, t_wide, t_narrow| {
                    (wide, narrow_tile, t_wide, t_narrow)
                })
            } else {
                LARGE
                    .iter()
                    .copied()
                    .filter(|(bm, bn, _, _)| *bm <= pm && *bn <= pn)
                    .collect()
            };
            tiles
                .into_iter()
                .filter(|(bm, bn, _, _)| (*bm, *bn) != (t.block_m, t.block_n))
                .filter_map(|c| finish(kernel, plan, target, &s, c))
                .map(|o| {
                    Tiles {
                        group_m: t.group_m,
                        ..o
                    }
                    .to_schedule()
                })
                .collect()
        }
        _ => Vec::new(),
    }
}

/// `schedule` with one knob set to `value`.
fn with_knob(schedule: &Schedule, knob: &str, value: u32) -> Schedule {
    let mut values = schedule.knob_values();
    let at = schedule.kind().knobs().iter().position(|k| *k == knob);
    values[at.expect("a contraction knob")] = value;
    schedule.kind().schedule(&values).expect("the same knobs")
}

/// `base`, or the first of `others` the model estimates faster than it
/// and every earlier one; invalid points never win.
fn fastest(
    kernel: &Kernel,
    target: SmVersion,
    base: Schedule,
    others: impl IntoIterator<Item = Schedule>,
) -> Schedule {
    let model = Model::new(kernel, target);
    let seconds = |s: &Schedule| model.estimate(s).map(|e| e.seconds).ok();
    let Some(mut best_seconds) = seconds(&base) else {
        return base;
    };
    let mut best = base;
    for other in others {
        if let Some(t) = seconds(&other).filter(|t| *t < best_seconds) {
            (best, best_seconds) = (other, t);
        }
    }
    best
}

/// The default tiles (the tensor-core and SIMT rules), walked row by row.
fn heuristic_tiles(kernel: &Kernel, plan: &MatmulPlan, target: SmVersion) -> Schedule {
    let shape = Shape::of(kernel, plan, target);
    let tensor = tensor_core(kernel, plan, target, &shape).map(MmaTiles::to_schedule);
    let tf32 = kernel.input(plan.a.tensor).dtype == DType::F32;
    let simt = || {
        candidates(&shape)
            .into_iter()
            .find_map(|c| finish(kernel, plan, target, &shape, c))
            .unwrap_or(Tiles {
                block_m: 1,
                block_n: 32,
                block_k: 1,
                thread_m: 1,
                thread_n: 1,
                vector_a: 1,
                vector_b: 1,
                group_m: 1,
                stages: 1,
                split_k: 1,
            })
            .to_schedule()
    };
    match tensor {
        Some(mma) if tf32 => {
            let simt = simt();
            let seconds = |s: &Schedule| estimate(kernel, s, target).map(|e| e.seconds).ok();
            match (seconds(&mma), seconds(&simt)) {
                (Some(t), Some(s)) if t <= s => mma,
                _ => simt,
            }
        }
        Some(mma) => mma,
        None => simt(),
    }
}

/// The tensor-core default (rules 1–5 of the tensor-core section), if one
/// validates.
fn tensor_core(
    kernel: &Kernel,
    plan: &MatmulPlan,
    target: SmVersion,
    s: &Shape,
) -> Option<MmaTiles> {
    if target.compute_capability() < (8, 0) || !mma::applies(kernel, plan) {
        return None;
    }
    let (pm, pn) = (
        s.m.next_power_of_two().max(16),
        s.n.next_power_of_two().max(16),
    );
    let block_k = if s.k <= 16 { 16 } else { 32 };
    let stages = s.k.div_ceil(block_k).clamp(1, MMA_STAGES);
    let swizzle = match mma::layout::operand_kind(kernel, plan) {
        Ok(MmaKind::F16 | MmaKind::Bf16) => 1,
        _ => 0,
    };
    let fits: Vec<_> = MMA_TILES
        .iter()
        .copied()
        .filter(|(bm, bn, _, _)| *bm <= pm && *bn <= pn)
        .collect();
    let wave = fits
        .iter()
        .position(|c| s.fills_wave(*c))
        .unwrap_or(fits.len().saturating_sub(1));
    fits[wave..]
        .iter()
        .chain(&fits[..wave])
        .map(|&(block_m, block_n, warp_m, warp_n)| MmaTiles {
            block_m,
            block_n,
            block_k,
            warp_m,
            warp_n,
            stages,
            group_m: 1,
            split_k: 1,
            min_blocks: 0,
            swizzle,
            prefetch: u32::from(stages > 1),
            wgmma: 0,
            tail_split: 1,
            persistent: 0,
            producer: 0,
            tma: 0,
            cluster_m: 1,
        })
        .find(|t| MmaLayout::new(kernel, plan, *t, target).is_ok())
}

struct Shape {
    m: u32,
    n: u32,
    k: u32,
    batch: u64,
    sm_count: u32,
}

impl Shape {
    fn of(kernel: &Kernel, plan: &MatmulPlan, target: SmVersion) -> Shape {
        Shape {
            m: plan.m_extent(kernel),
            n: plan.n_extent(kernel),
            k: plan.k_extent(kernel),
            batch: plan.batch_count(kernel),
            sm_count: target.limits().sm_count,
        }
    }

    fn blocks(&self, (bm, bn, _, _): (u32, u32, u32, u32)) -> u64 {
        u64::from(self.m.div_ceil(bm)) * u64::from(self.n.div_ceil(bn)) * self.batch
    }

    fn fills_wave(&self, c: (u32, u32, u32, u32)) -> bool {
        self.blocks(c) >= u64::from(self.sm_count)
    }
}

/// Block and thread tiles in the order they are tried (rule 1, then the
/// fallbacks of rule 5).
fn candidates(s: &Shape) -> Vec<(u32, u32, u32, u32)> {
    let mut out = Vec::new();
    let (pm, pn) = (s.m.next_power_of_two(), s.n.next_power_of_two());
    if s.m <= NARROW && s.n <= NARROW {
        let bn = pn.max(32 / pm);
        out.push((pm, bn, 1, 1));
    } else if s.m <= NARROW {
        out.push(narrow(s, pm, |wide, narrow_tile, t_wide, t_narrow| {
            (narrow_tile, wide, t_narrow, t_wide)
        }));
    } else if s.n <= NARROW {
        out.push(narrow(s, pn, |wide, narrow_tile, t_wide, t_narrow| {
            (wide, narrow_tile, t_wide, t_narrow)
        }));
    } else {
        let fits: Vec<_> = LARGE
            .iter()
            .copied()
            .filter(|(bm, bn, _, _)| *bm <= pm && *bn <= pn)
            .collect();
        let fits = if fits.is_empty() {
            LARGE.to_vec()
        } else {
            fits
        };
        let wave = fits.iter().find(|c| s.fills_wave(**c));
        out.extend(wave.or(fits.last()).copied());
    }
    out.extend(LARGE.iter().rev());
    out.push((1, 32, 1, 1));
    out
}

/// Tiles for a problem with one narrow side of padded extent `p`: the narrow
/// side unsplit, the wide side the largest of 128/64/32 that fills a wave.
/// `orient(wide, narrow, thread_wide, thread_narrow)` builds the tuple.
fn narrow(
    s: &Shape,
    p: u32,
    orient: impl Fn(u32, u32, u32, u32) -> (u32, u32, u32, u32),
) -> (u32, u32, u32, u32) {
    let options = narrow_options(p, orient);
    options
        .iter()
        .copied()
        .find(|c| s.fills_wave(*c))
        .unwrap_or(options[2])
}

/// The narrow side's tiles with the wide side 128, 64 and 32 wide.
fn narrow_options(
    p: u32,
    orient: impl Fn(u32, u32, u32, u32) -> (u32, u32, u32, u32),
) -> Vec<(u32, u32, u32, u32)> {
    let t_narrow = (p / 8).max(1);
    let lanes_narrow = p / t_narrow;
    [128, 64, 32]
        .into_iter()
        .map(|wide| {
            let t_wide = (wide * lanes_narrow / 128).clamp(1, 8);
            orient(wide, p, t_wide, t_narrow)
        })
        .collect()
}

/// Completes a tile choice with `block_k` and vector widths (rules 2 and 3);
/// `None` when it does not validate.
fn finish(
    kernel: &Kernel,
    plan: &MatmulPlan,
    target: SmVersion,
    s: &Shape,
    (block_m, block_n, thread_m, thread_n): (u32, u32, u32, u32),
) -> Option<Tiles> {
    let threads = (block_m / thread_m) * (block_n / thread_n);
    let per_thread = match thread_m * thread_n {
        0..=4 => 32,
        5..=16 => 16,
        _ => 8,
    };
    let mut block_k = 64;
    while block_k > 1 && (block_m + block_n) * block_k > per_thread * threads {
        block_k /= 2;
    }
    let block_k = block_k.min(s.k.next_power_of_two());
    let mut tiles = Tiles {
        block_m,
        block_n,
        block_k,
        thread_m,
        thread_n,
        vector_a: 1,
        vector_b: 1,
        group_m: 1,
        stages: 1,
        split_k: 1,
    };
    let valid = |t: Tiles| Layout::new(kernel, plan, t, target).is_ok();
    if !valid(tiles) {
        return None;
    }
    for v in [8, 4, 2] {
        let t = Tiles {
            vector_a: v,
            ..tiles
        };
        if valid(t) {
            tiles = t;
            break;
        }
    }
    for v in [8, 4, 2] {
        let t = Tiles {
            vector_b: v,
            ..tiles
        };
        if valid(t) {
            tiles = t;
            break;
        }
    }
    Some(tiles)
}
