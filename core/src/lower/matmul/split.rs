//! Split-K: the `K` tiles cut into slices, one block per slice of each
//! output tile, and the reduction of their partial sums.
//!
//! Slice `s` (`%ctaid.y`) covers tiles `s·tiles .. (s+1)·tiles` of `K`,
//! `tiles = ⌈⌈K / block_k⌉ / split_k⌉`: every slice runs the same loop,
//! and the last one's tiles past `K` are staged as zeros like any tile
//! that overhangs `K`. A slice wholly past `K` would be a block of wasted
//! work: such points are rejected ([`Constraint::Split`]), never clamped,
//! so that a schedule means what it says.
//!
//! The workspace ([`Launch::workspace_bytes`](crate::lower::Launch)) holds
//! `split_k` slices of partial tiles, then one `u32` arrival counter per
//! output tile (`%ctaid.x`):
//!
//! ```text
//! partial[s][tile][e][tid]  f32, e < thread_m·thread_n (a warp's stores are contiguous)
//! counter[tile]             u32, zero between launches
//! ```
//!
//! After its `k` loop a block runs:
//!
//! ```text
//! store its accumulators to partial[slice][tile]
//! fence.acq_rel.gpu; bar.sync                (the block's partial is visible to the GPU)
//! thread 0: old = atom.add.u32 counter[tile], 1
//!           last = old == split_k - 1; if last: counter[tile] = 0
//!           shared flag = last
//! bar.sync; every thread reads the flag; all but the last block exit
//! fence.acq_rel.gpu
//! acc = Σ_{s = 0 .. split_k} partial[s][tile]   (ld.global.cg: L2, never a stale L1 line)
//! the epilogue, on acc
//! ```
//!
//! The last block reads its own slice back from the workspace too rather
//! than from registers: the sum then needs no second set of registers, and
//! adds the same values in the same order (slice 0 first) whichever block
//! arrives last, so the output is deterministic. The last block resets its
//! tile's counter, so the workspace is ready for the next launch;
//! launchers zero it once, when they allocate it.

use super::MatmulPlan;
use super::output::Tile;
use crate::dtype::DType;
use crate::ir::Kernel;
use crate::lower::{Constraint, Violation};
use crate::ptx::Builder;
use crate::ptx::inst::{Addr, ArithOp, Cmp, Label, Op, Operand, Reg, RegClass, Space, Special, Ty};
use crate::target::SmVersion;

/// The most slices a schedule may cut `K` into.
pub(crate) const MAX_SPLIT_K: u32 = 16;

/// The `split_k` values worth trying for a contraction (the space's and
/// the default's): 1, and where even the coarsest tiling (256 × 256)
/// leaves SMs idle, 2, 4, 8 and 16 while each slice is at least two of the
/// shallowest `K` tiles (8) deep. Elsewhere more blocks gain little and
/// the partial tiles cost traffic.
pub fn split_k_values(kernel: &Kernel, plan: &MatmulPlan, target: SmVersion) -> Vec<u32> {
    let coarsest = u64::from(plan.m_extent(kernel).div_ceil(256))
        * u64::from(plan.n_extent(kernel).div_ceil(256))
        * plan.batch_count(kernel);
    let idle = coarsest < u64::from(target.limits().sm_count);
    std::iter::once(1)
        .chain(
            [2, 4, 8, MAX_SPLIT_K]
                .into_iter()
                .filter(|s| idle && plan.k_extent(kernel) >= s * 16),
        )
        .collect()
}

/// How `K` is cut, and where each part of the workspace lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Split {
    pub slices: u32,
    /// `K` tiles per slice.
    pub tiles: u32,
    /// Bytes of one slice's partial tiles (all output tiles).
    pub slice_bytes: u32,
    /// Byte offset of the counters.
    pub counters: u32,
    pub workspace_bytes: u64,
}

/// `K` tiles of `block_k` each block's loop runs over: all of `K`'s, or
/// its slice's.
pub(crate) fn k_tiles(split: Option<Split>, k_extent: u32, block_k: u32) -> u32 {
    match split {
        Some(split) => split.tiles,
        None => k_extent.div_ceil(block_k),
    }
}

/// Whether the tiles the blocks run over reach past `K` (so loads need a
/// `k` guard).
pub(crate) fn k_overhangs(split: Option<Split>, k_extent: u32, block_k: u32) -> bool {
    let slices = split.map_or(1, |s| s.slices);
    slices * k_tiles(split, k_extent, block_k) * block_k != k_extent
}

/// What [`Split::new`] needs to know of the kernel and the tiles.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Extents {
    pub k_extent: u32,
    pub block_k: u32,
    /// Output tiles: blocks along `%ctaid.x`.
    pub grid: u64,
    /// Accumulators per block: `block_m · block_n`.
    pub tile_values: u32,
}

impl Split {
    /// Checks `split_k` against the kernel's `K` tiles and the workspace's
    /// 32-bit offsets; `None` for 1 (no split).
    pub fn new(split_k: u32, extents: Extents) -> Result<Option<Split>, Violation> {
        if !(1..=MAX_SPLIT_K).contains(&split_k) {
            return Err(Violation::new(
                Constraint::Range,
                format!("split_k = {split_k}; expected 1 to {MAX_SPLIT_K}"),
            ));
        }
        if split_k == 1 {
            return Ok(None);
        }
        let Extents {
            k_extent,
            block_k,
            grid,
            tile_values,
        } = extents;
        let k_tiles = k_extent.div_ceil(block_k);
        let tiles = k_tiles.div_ceil(split_k);
        if (split_k - 1) * tiles >= k_tiles {
            return Err(Violation::new(
                Constraint::Split,
                format!(
                    "split_k = {split_k} slices of {tiles} tiles of {block_k} leave the last past K = {k_extent} ({k_tiles} tiles)"
                ),
            ));
        }
        let slice_bytes = grid * u64::from(tile_values) * 4;
        let counters = u64::from(split_k) * slice_bytes;
        let workspace_bytes = counters + grid * 4;
        if workspace_bytes > u64::from(u32::MAX) {
            return Err(Violation::new(
                Constraint::Split,
                format!(
                    "split_k = {split_k} needs a workspace of {workspace_bytes} bytes; the lowering addresses at most 4 GiB"
                ),
            ));
        }
        Ok(Some(Split {
            slices: split_k,
            tiles,
            slice_bytes: slice_bytes as u32,
            counters: counters as u32,
            workspace_bytes,
        }))
    }

    /// The first `k` of the block's slice: `%ctaid.y · tiles · block_k`.
    pub(super) fn k0(&self, b: &mut Builder, block_k: u32) -> Reg {
        let slice = b.special(Special::CtaidY);
        b.u32_op(ArithOp::Mul, slice, imm(self.tiles * block_k))
    }

    /// Emits the reduction after the `k` loop (see the [module docs](self)):
    /// blocks other than the last of their tile jump to the returned label,
    /// which the caller places after the epilogue; in the last block `acc`
    /// ends holding the sum of every slice.
    pub(super) fn reduce(
        &self,
        b: &mut Builder,
        tile: &Tile,
        (smem, threads, workspace_param): (Reg, u32, usize),
        acc: &[Vec<Reg>],
    ) -> Label {
        let values: Vec<Reg> = acc.iter().flatten().copied().collect();
        let workspace = b.param_ptr(workspace_param);
        let ctaid = b.special(Special::CtaidX);
        let slot = b.u32_mad(ctaid, imm(values.len() as u32 * threads), tile.tid);
        let first = b.global_addr(workspace, slot, 4);
        let slice = b.special(Special::CtaidY);
        let own_offset = b.u32_op(ArithOp::Mul, slice, imm(self.slice_bytes));
        let own = b.global_addr(first, own_offset, 1);
        let at = |base: Reg, e: usize| Addr {
            base,
            offset: (e as u32 * threads * 4).into(),
        };
        for (e, v) in values.iter().enumerate() {
            b.store(Space::Global, DType::F32, at(own, e), *v);
        }
        b.push(Op::Fence);
        b.push(Op::BarSync);

        let leader = b.setp(Cmp::Eq, Ty::U32, tile.tid, imm(0));
        let counter_offset = b.u32_mad(ctaid, imm(4), imm(self.counters));
        let counter = b.global_addr(workspace, counter_offset, 1);
        let counter = Addr {
            base: counter,
            offset: 0,
        };
        // Zero in every other thread, which split_k ≥ 2 makes "not last".
        let old = b.u32_imm(0);
        b.push_guarded(
            leader,
            false,
            Op::AtomAdd {
                ty: Ty::U32,
                dst: old,
                addr: counter,
                value: Operand::Int(1),
            },
        );
        let last = b.setp(Cmp::Eq, Ty::U32, old, imm(self.slices - 1));
        b.push_guarded(
            last,
            false,
            Op::St {
                space: Space::Global,
                ty: Ty::U32,
                addr: counter,
                srcs: vec![Operand::Int(0)],
            },
        );
        let flag = b.reg(RegClass::B32);
        b.push(Op::Selp {
            ty: Ty::U32,
            dst: flag,
            a: imm(1),
            b: imm(0),
            cond: last,
        });
        let shared_flag = Addr {
            base: smem,
            offset: 0,
        };
        b.push_guarded(
            leader,
            false,
            Op::St {
                space: Space::Shared,
                ty: Ty::U32,
                addr: shared_flag,
                srcs: vec![flag.into()],
            },
        );
        b.push(Op::BarSync);
        let arrived = b.reg(RegClass::B32);
        b.push(Op::Ld {
            space: Space::Shared,
            ty: Ty::U32,
            dsts: vec![arrived],
            addr: shared_flag,
        });
        let exit = b.label();
        let is_last = b.setp(Cmp::Ne, Ty::U32, arrived, imm(0));
        b.bra_if(is_last, true, exit);
        b.push(Op::Fence);

        for v in &values {
            b.push(Op::Mov {
                ty: Ty::F32,
                dst: *v,
                src: Operand::F32(0.0),
            });
        }
        let ptr = b.reg(RegClass::B64);
        b.push(Op::Mov {
            ty: Ty::U64,
            dst: ptr,
            src: first.into(),
        });
        let s = b.u32_imm(0);
        let top = b.label();
        b.place(top);
        for (e, v) in values.iter().enumerate() {
            let x = b.load_global_cg_f32(at(ptr, e), 1)[0];
            b.push(Op::Arith {
                op: ArithOp::Add,
                ty: Ty::F32,
                dst: *v,
                a: (*v).into(),
                b: x.into(),
            });
        }
        b.push(Op::Arith {
            op: ArithOp::Add,
            ty: Ty::U64,
            dst: ptr,
            a: ptr.into(),
            b: Operand::Int(i64::from(self.slice_bytes)),
        });
        b.push(Op::Arith {
            op: ArithOp::Add,
            ty: Ty::U32,
            dst: s,
            a: s.into(),
            b: Operand::Int(1),
        });
        let more = b.setp(Cmp::Lt, Ty::U32, s, imm(self.slices));
        b.bra_if(more, false, top);
        exit
    }
}

fn imm(value: u32) -> Operand {
    Operand::Int(i64::from(value))
}
