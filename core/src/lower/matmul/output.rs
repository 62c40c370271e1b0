//! A block's output tile, shared by the SIMT and tensor-core lowerings:
//! which tile and batch element a block computes ([`Tile::decode`]), and
//! the epilogue that evaluates the root per output with the accumulator
//! standing for the reduction and stores it ([`epilogue`]), and the end of
//! the kernel with its launch configuration ([`finish`]).

use super::split::TailPart;
use super::{MatmulPlan, Split};
use crate::dtype::DType;
use crate::ir::Kernel;
use crate::lower::expr::{self, Env};
use crate::lower::{Constraint, Launch, Lowered, Violation, entry_name};
use crate::ptx::Builder;
use crate::ptx::inst::{Addr, ArithOp, Cmp, Label, Op, Operand, Reg, Space, Special, Ty};

/// Where a block's tile lies, and what every thread needs to address the
/// inputs and the output.
#[derive(Debug)]
pub(super) struct Tile {
    pub tid: Reg,
    /// The first `m` and `n` of the tile.
    pub m0: Reg,
    pub n0: Reg,
    /// Input pointers and the batch variables' indices.
    pub env: Env,
    /// The output pointer.
    pub out: Reg,
    /// Output tiles in the grid.
    pub grid: u64,
    /// With a tail split, which part of the work the block does.
    pub tail: Option<TailPart>,
    /// With a tail split, the `K` tiles the block's loop runs over (its
    /// slice's or a whole tile's; [`Ring::count`](super::pipeline::Ring)).
    pub count: Option<Reg>,
}

/// The largest `group_m` the lowerings implement.
const MAX_GROUP_M: u32 = 16;

/// Checks `group_m`: a power of two up to [`MAX_GROUP_M`], and when above 1,
/// fewer block rows than the grid has.
pub(super) fn check_group(group_m: u32, block_m: u32, m_extent: u32) -> Result<(), Violation> {
    if !group_m.is_power_of_two() || group_m > MAX_GROUP_M {
        return Err(Violation::new(
            Constraint::Range,
            format!("group_m = {group_m}; expected a power of two up to {MAX_GROUP_M}"),
        ));
    }
    let rows = m_extent.div_ceil(block_m);
    if group_m > 1 && group_m >= rows {
        return Err(Violation::new(
            Constraint::Tiling,
            format!(
                "group_m = {group_m} block rows is not fewer than the grid's {rows} (M = {m_extent} in tiles of {block_m})"
            ),
        ));
    }
    Ok(())
}

impl Tile {
    /// Decodes `ctaid.x` (with a tail split, the index of the block's
    /// tile, [`Split::tail_part`]) as [`Tile::at`] does.
    pub fn decode(
        b: &mut Builder,
        (kernel, plan): (&Kernel, &MatmulPlan),
        blocks: (u32, u32),
        group_m: u32,
        k_split: Option<&Split>,
    ) -> Tile {
        let tid = b.special(Special::TidX);
        let ctaid = b.special(Special::CtaidX);
        match k_split.and_then(|s| s.tail_part(b, ctaid)) {
            Some((part, index)) => Tile {
                tail: Some(part),
                ..Tile::at(b, (kernel, plan), blocks, group_m, (tid, index))
            },
            None => Tile::at(b, (kernel, plan), blocks, group_m, (tid, ctaid)),
        }
    }

    /// The tile numbered `index` in the grid's walk: the batch element
    /// varies slowest; within it, tiles along `n` vary fastest, then along
    /// `m` (`group_m` 1), or tiles run down each group of `group_m` block
    /// rows, then along `n`, then to the next group.
    pub fn at(
        b: &mut Builder,
        (kernel, plan): (&Kernel, &MatmulPlan),
        (block_m, block_n): (u32, u32),
        group_m: u32,
        (tid, index): (Reg, Reg),
    ) -> Tile {
        let tiles_n = plan.n_extent(kernel).div_ceil(block_n);
        let tiles_m = plan.m_extent(kernel).div_ceil(block_m);
        let (m_tile, n_tile, batch) = if group_m == 1 {
            let (n_tile, rest) = split(b, index, tiles_n);
            let (m_tile, batch) = split(b, rest, tiles_m);
            (m_tile, n_tile, batch)
        } else {
            let (pid, batch) = split(b, index, tiles_m * tiles_n);
            let (m_tile, n_tile) = grouped(b, pid, tiles_m, tiles_n, group_m);
            (m_tile, n_tile, batch)
        };
        let m0 = b.u32_op(ArithOp::Mul, m_tile, imm(block_m));
        let n0 = b.u32_op(ArithOp::Mul, n_tile, imm(block_n));

        let mut env = Env {
            inputs: (0..kernel.inputs.len()).map(|i| b.param_ptr(i)).collect(),
            read_only_inputs: true,
            ..Env::default()
        };
        let out = b.param_ptr(kernel.inputs.len());
        let mut rest = batch;
        for (i, v) in plan.batch.iter().enumerate().rev() {
            let index = if i == 0 {
                rest
            } else {
                let (index, outer) = split(b, rest, kernel.extent(*v));
                rest = outer;
                index
            };
            env.index.insert(*v, index);
        }
        Tile {
            tid,
            m0,
            n0,
            env,
            out,
            grid: u64::from(tiles_m) * u64::from(tiles_n) * plan.batch_count(kernel),
            tail: None,
            count: None,
        }
    }
}

/// What every contraction kernel starts with: the block's tile (its
/// walk's `group_m`), the base of the shared window, and with a split the
/// first `k` of the block's slice (with a tail split, also its count of
/// `K` tiles).
pub(super) fn begin(
    b: &mut Builder,
    (kernel, plan): (&Kernel, &MatmulPlan),
    [block_m, block_n, block_k]: [u32; 3],
    group_m: u32,
    k_split: Option<&Split>,
) -> (Tile, Reg, Option<Reg>) {
    let mut tile = Tile::decode(b, (kernel, plan), (block_m, block_n), group_m, k_split);
    let smem = b.shared_base();
    let k0 = k_split.map(|split| split.k0(b, tile.tail.as_ref(), block_k));
    let k_tiles = plan.k_extent(kernel).div_ceil(block_k);
    tile.count = k_split.and_then(|split| split.tail_count(b, tile.tail.as_ref(), k_tiles));
    (tile, smem, k0)
}

/// The tile `(m, n)` of the `pid`-th block of one batch element in the
/// grouped walk: groups of `group_m` block rows (the last one, `rows`,
/// possibly fewer) one after the other, each walked down its rows first.
fn grouped(b: &mut Builder, pid: Reg, tiles_m: u32, tiles_n: u32, group_m: u32) -> (Reg, Reg) {
    let (local, group) = split(b, pid, group_m * tiles_n);
    let first = b.u32_op(ArithOp::Mul, group, imm(group_m));
    let rows: Operand = if tiles_m.is_multiple_of(group_m) {
        imm(group_m)
    } else {
        let all = b.u32_imm(tiles_m);
        let left = b.u32_op(ArithOp::Sub, all, first);
        b.u32_op(ArithOp::Min, left, imm(group_m)).into()
    };
    let row = b.u32_op(ArithOp::Rem, local, rows);
    let m_tile = b.u32_op(ArithOp::Add, first, row);
    let n_tile = b.u32_op(ArithOp::Div, local, rows);
    (m_tile, n_tile)
}

/// A thread's accumulators and the output coordinates they belong to.
#[derive(Debug)]
pub(super) struct Outputs<'r> {
    /// `acc[i][j]` is the sum for output `(ms[i], ns[j])`.
    pub acc: &'r [Vec<Reg>],
    pub ms: &'r [Reg],
    pub ns: &'r [Reg],
    /// The extent to check a coordinate against, when the tiles can
    /// overhang it.
    pub m_bound: Option<u32>,
    pub n_bound: Option<u32>,
    /// How many consecutive entries of `ns` (from every multiple of it) are
    /// consecutive outputs, stored at once where the output allows it.
    pub run: u32,
}

/// A contraction block's size and what its kernel takes beyond the
/// inputs and the output.
#[derive(Debug, Clone, Copy)]
pub(super) struct BlockShape {
    pub threads: u32,
    pub shared_bytes: u32,
    /// Split-K's slices: a workspace parameter after the output, and
    /// `ctaid.y` over the slices.
    pub split: Option<Split>,
    /// Blocks per SM ptxas leaves room for (`.minnctapersm`; 0: it chooses).
    pub min_blocks: u32,
    /// Whether each block loops over tiles ([`Launch::persistent`]).
    pub persistent: bool,
    /// Registers each thread must get at launch ([`Launch::registers`]).
    pub registers: u32,
}

/// Ends a contraction kernel: the epilogue, then the label where the
/// blocks that are not the last of their tile to arrive (`reduced`, with
/// split-K) skip to, then the kernel and its launch configuration.
pub(super) fn finish(
    mut b: Builder,
    kernel: &Kernel,
    plan: &MatmulPlan,
    (tile, outputs): (&Tile, &Outputs<'_>),
    reduced: Option<Label>,
    block: BlockShape,
) -> Lowered {
    epilogue(&mut b, kernel, plan, tile, outputs);
    if let Some(exit) = reduced {
        b.place(exit);
    }
    assemble(b, kernel, tile.grid, block)
}

/// The kernel of a body that is complete, over a grid of `tiles` output
/// tiles, and its launch configuration.
pub(super) fn assemble(b: Builder, kernel: &Kernel, tiles: u64, block: BlockShape) -> Lowered {
    let params = kernel.inputs.len() + 1 + usize::from(block.split.is_some());
    let mut ptx = b.finish(
        entry_name(kernel),
        params,
        block.threads,
        block.shared_bytes,
    );
    ptx.min_blocks_per_sm = block.min_blocks;
    Lowered {
        ptx,
        launch: Launch {
            // At most one block per output element (a tail split cuts a
            // tile of at least 16 × 16 at most four ways), and lowering
            // checked that the output has fewer than 2^31 elements.
            grid: match block.split {
                Some(split) => [split.blocks_x(tiles) as u32, split.blocks_y(), 1],
                None => [tiles as u32, 1, 1],
            },
            block: [block.threads, 1, 1],
            dynamic_shared_bytes: block.shared_bytes,
            workspace_bytes: block.split.map_or(0, |s| s.workspace_bytes),
            persistent: block.persistent,
            registers: block.registers,
        },
    }
}

/// Evaluates the root for each of the thread's in-range outputs, with the
/// accumulator standing for the reduction, and stores it.
///
/// A row past `M` is branched over whole; within a row, outputs past `N`
/// are evaluated at the last column (their loads stay in bounds) and only
/// their stores are guarded, so that no branch splits a row and ptxas may
/// issue its loads ahead of the arithmetic. Branching around each output
/// had cost a 16 × 63 product with a GELU epilogue 28 bytes of spills on
/// sm_90; evaluating rows past `M` too, the loads of many out-of-range
/// outputs at once spilled others.
pub(super) fn epilogue(
    b: &mut Builder,
    kernel: &Kernel,
    plan: &MatmulPlan,
    tile: &Tile,
    outputs: &Outputs<'_>,
) {
    let dtype = kernel.output.dtype;
    let vars = kernel.output_vars();
    let strides = kernel.strides_of(&kernel.output);
    let k_extent = plan.k_extent(kernel);
    let group = store_group(kernel, plan, outputs.run) as usize;
    // Computed where they are used: the hardware has few predicate
    // registers.
    let inside = |b: &mut Builder, at: Reg, bound: Option<u32>| {
        bound.map(|extent| b.setp(Cmp::Lt, Ty::U32, at, imm(extent)))
    };
    for (m, row) in outputs.ms.iter().zip(outputs.acc) {
        let skip = b.label();
        if let Some(ok) = inside(b, *m, outputs.m_bound) {
            b.bra_if(ok, true, skip);
        }
        for j0 in (0..outputs.ns.len()).step_by(group) {
            let at = |n: Reg| {
                let mut e = tile.env.clone();
                e.index.insert(plan.m, *m);
                e.index.insert(plan.n, n);
                e
            };
            let mut values = Vec::new();
            for (n, sum) in outputs.ns[j0..j0 + group].iter().zip(&row[j0..]) {
                let n_at = match outputs.n_bound {
                    Some(extent) => b.u32_op(ArithOp::Min, *n, imm(extent - 1)),
                    None => *n,
                };
                let mut e = at(n_at);
                let reduced = if plan.mean {
                    let scale = Operand::F32(1.0 / k_extent as f32);
                    b.f32_op(ArithOp::Mul, *sum, scale)
                } else {
                    *sum
                };
                e.reduced.insert(plan.reduce, reduced);
                values.push(expr::emit(b, kernel, &mut e, kernel.root).reg());
            }
            let flat = expr::flat_index(b, &at(outputs.ns[j0]), &vars, &strides);
            let base = b.global_addr(tile.out, flat, dtype.size());
            let addr = Addr { base, offset: 0 };
            let (ty, srcs) = match dtype {
                DType::F32 => (Ty::F32, values.iter().map(|v| (*v).into()).collect()),
                _ => (
                    Ty::B16,
                    values.iter().map(|v| b.narrow(dtype, *v).into()).collect(),
                ),
            };
            let store = Op::St {
                space: Space::Global,
                ty,
                addr,
                srcs,
            };
            // With groups, `N` is a multiple of the group and groups start
            // aligned: the first element's predicate covers the group.
            match inside(b, outputs.ns[j0], outputs.n_bound) {
                Some(ok) => b.push_guarded(ok, false, store),
                None => b.push(store),
            }
        }
        b.place(skip);
    }
}

/// How many consecutive `n` outputs one store instruction writes: the run
/// when `n` is the output's contiguous dimension and every run stays
/// aligned, else 1.
fn store_group(kernel: &Kernel, plan: &MatmulPlan, run: u32) -> u32 {
    if run == 1 || !plan.n_extent(kernel).is_multiple_of(run) {
        return 1;
    }
    let vars = kernel.output_vars();
    let strides = kernel.strides_of(&kernel.output);
    let aligned = vars.iter().zip(&strides).all(|(v, s)| {
        if *v == plan.n {
            *s == 1
        } else {
            kernel.extent(*v) == 1 || s.is_multiple_of(u64::from(run))
        }
    });
    if aligned { run } else { 1 }
}

/// `(value % count, value / count)`, with no arithmetic when `count` is 1.
fn split(b: &mut Builder, value: Reg, count: u32) -> (Reg, Reg) {
    if count == 1 {
        return (b.u32_imm(0), value);
    }
    (
        b.u32_op(ArithOp::Rem, value, imm(count)),
        b.u32_op(ArithOp::Div, value, imm(count)),
    )
}

fn imm(value: u32) -> Operand {
    Operand::Int(i64::from(value))
}
