//! Pre-decoding: a [`Kernel`]'s instruction list becomes a compact program
//! over flat register slots, with labels resolved, operand widths checked
//! and every type-dependent choice made once.

use std::cell::RefCell;
use std::collections::HashMap;

use ktune_core::ptx::TensorMap;
use ktune_core::ptx::inst::{
    Addr, ArithOp, Cmp, CpAsyncCache, Instr, Kernel, MmaKind, Op, Operand, Reg, RegClass, ShflMode,
    Space, Special, Ty, UnaryOp,
};
use ktune_core::ptx::tensor_map::MAX_RANK;

use crate::memory::Memory;
use crate::order::NAMED_BARRIERS;
use crate::shared::SHARED_BASE;
use crate::tensor_copy;

/// Index of a register in a thread's flat register file.
pub(crate) type Slot = u32;

/// A source operand.
#[derive(Debug, Clone, Copy)]
#[repr(u8)]
pub(crate) enum Src {
    Reg(Slot),
    /// Already truncated to the instruction type's width.
    Imm(u64),
}

#[derive(Debug, Clone, Copy)]
#[repr(u8)]
pub(crate) enum Guard {
    Always,
    If(Slot),
    IfNot(Slot),
}

/// Two-operand operations, one variant per (operation, type) pair.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Bin {
    Add32,
    Sub32,
    Mul32,
    DivU32,
    DivS32,
    RemU32,
    RemS32,
    MinU32,
    MinS32,
    MaxU32,
    MaxS32,
    Shl32,
    ShrU32,
    ShrS32,
    Add64,
    Sub64,
    Mul64,
    DivU64,
    RemU64,
    MinU64,
    MaxU64,
    Shl64,
    ShrU64,
    /// Bitwise, on values already normalised to their width (predicates
    /// are 0 or 1), so one variant serves every width.
    And,
    Or,
    Xor,
    AddF,
    SubF,
    MulF,
    DivF,
    MinF,
    MaxF,
    /// `mul.wide.u32`
    MulWide,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Un {
    NegF,
    AbsF,
    SqrtF,
    RsqrtF,
    RcpF,
    RcpApproxF,
    Ex2F,
    Lg2F,
    Neg32,
    Abs32,
    NotPred,
    Not16,
    Not32,
    Not64,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Mad {
    Int32,
    Int64,
    F32,
}

/// How `setp` compares.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CmpKind {
    /// Unsigned integers of any width (values are zero-extended).
    Unsigned,
    S32,
    F32,
}

/// A numeric type `cvt` converts between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Num {
    Int { bits: u8, signed: bool },
    F16,
    Bf16,
    F32,
    Tf32,
}

// Explicit tags: a plain byte to dispatch on, instead of a niche-encoded
// discriminant the interpreter would have to decode on every instruction.
#[derive(Debug, Clone, Copy)]
#[repr(u8)]
pub(crate) enum Exec {
    Mov {
        dst: Slot,
        src: Src,
    },
    Sreg {
        dst: Slot,
        sreg: Special,
    },
    Bin {
        op: Bin,
        dst: Slot,
        a: Src,
        b: Src,
    },
    Mad {
        kind: Mad,
        dst: Slot,
        a: Src,
        b: Src,
        c: Src,
    },
    Un {
        op: Un,
        dst: Slot,
        a: Src,
    },
    Cvt {
        from: Num,
        to: Num,
        dst: Slot,
        src: Slot,
    },
    Setp {
        cmp: Cmp,
        kind: CmpKind,
        dst: Slot,
        a: Src,
        b: Src,
    },
    Selp {
        dst: Slot,
        a: Src,
        b: Src,
        cond: Slot,
    },
    Ld {
        space: Space,
        elem: u8,
        n: u8,
        dsts: [Slot; 4],
        base: Slot,
        offset: i64,
    },
    St {
        space: Space,
        elem: u8,
        n: u8,
        srcs: [Src; 4],
        base: Slot,
        offset: i64,
    },
    Shfl {
        mode: ShflMode,
        dst: Slot,
        src: Slot,
        lane: Src,
        clamp: u32,
    },
    /// `mov.b32 dst, {lo, hi}`
    Pack {
        dst: Slot,
        lo: Slot,
        hi: Slot,
    },
    /// `mov.b32 {lo, hi}, src`
    Unpack {
        lo: Slot,
        hi: Slot,
        src: Slot,
    },
    CpAsync {
        dst: Slot,
        dst_offset: i64,
        src: Slot,
        src_offset: i64,
        bytes: u8,
        src_bytes: Option<Slot>,
    },
    CpCommit,
    CpWait {
        pending: u32,
    },
    CpWaitAll,
    /// `cp.async.mbarrier.arrive.noinc`: the thread's copies arrive at the
    /// memory barrier at the address once landed (see `shared::mbarrier`).
    CpMbarrierArrive {
        base: Slot,
        offset: i64,
    },
    /// `mbarrier.init`: a memory barrier expecting `count` arrivals a phase.
    MbarrierInit {
        base: Slot,
        offset: i64,
        count: Src,
    },
    /// `mbarrier.arrive`, the phase's token (its number) in `state`.
    MbarrierArrive {
        state: Slot,
        base: Slot,
        offset: i64,
    },
    /// `mbarrier.arrive.expect_tx`: the phase expects `bytes` more
    /// transaction bytes, then the thread arrives.
    MbarrierArriveExpectTx {
        state: Slot,
        base: Slot,
        offset: i64,
        bytes: Src,
    },
    /// `cvta.param.u64`: a tensor map's parameter-space address made
    /// generic (see [`crate::tensor_copy`]).
    CvtaParam {
        dst: Slot,
        src: Slot,
    },
    /// `cp.async.bulk.tensor`, entry `index` of [`Program::tensor_copies`].
    TensorCopy {
        index: u32,
    },
    /// `mbarrier.arrive.shared::cluster`: an arrival at
    /// the memory barrier at a cluster-window address, which the cluster
    /// completes ([`crate::block`]).
    MbarrierArriveCluster {
        base: Slot,
        offset: i64,
    },
    /// `fence.mbarrier_init.release.cluster`: the thread's barrier inits
    /// become visible to the cluster's other blocks.
    FenceMbarrierInit,
    /// `mbarrier.try_wait.parity`: `done` once the phase of parity
    /// `parity` has completed; the thread waits for that in place.
    MbarrierTryWait {
        done: Slot,
        base: Slot,
        offset: i64,
        parity: Src,
    },
    /// Warp-collective: the lanes' operands are read when the whole warp
    /// has arrived.
    Ldmatrix {
        trans: bool,
        n: u8,
        dsts: [Slot; 4],
        base: Slot,
        offset: i64,
    },
    /// Warp-collective, like [`Exec::Ldmatrix`].
    Mma {
        kind: MmaKind,
        d: [Slot; 4],
        a: [Slot; 4],
        b: [Slot; 2],
        c: [Slot; 4],
    },
    /// `red.global.add.f32` (no `dst`) or `atom.global.add.f32` (`float`)
    /// or `.u32`.
    AtomAdd {
        float: bool,
        dst: Option<Slot>,
        base: Slot,
        offset: i64,
        value: Src,
    },
    /// `fence.proxy.async.shared::cta`: the thread's shared-memory writes
    /// become visible to the async proxy.
    FenceProxy,
    /// Warpgroup-collective, like the three after it: the threads' operands
    /// are read when the whole warpgroup has arrived (see `warpgroup`).
    WgmmaFence,
    /// `wgmma.mma_async`, entry `index` of [`Program::wgmma`].
    Wgmma {
        index: u32,
    },
    WgmmaCommit,
    WgmmaWait {
        pending: u32,
    },
    /// `setmaxnreg`: the warpgroup's threads' register count, from now on.
    SetMaxNReg {
        count: u32,
        raise: bool,
    },
    /// Orders the block's global accesses (see [`crate::memory`]).
    Fence,
    Bar,
    /// A named barrier (see [`crate::order`]).
    NamedBar {
        /// 1 to 15, checked when decoding an immediate and when arriving
        /// at a register's.
        id: Src,
        threads: u32,
        wait: bool,
    },
    /// `mapa.shared::cluster`: the cluster-window address of a shared
    /// address in block `rank`'s shared memory (see [`crate::cluster`]).
    Mapa {
        dst: Slot,
        src: Slot,
        rank: Src,
    },
    ClusterArrive,
    ClusterWait,
    Bra {
        target: u32,
    },
    Ret,
    Trap,
}

impl Exec {
    /// Whether the instruction is collective over a warpgroup (four
    /// warps) rather than a warp.
    pub(crate) fn is_warpgroup(&self) -> bool {
        matches!(
            self,
            Exec::WgmmaFence
                | Exec::Wgmma { .. }
                | Exec::WgmmaCommit
                | Exec::WgmmaWait { .. }
                | Exec::SetMaxNReg { .. }
        )
    }
}

/// A decoded `cp.async.bulk.tensor`: the box of the map whose generic
/// address `map` holds, at `coords`, to shared `dst` (plus `dst_offset`),
/// its bytes completing at the memory barrier at `barrier` (plus
/// `barrier_offset`).
#[derive(Debug, Clone)]
pub(crate) struct TensorCopy {
    pub dst: Slot,
    pub dst_offset: i64,
    pub map: Slot,
    pub coords: Vec<Slot>,
    pub barrier: Slot,
    pub barrier_offset: i64,
    /// The mask of the cluster's blocks it lands in (`.multicast::cluster`,
    /// a 16-bit register), or `None` for the issuing block alone.
    pub multicast: Option<Slot>,
}

/// A decoded `wgmma.mma_async`: N is twice `d.len()`.
#[derive(Debug, Clone)]
pub(crate) struct Wgmma {
    pub kind: MmaKind,
    pub d: Vec<Slot>,
    pub a: Slot,
    pub b: Slot,
    pub scale_d: Slot,
    pub trans_a: bool,
    pub trans_b: bool,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Inst {
    pub guard: Guard,
    pub exec: Exec,
}

/// A decoded kernel.
#[derive(Debug)]
pub(crate) struct Program {
    pub insts: Vec<Inst>,
    /// For each decoded instruction, its index in the kernel body.
    pub origin: Vec<usize>,
    /// Registers per thread.
    pub slots: u32,
    /// The `wgmma.mma_async`s, which [`Exec::Wgmma`] points into.
    pub wgmma: Vec<Wgmma>,
    /// Every register a `wgmma.mma_async` accumulates in, once each.
    pub wgmma_accumulators: Vec<Slot>,
    /// The `cp.async.bulk.tensor`s, which [`Exec::TensorCopy`] points
    /// into.
    pub tensor_copies: Vec<TensorCopy>,
    /// The kernel's tensor maps.
    pub maps: Vec<TensorMap>,
    /// Whether any instruction is warpgroup-collective: blocks of other
    /// kernels keep no warpgroup state.
    pub warpgroups: bool,
    /// Whether any instruction is a named barrier's.
    pub named_barriers: bool,
    /// Whether any instruction is a memory barrier's.
    pub mbarriers: bool,
    class_base: [u32; 5],
    class_count: [u32; 5],
}

/// Why decoding failed: the body index of the instruction and the reason.
pub(crate) type DecodeError = (usize, String);

impl Program {
    pub(crate) fn decode(kernel: &Kernel) -> Result<Program, DecodeError> {
        let mut class_count = [0u32; 5];
        for (class, count) in &kernel.reg_counts {
            class_count[*class as usize] = *count;
        }
        let mut class_base = [0u32; 5];
        let mut slots = 0u32;
        for class in RegClass::ALL {
            class_base[class as usize] = slots;
            slots += class_count[class as usize];
        }
        let mut program = Program {
            insts: Vec::with_capacity(kernel.body.len() + 1),
            origin: Vec::with_capacity(kernel.body.len() + 1),
            slots,
            wgmma: Vec::new(),
            wgmma_accumulators: Vec::new(),
            tensor_copies: Vec::new(),
            maps: kernel.tensor_maps.clone(),
            warpgroups: false,
            named_barriers: false,
            mbarriers: false,
            class_base,
            class_count,
        };

        // Labels resolve to the next real instruction.
        let mut labels = HashMap::new();
        let mut next = 0u32;
        for (i, instr) in kernel.body.iter().enumerate() {
            if let Op::Label(l) = instr.op {
                if instr.guard.is_some() {
                    return Err((i, "a label cannot be guarded".into()));
                }
                if labels.insert(l, next).is_some() {
                    return Err((i, format!("label {} is defined twice", l.0)));
                }
            } else {
                next += 1;
            }
        }

        let d = Decoder {
            program: &program,
            kernel,
            labels: &labels,
            wgmma: RefCell::new(Vec::new()),
            tensor_copies: RefCell::new(Vec::new()),
        };
        let mut insts = Vec::with_capacity(kernel.body.len() + 1);
        let mut origin = Vec::with_capacity(kernel.body.len() + 1);
        for (i, instr) in kernel.body.iter().enumerate() {
            if matches!(instr.op, Op::Label(_)) {
                continue;
            }
            insts.push(d.instr(instr).map_err(|e| (i, e))?);
            origin.push(i);
        }
        // Falling off the end of the body returns.
        insts.push(Inst {
            guard: Guard::Always,
            exec: Exec::Ret,
        });
        origin.push(kernel.body.len());
        let wgmma = d.wgmma.into_inner();
        program.tensor_copies = d.tensor_copies.into_inner();
        let mut accumulators: Vec<Slot> = wgmma.iter().flat_map(|w| w.d.iter().copied()).collect();
        accumulators.sort_unstable();
        accumulators.dedup();
        program.wgmma = wgmma;
        program.wgmma_accumulators = accumulators;
        program.warpgroups = insts.iter().any(|i| i.exec.is_warpgroup());
        program.named_barriers = insts
            .iter()
            .any(|i| matches!(i.exec, Exec::NamedBar { .. }));
        program.mbarriers = insts.iter().any(|i| {
            matches!(
                i.exec,
                Exec::MbarrierInit { .. }
                    | Exec::MbarrierArrive { .. }
                    | Exec::MbarrierArriveExpectTx { .. }
                    | Exec::CpMbarrierArrive { .. }
                    | Exec::TensorCopy { .. }
                    | Exec::MbarrierArriveCluster { .. }
            )
        });
        program.insts = insts;
        program.origin = origin;
        Ok(program)
    }

    fn slot(&self, r: Reg) -> Option<Slot> {
        let c = r.class as usize;
        (r.index < self.class_count[c]).then(|| self.class_base[c] + r.index)
    }

    /// The PTX name of the register in a slot (`%r7`).
    pub(crate) fn reg_name(&self, slot: Slot) -> String {
        for class in RegClass::ALL.into_iter().rev() {
            let base = self.class_base[class as usize];
            if slot >= base && self.class_count[class as usize] > 0 {
                let prefix = match class {
                    RegClass::Pred => "%p",
                    RegClass::B16 => "%h",
                    RegClass::B32 => "%r",
                    RegClass::B64 => "%rd",
                    RegClass::F32 => "%f",
                };
                return format!("{prefix}{}", slot - base);
            }
        }
        format!("slot {slot}")
    }
}

/// Register and operand widths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Width {
    Pred,
    W16,
    W32,
    W64,
}

impl Width {
    fn bits(self) -> u32 {
        match self {
            Width::Pred => 1,
            Width::W16 => 16,
            Width::W32 => 32,
            Width::W64 => 64,
        }
    }

    fn bytes(self) -> u8 {
        match self {
            Width::Pred => 0,
            Width::W16 => 2,
            Width::W32 => 4,
            Width::W64 => 8,
        }
    }

    fn mask(self, v: u64) -> u64 {
        match self {
            Width::W64 => v,
            w => v & ((1u64 << w.bits()) - 1),
        }
    }
}

fn class_width(c: RegClass) -> Width {
    match c {
        RegClass::Pred => Width::Pred,
        RegClass::B16 => Width::W16,
        RegClass::B32 | RegClass::F32 => Width::W32,
        RegClass::B64 => Width::W64,
    }
}

fn ty_width(t: Ty) -> Width {
    match t {
        Ty::Pred => Width::Pred,
        Ty::B16 | Ty::U16 | Ty::F16 | Ty::Bf16 => Width::W16,
        Ty::B32 | Ty::U32 | Ty::S32 | Ty::F32 | Ty::Tf32 => Width::W32,
        Ty::B64 | Ty::U64 => Width::W64,
    }
}

fn is_float(t: Ty) -> bool {
    matches!(t, Ty::F16 | Ty::Bf16 | Ty::F32 | Ty::Tf32)
}

fn num(t: Ty) -> Result<Num, String> {
    Ok(match t {
        Ty::F16 => Num::F16,
        Ty::Bf16 => Num::Bf16,
        Ty::F32 => Num::F32,
        Ty::Tf32 => Num::Tf32,
        Ty::S32 => Num::Int {
            bits: 32,
            signed: true,
        },
        Ty::Pred => return Err("cvt has no .pred form".into()),
        t => Num::Int {
            bits: ty_width(t).bits() as u8,
            signed: false,
        },
    })
}

struct Decoder<'a> {
    program: &'a Program,
    kernel: &'a Kernel,
    labels: &'a HashMap<ktune_core::ptx::inst::Label, u32>,
    wgmma: RefCell<Vec<Wgmma>>,
    tensor_copies: RefCell<Vec<TensorCopy>>,
}

fn unsupported(what: &str, t: Ty) -> String {
    format!("{what} on .{t:?} is not supported by the virtual GPU").to_lowercase()
}

impl Decoder<'_> {
    fn slot(&self, r: Reg) -> Result<Slot, String> {
        self.program.slot(r).ok_or_else(|| {
            format!(
                "register {:?} {} is not declared (the kernel declares {} of that class)",
                r.class, r.index, self.program.class_count[r.class as usize]
            )
        })
    }

    /// A register whose width must equal `w`.
    fn reg(&self, r: Reg, w: Width) -> Result<Slot, String> {
        let have = class_width(r.class);
        if have != w {
            return Err(format!(
                "register of class {:?} used where a {}-bit operand is expected",
                r.class,
                w.bits()
            ));
        }
        self.slot(r)
    }

    /// A register at least `w` wide (`ld`, `st` and `cvt` use its low bits).
    fn wide_reg(&self, r: Reg, w: Width) -> Result<Slot, String> {
        let have = class_width(r.class);
        if (have == Width::Pred) != (w == Width::Pred) || have < w {
            return Err(format!(
                "register of class {:?} used where a {}-bit operand is expected",
                r.class,
                w.bits()
            ));
        }
        self.slot(r)
    }

    fn src(&self, o: Operand, t: Ty) -> Result<Src, String> {
        let w = ty_width(t);
        match o {
            Operand::Reg(r) => Ok(Src::Reg(self.reg(r, w)?)),
            Operand::Int(i) if is_float(t) => Err(format!(
                "integer immediate {i} used as a .{t:?} operand (write it as a float immediate)"
            )
            .to_lowercase()),
            Operand::Int(i) => Ok(Src::Imm(w.mask(i as u64))),
            Operand::F32(x) if w == Width::W32 => Ok(Src::Imm(u64::from(x.to_bits()))),
            Operand::F32(_) => Err(format!("f32 immediate used as a {}-bit operand", w.bits())),
        }
    }

    fn instr(&self, instr: &Instr) -> Result<Inst, String> {
        let guard = match instr.guard {
            None => Guard::Always,
            Some(g) => {
                let p = self.reg(g.pred, Width::Pred)?;
                if g.negate {
                    Guard::IfNot(p)
                } else {
                    Guard::If(p)
                }
            }
        };
        Ok(Inst {
            guard,
            exec: self.op(&instr.op)?,
        })
    }

    fn op(&self, op: &Op) -> Result<Exec, String> {
        Ok(match op {
            Op::LdParam { dst, index } => {
                if *index >= self.kernel.param_count {
                    return Err(format!(
                        "param_{index} does not exist (the kernel has {} parameters)",
                        self.kernel.param_count
                    ));
                }
                Exec::Mov {
                    dst: self.reg(*dst, Width::W64)?,
                    src: Src::Imm(Memory::base_address(*index)),
                }
            }
            Op::TensorMapParam { dst, index } => {
                if *index >= self.kernel.tensor_maps.len() {
                    return Err(format!(
                        "map_{index} does not exist (the kernel takes {} tensor maps)",
                        self.kernel.tensor_maps.len()
                    ));
                }
                Exec::Mov {
                    dst: self.reg(*dst, Width::W64)?,
                    src: Src::Imm(tensor_copy::param_address(*index)),
                }
            }
            Op::CvtaParam { dst, src } => Exec::CvtaParam {
                dst: self.reg(*dst, Width::W64)?,
                src: self.reg(*src, Width::W64)?,
            },
            Op::CvtaGlobal { dst, src } => Exec::Mov {
                dst: self.reg(*dst, Width::W64)?,
                src: Src::Reg(self.reg(*src, Width::W64)?),
            },
            Op::SharedBase { dst } => {
                if self.kernel.dynamic_shared_bytes == 0 {
                    return Err(
                        "the kernel addresses the shared window but declares 0 dynamic shared bytes"
                            .into(),
                    );
                }
                Exec::Mov {
                    dst: self.reg(*dst, Width::W32)?,
                    src: Src::Imm(u64::from(SHARED_BASE)),
                }
            }
            Op::Mov { ty, dst, src } => Exec::Mov {
                dst: self.reg(*dst, ty_width(*ty))?,
                src: self.src(*src, *ty)?,
            },
            Op::ReadSpecial { dst, sreg } => Exec::Sreg {
                dst: self.reg(*dst, Width::W32)?,
                sreg: *sreg,
            },
            Op::Arith { op, ty, dst, a, b } => {
                let bin = arith(*op, *ty)?;
                let shift = matches!(op, ArithOp::Shl | ArithOp::Shr);
                Exec::Bin {
                    op: bin,
                    dst: self.reg(*dst, ty_width(*ty))?,
                    a: self.src(*a, *ty)?,
                    // Shift amounts are always .u32.
                    b: self.src(*b, if shift { Ty::U32 } else { *ty })?,
                }
            }
            Op::MulWide { dst, a, b } => Exec::Bin {
                op: Bin::MulWide,
                dst: self.reg(*dst, Width::W64)?,
                a: self.src(*a, Ty::U32)?,
                b: self.src(*b, Ty::U32)?,
            },
            Op::Mad { ty, dst, a, b, c } => {
                let kind = match ty {
                    Ty::U32 | Ty::S32 | Ty::B32 => Mad::Int32,
                    Ty::U64 | Ty::B64 => Mad::Int64,
                    Ty::F32 => Mad::F32,
                    t => return Err(unsupported("mad/fma", *t)),
                };
                Exec::Mad {
                    kind,
                    dst: self.reg(*dst, ty_width(*ty))?,
                    a: self.src(*a, *ty)?,
                    b: self.src(*b, *ty)?,
                    c: self.src(*c, *ty)?,
                }
            }
            Op::Unary { op, ty, dst, a } => Exec::Un {
                op: unary(*op, *ty)?,
                dst: self.reg(*dst, ty_width(*ty))?,
                a: self.src(*a, *ty)?,
            },
            Op::Cvt { to, from, dst, src } => {
                let (to_num, from_num) = (num(*to)?, num(*from)?);
                let float = |n| matches!(n, Num::F16 | Num::Bf16 | Num::F32);
                if to_num == Num::Tf32 || from_num == Num::Tf32 {
                    if (to_num, from_num) != (Num::Tf32, Num::F32) {
                        return Err("tf32 is only converted to, from f32 (cvt.rna.tf32.f32)".into());
                    }
                } else if float(to_num) && float(from_num) {
                    let ok = matches!(
                        (to_num, from_num),
                        (Num::F32, _) | (Num::F16 | Num::Bf16, Num::F32)
                    );
                    if !ok {
                        return Err(format!("cvt.{to:?}.{from:?} is not supported").to_lowercase());
                    }
                }
                Exec::Cvt {
                    from: from_num,
                    to: to_num,
                    dst: self.wide_reg(*dst, ty_width(*to))?,
                    src: self.wide_reg(*src, ty_width(*from))?,
                }
            }
            Op::Setp { cmp, ty, dst, a, b } => {
                let kind = match ty {
                    Ty::F32 => CmpKind::F32,
                    Ty::S32 => CmpKind::S32,
                    Ty::U16 | Ty::U32 | Ty::U64 | Ty::B16 | Ty::B32 | Ty::B64 => CmpKind::Unsigned,
                    t => return Err(unsupported("setp", *t)),
                };
                if matches!(cmp, Cmp::Neu) && !matches!(kind, CmpKind::F32) {
                    return Err("setp.neu needs a floating-point type".into());
                }
                Exec::Setp {
                    cmp: *cmp,
                    kind,
                    dst: self.reg(*dst, Width::Pred)?,
                    a: self.src(*a, *ty)?,
                    b: self.src(*b, *ty)?,
                }
            }
            Op::Selp {
                ty,
                dst,
                a,
                b,
                cond,
            } => Exec::Selp {
                dst: self.reg(*dst, ty_width(*ty))?,
                a: self.src(*a, *ty)?,
                b: self.src(*b, *ty)?,
                cond: self.reg(*cond, Width::Pred)?,
            },
            Op::Ld {
                space,
                ty,
                dsts,
                addr,
            } => self.load(*space, *ty, dsts, addr)?,
            Op::LdGlobalCg { ty, dsts, addr } => self.load(Space::Global, *ty, dsts, addr)?,
            Op::St {
                space,
                ty,
                addr,
                srcs,
            } => {
                if *space == Space::GlobalReadOnly {
                    return Err("`st.global.nc` does not exist: `.nc` is for loads".into());
                }
                if *space == Space::SharedCluster {
                    return Err(
                        "stores to another block's shared memory are not supported here".into(),
                    );
                }
                let (elem, n) = self.access(*ty, srcs.len())?;
                let mut values = [Src::Imm(0); 4];
                for (v, o) in values.iter_mut().zip(srcs) {
                    *v = match o {
                        Operand::Reg(r) => Src::Reg(self.wide_reg(*r, ty_width(*ty))?),
                        imm => self.src(*imm, *ty)?,
                    };
                }
                Exec::St {
                    space: *space,
                    elem,
                    n,
                    srcs: values,
                    base: self.address(*space, addr.base)?,
                    offset: addr.offset,
                }
            }
            Op::Shfl {
                mode,
                dst,
                src,
                lane,
                clamp,
            } => Exec::Shfl {
                mode: *mode,
                dst: self.reg(*dst, Width::W32)?,
                src: self.reg(*src, Width::W32)?,
                lane: self.src(*lane, Ty::U32)?,
                clamp: *clamp,
            },
            Op::Pack { dst, lo, hi } => Exec::Pack {
                dst: self.reg(*dst, Width::W32)?,
                lo: self.reg(*lo, Width::W16)?,
                hi: self.reg(*hi, Width::W16)?,
            },
            Op::Unpack { lo, hi, src } => Exec::Unpack {
                lo: self.reg(*lo, Width::W16)?,
                hi: self.reg(*hi, Width::W16)?,
                src: self.reg(*src, Width::W32)?,
            },
            Op::CpAsync {
                cache,
                dst,
                src,
                bytes,
                src_bytes,
            } => {
                let sizes: &[u32] = match cache {
                    CpAsyncCache::Ca => &[4, 8, 16],
                    CpAsyncCache::Cg => &[16],
                };
                if !sizes.contains(bytes) {
                    return Err(format!(
                        "cp.async.{} copies {sizes:?} bytes, not {bytes}",
                        format!("{cache:?}").to_lowercase()
                    ));
                }
                Exec::CpAsync {
                    dst: self.address(Space::Shared, dst.base)?,
                    dst_offset: dst.offset,
                    src: self.address(Space::Global, src.base)?,
                    src_offset: src.offset,
                    bytes: *bytes as u8,
                    src_bytes: src_bytes.map(|r| self.reg(r, Width::W32)).transpose()?,
                }
            }
            Op::CpAsyncCommit => Exec::CpCommit,
            Op::CpAsyncWait { pending } => Exec::CpWait { pending: *pending },
            Op::CpAsyncWaitAll => Exec::CpWaitAll,
            Op::CpAsyncMbarrierArrive { addr } => Exec::CpMbarrierArrive {
                base: self.address(Space::Shared, addr.base)?,
                offset: addr.offset,
            },
            Op::MbarrierInit { addr, count } => Exec::MbarrierInit {
                base: self.address(Space::Shared, addr.base)?,
                offset: addr.offset,
                count: self.src(*count, Ty::U32)?,
            },
            Op::MbarrierArrive { state, addr } => Exec::MbarrierArrive {
                state: self.reg(*state, Width::W64)?,
                base: self.address(Space::Shared, addr.base)?,
                offset: addr.offset,
            },
            Op::MbarrierArriveExpectTx { state, addr, bytes } => {
                if let Operand::Int(b) = bytes
                    && !(0..1 << 20).contains(b)
                {
                    return Err(format!(
                        "expect_tx of {b} bytes: a phase expects 0 to 1048575"
                    ));
                }
                Exec::MbarrierArriveExpectTx {
                    state: self.reg(*state, Width::W64)?,
                    base: self.address(Space::Shared, addr.base)?,
                    offset: addr.offset,
                    bytes: self.src(*bytes, Ty::U32)?,
                }
            }
            Op::CpAsyncBulkTensor {
                dst,
                map,
                coords,
                barrier,
                multicast,
            } => {
                if coords.is_empty() || coords.len() > MAX_RANK {
                    return Err(format!(
                        "cp.async.bulk.tensor with {} coordinates; a tensor map has 1 to {MAX_RANK}",
                        coords.len(),
                    ));
                }
                let copy = TensorCopy {
                    dst: self.address(Space::Shared, dst.base)?,
                    dst_offset: dst.offset,
                    map: self.reg(*map, Width::W64)?,
                    coords: coords
                        .iter()
                        .map(|r| self.reg(*r, Width::W32))
                        .collect::<Result<_, _>>()?,
                    barrier: self.address(Space::Shared, barrier.base)?,
                    barrier_offset: barrier.offset,
                    multicast: multicast.map(|m| self.reg(m, Width::W16)).transpose()?,
                };
                let mut table = self.tensor_copies.borrow_mut();
                table.push(copy);
                Exec::TensorCopy {
                    index: table.len() as u32 - 1,
                }
            }
            Op::MbarrierTryWait { done, addr, parity } => Exec::MbarrierTryWait {
                done: self.reg(*done, Width::Pred)?,
                base: self.address(Space::Shared, addr.base)?,
                offset: addr.offset,
                parity: self.src(*parity, Ty::U32)?,
            },
            Op::Ldmatrix { trans, dsts, addr } => {
                if !matches!(dsts.len(), 1 | 2 | 4) {
                    return Err(format!(
                        "ldmatrix loads 1, 2 or 4 matrices, not {}",
                        dsts.len()
                    ));
                }
                let mut slots = [0; 4];
                for (s, r) in slots.iter_mut().zip(dsts) {
                    *s = self.reg(*r, Width::W32)?;
                }
                Exec::Ldmatrix {
                    trans: *trans,
                    n: dsts.len() as u8,
                    dsts: slots,
                    base: self.address(Space::Shared, addr.base)?,
                    offset: addr.offset,
                }
            }
            Op::Mma { kind, d, a, b, c } => {
                let f32s = |regs: &[Reg; 4]| -> Result<[Slot; 4], String> {
                    let mut slots = [0; 4];
                    for (s, r) in slots.iter_mut().zip(regs) {
                        *s = self.f32_reg(*r)?;
                    }
                    Ok(slots)
                };
                let b32s = |regs: &[Reg]| -> Result<Vec<Slot>, String> {
                    regs.iter().map(|r| self.b32_reg(*r)).collect()
                };
                let (a_slots, b_slots) = (b32s(a)?, b32s(b)?);
                Exec::Mma {
                    kind: *kind,
                    d: f32s(d)?,
                    a: [a_slots[0], a_slots[1], a_slots[2], a_slots[3]],
                    b: [b_slots[0], b_slots[1]],
                    c: f32s(c)?,
                }
            }
            Op::RedAdd { addr, value } => self.atom_add(Ty::F32, None, addr, *value)?,
            Op::AtomAdd {
                ty,
                dst,
                addr,
                value,
            } => self.atom_add(*ty, Some(*dst), addr, *value)?,
            Op::FenceProxyAsync => Exec::FenceProxy,
            Op::FenceMbarrierInit => Exec::FenceMbarrierInit,
            Op::MbarrierArriveCluster { addr } => Exec::MbarrierArriveCluster {
                base: self.address(Space::SharedCluster, addr.base)?,
                offset: addr.offset,
            },
            Op::WgmmaFence => Exec::WgmmaFence,
            Op::WgmmaCommit => Exec::WgmmaCommit,
            Op::WgmmaWait { pending } => Exec::WgmmaWait { pending: *pending },
            Op::SetMaxNReg { count, raise } => {
                if !(24..=256).contains(count) || count % 8 != 0 {
                    return Err(format!(
                        "setmaxnreg to {count} registers: the count is a multiple of 8 from 24 to 256"
                    ));
                }
                Exec::SetMaxNReg {
                    count: *count,
                    raise: *raise,
                }
            }
            Op::Wgmma {
                kind,
                d,
                a,
                b,
                scale_d,
                trans_a,
                trans_b,
            } => {
                let n = 2 * d.len();
                if n % 8 != 0 || !(8..=256).contains(&n) {
                    return Err(format!(
                        "wgmma.mma_async has N = {n} ({} accumulators); N is a multiple of 8 from 8 to 256",
                        d.len()
                    ));
                }
                if *kind == MmaKind::Tf32 && (*trans_a || *trans_b) {
                    return Err("tf32 wgmma.mma_async operands are K-major only".into());
                }
                let wgmma = Wgmma {
                    kind: *kind,
                    d: d.iter()
                        .map(|r| self.f32_reg(*r))
                        .collect::<Result<_, _>>()?,
                    a: self.reg(*a, Width::W64)?,
                    b: self.reg(*b, Width::W64)?,
                    scale_d: self.reg(*scale_d, Width::Pred)?,
                    trans_a: *trans_a,
                    trans_b: *trans_b,
                };
                let mut table = self.wgmma.borrow_mut();
                table.push(wgmma);
                Exec::Wgmma {
                    index: table.len() as u32 - 1,
                }
            }
            Op::Fence => Exec::Fence,
            Op::BarSync => Exec::Bar,
            Op::NamedBar { id, threads, wait } => {
                if let Operand::Int(id) = *id
                    && !(1..NAMED_BARRIERS as i64).contains(&id)
                {
                    return Err(format!(
                        "named barrier {id}: {}",
                        crate::NamedProblem::Number
                    ));
                }
                if *threads == 0 || threads % 32 != 0 {
                    return Err(format!(
                        "a named barrier for {threads} threads: whole warps arrive, a positive multiple of 32"
                    ));
                }
                Exec::NamedBar {
                    id: self.src(*id, Ty::U32)?,
                    threads: *threads,
                    wait: *wait,
                }
            }
            Op::Mapa { dst, src, rank } => Exec::Mapa {
                dst: self.reg(*dst, Width::W32)?,
                src: self.reg(*src, Width::W32)?,
                rank: self.src(*rank, Ty::U32)?,
            },
            Op::ClusterArrive => Exec::ClusterArrive,
            Op::ClusterWait => Exec::ClusterWait,
            Op::Bra { target } => Exec::Bra {
                target: *self
                    .labels
                    .get(target)
                    .ok_or_else(|| format!("label {} is never placed", target.0))?,
            },
            Op::Label(_) => return Err("a label is not an instruction".into()),
            Op::Ret => Exec::Ret,
            Op::Trap => Exec::Trap,
        })
    }

    /// An `.f32` operand of `mma`: an f32 register.
    fn f32_reg(&self, r: Reg) -> Result<Slot, String> {
        if r.class != RegClass::F32 {
            return Err(format!(
                "mma accumulators are .f32 registers, not {:?}",
                r.class
            ));
        }
        self.slot(r)
    }

    /// A packed `.b32` operand of `mma`: a 32-bit integer register.
    fn b32_reg(&self, r: Reg) -> Result<Slot, String> {
        if r.class != RegClass::B32 {
            return Err(format!(
                "mma A and B fragments are .b32 registers, not {:?}",
                r.class
            ));
        }
        self.slot(r)
    }

    fn atom_add(
        &self,
        ty: Ty,
        dst: Option<Reg>,
        addr: &Addr,
        value: Operand,
    ) -> Result<Exec, String> {
        let float = match ty {
            Ty::F32 => true,
            Ty::U32 => false,
            other => return Err(format!("atom.add.{other:?} is not a form ktune emits")),
        };
        Ok(Exec::AtomAdd {
            float,
            dst: dst.map(|r| self.reg(r, Width::W32)).transpose()?,
            base: self.address(Space::Global, addr.base)?,
            offset: addr.offset,
            value: self.src(value, ty)?,
        })
    }

    fn load(&self, space: Space, ty: Ty, dsts: &[Reg], addr: &Addr) -> Result<Exec, String> {
        let (elem, n) = self.access(ty, dsts.len())?;
        let mut slots = [0; 4];
        for (s, r) in slots.iter_mut().zip(dsts) {
            *s = self.wide_reg(*r, ty_width(ty))?;
        }
        Ok(Exec::Ld {
            space,
            elem,
            n,
            dsts: slots,
            base: self.address(space, addr.base)?,
            offset: addr.offset,
        })
    }

    /// Element size and vector length of a load or store.
    fn access(&self, ty: Ty, n: usize) -> Result<(u8, u8), String> {
        let elem = ty_width(ty).bytes();
        if elem == 0 {
            return Err("loads and stores have no .pred form".into());
        }
        if !matches!(n, 1 | 2 | 4) || usize::from(elem) * n > 16 {
            return Err(format!(
                "a vector of {n} {}-byte elements is not a PTX vector access",
                elem
            ));
        }
        Ok((elem, n as u8))
    }

    fn address(&self, space: Space, base: Reg) -> Result<Slot, String> {
        match space {
            Space::Global | Space::GlobalReadOnly => self.reg(base, Width::W64),
            Space::Shared => match class_width(base.class) {
                Width::W32 | Width::W64 => self.slot(base),
                _ => Err("a shared address must be a 32- or 64-bit register".into()),
            },
            Space::SharedCluster => self.reg(base, Width::W32),
        }
    }
}

fn arith(op: ArithOp, ty: Ty) -> Result<Bin, String> {
    use ArithOp as A;
    let int32 = matches!(ty, Ty::U32 | Ty::B32 | Ty::S32);
    let int64 = matches!(ty, Ty::U64 | Ty::B64);
    let signed = ty == Ty::S32;
    Ok(match op {
        A::And | A::Or | A::Xor if is_float(ty) => return Err(unsupported(&format!("{op:?}"), ty)),
        A::And => Bin::And,
        A::Or => Bin::Or,
        A::Xor => Bin::Xor,
        A::Add if int32 => Bin::Add32,
        A::Sub if int32 => Bin::Sub32,
        A::Mul if int32 => Bin::Mul32,
        A::Div if signed => Bin::DivS32,
        A::Div if int32 => Bin::DivU32,
        A::Rem if signed => Bin::RemS32,
        A::Rem if int32 => Bin::RemU32,
        A::Min if signed => Bin::MinS32,
        A::Min if int32 => Bin::MinU32,
        A::Max if signed => Bin::MaxS32,
        A::Max if int32 => Bin::MaxU32,
        A::Shl if int32 => Bin::Shl32,
        A::Shr if signed => Bin::ShrS32,
        A::Shr if int32 => Bin::ShrU32,
        A::Add if int64 => Bin::Add64,
        A::Sub if int64 => Bin::Sub64,
        A::Mul if int64 => Bin::Mul64,
        A::Div if int64 => Bin::DivU64,
        A::Rem if int64 => Bin::RemU64,
        A::Min if int64 => Bin::MinU64,
        A::Max if int64 => Bin::MaxU64,
        A::Shl if int64 => Bin::Shl64,
        A::Shr if int64 => Bin::ShrU64,
        A::Add if ty == Ty::F32 => Bin::AddF,
        A::Sub if ty == Ty::F32 => Bin::SubF,
        A::Mul if ty == Ty::F32 => Bin::MulF,
        A::Div if ty == Ty::F32 => Bin::DivF,
        A::Min if ty == Ty::F32 => Bin::MinF,
        A::Max if ty == Ty::F32 => Bin::MaxF,
        op => return Err(unsupported(&format!("{op:?}"), ty)),
    })
}

fn unary(op: UnaryOp, ty: Ty) -> Result<Un, String> {
    use UnaryOp as U;
    Ok(match (op, ty) {
        (U::Neg, Ty::F32) => Un::NegF,
        (U::Abs, Ty::F32) => Un::AbsF,
        (U::Sqrt, Ty::F32) => Un::SqrtF,
        (U::Rsqrt, Ty::F32) => Un::RsqrtF,
        (U::Rcp, Ty::F32) => Un::RcpF,
        (U::RcpApprox, Ty::F32) => Un::RcpApproxF,
        (U::Ex2, Ty::F32) => Un::Ex2F,
        (U::Lg2, Ty::F32) => Un::Lg2F,
        (U::Neg, Ty::S32) => Un::Neg32,
        (U::Abs, Ty::S32) => Un::Abs32,
        (U::Not, Ty::Pred) => Un::NotPred,
        (U::Not, Ty::B16 | Ty::U16) => Un::Not16,
        (U::Not, Ty::B32 | Ty::U32 | Ty::S32) => Un::Not32,
        (U::Not, Ty::B64 | Ty::U64) => Un::Not64,
        (op, t) => return Err(unsupported(&format!("{op:?}"), t)),
    })
}
