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
//! Loading and storing a tile are separate steps ([`Stager::load`],
//! [`Stager::store`]) so that a pipelined variant (prefetch into registers or
//! `cp.async` into a second buffer) can reorder them.

use std::collections::HashMap;

use super::{Layout, MatmulOperand, MatmulPlan, Staging};
use crate::dtype::DType;
use crate::ir::Kernel;
use crate::lower::expr::{self, Env};
use crate::lower::{Launch, Lowered, entry_name};
use crate::ptx::Builder;
use crate::ptx::inst::{Addr, ArithOp, Cmp, Op, Operand, Reg, RegClass, Space, Special, Ty};

pub(super) fn emit(kernel: &Kernel, plan: &MatmulPlan, layout: &Layout) -> Lowered {
    let t = layout.tiles;
    let mut b = Builder::new();
    let tid = b.special(Special::TidX);
    let ctaid = b.special(Special::CtaidX);

    let tiles_n = layout.n_extent.div_ceil(t.block_n);
    let tiles_m = layout.m_extent.div_ceil(t.block_m);
    let (n_tile, rest) = split(&mut b, ctaid, tiles_n);
    let (m_tile, batch) = split(&mut b, rest, tiles_m);
    let m0 = b.u32_op(ArithOp::Mul, m_tile, Operand::Int(i64::from(t.block_m)));
    let n0 = b.u32_op(ArithOp::Mul, n_tile, Operand::Int(i64::from(t.block_n)));

    let mut env = Env {
        inputs: (0..kernel.inputs.len()).map(|i| b.param_ptr(i)).collect(),
        ..Env::default()
    };
    let out = b.param_ptr(kernel.inputs.len());
    let mut rest = batch;
    for (i, v) in plan.batch.iter().enumerate().rev() {
        let extent = kernel.extent(*v);
        let index = if i == 0 {
            rest
        } else {
            let (index, outer) = split(&mut b, rest, extent);
            rest = outer;
            index
        };
        env.index.insert(*v, index);
    }

    let smem = b.shared_base();
    let mut a = Stager::new(
        &mut b,
        kernel,
        plan,
        &plan.a,
        &layout.a,
        layout,
        &env,
        tid,
        m0,
        layout.m_extent,
        smem,
    );
    let mut bs = Stager::new(
        &mut b,
        kernel,
        plan,
        &plan.b,
        &layout.b,
        layout,
        &env,
        tid,
        n0,
        layout.n_extent,
        smem,
    );

    let tx = b.u32_op(ArithOp::Rem, tid, Operand::Int(i64::from(layout.threads_n)));
    let ty = b.u32_op(ArithOp::Div, tid, Operand::Int(i64::from(layout.threads_n)));
    let a_frag = b.u32_mad(ty, Operand::Int(i64::from(layout.frag_m * 4)), smem);
    let a_frag = b.u32_op(
        ArithOp::Add,
        a_frag,
        Operand::Int(i64::from(layout.a.offset)),
    );
    let b_frag = b.u32_mad(tx, Operand::Int(i64::from(layout.frag_n * 4)), smem);
    let b_frag = b.u32_op(
        ArithOp::Add,
        b_frag,
        Operand::Int(i64::from(layout.b.offset)),
    );

    let acc: Vec<Vec<Reg>> = (0..t.thread_m)
        .map(|_| (0..t.thread_n).map(|_| b.f32_imm(0.0)).collect())
        .collect();

    let iterations = layout.k_extent.div_ceil(t.block_k);
    let looped = iterations > 1;
    let (counter, top) = if looped {
        let counter = b.u32_imm(0);
        let top = b.label();
        b.place(top);
        (Some(counter), Some(top))
    } else {
        (None, None)
    };

    let a_values = a.load(&mut b, kernel);
    let b_values = bs.load(&mut b, kernel);
    a.store(&mut b, &a_values);
    bs.store(&mut b, &b_values);
    b.push(Op::BarSync);
    for kk in 0..t.block_k {
        let a_row = fragment(
            &mut b,
            a_frag,
            kk * layout.a.row,
            t.thread_m,
            layout.frag_m,
            layout.threads_m,
        );
        let b_row = fragment(
            &mut b,
            b_frag,
            kk * layout.b.row,
            t.thread_n,
            layout.frag_n,
            layout.threads_n,
        );
        for (i, x) in a_row.iter().enumerate() {
            for (j, y) in b_row.iter().enumerate() {
                let c = acc[i][j];
                b.push(Op::Mad {
                    ty: Ty::F32,
                    dst: c,
                    a: (*x).into(),
                    b: (*y).into(),
                    c: c.into(),
                });
            }
        }
    }
    if let (Some(counter), Some(top)) = (counter, top) {
        b.push(Op::BarSync);
        a.advance(&mut b);
        bs.advance(&mut b);
        increment(&mut b, counter, 1);
        let more = b.setp(
            Cmp::Lt,
            Ty::U32,
            counter,
            Operand::Int(i64::from(iterations)),
        );
        b.bra_if(more, false, top);
    }

    let m_base = b.u32_mad(ty, Operand::Int(i64::from(layout.frag_m)), m0);
    let n_base = b.u32_mad(tx, Operand::Int(i64::from(layout.frag_n)), n0);
    let ms = coordinates(
        &mut b,
        m_base,
        t.thread_m,
        layout.frag_m,
        layout.threads_m,
        layout.m_extent,
        t.block_m,
    );
    let ns = coordinates(
        &mut b,
        n_base,
        t.thread_n,
        layout.frag_n,
        layout.threads_n,
        layout.n_extent,
        t.block_n,
    );
    let group = store_group(kernel, plan, layout);
    for (i, (m, m_ok)) in ms.iter().enumerate() {
        for j0 in (0..ns.len()).step_by(group as usize) {
            let (_, n_ok) = ns[j0];
            let ok = match (m_ok, n_ok) {
                (Some(p), Some(q)) => Some(b.pred_op(ArithOp::And, *p, q)),
                (p, q) => p.or(q),
            };
            let skip = b.label();
            if let Some(ok) = ok {
                b.bra_if(ok, true, skip);
            }
            let mut values = Vec::new();
            let mut first_env = None;
            for (j, (n, _)) in ns.iter().enumerate().skip(j0).take(group as usize) {
                let mut e = env.clone();
                e.index.insert(plan.m, *m);
                e.index.insert(plan.n, *n);
                let sum = acc[i][j];
                let value = if plan.mean {
                    b.f32_op(
                        ArithOp::Mul,
                        sum,
                        Operand::F32(1.0 / layout.k_extent as f32),
                    )
                } else {
                    sum
                };
                e.reduced.insert(plan.reduce, value);
                values.push(expr::emit(&mut b, kernel, &mut e, kernel.root).reg());
                first_env.get_or_insert(e);
            }
            let e = first_env.expect("a store group has at least one element");
            let flat = expr::flat_index(
                &mut b,
                &e,
                &kernel.output_vars(),
                &kernel.strides_of(&kernel.output),
            );
            let dtype = kernel.output.dtype;
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

    let threads = layout.threads;
    let grid = u64::from(tiles_m) * u64::from(tiles_n) * plan.batch_count(kernel);
    Lowered {
        ptx: b.finish(
            entry_name(kernel),
            kernel.inputs.len() + 1,
            threads,
            layout.shared_bytes,
        ),
        launch: Launch {
            grid: [grid as u32, 1, 1],
            block: [threads, 1, 1],
            dynamic_shared_bytes: layout.shared_bytes,
        },
    }
}

/// `(value % count, value / count)`, with no instructions when `count` is 1.
fn split(b: &mut Builder, value: Reg, count: u32) -> (Reg, Reg) {
    if count == 1 {
        return (b.u32_imm(0), value);
    }
    let count = Operand::Int(i64::from(count));
    (
        b.u32_op(ArithOp::Rem, value, count),
        b.u32_op(ArithOp::Div, value, count),
    )
}

/// `reg += by` on u32, in place.
fn increment(b: &mut Builder, reg: Reg, by: i64) {
    b.push(Op::Arith {
        op: ArithOp::Add,
        ty: Ty::U32,
        dst: reg,
        a: reg.into(),
        b: Operand::Int(by),
    });
}

/// Reads one `k` row of a thread's fragment from shared memory: `count`
/// values in groups of `vector` consecutive ones, groups `threads · vector`
/// apart (so that a warp's reads of one group are contiguous).
fn fragment(
    b: &mut Builder,
    base: Reg,
    row_start: u32,
    count: u32,
    vector: u32,
    threads: u32,
) -> Vec<Reg> {
    (0..count / vector)
        .flat_map(|g| {
            let offset = (row_start + g * threads * vector) * 4;
            let addr = Addr {
                base,
                offset: i64::from(offset),
            };
            if vector == 1 {
                vec![b.load(Space::Shared, DType::F32, addr)]
            } else {
                b.load_f32_vec(Space::Shared, addr, vector as usize)
            }
        })
        .collect()
}

/// A thread's output coordinates along one tile dimension, in fragment
/// order, each with the predicate "inside the tensor" when the tile can
/// overhang.
fn coordinates(
    b: &mut Builder,
    base: Reg,
    count: u32,
    vector: u32,
    threads: u32,
    extent: u32,
    block: u32,
) -> Vec<(Reg, Option<Reg>)> {
    (0..count)
        .map(|i| {
            let offset = (i / vector) * threads * vector + i % vector;
            let at = if offset == 0 {
                base
            } else {
                b.u32_op(ArithOp::Add, base, Operand::Int(i64::from(offset)))
            };
            let ok = (extent % block != 0)
                .then(|| b.setp(Cmp::Lt, Ty::U32, at, Operand::Int(i64::from(extent))));
            (at, ok)
        })
        .collect()
}

/// How many consecutive `n` outputs one store instruction writes: the
/// fragment width when `n` is the output's contiguous dimension and every
/// run stays aligned, else 1.
fn store_group(kernel: &Kernel, plan: &MatmulPlan, layout: &Layout) -> u32 {
    let group = layout.frag_n;
    if group == 1 || layout.n_extent % group != 0 {
        return 1;
    }
    let vars = kernel.output_vars();
    let strides = kernel.strides_of(&kernel.output);
    let aligned = vars.iter().zip(&strides).all(|(v, s)| {
        if *v == plan.n {
            *s == 1
        } else {
            kernel.extent(*v) == 1 || s % u64::from(group) == 0
        }
    });
    if aligned { group } else { 1 }
}

/// Moves one operand's tiles from global to shared memory.
struct Stager<'a> {
    staging: &'a Staging,
    operand: &'a MatmulOperand,
    threads: u32,
    block_k: u32,
    elem: u32,
    /// Global address of this thread's first element (pass 0) of the
    /// current tile.
    ptr: Reg,
    /// Shared address of the same element.
    shared: Reg,
    /// Per pass: whether the element is inside the tile's rows/columns
    /// along `x` (and the thread takes part), when that can fail.
    x_ok: Vec<Option<Reg>>,
    /// Per pass: the element's `k` within the tile, when `k` can overhang.
    k_local: Vec<Option<Reg>>,
    /// `K - k0` (as s32), when `k` can overhang.
    k_end: Option<Reg>,
    /// The active-thread predicate, when the tile has fewer vectors than
    /// the block has threads.
    active: Option<Reg>,
}

/// One pass's f32 values, ready for shared memory.
type Staged = Vec<Reg>;

impl<'a> Stager<'a> {
    #[allow(clippy::too_many_arguments)]
    fn new(
        b: &mut Builder,
        kernel: &Kernel,
        plan: &MatmulPlan,
        operand: &'a MatmulOperand,
        staging: &'a Staging,
        layout: &Layout,
        env: &Env,
        tid: Reg,
        x0: Reg,
        x_extent: u32,
        smem: Reg,
    ) -> Stager<'a> {
        let threads = layout.threads;
        let block_k = layout.tiles.block_k;
        let elem = staging.dtype.size();
        let k_extent = layout.k_extent;

        let cols = Operand::Int(i64::from(staging.cols));
        let r0 = b.u32_op(ArithOp::Div, tid, cols);
        let c0 = b.u32_op(ArithOp::Rem, tid, cols);
        let c0 = b.u32_op(ArithOp::Mul, c0, Operand::Int(i64::from(staging.vector)));
        let (x_local, k_local) = if staging.k_major { (r0, c0) } else { (c0, r0) };

        let x = b.u32_op(ArithOp::Add, x0, x_local);
        let mut offset = b.u32_op(ArithOp::Mul, x, imm(operand.stride_x));
        offset = b.u32_mad(k_local, imm(operand.stride_k), offset);
        for (v, stride) in plan.batch.iter().zip(&operand.stride_batch) {
            if *stride != 0 && kernel.extent(*v) > 1 {
                offset = b.u32_mad(env.index[v], imm(*stride), offset);
            }
        }
        let ptr = b.global_addr(env.inputs[operand.tensor.0], offset, elem);

        let shared = b.u32_mad(k_local, Operand::Int(i64::from(staging.row)), x_local);
        let shared = b.u32_op(ArithOp::Mul, shared, Operand::Int(4));
        let shared = b.u32_op(ArithOp::Add, shared, smem);
        let shared = b.u32_op(
            ArithOp::Add,
            shared,
            Operand::Int(i64::from(staging.offset)),
        );

        let active = staging.partial.then(|| {
            let units = staging.rows * staging.cols;
            b.setp(Cmp::Lt, Ty::U32, tid, Operand::Int(i64::from(units)))
        });
        let x_overhangs = x_extent % staging.block_x != 0;
        let k_overhangs = k_extent % block_k != 0;
        let mut x_ok = Vec::new();
        let mut k_locals = Vec::new();
        let mut by_step: HashMap<u32, Reg> = HashMap::new();
        for pass in 0..staging.passes {
            let (dx, dk) = steps(staging, pass, threads);
            let inside = x_overhangs.then(|| {
                let at = b.u32_op(ArithOp::Add, x, Operand::Int(i64::from(dx)));
                b.setp(Cmp::Lt, Ty::U32, at, Operand::Int(i64::from(x_extent)))
            });
            x_ok.push(match (inside, active) {
                (Some(p), Some(q)) => Some(b.pred_op(ArithOp::And, p, q)),
                (p, q) => p.or(q),
            });
            k_locals.push(k_overhangs.then(|| {
                *by_step
                    .entry(dk)
                    .or_insert_with(|| b.u32_op(ArithOp::Add, k_local, Operand::Int(i64::from(dk))))
            }));
        }
        let k_end = k_overhangs.then(|| b.u32_imm(k_extent));
        Stager {
            staging,
            operand,
            threads,
            block_k,
            elem,
            ptr,
            shared,
            x_ok,
            k_local: k_locals,
            k_end,
            active,
        }
    }

    /// Loads this thread's part of the current tile into registers as f32
    /// (prologue applied), zeros for elements outside the tensor.
    fn load(&mut self, b: &mut Builder, kernel: &Kernel) -> Vec<Staged> {
        let s = *self.staging;
        let mut k_ok_of: HashMap<Reg, Reg> = HashMap::new();
        (0..s.passes)
            .map(|pass| {
                let (dx, dk) = steps(&s, pass, self.threads);
                let k_ok = match (self.k_local[pass as usize], self.k_end) {
                    (Some(k), Some(end)) => Some(
                        *k_ok_of
                            .entry(k)
                            .or_insert_with(|| b.setp(Cmp::Lt, Ty::S32, k, end)),
                    ),
                    _ => None,
                };
                let guard = match (self.x_ok[pass as usize], k_ok) {
                    (Some(p), Some(q)) => Some(b.pred_op(ArithOp::And, p, q)),
                    (p, q) => p.or(q),
                };
                let bytes = (u64::from(dx) * self.operand.stride_x
                    + u64::from(dk) * self.operand.stride_k)
                    * u64::from(self.elem);
                let addr = if bytes <= i32::MAX as u64 {
                    Addr {
                        base: self.ptr,
                        offset: bytes as i64,
                    }
                } else {
                    let base = b.reg(RegClass::B64);
                    b.push(Op::Arith {
                        op: ArithOp::Add,
                        ty: Ty::U64,
                        dst: base,
                        a: self.ptr.into(),
                        b: Operand::Int(bytes as i64),
                    });
                    Addr { base, offset: 0 }
                };
                let raw = load_raw(b, s.dtype, s.vector, addr, guard);
                let values = raw
                    .into_iter()
                    .map(|x| {
                        if self.operand.value == self.operand.load {
                            return x;
                        }
                        let mut env = Env::default();
                        env.preloaded.insert(self.operand.load, x);
                        let y = expr::emit(b, kernel, &mut env, self.operand.value).reg();
                        match guard {
                            Some(g) => b.f32_select(g, y, Operand::F32(0.0)),
                            None => y,
                        }
                    })
                    .collect();
                values
            })
            .collect()
    }

    /// Stores loaded values into the shared tile (`[k][x]`, f32).
    fn store(&mut self, b: &mut Builder, staged: &[Staged]) {
        let s = *self.staging;
        for (pass, staged) in staged.iter().enumerate() {
            let (dx, dk) = steps(&s, pass as u32, self.threads);
            let at = |x: u32, k: u32| i64::from(((dk + k) * s.row + dx + x) * 4);
            let push = |b: &mut Builder, offset: i64, srcs: Vec<Operand>| {
                let op = Op::St {
                    space: Space::Shared,
                    ty: Ty::F32,
                    addr: Addr {
                        base: self.shared,
                        offset,
                    },
                    srcs,
                };
                match self.active {
                    Some(p) => b.push_guarded(p, false, op),
                    None => b.push(op),
                }
            };
            if s.k_major {
                for (e, v) in staged.iter().enumerate() {
                    push(b, at(0, e as u32), vec![(*v).into()]);
                }
            } else {
                for (c, chunk) in staged.chunks(4).enumerate() {
                    push(
                        b,
                        at(c as u32 * 4, 0),
                        chunk.iter().map(|v| (*v).into()).collect(),
                    );
                }
            }
        }
    }

    /// Moves on to the next `k` tile.
    fn advance(&mut self, b: &mut Builder) {
        let bytes = u64::from(self.block_k) * self.operand.stride_k * u64::from(self.elem);
        b.push(Op::Arith {
            op: ArithOp::Add,
            ty: Ty::U64,
            dst: self.ptr,
            a: self.ptr.into(),
            b: Operand::Int(bytes as i64),
        });
        if let Some(end) = self.k_end {
            increment(b, end, -i64::from(self.block_k));
        }
    }
}

/// A pass's offset from pass 0 along `x` and `k`, in elements.
fn steps(s: &Staging, pass: u32, threads: u32) -> (u32, u32) {
    let (rows, cols) = s.pass_step(pass, threads);
    if s.k_major {
        (rows, cols)
    } else {
        (cols, rows)
    }
}

fn imm(value: u64) -> Operand {
    Operand::Int(value as i64)
}

/// Loads `vector` consecutive elements of `dtype` (zeros when `guard` is
/// false) and widens them to f32.
fn load_raw(
    b: &mut Builder,
    dtype: DType,
    vector: u32,
    addr: Addr,
    guard: Option<Reg>,
) -> Vec<Reg> {
    let (class, ty, count) = match (dtype, vector) {
        (DType::F32, v) => (RegClass::F32, Ty::F32, v),
        (_, 8) => (RegClass::B32, Ty::B32, 4),
        (_, v) => (RegClass::B16, Ty::B16, v),
    };
    let dsts: Vec<Reg> = (0..count).map(|_| b.reg(class)).collect();
    let op = Op::Ld {
        space: Space::Global,
        ty,
        dsts: dsts.clone(),
        addr,
    };
    match guard {
        Some(g) => {
            for d in &dsts {
                let zero = if class == RegClass::F32 {
                    Operand::F32(0.0)
                } else {
                    Operand::Int(0)
                };
                b.push(Op::Mov {
                    ty,
                    dst: *d,
                    src: zero,
                });
            }
            b.push_guarded(g, false, op);
        }
        None => b.push(op),
    }
    match class {
        RegClass::F32 => dsts,
        RegClass::B16 => dsts.into_iter().map(|h| b.widen(dtype, h)).collect(),
        _ => dsts.into_iter().flat_map(|w| unpack(b, dtype, w)).collect(),
    }
}

/// Splits a 32-bit word holding two 16-bit elements (the lower address in
/// the low half) into two f32 values.
fn unpack(b: &mut Builder, dtype: DType, word: Reg) -> [Reg; 2] {
    let as_f32 = |b: &mut Builder, bits: Reg| {
        let dst = b.reg(RegClass::F32);
        b.push(Op::Mov {
            ty: Ty::B32,
            dst,
            src: bits.into(),
        });
        dst
    };
    match dtype {
        DType::Bf16 => {
            let lo = b.u32_op(ArithOp::Shl, word, Operand::Int(16));
            let hi = b.u32_op(ArithOp::And, word, Operand::Int(0xFFFF_0000));
            [as_f32(b, lo), as_f32(b, hi)]
        }
        _ => {
            let high = b.u32_op(ArithOp::Shr, word, Operand::Int(16));
            [word, high].map(|w| {
                let half = b.reg(RegClass::B16);
                b.push(Op::Cvt {
                    to: Ty::U16,
                    from: Ty::U32,
                    dst: half,
                    src: w,
                });
                b.widen(dtype, half)
            })
        }
    }
}
