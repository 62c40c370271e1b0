//! The tensor-core contraction lowering: `mma.sync` m16n8k16 on fragments
//! read by `ldmatrix` (f16, bf16), or m16n8k8 tf32 on f32 fragments read
//! word by word and rounded by `cvt.rna.tf32.f32` (f32 with `allow_tf32`),
//! operand tiles moved by multi-stage `cp.async`.
//!
//! # When it applies (`layout`)
//!
//! Both factors are plain loads (a cast to f32 allowed, which widening
//! makes exact) of f16 or bf16 tensors of the same dtype: the tensor cores
//! multiply the stored values and accumulate in f32, which is what the
//! reference computes. Two f32 tensors qualify too when the kernel says
//! `allow_tf32`: the tensor cores then round each factor to tf32 (10
//! mantissa bits) and accumulate in f32, which the kernel opted into.
//! Other prologues (a scale, an f32 operand without the flag) are the SIMT
//! lowering's ([`Constraint::Operands`](crate::lower::Constraint)). Every
//! global access is a 16-byte `cp.async` of eight 16-bit (four f32)
//! elements, so each operand must be contiguous along `k` or along its
//! row, with that extent and every other stride a multiple of 8 (4)
//! elements ([`Constraint::Alignment`](crate::lower::Constraint)).
//!
//! # The schedule ([`MmaTiles`])
//!
//! A block computes a `block_m × block_n` tile of one batch element (blocks
//! numbered like the SIMT lowering's) with `(block_m / warp_m) · (block_n /
//! warp_n)` warps; each warp owns a `warp_m × warp_n` sub-tile, held as
//! `(warp_m / 16) · (warp_n / 8)` m16n8 accumulator fragments (four f32
//! registers per lane each).
//!
//! Shape of the kernel:
//!
//! ```text
//! decode tile and batch from ctaid.x; per-thread copy pointers, per-lane ldmatrix addresses
//! prologue: cp.async tiles 0 .. stages-1 into ring slots 0 .. stages-2, one group each
//! loop over the K tiles (kt):
//!     cp.async.wait_group stages-2          (tile kt has landed, for this thread)
//!     bar.sync                               (… for every thread; slot (kt-1) is free)
//!     cp.async tile kt+stages-1 into slot (kt+stages-1) % stages (when there is one); commit
//!     block_k/16 steps: ldmatrix.x4 A and B fragments from slot kt % stages, mma.sync each pair
//!       (tf32: block_k/8 steps: ld.shared.f32 + cvt.rna.tf32.f32 per fragment register)
//! epilogue: evaluate the root per in-range output from the accumulators, store
//! ```
//!
//! With one stage the loop loads, waits, synchronizes, computes and
//! synchronizes again (nothing overlaps). With `prefetch = 1` (two stages
//! or more) each k-step's fragments are loaded during the step before,
//! and the next tile's first k-step's right after the barrier, which moves
//! to before the tile's last k-step (`pipeline::ring_ahead`):
//! the loads' latency overlaps `mma`s, and the barrier no longer stands
//! between a tile's loads and its first `mma`. Every thread runs the whole loop
//! (collectives are reached by all); only the copies of a tile with fewer
//! 16-byte chunks than threads and the epilogue's stores are predicated.
//!
//! # Shared memory
//!
//! Each operand tile keeps its global layout in shared memory: rows along
//! its non-contiguous dimension, `contiguous extent + 8` elements per row
//! (f32: `+ 4` for `k`-contiguous tiles, `+ 8` for the others; see
//! `layout::pad` for why neither conflicts).
//! Which dimension is contiguous decides the `ldmatrix` form: A as `m × k`
//! (`k` contiguous) and B as `[N][K]` load without `.trans`; A as `[K][M]`
//! and B as `[K][N]` load with `.trans`, which hands each lane the same
//! fragment. The 8-element (16-byte) padding keeps rows 16-byte aligned
//! for `cp.async` and `ldmatrix`, and shifts consecutive rows by four
//! banks, so the eight rows an `ldmatrix` phase reads cover all 32 banks:
//! conflict-free, at the cost of `8 / extent` more memory.
//!
//! With `swizzle = 1` (16-bit operands) rows are unpadded and each row's
//! 16-byte chunks are permuted by an XOR with a key of the row
//! (`layout::MmaStaging`): `ldmatrix` is conflict-free as well, no
//! memory is spent on padding, and rows start on 128-byte lines, so each
//! warp's 32 `cp.async` copies fill four whole lines. Each lane takes its
//! row's key once, before the loop: its `ldmatrix` addresses are a few
//! registers (one per class of fragments that share the low bits of
//! their chunk offset) plus constant offsets, as with padded rows.
//!
//! # Edges
//!
//! Rows past `M` or `N` only reach accumulators of outputs that are never
//! stored, and elements past `K` must add nothing: `cp.async`'s source
//! size zero-fills both (0 bytes read), the rows' addresses clamped to the
//! last row so that they stay valid (`copy`).
//!
//! With `split_k` above 1 each block's ring covers its slice of `K` and
//! the slices are added up as for SIMT points (`split`), on the
//! `mma` accumulators before the epilogue.
//!
//! # Warpgroups (`wgmma = 1`)
//!
//! On sm_90, 16-bit operands can be multiplied by Hopper's
//! `wgmma.mma_async` instead: the block's threads form warpgroups of 128,
//! each computing a `warp_m × warp_n` sub-tile (64 or 128 rows, up to 256
//! columns), and the tensor cores read both operands from the ring
//! themselves, through matrix descriptors: no fragments in registers, no
//! `ldmatrix`. The swizzled rows above are the instruction's canonical
//! layouts when a row is at most 128 bytes, which `k`-contiguous tiles
//! always are; a tile contiguous along `m` or `n` and wider is stored in
//! 128-byte column panels (`layout::MmaStaging::panels`), each
//! warpgroup's part starting on one (see `warpgroup`). There, with
//! `persistent = 1`, blocks loop over the grid's tiles, each filling its
//! ring for the next tile before the current one's epilogue. With
//! `producer = 1` a warpgroup of its own does all the copying while the
//! others multiply, each ring slot handed over by a pair of memory
//! barriers, and gives its registers to them with `setmaxnreg` (see
//! `producer`, and `layout::Realloc` for the registers); with `producer =
//! 2` two sets of such warpgroups take a persistent block's tiles in turn
//! (ping-pong). Its copies are `cp.async`s, or with `tma = 1` one
//! thread's tensor-map copies (`tma`); with `cluster_m = 2` the two
//! blocks of a cluster share B's tiles through them.
//!
//! The code is split by pass: `layout` (checking a schedule), `copy`
//! (global → shared with `cp.async`), `emit` (the rest; its `k` loop is
//! the ring of `pipeline`, which the SIMT lowering's
//! multi-stage points share), `warpgroup` (the rest for `wgmma = 1`),
//! `producer` (the rest for `producer` 1 and 2).

mod copy;
mod emit;
pub(crate) mod layout;
mod producer;
#[cfg(test)]
mod tests;
mod tma;
mod warpgroup;

use super::MatmulPlan;
use crate::ir::Kernel;
use crate::lower::{Lowered, Violation};
pub use crate::schedule::MmaTiles;
use crate::schedule::Schedule;
use crate::target::SmVersion;

pub(crate) use layout::MmaLayout;

impl MmaTiles {
    pub fn from_schedule(schedule: &Schedule) -> Option<MmaTiles> {
        match schedule {
            Schedule::Mma(tiles) => Some(*tiles),
            _ => None,
        }
    }

    pub fn to_schedule(self) -> Schedule {
        Schedule::Mma(self)
    }

    /// Warps per block, or with `wgmma = 1` warpgroups per block.
    pub fn warps(self) -> u32 {
        (self.block_m / self.warp_m.max(1)).saturating_mul(self.block_n / self.warp_n.max(1))
    }

    /// Ring slots a tile's compute still reads once it has returned: 1
    /// with `wgmma = 1` and three stages or more (the tile's `wgmma`s stay
    /// in flight while the next tile's are issued), else 0. The copies
    /// then run that many tiles less ahead (`pipeline::Ring::held`).
    pub fn held(self) -> u32 {
        u32::from(self.wgmma == 1 && self.stages >= 3)
    }

    /// Tiles whose copies are in flight while one is computed.
    pub fn tiles_in_flight(self) -> u32 {
        self.stages.saturating_sub(1 + self.held())
    }

    /// The sets of warpgroups that multiply, each computing whole block
    /// tiles: two taking tiles in turn with `producer = 2`, else one.
    pub fn consumer_sets(self) -> u32 {
        if self.producer == 2 { 2 } else { 1 }
    }

    /// Threads per block: 32 a warp, or 128 a warpgroup with `wgmma = 1`,
    /// each set's (see [`MmaTiles::consumer_sets`]), and 128 more for a
    /// producer warpgroup.
    pub fn threads(self) -> u32 {
        let per: u32 = if self.wgmma == 1 { 128 } else { 32 };
        per.saturating_mul(self.warps())
            .saturating_mul(self.consumer_sets())
            .saturating_add(128 * self.producer.min(1))
    }
}

/// Whether the tensor-core lowering applies to the contraction's operands
/// (see `layout`); the schedule's own constraints are checked by
/// `MmaLayout::new`.
pub fn applies(kernel: &Kernel, plan: &MatmulPlan) -> bool {
    layout::operand_kind(kernel, plan).is_ok()
}

/// Lowers a contraction on tensor cores with the given tiles, after
/// checking them.
pub(crate) fn lower(
    kernel: &Kernel,
    plan: &MatmulPlan,
    tiles: MmaTiles,
    target: SmVersion,
) -> Result<Lowered, Violation> {
    let layout = MmaLayout::new(kernel, plan, tiles, target)?;
    Ok(if tiles.producer >= 1 {
        producer::emit(kernel, plan, &layout)
    } else if tiles.wgmma == 1 {
        warpgroup::emit(kernel, plan, &layout)
    } else {
        emit::emit(kernel, plan, &layout)
    })
}
