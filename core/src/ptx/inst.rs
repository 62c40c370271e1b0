//! The typed PTX instruction list.
//!
//! Code generation builds a [`Kernel`] of [`Instr`]s; [`super::print`] turns it
//! into PTX text and the virtual GPU executes the same list. Only the
//! instructions ktune emits exist here, each with the operand types it needs,
//! so a malformed combination is hard to build.

/// A register's class, which fixes its PTX declaration and name prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RegClass {
    /// `.pred`, `%p`
    Pred,
    /// `.b16`, `%h` (f16 and bf16 values in storage form)
    B16,
    /// `.b32`, `%r` (32-bit integers)
    B32,
    /// `.b64`, `%rd` (addresses)
    B64,
    /// `.f32`, `%f`
    F32,
}

impl RegClass {
    pub const ALL: [RegClass; 5] = [
        RegClass::Pred,
        RegClass::B16,
        RegClass::B32,
        RegClass::B64,
        RegClass::F32,
    ];
}

/// A virtual register. Registers may be written more than once (loop
/// counters, accumulators).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Reg {
    pub class: RegClass,
    pub index: u32,
}

/// The type suffix of an instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ty {
    Pred,
    B16,
    B32,
    B64,
    U16,
    U32,
    U64,
    S32,
    F16,
    Bf16,
    F32,
}

/// An instruction operand: a register or an immediate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Operand {
    Reg(Reg),
    /// An integer immediate (printed in decimal).
    Int(i64),
    /// An f32 immediate (printed exactly, as `0fXXXXXXXX`).
    F32(f32),
}

impl From<Reg> for Operand {
    fn from(r: Reg) -> Operand {
        Operand::Reg(r)
    }
}

/// Special registers read with `mov`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Special {
    TidX,
    TidY,
    NtidX,
    CtaidX,
    CtaidY,
    CtaidZ,
    NctaidX,
    NctaidY,
    LaneId,
}

/// A state space for loads and stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Space {
    Global,
    Shared,
}

/// A memory address: a register (64-bit for global, 32-bit for shared)
/// plus a constant byte offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addr {
    pub base: Reg,
    pub offset: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArithOp {
    Add,
    Sub,
    /// `mul.lo` for integers, `mul.rn` for floats.
    Mul,
    /// `div.rn` for floats, `div` for integers.
    Div,
    Rem,
    Min,
    Max,
    And,
    Or,
    Xor,
    Shl,
    Shr,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Neg,
    Abs,
    /// `sqrt.rn.f32`
    Sqrt,
    /// `rsqrt.approx.f32`: relative error at most 2^-22.9.
    Rsqrt,
    /// `rcp.rn.f32`
    Rcp,
    /// `ex2.approx.f32`: relative error at most 2^-22 (2 ulp).
    Ex2,
    /// `lg2.approx.f32`: absolute error at most 2^-22.6 near 1.
    Lg2,
    /// `not` on predicates and integers.
    Not,
}

/// Comparison operators of `setp`. Float comparisons are ordered (false when
/// either operand is NaN) except `Neu`, which matches Rust's `!=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cmp {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
    Neu,
}

/// Modes of `shfl.sync`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ShflMode {
    Bfly,
    Down,
    Up,
    Idx,
}

/// A branch target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Label(pub u32);

/// An instruction and its operands.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// `ld.param.u64 dst, [param_i]`: the i-th kernel parameter (a pointer).
    LdParam { dst: Reg, index: usize },
    /// `cvta.to.global.u64 dst, src`
    CvtaGlobal { dst: Reg, src: Reg },
    /// `mov.u32 dst, smem`: the address of the dynamic shared-memory window.
    SharedBase { dst: Reg },
    /// `mov.<ty> dst, src`
    Mov { ty: Ty, dst: Reg, src: Operand },
    /// `mov.u32 dst, %sreg`
    ReadSpecial { dst: Reg, sreg: Special },
    /// `<op>.<ty> dst, a, b`
    Arith {
        op: ArithOp,
        ty: Ty,
        dst: Reg,
        a: Operand,
        b: Operand,
    },
    /// `mul.wide.u32 dst, a, b`: a 64-bit product of 32-bit operands.
    MulWide { dst: Reg, a: Operand, b: Operand },
    /// `mad.lo.<ty>` for integers, `fma.rn.f32` for floats: `dst = a * b + c`.
    Mad {
        ty: Ty,
        dst: Reg,
        a: Operand,
        b: Operand,
        c: Operand,
    },
    /// `<op>.<ty> dst, a`
    Unary {
        op: UnaryOp,
        ty: Ty,
        dst: Reg,
        a: Operand,
    },
    /// `cvt[.rn].<to>.<from> dst, src`; the printer picks the rounding mode
    /// the pair needs.
    Cvt {
        to: Ty,
        from: Ty,
        dst: Reg,
        src: Reg,
    },
    /// `setp.<cmp>.<ty> dst, a, b`
    Setp {
        cmp: Cmp,
        ty: Ty,
        dst: Reg,
        a: Operand,
        b: Operand,
    },
    /// `selp.<ty> dst, a, b, cond`: `cond ? a : b`.
    Selp {
        ty: Ty,
        dst: Reg,
        a: Operand,
        b: Operand,
        cond: Reg,
    },
    /// `ld.<space>[.v2|.v4].<ty> {dsts}, [addr]`
    Ld {
        space: Space,
        ty: Ty,
        dsts: Vec<Reg>,
        addr: Addr,
    },
    /// `st.<space>[.v2|.v4].<ty> [addr], {srcs}`
    St {
        space: Space,
        ty: Ty,
        addr: Addr,
        srcs: Vec<Operand>,
    },
    /// `shfl.sync.<mode>.b32 dst, src, lane, clamp, 0xffffffff`
    Shfl {
        mode: ShflMode,
        dst: Reg,
        src: Reg,
        lane: Operand,
        clamp: u32,
    },
    /// `bar.sync 0`
    BarSync,
    /// `bra.uni label` (or `bra` when guarded)
    Bra { target: Label },
    /// A label definition.
    Label(Label),
    /// `ret`
    Ret,
}

/// A predicate guard: `@p` or `@!p`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Guard {
    pub pred: Reg,
    pub negate: bool,
}

/// One instruction, optionally guarded by a predicate.
#[derive(Debug, Clone, PartialEq)]
pub struct Instr {
    pub guard: Option<Guard>,
    pub op: Op,
}

/// A complete kernel entry: its parameters are `param_count` 64-bit global
/// pointers (the input tensors in order, then the output).
#[derive(Debug, Clone, PartialEq)]
pub struct Kernel {
    pub entry: String,
    pub param_count: usize,
    /// Bytes of dynamic shared memory the kernel addresses through
    /// [`Op::SharedBase`] (the launch must provide at least this much).
    pub dynamic_shared_bytes: u32,
    /// Threads per block the kernel is written for (`.maxntid`).
    pub block_threads: u32,
    /// How many registers of each class the body uses.
    pub reg_counts: Vec<(RegClass, u32)>,
    pub body: Vec<Instr>,
}
