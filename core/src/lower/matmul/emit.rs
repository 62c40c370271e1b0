//! Emits a contraction's instruction list for a checked [`Layout`].
//!
//! Shape of the kernel (one block, one `block_m × block_n` tile):
//!
//! ```text
//! decode tile and batch from ctaid.x (row by row, or grouped); set up per-thread pointers
//! loop over K in steps of block_k:
//!     load the A and B tiles (global → registers, predicated, zero outside)
//!     store them as f32 to shared memory ([k][m] and [k][n])
//!     bar.sync
//!     block_k unrolled steps: read thread_m + thread_n values, thread_m·thread_n fma
//!     bar.sync
//! with split_k above 1: partial sums through the workspace, the last block goes on
//! epilogue: evaluate the root per in-range output, store
//! ```
//!
//! With `stages` above 1 the loop is [`pipeline::ring`]: `cp.async` copies
//! the tiles `stages - 1` ahead into a ring of slots ([`Stager::issue`]),
//! and the same `block_k` steps read the slot of the current tile.
//!
//! With `split_k` above 1 the block's loop covers its slice of `K`
//! (`%ctaid.y`) and [`Split::reduce`](super::split::Split::reduce) adds the
//! slices up before the epilogue, in the last block of the tile to arrive.
//!
//! Every thread runs the whole loop (an out-of-range thread computes on
//! zeros), so every thread reaches every barrier; only the epilogue, after
//! the last one, branches per output.

use super::output::{BlockShape, Outputs, begin, finish};
use super::pipeline::{self, Ring};
use super::stage::{Origin, Stager};
use super::{Layout, MatmulPlan, Side};
use crate::dtype::DType;
use crate::ir::Kernel;
use crate::lower::Lowered;
use crate::ptx::Builder;
use crate::ptx::inst::{Addr, ArithOp, Cmp, Op, Operand, Reg, Space, Ty};

pub(super) fn emit(kernel: &Kernel, plan: &MatmulPlan, layout: &Layout) -> Lowered {
    let t = layout.tiles;
    let mut b = Builder::new();
    let (tile, smem, k0) = begin(
        &mut b,
        (kernel, plan),
        [t.block_m, t.block_n, t.block_k],
        t.group_m,
        layout.split.as_ref(),
    );
    let origin = Origin {
        tid: tile.tid,
        smem,
        m0: tile.m0,
        n0: tile.n0,
        env: &tile.env,
        k0,
    };
    let a = Stager::new(&mut b, kernel, plan, layout, Side::A, &origin);
    let bs = Stager::new(&mut b, kernel, plan, layout, Side::B, &origin);

    let tx = b.u32_op(ArithOp::Rem, tile.tid, imm(layout.threads_n));
    let ty = b.u32_op(ArithOp::Div, tile.tid, imm(layout.threads_n));
    let acc = if t.stages == 1 {
        main_loop(&mut b, kernel, layout, [&a, &bs], [tx, ty], smem)
    } else {
        pipelined(&mut b, layout, [&a, &bs], [tx, ty], smem)
    };

    let params = kernel.inputs.len() + 1;
    let reduced = layout
        .split
        .map(|split| split.reduce(&mut b, &tile, (smem, layout.threads, params), &acc));

    let m_base = b.u32_mad(ty, imm(layout.frag_m), tile.m0);
    let n_base = b.u32_mad(tx, imm(layout.frag_n), tile.n0);
    let ms = coordinates(&mut b, m_base, Axis::m(layout));
    let ns = coordinates(&mut b, n_base, Axis::n(layout));
    let overhang = |axis: Axis| (!axis.extent.is_multiple_of(axis.block)).then_some(axis.extent);
    let outputs = Outputs {
        acc: &acc,
        ms: &ms,
        ns: &ns,
        m_bound: overhang(Axis::m(layout)),
        n_bound: overhang(Axis::n(layout)),
        run: layout.frag_n,
    };
    finish(
        b,
        kernel,
        plan,
        (&tile, &outputs),
        reduced,
        BlockShape {
            threads: layout.threads,
            shared_bytes: layout.shared_bytes,
            split: layout.split,
            min_blocks: 0,
            persistent: false,
            registers: 0,
        },
    )
}

/// The `k` loop with one stage; returns the accumulators, `[i][j]` for the
/// thread's `i`-th row and `j`-th column.
fn main_loop(
    b: &mut Builder,
    kernel: &Kernel,
    layout: &Layout,
    [a, bs]: [&Stager<'_>; 2],
    threads: [Reg; 2],
    smem: Reg,
) -> Vec<Vec<Reg>> {
    let ([a_frag, b_frag], acc) = fragments(b, layout, threads, smem);

    let iterations = layout.k_tiles();
    let looped = (iterations > 1).then(|| {
        let counter = b.u32_imm(0);
        let top = b.label();
        b.place(top);
        (counter, top)
    });

    // All global loads first, so that they are in flight together.
    let a_values = a.load(b, kernel);
    let b_values = bs.load(b, kernel);
    a.store(b, &a_values);
    bs.store(b, &b_values);
    b.push(Op::BarSync);
    rank_updates(b, layout, &acc, [a_frag, b_frag]);
    if let Some((counter, top)) = looped {
        // The next iteration's stores must wait for every thread's reads.
        b.push(Op::BarSync);
        a.advance(b);
        bs.advance(b);
        b.push(Op::Arith {
            op: ArithOp::Add,
            ty: Ty::U32,
            dst: counter,
            a: counter.into(),
            b: Operand::Int(1),
        });
        let more = b.setp(Cmp::Lt, Ty::U32, counter, imm(iterations));
        b.bra_if(more, false, top);
    }
    acc
}

/// The `k` loop over a ring of `stages` slots filled by `cp.async`
/// ([`pipeline::ring`]); returns the accumulators as [`main_loop`] does.
fn pipelined(
    b: &mut Builder,
    layout: &Layout,
    [a, bs]: [&Stager<'_>; 2],
    threads: [Reg; 2],
    smem: Reg,
) -> Vec<Vec<Reg>> {
    let t = layout.tiles;
    let ([a_frag, b_frag], acc) = fragments(b, layout, threads, smem);
    let issue = |b: &mut Builder, slot: Reg| {
        a.issue(b, slot);
        bs.issue(b, slot);
        a.advance(b);
        bs.advance(b);
    };
    let ring = Ring {
        tiles: layout.k_tiles(),
        count: None,
        stages: t.stages,
        slot_bytes: layout.slot_bytes,
        async_proxy: false,
        held: 0,
    };
    pipeline::ring(b, ring, issue, |b, slot| {
        let a_slot = b.u32_op(ArithOp::Add, a_frag, slot);
        let b_slot = b.u32_op(ArithOp::Add, b_frag, slot);
        rank_updates(b, layout, &acc, [a_slot, b_slot]);
    });
    acc
}

/// The shared addresses of the thread's A and B fragments (in slot 0), and
/// its accumulators, zeroed.
fn fragments(
    b: &mut Builder,
    layout: &Layout,
    [tx, ty]: [Reg; 2],
    smem: Reg,
) -> ([Reg; 2], Vec<Vec<Reg>>) {
    let t = layout.tiles;
    let a_frag = b.u32_mad(ty, imm(layout.frag_m * 4), smem);
    let a_frag = b.u32_op(ArithOp::Add, a_frag, imm(layout.a.offset));
    let b_frag = b.u32_mad(tx, imm(layout.frag_n * 4), smem);
    let b_frag = b.u32_op(ArithOp::Add, b_frag, imm(layout.b.offset));
    let acc = (0..t.thread_m)
        .map(|_| (0..t.thread_n).map(|_| b.f32_imm(0.0)).collect())
        .collect();
    ([a_frag, b_frag], acc)
}

/// One tile's `block_k` unrolled rank-1 updates of the accumulators, from
/// the fragments at `a_frag` and `b_frag`.
fn rank_updates(b: &mut Builder, layout: &Layout, acc: &[Vec<Reg>], [a_frag, b_frag]: [Reg; 2]) {
    let m_axis = Axis::m(layout);
    let n_axis = Axis::n(layout);
    for kk in 0..layout.tiles.block_k {
        let xs = fragment(b, a_frag, kk * layout.a.row, m_axis);
        let ys = fragment(b, b_frag, kk * layout.b.row, n_axis);
        for (x, row) in xs.iter().zip(acc) {
            for (y, c) in ys.iter().zip(row) {
                b.push(Op::Mad {
                    ty: Ty::F32,
                    dst: *c,
                    a: (*x).into(),
                    b: (*y).into(),
                    c: (*c).into(),
                });
            }
        }
    }
}

/// How a thread's outputs spread along one tile dimension: `count` values in
/// groups of `vector` consecutive ones, consecutive threads on consecutive
/// groups, groups `threads · vector` apart (so that a warp's shared-memory
/// reads of one group are contiguous).
#[derive(Debug, Clone, Copy)]
struct Axis {
    count: u32,
    vector: u32,
    threads: u32,
    extent: u32,
    block: u32,
}

impl Axis {
    fn m(layout: &Layout) -> Axis {
        Axis {
            count: layout.tiles.thread_m,
            vector: layout.frag_m,
            threads: layout.threads_m,
            extent: layout.m_extent,
            block: layout.tiles.block_m,
        }
    }

    fn n(layout: &Layout) -> Axis {
        Axis {
            count: layout.tiles.thread_n,
            vector: layout.frag_n,
            threads: layout.threads_n,
            extent: layout.n_extent,
            block: layout.tiles.block_n,
        }
    }

    /// The `i`-th value's offset from the thread's first.
    fn offset(self, i: u32) -> u32 {
        (i / self.vector) * self.threads * self.vector + i % self.vector
    }
}

/// Reads one `k` row of a thread's fragment from shared memory.
fn fragment(b: &mut Builder, base: Reg, row_start: u32, axis: Axis) -> Vec<Reg> {
    (0..axis.count)
        .step_by(axis.vector as usize)
        .flat_map(|i| {
            let addr = Addr {
                base,
                offset: i64::from((row_start + axis.offset(i)) * 4),
            };
            if axis.vector == 1 {
                vec![b.load(Space::Shared, DType::F32, addr)]
            } else {
                b.load_f32_vec(Space::Shared, addr, axis.vector as usize)
            }
        })
        .collect()
}

/// A thread's output coordinates along one axis.
fn coordinates(b: &mut Builder, base: Reg, axis: Axis) -> Vec<Reg> {
    (0..axis.count)
        .map(|i| match axis.offset(i) {
            0 => base,
            offset => b.u32_op(ArithOp::Add, base, imm(offset)),
        })
        .collect()
}

fn imm(value: u32) -> Operand {
    Operand::Int(i64::from(value))
}
