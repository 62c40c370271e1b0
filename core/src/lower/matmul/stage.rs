//! Moving one operand's tiles from global to shared memory.
//!
//! Each thread owns the same positions of every tile: `passes` accesses of
//! `vector` consecutive elements along the operand's contiguous dimension,
//! consecutive threads on consecutive vectors. Its global addresses advance
//! by `block_k` along `k` per tile; its shared addresses never change (with
//! one stage) or move to the tile's ring slot.
//!
//! With one stage a tile goes through registers ([`Stager::load`], which
//! widens and applies the prologue, then [`Stager::store`]); with more,
//! `cp.async` copies it ([`Stager::issue`]), which only moves bytes.
//!
//! A tile that overhangs the tensor is handled per dimension:
//! - along `k`, elements past `K` are loaded as zeros (the load is
//!   predicated off, or the copy reads nothing and zero-fills), so they
//!   add nothing to any output;
//! - along `m` (or `n`), the row is clamped to the last one: the values it
//!   stages only reach accumulators of outputs past `M` (`N`), which are
//!   never stored. This keeps the loop free of per-pass predicates, which
//!   would outnumber the hardware's predicate registers. Copies by
//!   `cp.async` read nothing there either (source size 0, a register per
//!   pass fixed over the loop), sparing the memory system the clamped
//!   row's repeated reads.

use std::collections::HashMap;

use super::{Layout, MatmulOperand, MatmulPlan, Side, Staging};
use crate::dtype::DType;
use crate::ir::Kernel;
use crate::lower::expr::{self, Env};
use crate::ptx::Builder;
use crate::ptx::inst::{Addr, ArithOp, Cmp, CpAsyncCache, Op, Operand, Reg, RegClass, Space, Ty};

/// What a stager needs from the block's set-up.
#[derive(Debug)]
pub(super) struct Origin<'e> {
    pub tid: Reg,
    /// Address of the dynamic shared-memory window.
    pub smem: Reg,
    /// The first `m` and `n` of the block's tile.
    pub m0: Reg,
    pub n0: Reg,
    /// Input pointers and batch variables.
    pub env: &'e Env,
    /// The first `k` of the block's slice of `K`, with split-K.
    pub k0: Option<Reg>,
}

/// One pass's values, as f32, ready for shared memory.
pub(super) type Staged = Vec<Reg>;

/// Moves one operand's tiles from global to shared memory.
#[derive(Debug)]
pub(super) struct Stager<'a> {
    staging: &'a Staging,
    operand: &'a MatmulOperand,
    threads: u32,
    block_k: u32,
    elem: u32,
    /// Per pass: where the access reads, in the current tile.
    access: Vec<Addr>,
    /// The distinct base registers of `access`, advanced once per tile.
    pointers: Vec<Reg>,
    /// Shared address of this thread's first element (pass 0).
    shared: Reg,
    /// Per pass: the element's `k` within the tile, when `k` can overhang.
    k_local: Vec<Option<Reg>>,
    /// Per pass: the bytes a copy reads by its row (all of them inside the
    /// tensor, 0 past `M` or `N`), when rows can overhang and tiles are
    /// copied by `cp.async`.
    x_bytes: Vec<Option<Reg>>,
    /// `K - k0` (compared as s32), when `k` can overhang.
    k_end: Option<Reg>,
    /// Whether the thread takes part, when the tile has fewer vectors than
    /// the block has threads.
    active: Option<Reg>,
}

impl<'a> Stager<'a> {
    /// Computes the thread's addresses and the predicates that stay fixed
    /// over the `k` loop.
    pub fn new(
        b: &mut Builder,
        kernel: &Kernel,
        plan: &'a MatmulPlan,
        layout: &'a Layout,
        side: Side,
        origin: &Origin<'_>,
    ) -> Stager<'a> {
        let operand = side.operand(plan);
        let (staging, x0, x_extent) = match side {
            Side::A => (&layout.a, origin.m0, layout.m_extent),
            Side::B => (&layout.b, origin.n0, layout.n_extent),
        };
        let threads = layout.threads;
        let block_k = layout.tiles.block_k;
        let elem = staging.dtype.size();

        let cols = Operand::Int(i64::from(staging.cols));
        let r0 = b.u32_op(ArithOp::Div, origin.tid, cols);
        let c0 = b.u32_op(ArithOp::Rem, origin.tid, cols);
        let c0 = b.u32_op(ArithOp::Mul, c0, imm(staging.vector));
        let (x_local, k_local) = if staging.k_major { (r0, c0) } else { (c0, r0) };

        let shared = b.u32_mad(k_local, imm(staging.row), x_local);
        let shared = b.u32_mad(shared, imm(4u32), origin.smem);
        let shared = b.u32_op(ArithOp::Add, shared, imm(staging.offset));

        // Element offsets are exact wherever a thread loads; where `k` is
        // past `K` they may wrap, but those are never dereferenced (and
        // later passes and tiles only move further along `k`).
        let x = b.u32_op(ArithOp::Add, x0, x_local);
        let mut fixed = None;
        for (v, stride) in plan.batch.iter().zip(&operand.stride_batch) {
            if *stride != 0 && kernel.extent(*v) > 1 {
                let index = origin.env.index[v];
                fixed = Some(match fixed {
                    None => b.u32_op(ArithOp::Mul, index, imm(*stride)),
                    Some(acc) => b.u32_mad(index, imm(*stride), acc),
                });
            }
        }
        let base = origin.env.inputs[operand.tensor.0];
        let pointer = |b: &mut Builder, x: Reg, k: Reg| {
            let k = match origin.k0 {
                Some(k0) => b.u32_op(ArithOp::Add, k, k0),
                None => k,
            };
            let offset = b.u32_mad(
                x,
                imm(operand.stride_x),
                fixed.map_or(imm(0u32), Operand::Reg),
            );
            let offset = b.u32_mad(k, imm(operand.stride_k), offset);
            b.global_addr(base, offset, elem)
        };
        let x_overhangs = !x_extent.is_multiple_of(staging.block_x);
        // The last row or vector start (vectors along `x` stay aligned).
        let x_last = x_extent - if staging.k_major { 1 } else { staging.vector };
        let mut access = Vec::new();
        let mut pointers = Vec::new();
        let mut x_bytes = vec![None; staging.passes as usize];
        let copied = layout.tiles.stages > 1;
        if x_overhangs {
            for pass in 0..staging.passes {
                let (dx, dk) = steps(staging, pass, threads);
                let at = b.u32_op(ArithOp::Add, x, imm(dx));
                if copied {
                    let inside = b.setp(Cmp::Le, Ty::U32, at, imm(x_last));
                    let bytes = copy_bytes(staging).0;
                    x_bytes[pass as usize] = Some(b.u32_select(inside, imm(bytes), imm(0u32)));
                }
                let at = b.u32_op(ArithOp::Min, at, imm(x_last));
                let k = b.u32_op(ArithOp::Add, k_local, imm(dk));
                let ptr = pointer(b, at, k);
                pointers.push(ptr);
                access.push(Addr {
                    base: ptr,
                    offset: 0,
                });
            }
        } else {
            let first = pointer(b, x, k_local);
            pointers.push(first);
            for pass in 0..staging.passes {
                let (dx, dk) = steps(staging, pass, threads);
                let bytes = (u64::from(dx) * operand.stride_x + u64::from(dk) * operand.stride_k)
                    * u64::from(elem);
                access.push(offset_address(b, first, bytes, &mut pointers));
            }
        }

        let active = staging.partial.then(|| {
            let units = staging.rows * staging.cols;
            b.setp(Cmp::Lt, Ty::U32, origin.tid, imm(units))
        });
        let k_overhangs = layout.k_overhangs();
        let mut by_step: HashMap<u32, Reg> = HashMap::new();
        let k_locals = (0..staging.passes)
            .map(|pass| {
                let (_, dk) = steps(staging, pass, threads);
                k_overhangs.then(|| {
                    *by_step
                        .entry(dk)
                        .or_insert_with(|| b.u32_op(ArithOp::Add, k_local, imm(dk)))
                })
            })
            .collect();
        let k_end = k_overhangs.then(|| match origin.k0 {
            Some(k0) => {
                let k = b.u32_imm(layout.k_extent);
                b.u32_op(ArithOp::Sub, k, k0)
            }
            None => b.u32_imm(layout.k_extent),
        });
        Stager {
            staging,
            operand,
            threads,
            block_k,
            elem,
            access,
            pointers,
            shared,
            k_local: k_locals,
            x_bytes,
            k_end,
            active,
        }
    }

    /// Loads this thread's part of the current tile into registers as f32
    /// (the operand's prologue applied), zeros outside the tensor.
    pub fn load(&self, b: &mut Builder, kernel: &Kernel) -> Vec<Staged> {
        let s = self.staging;
        let mut k_ok_of: HashMap<Reg, Reg> = HashMap::new();
        (0..s.passes)
            .map(|pass| {
                let k_ok = match (self.k_local[pass as usize], self.k_end) {
                    (Some(k), Some(end)) => Some(
                        *k_ok_of
                            .entry(k)
                            .or_insert_with(|| b.setp(Cmp::Lt, Ty::S32, k, end)),
                    ),
                    _ => None,
                };
                let guard = and(b, self.active, k_ok);
                let addr = self.access[pass as usize];
                load_raw(b, s.dtype, s.vector, addr, guard)
                    .into_iter()
                    .map(|x| self.prologue(b, kernel, x, guard))
                    .collect()
            })
            .collect()
    }

    /// The operand's value for a loaded element; zero outside the tensor,
    /// whatever the prologue makes of a zero.
    fn prologue(&self, b: &mut Builder, kernel: &Kernel, loaded: Reg, guard: Option<Reg>) -> Reg {
        if self.operand.value == self.operand.load {
            return loaded;
        }
        let mut env = Env::default();
        env.preloaded.insert(self.operand.load, loaded);
        let value = expr::emit(b, kernel, &mut env, self.operand.value).reg();
        match guard {
            Some(g) => b.f32_select(g, value, Operand::F32(0.0)),
            None => value,
        }
    }

    /// Stores loaded values into the shared tile (`[k][row]`, f32).
    pub fn store(&self, b: &mut Builder, staged: &[Staged]) {
        let s = self.staging;
        for (pass, values) in staged.iter().enumerate() {
            let (dx, dk) = steps(s, pass as u32, self.threads);
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
                // Consecutive elements are consecutive `k`: one row each.
                for (e, v) in values.iter().enumerate() {
                    push(b, at(0, e as u32), vec![(*v).into()]);
                }
            } else {
                for (c, chunk) in values.chunks(4).enumerate() {
                    let srcs = chunk.iter().map(|v| (*v).into()).collect();
                    push(b, at(c as u32 * 4, 0), srcs);
                }
            }
        }
    }

    /// Starts `cp.async` copies of this thread's part of the current tile
    /// into the ring slot at byte offset `slot` (a register), without
    /// committing them: `vector` elements at once, or one at a time where
    /// the store transposes; elements past `K` are zero-filled (source
    /// size 0). Only for plain f32 loads ([`Layout`] checks that).
    pub fn issue(&self, b: &mut Builder, slot: Reg) {
        let s = self.staging;
        let dst = b.u32_op(ArithOp::Add, self.shared, slot);
        let (bytes, copies) = copy_bytes(s);
        let cache = if bytes == 16 {
            CpAsyncCache::Cg
        } else {
            CpAsyncCache::Ca
        };
        let mut size_of: HashMap<Reg, Reg> = HashMap::new();
        for pass in 0..s.passes {
            let k_bytes = match (self.k_local[pass as usize], self.k_end) {
                (Some(k), Some(end)) => Some(*size_of.entry(k).or_insert_with(|| {
                    let inside = b.setp(Cmp::Lt, Ty::S32, k, end);
                    b.u32_select(inside, imm(bytes), imm(0u32))
                })),
                _ => None,
            };
            let src_bytes = match (k_bytes, self.x_bytes[pass as usize]) {
                (Some(k), Some(x)) => Some(b.u32_op(ArithOp::Min, k, x)),
                (k, x) => k.or(x),
            };
            let (dx, dk) = steps(s, pass, self.threads);
            let src = self.access[pass as usize];
            // Transposing, copy `e` is the element at `k + e`.
            for e in 0..copies {
                let op = Op::CpAsync {
                    cache,
                    dst: Addr {
                        base: dst,
                        offset: i64::from(((dk + e) * s.row + dx) * 4),
                    },
                    src: Addr {
                        offset: src.offset + i64::from(e * 4),
                        ..src
                    },
                    bytes,
                    src_bytes,
                };
                match self.active {
                    Some(p) => b.push_guarded(p, false, op),
                    None => b.push(op),
                }
            }
        }
    }

    /// Moves on to the next `k` tile.
    pub fn advance(&self, b: &mut Builder) {
        let bytes = u64::from(self.block_k) * self.operand.stride_k * u64::from(self.elem);
        advance(b, &self.pointers, self.k_end, self.block_k, bytes);
    }
}

/// Moves an operand's loads on to the next `k` tile: its `pointers` by
/// the tile's `bytes`, and `k_end`, the count of `k` values left that
/// guards the loads (where there is one), down by `block_k`.
pub(super) fn advance(
    b: &mut Builder,
    pointers: &[Reg],
    k_end: Option<Reg>,
    block_k: u32,
    bytes: u64,
) {
    for ptr in pointers {
        b.push(Op::Arith {
            op: ArithOp::Add,
            ty: Ty::U64,
            dst: *ptr,
            a: (*ptr).into(),
            b: Operand::Int(bytes as i64),
        });
    }
    if let Some(end) = k_end {
        b.push(Op::Arith {
            op: ArithOp::Sub,
            ty: Ty::U32,
            dst: end,
            a: end.into(),
            b: imm(block_k),
        });
    }
}

/// The bytes of one `cp.async` copy and the copies per access: one per
/// element where the store transposes (`k`-major tiles), else one per
/// vector.
fn copy_bytes(s: &Staging) -> (u32, u32) {
    if s.k_major {
        (4, s.vector)
    } else {
        (4 * s.vector, 1)
    }
}

/// `base + bytes` as an address: an offset of the instruction while it
/// fits PTX's 32-bit offsets, else a pointer of its own, computed once here
/// and added to `pointers` (which the stager advances along `K`).
pub(super) fn offset_address(
    b: &mut Builder,
    base: Reg,
    bytes: u64,
    pointers: &mut Vec<Reg>,
) -> Addr {
    if bytes <= i32::MAX as u64 {
        return Addr {
            base,
            offset: bytes as i64,
        };
    }
    let ptr = b.reg(RegClass::B64);
    b.push(Op::Arith {
        op: ArithOp::Add,
        ty: Ty::U64,
        dst: ptr,
        a: base.into(),
        b: Operand::Int(bytes as i64),
    });
    pointers.push(ptr);
    Addr {
        base: ptr,
        offset: 0,
    }
}

/// `p && q` for optional predicates (an absent one is true).
pub(super) fn and(b: &mut Builder, p: Option<Reg>, q: Option<Reg>) -> Option<Reg> {
    match (p, q) {
        (Some(p), Some(q)) => Some(b.pred_op(ArithOp::And, p, q)),
        (p, q) => p.or(q),
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

fn imm(value: impl Into<u64>) -> Operand {
    Operand::Int(value.into() as i64)
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
    // Eight 16-bit elements travel as four 32-bit words (`ld.v4.b32`).
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
            let zero = if class == RegClass::F32 {
                Operand::F32(0.0)
            } else {
                Operand::Int(0)
            };
            for d in &dsts {
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
        // A bf16 is the top half of an f32.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_past_32_bits_get_a_pointer_of_their_own() {
        let mut b = Builder::new();
        let base = b.reg(RegClass::B64);
        let mut pointers = Vec::new();
        let near = offset_address(&mut b, base, i32::MAX as u64, &mut pointers);
        assert_eq!((near.base, near.offset), (base, i64::from(i32::MAX)));
        assert!(pointers.is_empty());
        let far = offset_address(&mut b, base, 3 << 30, &mut pointers);
        assert_eq!(far.offset, 0);
        assert_ne!(far.base, base);
        assert_eq!(pointers, [far.base]);
    }
}
