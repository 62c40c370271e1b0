//! Emits a contraction's instruction list for a checked [`Layout`].
//!
//! Shape of the kernel (one block, one `block_m × block_n` tile):
//!
//! ```text
//! decode tile and batch from ctaid.x; set up per-thread pointers
//! loop over K in steps of block_k:
//!     load the A and B tiles (global → registers, predicated, zero outside)
//!     store them as f32 to shared memory ([k][m] and [k][n])
//!     bar.sync
//!     block_k unrolled steps: read thread_m + thread_n values, thread_m·thread_n fma
//!     bar.sync
//! epilogue: evaluate the root per in-range output, store
//! ```
//!
//! Every thread runs the whole loop (an out-of-range thread computes on
//! zeros), so every thread reaches every barrier; only the epilogue, after
//! the last one, branches per output.
//!
//! Loading and storing a tile are separate steps ([`Stager::load`],
//! [`Stager::store`]) so that a pipelined variant (prefetch into registers or
//! `cp.async` into a second buffer) can reorder them.

use super::stage::{Origin, Stager, and};
use super::{Layout, MatmulPlan, Side};
use crate::dtype::DType;
use crate::ir::Kernel;
use crate::lower::expr::{self, Env};
use crate::lower::{Launch, Lowered, entry_name};
use crate::ptx::Builder;
use crate::ptx::inst::{Addr, ArithOp, Cmp, Op, Operand, Reg, Space, Special, Ty};

pub(super) fn emit(kernel: &Kernel, plan: &MatmulPlan, layout: &Layout) -> Lowered {
    let t = layout.tiles;
    let mut b = Builder::new();
    let tid = b.special(Special::TidX);
    let ctaid = b.special(Special::CtaidX);

    // Tiles along `n` vary fastest, then along `m`, then the batch.
    let tiles_n = layout.n_extent.div_ceil(t.block_n);
    let tiles_m = layout.m_extent.div_ceil(t.block_m);
    let (n_tile, rest) = split(&mut b, ctaid, tiles_n);
    let (m_tile, batch) = split(&mut b, rest, tiles_m);
    let m0 = b.u32_op(ArithOp::Mul, m_tile, imm(t.block_m));
    let n0 = b.u32_op(ArithOp::Mul, n_tile, imm(t.block_n));

    let mut env = Env {
        inputs: (0..kernel.inputs.len()).map(|i| b.param_ptr(i)).collect(),
        ..Env::default()
    };
    let out = b.param_ptr(kernel.inputs.len());
    let mut rest = batch;
    for (i, v) in plan.batch.iter().enumerate().rev() {
        let index = if i == 0 {
            rest
        } else {
            let (index, outer) = split(&mut b, rest, kernel.extent(*v));
            rest = outer;
            index
        };
        env.index.insert(*v, index);
    }

    let smem = b.shared_base();
    let origin = Origin {
        tid,
        smem,
        m0,
        n0,
        env: &env,
    };
    let a = Stager::new(&mut b, kernel, plan, layout, Side::A, &origin);
    let bs = Stager::new(&mut b, kernel, plan, layout, Side::B, &origin);

    let tx = b.u32_op(ArithOp::Rem, tid, imm(layout.threads_n));
    let ty = b.u32_op(ArithOp::Div, tid, imm(layout.threads_n));
    let acc = main_loop(&mut b, kernel, layout, [&a, &bs], [tx, ty], smem);

    let m_base = b.u32_mad(ty, imm(layout.frag_m), m0);
    let n_base = b.u32_mad(tx, imm(layout.frag_n), n0);
    let ms = coordinates(&mut b, m_base, Axis::m(layout));
    let ns = coordinates(&mut b, n_base, Axis::n(layout));
    epilogue(&mut b, kernel, plan, layout, &env, out, &acc, &ms, &ns);

    let grid = u64::from(tiles_m) * u64::from(tiles_n) * plan.batch_count(kernel);
    Lowered {
        ptx: b.finish(
            entry_name(kernel),
            kernel.inputs.len() + 1,
            layout.threads,
            layout.shared_bytes,
        ),
        launch: Launch {
            // At most one block per output element, and lowering checked
            // that the output has fewer than 2^31 elements.
            grid: [grid as u32, 1, 1],
            block: [layout.threads, 1, 1],
            dynamic_shared_bytes: layout.shared_bytes,
        },
    }
}

/// The `k` loop; returns the accumulators, `[i][j]` for the thread's `i`-th
/// row and `j`-th column.
fn main_loop(
    b: &mut Builder,
    kernel: &Kernel,
    layout: &Layout,
    [a, bs]: [&Stager<'_>; 2],
    [tx, ty]: [Reg; 2],
    smem: Reg,
) -> Vec<Vec<Reg>> {
    let t = layout.tiles;
    let a_frag = b.u32_mad(ty, imm(layout.frag_m * 4), smem);
    let a_frag = b.u32_op(ArithOp::Add, a_frag, imm(layout.a.offset));
    let b_frag = b.u32_mad(tx, imm(layout.frag_n * 4), smem);
    let b_frag = b.u32_op(ArithOp::Add, b_frag, imm(layout.b.offset));
    let acc: Vec<Vec<Reg>> = (0..t.thread_m)
        .map(|_| (0..t.thread_n).map(|_| b.f32_imm(0.0)).collect())
        .collect();

    let iterations = layout.k_extent.div_ceil(t.block_k);
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
    let m_axis = Axis::m(layout);
    let n_axis = Axis::n(layout);
    for kk in 0..t.block_k {
        let xs = fragment(b, a_frag, kk * layout.a.row, m_axis);
        let ys = fragment(b, b_frag, kk * layout.b.row, n_axis);
        for (x, row) in xs.iter().zip(&acc) {
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

/// Whether a coordinate is inside the tensor, when the tile can overhang.
/// Computed where it is used: the hardware has few predicate registers.
fn inside(b: &mut Builder, at: Reg, axis: Axis) -> Option<Reg> {
    (!axis.extent.is_multiple_of(axis.block))
        .then(|| b.setp(Cmp::Lt, Ty::U32, at, imm(axis.extent)))
}

/// Evaluates the root for each of the thread's in-range outputs, with the
/// accumulator standing for the reduction, and stores it.
#[allow(clippy::too_many_arguments)]
fn epilogue(
    b: &mut Builder,
    kernel: &Kernel,
    plan: &MatmulPlan,
    layout: &Layout,
    env: &Env,
    out: Reg,
    acc: &[Vec<Reg>],
    ms: &[Reg],
    ns: &[Reg],
) {
    let dtype = kernel.output.dtype;
    let vars = kernel.output_vars();
    let strides = kernel.strides_of(&kernel.output);
    let group = store_group(kernel, plan, layout) as usize;
    for (m, row) in ms.iter().zip(acc) {
        let m_ok = inside(b, *m, Axis::m(layout));
        for j0 in (0..ns.len()).step_by(group) {
            // With groups, `N` is a multiple of the group and groups start
            // aligned: the first element's predicate covers the group.
            let skip = b.label();
            let n_ok = inside(b, ns[j0], Axis::n(layout));
            if let Some(ok) = and(b, m_ok, n_ok) {
                b.bra_if(ok, true, skip);
            }
            let at = |n: Reg| {
                let mut e = env.clone();
                e.index.insert(plan.m, *m);
                e.index.insert(plan.n, n);
                e
            };
            let mut values = Vec::new();
            for (n, sum) in ns[j0..j0 + group].iter().zip(&row[j0..]) {
                let mut e = at(*n);
                let reduced = if plan.mean {
                    let scale = Operand::F32(1.0 / layout.k_extent as f32);
                    b.f32_op(ArithOp::Mul, *sum, scale)
                } else {
                    *sum
                };
                e.reduced.insert(plan.reduce, reduced);
                values.push(expr::emit(b, kernel, &mut e, kernel.root).reg());
            }
            let flat = expr::flat_index(b, &at(ns[j0]), &vars, &strides);
            let base = b.global_addr(out, flat, dtype.size());
            let addr = Addr { base, offset: 0 };
            if let [value] = values[..] {
                b.store(Space::Global, dtype, addr, value);
            } else {
                let (ty, srcs) = match dtype {
                    DType::F32 => (Ty::F32, values.iter().map(|v| (*v).into()).collect()),
                    _ => (
                        Ty::B16,
                        values.iter().map(|v| b.narrow(dtype, *v).into()).collect(),
                    ),
                };
                b.push(Op::St {
                    space: Space::Global,
                    ty,
                    addr,
                    srcs,
                });
            }
            b.place(skip);
        }
    }
}

/// How many consecutive `n` outputs one store instruction writes: the
/// fragment width when `n` is the output's contiguous dimension and every
/// run stays aligned, else 1.
fn store_group(kernel: &Kernel, plan: &MatmulPlan, layout: &Layout) -> u32 {
    let group = layout.frag_n;
    if group == 1 || !layout.n_extent.is_multiple_of(group) {
        return 1;
    }
    let vars = kernel.output_vars();
    let strides = kernel.strides_of(&kernel.output);
    let aligned = vars.iter().zip(&strides).all(|(v, s)| {
        if *v == plan.n {
            *s == 1
        } else {
            kernel.extent(*v) == 1 || s.is_multiple_of(u64::from(group))
        }
    });
    if aligned { group } else { 1 }
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
