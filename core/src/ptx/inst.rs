//! The typed PTX instruction list.
//!
//! Code generation builds a [`Kernel`] of [`Instr`]s; [`super::print`](fn@super::print) turns it
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
    /// TensorFloat-32 (f32's 8-bit exponent, 10-bit mantissa) held in a
    /// `.b32` register with the low 13 bits zero: `cvt.rna.tf32.f32`'s
    /// result and the operand type of `mma` with [`MmaKind::Tf32`].
    Tf32,
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

impl From<u32> for Operand {
    fn from(value: u32) -> Operand {
        Operand::Int(i64::from(value))
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
    /// `%globaltimer_lo`: the low 32 bits of a count of nanoseconds
    /// (it wraps every 4.3 s), read by a wait that gives up after a
    /// deadline.
    GlobalTimerLo,
}

/// A state space for loads and stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Space {
    Global,
    /// Global memory the kernel only reads, for loads (`ld.global.nc`): a
    /// kernel's input tensors. The compiler may move such loads past the
    /// kernel's stores, which it cannot do for plain global loads, since a
    /// store might change what they read.
    GlobalReadOnly,
    Shared,
    /// The shared memory of any block of the thread's cluster (sm_90), for
    /// loads (`ld.shared::cluster`), at an address [`Op::Mapa`] gave.
    SharedCluster,
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
    /// `rcp.approx.f32`: within 1 ulp across the full range, subnormals,
    /// zeros and infinities included. Unlike `rcp.rn` and `div.rn`, no call
    /// to a slow path, which caps a small kernel's registers.
    RcpApprox,
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

/// The cache policy of `cp.async`: `.ca` caches in L1 and L2 (4, 8 or 16
/// bytes), `.cg` in L2 only (16 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CpAsyncCache {
    Ca,
    Cg,
}

/// The tensor-core `mma.sync.aligned` forms ktune emits. All are
/// `.row.col` with f32 accumulators: D (4 × f32) = A · B + C (4 × f32),
/// with A in 4 and B in 2 `.b32` registers per lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MmaKind {
    /// `m16n8k16.row.col.f32.f16.f16.f32`: each A and B register holds two
    /// f16 values, the lower-indexed one in the low 16 bits.
    F16,
    /// `m16n8k16.row.col.f32.bf16.bf16.f32`, packed like [`MmaKind::F16`].
    Bf16,
    /// `m16n8k8.row.col.f32.tf32.tf32.f32`: each A and B register holds one
    /// tf32 value.
    Tf32,
}

impl MmaKind {
    /// The K extent of one instruction (M is 16 and N is 8 for every form).
    pub fn k(self) -> u32 {
        match self {
            MmaKind::F16 | MmaKind::Bf16 => 16,
            MmaKind::Tf32 => 8,
        }
    }
}

/// A branch target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Label(pub u32);

/// An instruction and its operands.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// `ld.param.u64 dst, [param_i]`: the i-th kernel parameter (a pointer).
    LdParam { dst: Reg, index: usize },
    /// `mov.b64 dst, map_i`: the parameter-space address of the kernel's
    /// i-th tensor map (see [`Kernel::tensor_maps`]), which
    /// [`Op::CvtaParam`] makes generic.
    TensorMapParam { dst: Reg, index: usize },
    /// `cvta.param.u64 dst, src`: a parameter-space address made generic,
    /// as [`Op::CpAsyncBulkTensor`] takes a tensor map's.
    CvtaParam { dst: Reg, src: Reg },
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
    /// `ld.global.cg[.v2|.v4].<ty> {dsts}, [addr]`: a global load cached in
    /// L2 only, so that it sees what other blocks stored and made visible
    /// with a [`Op::Fence`] (L1 is not coherent between SMs).
    LdGlobalCg { ty: Ty, dsts: Vec<Reg>, addr: Addr },
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
    /// `mov.b32 dst, {lo, hi}`: two 16-bit registers packed into one 32-bit
    /// register, `lo` in bits 0–15.
    Pack { dst: Reg, lo: Reg, hi: Reg },
    /// `mov.b32 {lo, hi}, src`: the halves of a 32-bit register.
    Unpack { lo: Reg, hi: Reg, src: Reg },
    /// `cp.async.<cache>.shared.global [dst], [src], bytes[, src_bytes]`:
    /// starts copying `bytes` (4, 8 or 16) from global to shared memory; only
    /// the first `src_bytes` (a 32-bit register, at most `bytes`) are read
    /// and the rest of the destination is zero-filled. The copy joins the
    /// thread's next [`Op::CpAsyncCommit`] group and lands, for the thread
    /// and for others after a barrier, once a [`Op::CpAsyncWait`] completes
    /// that group.
    CpAsync {
        cache: CpAsyncCache,
        dst: Addr,
        src: Addr,
        bytes: u32,
        src_bytes: Option<Reg>,
    },
    /// `cp.async.commit_group`: the thread's uncommitted copies become a
    /// group.
    CpAsyncCommit,
    /// `cp.async.wait_group n`: waits until at most `n` of the thread's
    /// committed groups are incomplete.
    CpAsyncWait { pending: u32 },
    /// `cp.async.wait_all`: waits for every copy the thread started.
    CpAsyncWaitAll,
    /// `cp.async.mbarrier.arrive.noinc.shared.b64 [addr]`: an arrival at
    /// the memory barrier at `addr` once every `cp.async` the thread
    /// started before it has landed; with `.noinc` the barrier's pending
    /// count is not raised first, so the count its `init` gave includes
    /// these arrivals.
    CpAsyncMbarrierArrive { addr: Addr },
    /// `mbarrier.init.shared.b64 [addr], count`: the 8 aligned shared bytes
    /// at `addr` become a memory barrier whose phases each complete after
    /// `count` arrivals (1 to 2^20 - 1), starting in phase 0. Until then,
    /// and while it lives, no plain access may touch those bytes.
    MbarrierInit { addr: Addr, count: Operand },
    /// `mbarrier.arrive.shared.b64 state, [addr]`: an arrival at the memory
    /// barrier at `addr`, releasing the thread's memory accesses before
    /// it; the phase completes with its last expected arrival. `state`
    /// (`.b64`) is an opaque token of the phase arrived in.
    MbarrierArrive { state: Reg, addr: Addr },
    /// `mbarrier.arrive.expect_tx.shared::cta.b64 state, [addr], bytes`
    /// (sm_90): raises the current phase's count of transaction bytes by
    /// `bytes`, then arrives as [`Op::MbarrierArrive`] does. The phase
    /// completes once its arrivals are all in and as many bytes as were
    /// expected have landed ([`Op::CpAsyncBulkTensor`]).
    MbarrierArriveExpectTx {
        state: Reg,
        addr: Addr,
        bytes: Operand,
    },
    /// `mbarrier.try_wait.parity.shared.b64 done, [addr], parity` (sm_90):
    /// `done` (a predicate) is set once the phase of the barrier at `addr`
    /// with parity `parity` (0 or 1, the operand's low bit) has completed,
    /// that is, once the current phase's parity differs from it, acquiring
    /// what that phase's arrivals released; it may wait a while first, and
    /// may give up, leaving `done` false (the virtual GPU's first failure
    /// at a phase does).
    MbarrierTryWait {
        done: Reg,
        addr: Addr,
        parity: Operand,
    },
    /// `cp.async.bulk.tensor.<n>d.shared::cluster.global.mbarrier::complete_tx::bytes [dst], [map, {coords}], [barrier]`
    /// (sm_90): the tensor memory accelerator copies the box of the tensor
    /// map at the generic address `map` (a kernel parameter's, see
    /// [`Op::CvtaParam`]) whose first element is at `coords` (`n` of
    /// them, `.s32`, innermost first; elements outside the tensor read as
    /// zero) into shared memory at `dst`, laid out as the map's swizzle
    /// says, and its bytes complete as transactions of the memory barrier
    /// at `barrier`. The copy is the async proxy's: `wgmma` reads it
    /// without a proxy fence, and a thread's wait for the barrier's phase
    /// orders it before what follows.
    ///
    /// With `multicast` (`.multicast::cluster`, sm_90a, its `ctaMask` a
    /// `.b16` register) the box lands in the shared memory of every block
    /// of the cluster whose rank's bit the mask sets, each at the same
    /// offset as `dst` in its own, completing its bytes at the barrier at
    /// `barrier`'s offset in its own.
    CpAsyncBulkTensor {
        dst: Addr,
        map: Reg,
        coords: Vec<Reg>,
        barrier: Addr,
        multicast: Option<Reg>,
    },
    /// `mbarrier.arrive.shared::cluster.b64 _, [addr]` (sm_90): an
    /// arrival at the memory barrier at `addr`, an address in the
    /// [`Space::SharedCluster`] window ([`Op::Mapa`]), which may be in
    /// another block of the cluster, releasing the thread's accesses before
    /// it with the default semantics (`.release`, `.cta`), as CUTLASS's
    /// cluster pipelines arrive: with `.release.cluster` ptxas puts a
    /// GPU-wide memory barrier (`MEMBAR.ALL.GPU`) before each arrival.
    MbarrierArriveCluster { addr: Addr },
    /// `fence.mbarrier_init.release.cluster` (sm_90): the thread's
    /// `mbarrier.init`s before it are released at cluster scope, so that
    /// a cluster barrier after it orders them before other blocks'
    /// arrivals and copies at those barriers.
    FenceMbarrierInit,
    /// `ldmatrix.sync.aligned.m8n8.x<n>[.trans].shared.b16 {dsts}, [addr]`:
    /// warp-collective; `dsts.len()` (1, 2 or 4) 8×8 matrices of 16-bit
    /// values, matrix `i`'s rows addressed by lanes `8i..8i+8`.
    Ldmatrix {
        trans: bool,
        dsts: Vec<Reg>,
        addr: Addr,
    },
    /// `mma.sync.aligned.<shape>.row.col.f32.<t>.<t>.f32 {d}, {a}, {b}, {c}`:
    /// warp-collective matrix multiply-accumulate (see [`MmaKind`]).
    Mma {
        kind: MmaKind,
        d: [Reg; 4],
        a: [Reg; 4],
        b: [Reg; 2],
        c: [Reg; 4],
    },
    /// `fence.proxy.async.shared::cta`: the thread's shared-memory writes
    /// before it (stores and landed `cp.async` copies, both made through
    /// the generic proxy) become visible to the async proxy, which
    /// [`Op::Wgmma`] reads shared memory through; a `bar.sync` after it
    /// extends that to the other threads' `wgmma`s.
    FenceProxyAsync,
    /// `wgmma.fence.sync.aligned`: warpgroup-collective; orders the
    /// warpgroup's register accesses before it against the
    /// [`Op::Wgmma`]s after it. Needed before the first `wgmma` and after
    /// any other instruction touched a `wgmma`'s accumulators.
    WgmmaFence,
    /// `wgmma.mma_async.sync.aligned.m64n<N>k<K>.f32.<t>.<t> {d}, a, b, scale_d, 1, 1[, trans_a, trans_b]`:
    /// warpgroup-collective (the four warps `4i..4i+4` of the block), and
    /// asynchronous: `D (64 × N) = A (64 × K) · B (K × N) + (scale_d ? D : 0)`,
    /// both operands read from shared memory through the 64-bit matrix
    /// descriptors `a` and `b`, K-major, or M- and N-major where `trans_a`
    /// and `trans_b` are set (f16 and bf16 only). `kind` fixes the operand
    /// type and K as for [`Op::Mma`]; N is twice `d.len()`, a multiple of 8
    /// up to 256. `d` holds the accumulator fragment, which belongs to the
    /// instruction until a [`Op::WgmmaWait`] completes its group.
    Wgmma {
        kind: MmaKind,
        d: Vec<Reg>,
        a: Reg,
        b: Reg,
        scale_d: Reg,
        trans_a: bool,
        trans_b: bool,
    },
    /// `wgmma.commit_group.sync.aligned`: warpgroup-collective; the
    /// warpgroup's uncommitted `wgmma`s become a group.
    WgmmaCommit,
    /// `wgmma.wait_group.sync.aligned n`: warpgroup-collective; waits
    /// until at most `n` of the warpgroup's committed groups are
    /// incomplete.
    WgmmaWait { pending: u32 },
    /// `red.global.add.f32 [addr], value`: an atomic add with no result.
    RedAdd { addr: Addr, value: Operand },
    /// `atom.global.add.<ty> dst, [addr], value`: an atomic add returning
    /// the old value; `ty` is [`Ty::F32`] or [`Ty::U32`].
    AtomAdd {
        ty: Ty,
        dst: Reg,
        addr: Addr,
        value: Operand,
    },
    /// `fence.acq_rel.gpu`: orders the thread's global accesses before it
    /// against those after it, for every thread of the GPU (what
    /// `__threadfence()` compiles to).
    Fence,
    /// `bar.sync 0`: every thread of the block.
    BarSync,
    /// `bar.sync id, threads` (`wait`) or `bar.arrive id, threads`: named
    /// barrier `id` (1 to 15, a constant or a register holding the same
    /// value in every lane of a warp) completes when `threads` threads,
    /// whole warps, have arrived at it; `bar.sync` then waits for that,
    /// and acquires what the arrivals released, `bar.arrive` goes on at
    /// once. Both are `.aligned`: every thread of a warp executes the same
    /// one.
    NamedBar {
        id: Operand,
        threads: u32,
        wait: bool,
    },
    /// `setmaxnreg.inc.sync.aligned.u32 count` (`raise`) or `.dec`: the
    /// executing warpgroup's threads may from now on use `count`
    /// registers each (24 to 256, a multiple of 8), taken from or given
    /// back to the block's pool; `.inc` waits until the pool has them.
    /// Every thread of the warpgroup executes the same one (sm_90a).
    SetMaxNReg { count: u32, raise: bool },
    /// `mapa.shared::cluster.u32 dst, src, rank`: the address, in the
    /// [`Space::SharedCluster`] window, of the byte at shared address `src`
    /// in the shared memory of the cluster's block `rank` (sm_90).
    Mapa { dst: Reg, src: Reg, rank: Operand },
    /// `barrier.cluster.arrive`: the thread arrives at the cluster's
    /// barrier, releasing its memory accesses before it (sm_90). Every
    /// thread of the cluster arrives before any of its waits end. (Not the
    /// `.aligned` form, which requires a warp to execute it converged: the
    /// rows lowering waits where rows past the last one rejoin.)
    ClusterArrive,
    /// `barrier.cluster.wait`: waits until every thread of the
    /// cluster has arrived at the barrier the thread last arrived at, and
    /// acquires what they released. A block whose shared memory others
    /// read must not exit before they have passed such a barrier.
    ClusterWait,
    /// `bra.uni label` (or `bra` when guarded)
    Bra { target: Label },
    /// A label definition.
    Label(Label),
    /// `ret`
    Ret,
    /// `trap`: ends the kernel with an error.
    Trap,
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

impl Op {
    /// Whether the instruction is one of Hopper's warpgroup matrix
    /// instructions, the async-proxy fence that feeds them, a warpgroup's
    /// register reallocation, or a tensor-map copy and what it needs (PTX
    /// ISA 8.0; ktune emits them only beside `wgmma`), which make
    /// their kernel's module target `sm_90a` (PTX ISA 8.0).
    pub fn is_sm90a(&self) -> bool {
        matches!(
            self,
            Op::FenceProxyAsync
                | Op::TensorMapParam { .. }
                | Op::CvtaParam { .. }
                | Op::MbarrierArriveExpectTx { .. }
                | Op::CpAsyncBulkTensor { .. }
                | Op::MbarrierArriveCluster { .. }
                | Op::FenceMbarrierInit
                | Op::WgmmaFence
                | Op::Wgmma { .. }
                | Op::WgmmaCommit
                | Op::WgmmaWait { .. }
                | Op::SetMaxNReg { .. }
        )
    }
}

/// A complete kernel entry: its parameters are `param_count` 64-bit global
/// pointers (the input tensors in order, then the output), then its
/// tensor maps, passed by value.
#[derive(Debug, Clone, PartialEq)]
pub struct Kernel {
    pub entry: String,
    pub param_count: usize,
    /// Tensor maps (128 bytes, 64-byte aligned, `.param .align 64 .b8
    /// map_i[128]`) after the pointers: the descriptors
    /// [`Op::CpAsyncBulkTensor`] copies through, as the launcher must
    /// encode them.
    pub tensor_maps: Vec<super::TensorMap>,
    /// Bytes of dynamic shared memory the kernel addresses through
    /// [`Op::SharedBase`] (the launch must provide at least this much).
    pub dynamic_shared_bytes: u32,
    /// Threads per block the kernel is written for (`.maxntid`).
    pub block_threads: u32,
    /// Blocks per SM ptxas is asked to leave room for (`.minnctapersm`),
    /// which bounds the registers it allocates; 0 when the kernel does not
    /// say, and ptxas chooses.
    pub min_blocks_per_sm: u32,
    /// Blocks per cluster along `x` (`.reqnctapercluster n, 1, 1`, sm_90):
    /// consecutive blocks `n·c … n·c + n - 1` form cluster `c`, run
    /// together and reach each other's shared memory; a launch's grid
    /// must be a multiple of it. 0 when the kernel states none.
    pub cluster_blocks: u32,
    /// How many registers of each class the body uses.
    pub reg_counts: Vec<(RegClass, u32)>,
    pub body: Vec<Instr>,
}

impl Kernel {
    /// Whether the kernel uses Hopper's warpgroup matrix instructions (see
    /// [`Op::is_sm90a`]).
    pub fn is_sm90a(&self) -> bool {
        self.body.iter().any(|i| i.op.is_sm90a())
    }
}
