//! Builds a [`Kernel`]'s instruction list: register allocation, labels and
//! short forms for the instruction patterns every lowering needs.

use super::inst::*;
use crate::dtype::DType;

/// Accumulates instructions for one kernel.
#[derive(Debug, Default)]
pub struct Builder {
    body: Vec<Instr>,
    counts: [u32; RegClass::ALL.len()],
    labels: u32,
}

/// How long a bounded memory-barrier wait
/// ([`Builder::mbarrier_wait_bounded`]) lasts at most before its kernel
/// traps: a phase that never completes ends the kernel with an error
/// instead of hanging the GPU. No fill of a ring slot or turn of a
/// ping-pong set legitimately takes a thousandth of it.
pub const MBARRIER_DEADLINE_NS: u32 = 4_000_000_000;

impl Builder {
    pub fn new() -> Builder {
        Builder::default()
    }

    /// A fresh register of the given class.
    pub fn reg(&mut self, class: RegClass) -> Reg {
        let slot = &mut self.counts[class as usize];
        let reg = Reg {
            class,
            index: *slot,
        };
        *slot += 1;
        reg
    }

    pub fn push(&mut self, op: Op) {
        self.body.push(Instr { guard: None, op });
    }

    /// Pushes `op` guarded by `@pred` (or `@!pred` when `negate`).
    pub fn push_guarded(&mut self, pred: Reg, negate: bool, op: Op) {
        self.body.push(Instr {
            guard: Some(Guard { pred, negate }),
            op,
        });
    }

    /// A fresh label, placed later with [`Builder::place`].
    pub fn label(&mut self) -> Label {
        self.labels += 1;
        Label(self.labels)
    }

    pub fn place(&mut self, label: Label) {
        self.push(Op::Label(label));
    }

    pub fn bra(&mut self, target: Label) {
        self.push(Op::Bra { target });
    }

    /// Branches to `target` when `pred` is true (false when `negate`).
    pub fn bra_if(&mut self, pred: Reg, negate: bool, target: Label) {
        self.push_guarded(pred, negate, Op::Bra { target });
    }

    pub fn finish(
        mut self,
        entry: String,
        param_count: usize,
        block_threads: u32,
        dynamic_shared_bytes: u32,
    ) -> Kernel {
        self.push(Op::Ret);
        Kernel {
            entry,
            param_count,
            tensor_maps: Vec::new(),
            dynamic_shared_bytes,
            block_threads,
            min_blocks_per_sm: 0,
            cluster_blocks: 0,
            reg_counts: RegClass::ALL
                .iter()
                .map(|c| (*c, self.counts[*c as usize]))
                .collect(),
            body: self.body,
        }
    }

    pub fn special(&mut self, sreg: Special) -> Reg {
        let dst = self.reg(RegClass::B32);
        self.push(Op::ReadSpecial { dst, sreg });
        dst
    }

    pub fn u32_imm(&mut self, value: u32) -> Reg {
        let dst = self.reg(RegClass::B32);
        self.push(Op::Mov {
            ty: Ty::U32,
            dst,
            src: Operand::Int(i64::from(value)),
        });
        dst
    }

    pub fn f32_imm(&mut self, value: f32) -> Reg {
        let dst = self.reg(RegClass::F32);
        self.push(Op::Mov {
            ty: Ty::F32,
            dst,
            src: Operand::F32(value),
        });
        dst
    }

    /// `dst = a <op> b` on unsigned 32-bit integers.
    pub fn u32_op(&mut self, op: ArithOp, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        let dst = self.reg(RegClass::B32);
        self.push(Op::Arith {
            op,
            ty: arith_int_ty(op),
            dst,
            a: a.into(),
            b: b.into(),
        });
        dst
    }

    /// `dst = a * b + c` on unsigned 32-bit integers.
    pub fn u32_mad(
        &mut self,
        a: impl Into<Operand>,
        b: impl Into<Operand>,
        c: impl Into<Operand>,
    ) -> Reg {
        let dst = self.reg(RegClass::B32);
        self.push(Op::Mad {
            ty: Ty::U32,
            dst,
            a: a.into(),
            b: b.into(),
            c: c.into(),
        });
        dst
    }

    /// `dst = a <op> b` on f32 (round to nearest even).
    pub fn f32_op(&mut self, op: ArithOp, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        let dst = self.reg(RegClass::F32);
        self.push(Op::Arith {
            op,
            ty: Ty::F32,
            dst,
            a: a.into(),
            b: b.into(),
        });
        dst
    }

    /// Fused `a * b + c` on f32.
    pub fn f32_fma(
        &mut self,
        a: impl Into<Operand>,
        b: impl Into<Operand>,
        c: impl Into<Operand>,
    ) -> Reg {
        let dst = self.reg(RegClass::F32);
        self.push(Op::Mad {
            ty: Ty::F32,
            dst,
            a: a.into(),
            b: b.into(),
            c: c.into(),
        });
        dst
    }

    pub fn f32_unary(&mut self, op: UnaryOp, a: impl Into<Operand>) -> Reg {
        let dst = self.reg(RegClass::F32);
        self.push(Op::Unary {
            op,
            ty: Ty::F32,
            dst,
            a: a.into(),
        });
        dst
    }

    /// A predicate: `a <cmp> b` compared as `ty`.
    pub fn setp(&mut self, cmp: Cmp, ty: Ty, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        let dst = self.reg(RegClass::Pred);
        self.push(Op::Setp {
            cmp,
            ty,
            dst,
            a: a.into(),
            b: b.into(),
        });
        dst
    }

    /// `cond ? a : b` on f32.
    pub fn f32_select(&mut self, cond: Reg, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        let dst = self.reg(RegClass::F32);
        self.push(Op::Selp {
            ty: Ty::F32,
            dst,
            a: a.into(),
            b: b.into(),
            cond,
        });
        dst
    }

    /// `cond ? a : b` on u32.
    pub fn u32_select(&mut self, cond: Reg, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        let dst = self.reg(RegClass::B32);
        self.push(Op::Selp {
            ty: Ty::U32,
            dst,
            a: a.into(),
            b: b.into(),
            cond,
        });
        dst
    }

    /// `cond ? a : b` on 64-bit values (addresses).
    pub fn u64_select(&mut self, cond: Reg, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        let dst = self.reg(RegClass::B64);
        self.push(Op::Selp {
            ty: Ty::U64,
            dst,
            a: a.into(),
            b: b.into(),
            cond,
        });
        dst
    }

    /// `a + b` on 64-bit values (addresses).
    pub fn u64_add(&mut self, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        let dst = self.reg(RegClass::B64);
        self.push(Op::Arith {
            op: ArithOp::Add,
            ty: Ty::U64,
            dst,
            a: a.into(),
            b: b.into(),
        });
        dst
    }

    /// Combines two predicates with `and`, `or` or `xor`.
    pub fn pred_op(&mut self, op: ArithOp, a: Reg, b: Reg) -> Reg {
        let dst = self.reg(RegClass::Pred);
        self.push(Op::Arith {
            op,
            ty: Ty::Pred,
            dst,
            a: a.into(),
            b: b.into(),
        });
        dst
    }

    pub fn pred_not(&mut self, a: Reg) -> Reg {
        let dst = self.reg(RegClass::Pred);
        self.push(Op::Unary {
            op: UnaryOp::Not,
            ty: Ty::Pred,
            dst,
            a: a.into(),
        });
        dst
    }

    /// Converts an unsigned 32-bit integer to f32.
    pub fn u32_to_f32(&mut self, a: Reg) -> Reg {
        let dst = self.reg(RegClass::F32);
        self.push(Op::Cvt {
            to: Ty::F32,
            from: Ty::U32,
            dst,
            src: a,
        });
        dst
    }

    /// The global address of the `index`-th kernel parameter (a pointer).
    pub fn param_ptr(&mut self, index: usize) -> Reg {
        let raw = self.reg(RegClass::B64);
        self.push(Op::LdParam { dst: raw, index });
        let dst = self.reg(RegClass::B64);
        self.push(Op::CvtaGlobal { dst, src: raw });
        dst
    }

    /// The 32-bit address of the dynamic shared-memory window.
    pub fn shared_base(&mut self) -> Reg {
        let dst = self.reg(RegClass::B32);
        self.push(Op::SharedBase { dst });
        dst
    }

    /// `base + index * elem_bytes` as a 64-bit global address.
    pub fn global_addr(&mut self, base: Reg, index: impl Into<Operand>, elem_bytes: u32) -> Reg {
        let offset = self.reg(RegClass::B64);
        self.push(Op::MulWide {
            dst: offset,
            a: index.into(),
            b: Operand::Int(i64::from(elem_bytes)),
        });
        let dst = self.reg(RegClass::B64);
        self.push(Op::Arith {
            op: ArithOp::Add,
            ty: Ty::U64,
            dst,
            a: base.into(),
            b: offset.into(),
        });
        dst
    }

    /// Loads one element of `dtype` and widens it to f32.
    pub fn load(&mut self, space: Space, dtype: DType, addr: Addr) -> Reg {
        match dtype {
            DType::F32 => {
                let dst = self.reg(RegClass::F32);
                self.push(Op::Ld {
                    space,
                    ty: Ty::F32,
                    dsts: vec![dst],
                    addr,
                });
                dst
            }
            DType::F16 | DType::Bf16 => {
                let half = self.reg(RegClass::B16);
                self.push(Op::Ld {
                    space,
                    ty: Ty::B16,
                    dsts: vec![half],
                    addr,
                });
                self.widen(dtype, half)
            }
        }
    }

    /// Loads `n` (2 or 4) consecutive f32 elements with one vector access.
    pub fn load_f32_vec(&mut self, space: Space, addr: Addr, n: usize) -> Vec<Reg> {
        let dsts: Vec<Reg> = (0..n).map(|_| self.reg(RegClass::F32)).collect();
        self.push(Op::Ld {
            space,
            ty: Ty::F32,
            dsts: dsts.clone(),
            addr,
        });
        dsts
    }

    /// Widens a 16-bit value in storage form to f32 (exactly).
    pub fn widen(&mut self, dtype: DType, half: Reg) -> Reg {
        let dst = self.reg(RegClass::F32);
        match dtype {
            DType::F16 => self.push(Op::Cvt {
                to: Ty::F32,
                from: Ty::F16,
                dst,
                src: half,
            }),
            // `cvt.f32.bf16` needs sm_90; a bf16 is the top half of an f32.
            DType::Bf16 | DType::F32 => {
                let wide = self.reg(RegClass::B32);
                self.push(Op::Cvt {
                    to: Ty::U32,
                    from: Ty::U16,
                    dst: wide,
                    src: half,
                });
                let shifted = self.u32_op(ArithOp::Shl, wide, Operand::Int(16));
                self.push(Op::Mov {
                    ty: Ty::B32,
                    dst,
                    src: shifted.into(),
                });
            }
        }
        dst
    }

    /// Rounds an f32 to a 16-bit dtype (to nearest even), in storage form.
    pub fn narrow(&mut self, dtype: DType, value: Reg) -> Reg {
        let dst = self.reg(RegClass::B16);
        let to = if dtype == DType::Bf16 {
            Ty::Bf16
        } else {
            Ty::F16
        };
        self.push(Op::Cvt {
            to,
            from: Ty::F32,
            dst,
            src: value,
        });
        dst
    }

    /// Rounds an f32 to `dtype`'s precision, keeping it an f32.
    pub fn round_to(&mut self, dtype: DType, value: Reg) -> Reg {
        match dtype {
            DType::F32 => value,
            _ => {
                let half = self.narrow(dtype, value);
                self.widen(dtype, half)
            }
        }
    }

    /// Stores an f32 value as one element of `dtype`.
    pub fn store(&mut self, space: Space, dtype: DType, addr: Addr, value: Reg) {
        let (ty, src) = match dtype {
            DType::F32 => (Ty::F32, value),
            _ => (Ty::B16, self.narrow(dtype, value)),
        };
        self.push(Op::St {
            space,
            ty,
            addr,
            srcs: vec![src.into()],
        });
    }

    /// Packs two 16-bit registers into a `.b32` register (`lo` in bits
    /// 0–15), as `mma` and `ldmatrix` fragments hold f16/bf16 pairs.
    pub fn pack_b16x2(&mut self, lo: Reg, hi: Reg) -> Reg {
        let dst = self.reg(RegClass::B32);
        self.push(Op::Pack { dst, lo, hi });
        dst
    }

    /// The low and high 16-bit halves of a `.b32` register.
    pub fn unpack_b16x2(&mut self, src: Reg) -> (Reg, Reg) {
        let lo = self.reg(RegClass::B16);
        let hi = self.reg(RegClass::B16);
        self.push(Op::Unpack { lo, hi, src });
        (lo, hi)
    }

    /// Starts an asynchronous copy of `bytes` (4, 8 or 16; 16 only for
    /// [`CpAsyncCache::Cg`]) from global `src` to shared `dst`, both aligned
    /// to `bytes`. With `src_bytes` (a `.b32` register, at most `bytes`) only
    /// that many bytes are read and the rest of `dst` is zero-filled: 0 skips
    /// the source entirely, for tile elements past the tensor's edge.
    pub fn cp_async(
        &mut self,
        cache: CpAsyncCache,
        dst: Addr,
        src: Addr,
        bytes: u32,
        src_bytes: Option<Reg>,
    ) {
        self.push(Op::CpAsync {
            cache,
            dst,
            src,
            bytes,
            src_bytes,
        });
    }

    /// Closes the group of copies started since the last commit.
    pub fn cp_async_commit(&mut self) {
        self.push(Op::CpAsyncCommit);
    }

    /// Waits until at most `pending` committed groups are still in flight;
    /// the completed copies are then visible to this thread, and to the
    /// block after a `bar.sync`.
    pub fn cp_async_wait(&mut self, pending: u32) {
        self.push(Op::CpAsyncWait { pending });
    }

    /// Waits for every copy this thread started, committed or not.
    pub fn cp_async_wait_all(&mut self) {
        self.push(Op::CpAsyncWaitAll);
    }

    /// Arrives at the memory barrier at `addr` (the phase token is
    /// dropped).
    pub fn mbarrier_arrive(&mut self, addr: Addr) {
        let state = self.reg(RegClass::B64);
        self.push(Op::MbarrierArrive { state, addr });
    }

    /// Waits until the phase of parity `parity` of the memory barrier at
    /// `addr` has completed: `try_wait` in a loop, since it may give up
    /// (ptxas moves the retries out of line, past the function's end).
    pub fn mbarrier_wait(&mut self, addr: Addr, parity: Operand) {
        let again = self.label();
        self.place(again);
        let done = self.reg(RegClass::Pred);
        self.push(Op::MbarrierTryWait { done, addr, parity });
        self.bra_if(done, true, again);
    }

    /// [`Builder::mbarrier_wait`], but for at most
    /// [`MBARRIER_DEADLINE_NS`] after the first `try_wait` gave up, then
    /// `trap`: a phase that never completes ends the kernel with an error.
    /// A wait that passes at once reads no clock. The retries keep a
    /// register (ptxas 12.9 keeps them in line, the first `try_wait`
    /// branching over them when it passes).
    pub fn mbarrier_wait_bounded(&mut self, addr: Addr, parity: Operand) {
        let (again, passed) = (self.label(), self.label());
        let done = self.reg(RegClass::Pred);
        self.push(Op::MbarrierTryWait { done, addr, parity });
        self.bra_if(done, false, passed);
        // The clock's low word: the time since the first try, modulo 2^32
        // ns (4.29 s), passes the deadline 0.29 s before it wraps; reads
        // further apart than that (a kernel preempted or paused in a
        // debugger) may see it a wrap later. A debugger's pause longer
        // than the deadline traps the kernel once it resumes.
        let start = self.special(Special::GlobalTimerLo);
        self.place(again);
        let done = self.reg(RegClass::Pred);
        self.push(Op::MbarrierTryWait { done, addr, parity });
        self.bra_if(done, false, passed);
        let now = self.special(Special::GlobalTimerLo);
        let waited = self.u32_op(ArithOp::Sub, now, start);
        let late = self.setp(Cmp::Gt, Ty::U32, waited, MBARRIER_DEADLINE_NS);
        self.bra_if(late, true, again);
        self.push(Op::Trap);
        self.place(passed);
    }

    /// `ldmatrix` of `count` (1, 2 or 4) 8×8 b16 matrices from shared memory:
    /// every lane of the warp must execute it, lane `8i + r` giving the
    /// 16-byte-aligned address of row `r` of matrix `i`. Returns one `.b32`
    /// register per matrix: lane `l` gets row `l / 4`, columns `2 (l % 4)`
    /// and `2 (l % 4) + 1` (low half first), or with `trans` column `l / 4`,
    /// rows `2 (l % 4)` and `2 (l % 4) + 1` of the matrix as stored.
    pub fn ldmatrix(&mut self, count: usize, trans: bool, addr: Addr) -> Vec<Reg> {
        let dsts: Vec<Reg> = (0..count).map(|_| self.reg(RegClass::B32)).collect();
        self.push(Op::Ldmatrix {
            trans,
            dsts: dsts.clone(),
            addr,
        });
        dsts
    }

    /// `acc = A · B + acc` with one warp-collective `mma` (every lane must
    /// execute it). `acc` holds the f32 accumulator fragment, `a` and `b`
    /// the `.b32` operand fragments of `kind`.
    pub fn mma_acc(&mut self, kind: MmaKind, acc: [Reg; 4], a: [Reg; 4], b: [Reg; 2]) {
        self.push(Op::Mma {
            kind,
            d: acc,
            a,
            b,
            c: acc,
        });
    }

    /// Rounds an f32 to tf32 (to nearest, ties away from zero), into a
    /// `.b32` register for [`MmaKind::Tf32`].
    pub fn f32_to_tf32(&mut self, value: Reg) -> Reg {
        let dst = self.reg(RegClass::B32);
        self.push(Op::Cvt {
            to: Ty::Tf32,
            from: Ty::F32,
            dst,
            src: value,
        });
        dst
    }

    /// `*addr += value` on f32 in global memory, atomically.
    pub fn red_add_f32(&mut self, addr: Addr, value: impl Into<Operand>) {
        self.push(Op::RedAdd {
            addr,
            value: value.into(),
        });
    }

    /// `*addr += value` on f32 in global memory, atomically; returns the
    /// value `*addr` held before.
    pub fn atom_add_f32(&mut self, addr: Addr, value: impl Into<Operand>) -> Reg {
        let dst = self.reg(RegClass::F32);
        self.push(Op::AtomAdd {
            ty: Ty::F32,
            dst,
            addr,
            value: value.into(),
        });
        dst
    }

    /// `*addr += value` on a u32 in global memory, atomically; returns the
    /// value `*addr` held before.
    pub fn atom_add_u32(&mut self, addr: Addr, value: impl Into<Operand>) -> Reg {
        let dst = self.reg(RegClass::B32);
        self.push(Op::AtomAdd {
            ty: Ty::U32,
            dst,
            addr,
            value: value.into(),
        });
        dst
    }

    /// `n` (1, 2 or 4) consecutive f32 values from global memory, read from
    /// L2 (`ld.global.cg`): what other blocks stored before a fence.
    pub fn load_global_cg_f32(&mut self, addr: Addr, n: usize) -> Vec<Reg> {
        let dsts: Vec<Reg> = (0..n).map(|_| self.reg(RegClass::F32)).collect();
        self.push(Op::LdGlobalCg {
            ty: Ty::F32,
            dsts: dsts.clone(),
            addr,
        });
        dsts
    }
}

/// The integer type an arithmetic operation is printed with.
fn arith_int_ty(op: ArithOp) -> Ty {
    match op {
        ArithOp::And | ArithOp::Or | ArithOp::Xor | ArithOp::Shl => Ty::B32,
        _ => Ty::U32,
    }
}
