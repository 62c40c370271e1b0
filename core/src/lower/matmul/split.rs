//! Split-K: the `K` tiles cut into slices, one block per slice of each
//! output tile, and the reduction of their partial sums.
//!
//! A tail split cuts only some output tiles so: those of the grid's last,
//! partial wave over the SMs. The grid's first `whole` blocks each compute
//! a tile whole, as without a split; the blocks after them compute the
//! remaining tiles' slices, `slices` consecutive blocks a tile, along
//! `%ctaid.x`. With one block an SM, the last wave then takes `1/slices`
//! of a whole tile's time instead of all of it while most SMs idle. The
//! workspace, its counters and the reduction below are the split tiles'
//! alone (`tile` counts them from 0); whole tiles skip the reduction.
//!
//! Slice `s` (`%ctaid.y`, or with a tail split the block's place among
//! its tile's) covers tiles `s·tiles .. (s+1)·tiles` of `K`,
//! `tiles = ⌈⌈K / block_k⌉ / split_k⌉`: every slice runs the same loop,
//! and the last one's tiles past `K` are staged as zeros like any tile
//! that overhangs `K`. A slice wholly past `K` would be a block of wasted
//! work: such points are rejected ([`Constraint::Split`]), never clamped,
//! so that a schedule means what it says.
//!
//! The workspace ([`Launch::workspace_bytes`](crate::lower::Launch)) holds
//! `split_k` slices of partial tiles, then one `u32` arrival counter per
//! output tile split (`%ctaid.x`, or with a tail split its place among the
//! split tiles):
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
    let idle = !coarsest_fills(kernel, plan, target);
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
    /// Output tiles computed whole, by the grid's first blocks, before the
    /// split ones (a tail split); 0 with split-K, which splits every tile
    /// and lays its slices along `%ctaid.y`.
    pub whole: u32,
}

/// The most ways a tail split cuts a tile.
pub(crate) const MAX_TAIL_SPLIT: u32 = 4;

/// The `tail_split` values worth trying for a contraction (the space's): 1,
/// and where even the coarsest tiling (256 × 256) fills every SM at least
/// once, 2 and 4. Elsewhere [`split_k_values`] applies: the whole grid is
/// a partial wave.
pub fn tail_split_values(kernel: &Kernel, plan: &MatmulPlan, target: SmVersion) -> Vec<u32> {
    let fills = coarsest_fills(kernel, plan, target);
    std::iter::once(1)
        .chain([2, MAX_TAIL_SPLIT].into_iter().filter(|_| fills))
        .collect()
}

/// Whether the coarsest tiling (256 × 256) has a tile for every SM.
fn coarsest_fills(kernel: &Kernel, plan: &MatmulPlan, target: SmVersion) -> bool {
    let coarsest = u64::from(plan.m_extent(kernel).div_ceil(256))
        * u64::from(plan.n_extent(kernel).div_ceil(256))
        * plan.batch_count(kernel);
    coarsest >= u64::from(target.limits().sm_count)
}

/// Which part of the work a tail split's block does, in registers.
#[derive(Debug, Clone, Copy)]
pub(super) struct TailPart {
    /// Whether the block computes a slice of a split tile.
    pub split: Reg,
    /// Its tile's place among the split tiles.
    pub tile: Reg,
    /// Its slice.
    pub slice: Reg,
}

/// `K` tiles of `block_k` each block's loop runs over: all of `K`'s, or
/// its slice's; with a tail split, the most (a whole tile's).
pub(crate) fn k_tiles(split: Option<Split>, k_extent: u32, block_k: u32) -> u32 {
    match split {
        Some(split) if split.whole == 0 => split.tiles,
        _ => k_extent.div_ceil(block_k),
    }
}

/// Whether the tiles the blocks run over reach past `K` (so loads need a
/// `k` guard).
pub(crate) fn k_overhangs(split: Option<Split>, k_extent: u32, block_k: u32) -> bool {
    let whole = !k_extent.is_multiple_of(block_k);
    match split {
        Some(split) => {
            split.slices * split.tiles * block_k != k_extent || (split.whole > 0 && whole)
        }
        None => whole,
    }
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
            whole: 0,
        }))
    }

    /// Checks `tail_split` against the grid and the SMs; `None` for 1 (no
    /// split). The grid's `tiles % sm_count` last tiles are split, the
    /// others computed whole; both must be some, and the split tiles few
    /// enough that their slices shorten the last wave.
    pub fn tail(ways: u32, extents: Extents, sm_count: u32) -> Result<Option<Split>, Violation> {
        if !ways.is_power_of_two() || ways > MAX_TAIL_SPLIT {
            return Err(Violation::new(
                Constraint::Range,
                format!("tail_split = {ways}; expected 1, 2 or {MAX_TAIL_SPLIT}"),
            ));
        }
        if ways == 1 {
            return Ok(None);
        }
        let tiles = extents.grid;
        let split = tiles % u64::from(sm_count);
        if tiles < u64::from(sm_count) || split == 0 {
            return Err(Violation::new(
                Constraint::Split,
                format!(
                    "tail_split = {ways}: the grid's {tiles} tiles leave no partial wave over {sm_count} SMs after a whole one (split_k splits a grid smaller than a wave)"
                ),
            ));
        }
        // Split `ways` ways, the tiles' slices must take fewer waves (of one
        // block an SM) than `ways`, or the last wave is no shorter.
        let waves = (split * u64::from(ways)).div_ceil(u64::from(sm_count));
        if waves >= u64::from(ways) {
            return Err(Violation::new(
                Constraint::Split,
                format!(
                    "tail_split = {ways}: the last {split} of the grid's {tiles} tiles, split {ways} ways, fill {waves} waves over {sm_count} SMs, no shorter than the one they fill whole"
                ),
            ));
        }
        Ok(Split::new(
            ways,
            Extents {
                grid: split,
                ..extents
            },
        )?
        .map(|s| Split {
            whole: (tiles - split) as u32,
            ..s
        }))
    }

    /// Blocks along `%ctaid.x`: the output tiles, or with a tail split the
    /// whole ones and every slice of the split ones.
    pub fn blocks_x(&self, tiles: u64) -> u64 {
        if self.whole == 0 {
            tiles
        } else {
            u64::from(self.whole) + u64::from(self.slices) * (tiles - u64::from(self.whole))
        }
    }

    /// Blocks along `%ctaid.y`: split-K's slices, or 1.
    pub fn blocks_y(&self) -> u32 {
        if self.whole == 0 { self.slices } else { 1 }
    }

    /// A tail split's block's part, from `%ctaid.x`, and the index of its
    /// output tile in the grid's walk; `None` with split-K.
    pub(super) fn tail_part(&self, b: &mut Builder, ctaid: Reg) -> Option<(TailPart, Reg)> {
        if self.whole == 0 {
            return None;
        }
        let split = b.setp(Cmp::Ge, Ty::U32, ctaid, imm(self.whole));
        let past = b.u32_op(ArithOp::Sub, ctaid, imm(self.whole));
        let tile = b.u32_op(ArithOp::Div, past, imm(self.slices));
        let slice = b.u32_op(ArithOp::Rem, past, imm(self.slices));
        let split_index = b.u32_op(ArithOp::Add, tile, imm(self.whole));
        let index = b.u32_select(split, split_index, ctaid);
        Some((TailPart { split, tile, slice }, index))
    }

    /// The first `k` of the block's slice: `slice · tiles · block_k`, the
    /// slice `%ctaid.y` or the tail part's (0 for a whole tile).
    pub(super) fn k0(&self, b: &mut Builder, tail: Option<&TailPart>, block_k: u32) -> Reg {
        match tail {
            None => {
                let slice = b.special(Special::CtaidY);
                b.u32_op(ArithOp::Mul, slice, imm(self.tiles * block_k))
            }
            Some(part) => {
                let k0 = b.u32_op(ArithOp::Mul, part.slice, imm(self.tiles * block_k));
                let zero = b.u32_imm(0);
                b.u32_select(part.split, k0, zero)
            }
        }
    }

    /// With a tail split, the `K` tiles the block's loop runs over: its
    /// slice's, or a whole tile's.
    pub(super) fn tail_count(
        &self,
        b: &mut Builder,
        tail: Option<&TailPart>,
        k_tiles: u32,
    ) -> Option<Reg> {
        let part = tail?;
        let slice = b.u32_imm(self.tiles);
        let whole = b.u32_imm(k_tiles);
        Some(b.u32_select(part.split, slice, whole))
    }

    /// Emits the reduction after the `k` loop (see the [module docs](self)):
    /// blocks other than the last of their tile jump to the returned label,
    /// which the caller places after the epilogue; in the last block `acc`
    /// ends holding the sum of every slice. A tail split's whole tiles
    /// branch over it.
    pub(super) fn reduce(
        &self,
        b: &mut Builder,
        tile: &Tile,
        (smem, threads, workspace_param): (Reg, u32, usize),
        acc: &[Vec<Reg>],
    ) -> Label {
        let whole = tile.tail.map(|part| {
            let whole = b.label();
            b.bra_if(part.split, true, whole);
            whole
        });
        let values: Vec<Reg> = acc.iter().flatten().copied().collect();
        let workspace = b.param_ptr(workspace_param);
        let ctaid = tile
            .tail
            .map_or_else(|| b.special(Special::CtaidX), |part| part.tile);
        let slot = b.u32_mad(ctaid, imm(values.len() as u32 * threads), tile.tid);
        let first = b.global_addr(workspace, slot, 4);
        let slice = tile
            .tail
            .map_or_else(|| b.special(Special::CtaidY), |part| part.slice);
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
        if let Some(whole) = whole {
            b.place(whole);
        }
        exit
    }
}

fn imm(value: u32) -> Operand {
    Operand::Int(i64::from(value))
}
