//! What went wrong, where: the error every run returns.

use std::fmt;

use ktune_core::ptx::inst::Space;

/// A kernel stopped by the virtual GPU: which kernel, block, thread and
/// instruction, and why.
///
/// For [`FaultKind::InvalidLaunch`] no instruction ran: `block`, `thread`
/// and `pc` are zero and `instruction` is empty. For
/// [`FaultKind::InvalidKernel`] `pc` and `instruction` name the offending
/// instruction and `block` and `thread` are zero.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    /// The kernel's entry name.
    pub kernel: String,
    /// `%ctaid` of the faulting block.
    pub block: [u32; 3],
    /// `%tid` of the faulting thread.
    pub thread: [u32; 3],
    /// Index of the faulting instruction in [`ktune_core::ptx::Kernel::body`].
    pub pc: usize,
    /// The faulting instruction as printed in PTX (without the `;`).
    pub instruction: String,
    pub kind: FaultKind,
}

impl std::error::Error for Fault {}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            FaultKind::InvalidLaunch { reason } => {
                write!(f, "kernel `{}`: invalid launch: {reason}", self.kernel)
            }
            FaultKind::InvalidKernel { reason } => write!(
                f,
                "kernel `{}`: pc {} `{}`: invalid instruction: {reason}",
                self.kernel, self.pc, self.instruction
            ),
            kind => write!(
                f,
                "kernel `{}`, block {}, thread {}, pc {} `{}`: {kind}",
                self.kernel,
                Xyz(self.block),
                Xyz(self.thread),
                self.pc,
                self.instruction
            ),
        }
    }
}

/// Whether a memory access reads or writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    Load,
    Store,
}

/// Where the other lanes of a warp were when a `shfl.sync` could not
/// complete.
/// Which fence orders one block's load after another block's store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceSide {
    /// The storing block's, after its store.
    Release,
    /// The loading block's, after the atomic that told it the store was
    /// done.
    Acquire,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaneState {
    /// The lane does not exist: the block's last warp is partial.
    Missing,
    Exited,
    /// Waiting at a different `shfl.sync` (its pc in the kernel body).
    AtShuffle {
        pc: usize,
    },
    /// Waiting at a different `ldmatrix` or `mma` (its pc in the kernel
    /// body).
    AtCollective {
        pc: usize,
    },
}

/// Why a kernel was stopped.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum FaultKind {
    /// An access outside every buffer (global) or outside the dynamic
    /// shared-memory window (shared).
    OutOfBounds {
        space: Space,
        access: Access,
        /// The address accessed.
        addr: u64,
        /// Bytes accessed (vector length × element size).
        size: u32,
        /// The parameter whose buffer the address points into or next to
        /// (global only).
        param: Option<u32>,
        /// Byte offset from the start of that buffer, or of the shared
        /// window (negative when the address is below it).
        offset: i64,
        /// The buffer's or window's size in bytes.
        limit: u64,
    },
    /// An address that is not a multiple of the access size.
    MisalignedAccess {
        space: Space,
        access: Access,
        addr: u64,
        size: u32,
    },
    /// A load from a shared byte no thread of this block has written.
    UninitializedShared { addr: u64, offset: u32 },
    /// A shared byte accessed by this thread and by `first_thread` in the
    /// same barrier interval, at least one of them writing. The interpreter
    /// saw `first_thread`'s access first, which says nothing about the order
    /// on a GPU.
    SharedRace {
        addr: u64,
        offset: u32,
        first_thread: [u32; 3],
        first_was_write: bool,
        second_is_write: bool,
    },
    /// A register read before any instruction of this thread wrote it.
    UninitializedRegister { reg: String },
    /// Integer `div` or `rem` by zero (PTX leaves the result unspecified).
    DivisionByZero,
    /// Every live thread waits at a `bar.sync`, but not at the same one.
    BarrierDivergence {
        other_thread: [u32; 3],
        other_pc: usize,
    },
    /// This thread waits at a warp-collective instruction (`shfl.sync`,
    /// `ldmatrix`, `mma`) that another lane of its warp can never reach
    /// because it waits at a `bar.sync` for the whole block, or at the
    /// cluster's barrier.
    BarrierDeadlock {
        other_thread: [u32; 3],
        other_pc: usize,
    },
    /// A `shfl.sync` (full member mask) that not all 32 lanes of the warp
    /// reached.
    ShuffleDivergence {
        /// The first lane that is not at this `shfl.sync`.
        lane: u32,
        /// That lane's `%tid` (zero when the lane does not exist).
        other_thread: [u32; 3],
        other: LaneState,
    },
    /// An `ldmatrix` or `mma.sync` (`.aligned`: every lane of the warp must
    /// execute the same instruction together) that not all 32 lanes
    /// reached.
    CollectiveDivergence {
        /// The first lane that is not at this instruction.
        lane: u32,
        /// That lane's `%tid` (zero when the lane does not exist).
        other_thread: [u32; 3],
        other: LaneState,
    },
    /// A shared byte accessed while a `cp.async` into it is in flight: the
    /// copy lands only when the issuing thread's `cp.async.wait_group`
    /// completes its group (and other threads see it after a `bar.sync`);
    /// or while a tensor copy (`cp.async.bulk.tensor`) into it is, which
    /// lands as its memory barrier's phase completes.
    AsyncCopyPending {
        access: Access,
        addr: u64,
        offset: u32,
        /// The thread that issued the copy.
        copier: [u32; 3],
        /// The copy's index in the kernel body.
        copy_pc: usize,
        /// Whether it is a tensor copy.
        tensor: bool,
    },
    /// A `cp.async` whose source size operand exceeds its copy size (PTX
    /// leaves the result undefined).
    AsyncCopySize { bytes: u32, src_bytes: u32 },
    /// A plain store that changes a global byte another block (`other`) of
    /// the same launch stored: on a GPU the result depends on which block
    /// runs last.
    GlobalRace {
        param: u32,
        offset: u64,
        other: [u32; 3],
    },
    /// A global load of a byte another block stored in this launch, not
    /// ordered after that store by the fence `missing`: the value read
    /// depends on timing.
    UnorderedLoad {
        param: u32,
        offset: u64,
        other: [u32; 3],
        missing: FenceSide,
    },
    /// A `wgmma` instruction (`.aligned`: the four warps of a warpgroup
    /// must execute it together) that not all 128 threads of the
    /// warpgroup reached; `lane` counts within the warpgroup.
    WarpgroupDivergence {
        lane: u32,
        other_thread: [u32; 3],
        other: LaneState,
    },
    /// A `wgmma.mma_async` whose operands are not the same in every thread
    /// of the warpgroup, or whose matrix descriptor describes no layout
    /// ktune's virtual GPU knows.
    WgmmaOperands { reason: String },
    /// A `wgmma.mma_async` using accumulator `reg`, which another
    /// instruction wrote after the warpgroup's last `wgmma`, with no
    /// `wgmma.fence` since.
    WgmmaUnfenced { reg: String },
    /// Register `reg` accessed while a `wgmma.mma_async` that writes it is
    /// in flight: it lands only when a `wgmma.wait_group` completes the
    /// instruction's group.
    WgmmaPending { reg: String },
    /// A thread that exits, or a block that ends, with `wgmma.mma_async`s
    /// of its warpgroup still in flight.
    WgmmaInFlightAtExit { groups: usize },
    /// A write to a shared byte that an in-flight `wgmma.mma_async` reads.
    WgmmaOverwrite { addr: u64, offset: u32 },
    /// A `wgmma.mma_async` reading a shared byte that `writer` wrote with
    /// no `fence.proxy.async` after the write: the async proxy the
    /// instruction reads through may not see it.
    AsyncProxyUnfenced {
        addr: u64,
        offset: u32,
        writer: [u32; 3],
    },
    /// A misuse of the thread's cluster (sm_90): of another block's shared
    /// memory, or of the cluster's barrier.
    Cluster { problem: ClusterProblem },
    /// A misuse of named barrier `id` (`bar.sync id, n`, `bar.arrive id, n`).
    NamedBarrier { id: u32, problem: NamedProblem },
    /// A misuse of the memory barrier at shared window `offset`
    /// (`mbarrier`).
    Mbarrier {
        offset: u32,
        problem: MbarrierProblem,
    },
    /// A misuse of a tensor map or of a tensor copy through one
    /// (`cp.async.bulk.tensor`, sm_90).
    TensorCopy { problem: TensorCopyProblem },
    /// A `setmaxnreg` that moves the warpgroup's register count the other
    /// way than its action says: `.inc` (`raise`) to fewer registers than
    /// the warpgroup already has, `.dec` to more.
    RegisterCount {
        count: u32,
        current: u32,
        raise: bool,
    },
    /// A `setmaxnreg.inc` the block's register pool cannot meet, with no
    /// thread of the block left to run and give registers back: it waits
    /// forever. `free` counts the pool's registers (not per thread).
    RegisterPool { count: u32, current: u32, free: u32 },
    /// A thread executed more instructions than the configured limit.
    StepLimit { limit: u64 },
    /// A `trap`: the kernel ended itself with an error (ktune's kernels
    /// trap where a memory-barrier wait outlasts its deadline).
    Trap,
    /// The instruction list is malformed (undefined label, register out of
    /// range, operand of the wrong width, an instruction ktune never emits).
    InvalidKernel { reason: String },
    /// The launch does not fit the kernel (parameter count, block size,
    /// shared memory).
    InvalidLaunch { reason: String },
}

/// What went wrong at a named barrier. Threads are named by their linear
/// index in the block.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NamedProblem {
    /// An arrival expecting `got` threads in a phase that expects
    /// `expected`.
    Count { expected: u32, got: u32 },
    /// A second arrival of the thread before the phase it arrived in
    /// completed.
    Twice,
    /// The phase completed with only `lanes` lanes of warp `warp` arrived
    /// (the barrier is `.aligned`: whole warps arrive).
    PartialWarp { warp: u32, lanes: u32 },
    /// Two lanes of one warp, `thread` and `other`, arrived at the phase
    /// at different instructions (body indices `pcs`).
    Divergence {
        thread: u32,
        other: u32,
        pcs: [u32; 2],
    },
    /// No thread can run on, and the phase waits for `threads` threads of
    /// which `arrived` have arrived.
    Deadlock { threads: u32, arrived: u32 },
    /// The barrier's number is not one of 1 to 15.
    Number,
}

impl fmt::Display for NamedProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NamedProblem::Count { expected, got } => write!(
                f,
                "an arrival expecting {got} threads in a phase that expects {expected}"
            ),
            NamedProblem::Number => write!(
                f,
                "barriers are numbered 1 to 15 (0 is the block's bar.sync 0)"
            ),
            NamedProblem::Twice => write!(
                f,
                "the thread arrives again before the phase it arrived in completed"
            ),
            NamedProblem::PartialWarp { warp, lanes } => write!(
                f,
                "the phase completed with {lanes} lanes of warp {warp} arrived; whole warps arrive at a barrier"
            ),
            NamedProblem::Divergence { thread, other, pcs } => write!(
                f,
                "threads {thread} and {other} of one warp arrived at different instructions (pc {} and {})",
                pcs[0], pcs[1]
            ),
            NamedProblem::Deadlock { threads, arrived } => write!(
                f,
                "deadlock: the barrier waits for {threads} threads, {arrived} arrived, and no thread can run on"
            ),
        }
    }
}

/// What went wrong at a memory barrier (`mbarrier`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MbarrierProblem {
    /// A plain load, store or copy of a live barrier's bytes.
    PlainAccess { access: Access },
    /// An arrival or wait where no barrier was initialised.
    Uninitialized,
    /// An init of a barrier that is already live.
    Reinit,
    /// An init expecting `count` arrivals a phase; 1 to 2^20 - 1 are
    /// allowed.
    Count { count: u64 },
    /// A wait for the phase of parity `parity` that no thread is left to
    /// complete: `completed` phases completed, and the current one, of
    /// `expected` arrivals, misses `pending` and `transactions` bytes
    /// (negative: bytes copies completed that no arrival expected).
    Deadlock {
        parity: u32,
        completed: u32,
        expected: u32,
        pending: u32,
        transactions: i32,
    },
    /// An `expect_tx` or a tensor copy that would take the current phase's
    /// transaction count to `count` bytes; it holds -(2^20 - 1) to
    /// 2^20 - 1.
    Transactions { count: i64 },
    /// An arrival at a phase that has had all its `expected` arrivals and
    /// waits only for `transactions` bytes (the count would underflow).
    ExtraArrival { expected: u32, transactions: i32 },
}

impl fmt::Display for MbarrierProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MbarrierProblem::PlainAccess { access } => write!(
                f,
                "a plain {} of a live memory barrier's bytes; only mbarrier instructions reach them",
                access_name(*access)
            ),
            MbarrierProblem::Uninitialized => {
                write!(f, "no mbarrier.init made a barrier there in this block")
            }
            MbarrierProblem::Reinit => write!(f, "mbarrier.init of a barrier already live"),
            MbarrierProblem::Count { count } => write!(
                f,
                "mbarrier.init expecting {count} arrivals a phase; 1 to 1048575 are allowed"
            ),
            MbarrierProblem::Deadlock {
                parity,
                completed,
                expected,
                pending,
                transactions,
            } => {
                write!(
                    f,
                    "deadlock: a wait for the phase of parity {parity}, with {completed} phases completed and {pending} of the current one's {expected} arrivals missing"
                )?;
                match transactions {
                    0 => {}
                    t if *t > 0 => write!(
                        f,
                        ", and {t} transaction bytes it expects (expect_tx) that no copy has completed"
                    )?,
                    t => write!(
                        f,
                        ", and {} transaction bytes copies completed that no arrival expected (expect_tx)",
                        -i64::from(*t)
                    )?,
                }
                write!(f, ", and no thread can run on")
            }
            MbarrierProblem::Transactions { count } => write!(
                f,
                "the current phase's transaction count would reach {count} bytes; it holds -1048575 to 1048575"
            ),
            MbarrierProblem::ExtraArrival {
                expected,
                transactions,
            } => write!(
                f,
                "an arrival at a phase that has had all its {expected} arrivals and waits only for {transactions} transaction bytes"
            ),
        }
    }
}

/// What went wrong with a tensor map or a tensor copy through one
/// (`cp.async.bulk.tensor`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TensorCopyProblem {
    /// `cvta.param` of `addr`, which is no tensor map's address in
    /// parameter space (`mov.b64 %rd, map_i`).
    NotParam { addr: u64 },
    /// A copy through the map operand `reg`, which holds `addr`: not the
    /// generic address of one of the kernel's tensor maps.
    NotMap { reg: String, addr: u64 },
    /// A copy of `coords` coordinates through map `map`, which has
    /// `rank` dimensions.
    Rank { map: u32, rank: u32, coords: u32 },
    /// A copy to shared address `addr`, which is not `align`-byte aligned
    /// (128, or a swizzled copy's period: 8 times its span).
    Misaligned { addr: u64, align: u64 },
    /// A copy completing its bytes at the memory barrier at window offset
    /// `offset`, whose init its thread did not fence for the async proxy
    /// (`fence.proxy.async` after `mbarrier.init`): the tensor memory
    /// accelerator may not see the barrier.
    UnfencedInit { offset: u32 },
}

impl fmt::Display for TensorCopyProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TensorCopyProblem::NotParam { addr } => write!(
                f,
                "cvta.param of {addr:#x}, which is not a tensor map's address in parameter space (mov.b64 of map_i)"
            ),
            TensorCopyProblem::NotMap { reg, addr } => write!(
                f,
                "the map operand {reg} holds {addr:#x}, which is not the generic address of any of the kernel's tensor maps (mov.b64 of map_i, then cvta.param.u64)"
            ),
            TensorCopyProblem::Rank { map, rank, coords } => write!(
                f,
                "a copy with {coords} coordinates through map_{map}, which has {rank} dimensions"
            ),
            TensorCopyProblem::Misaligned { addr, align } => {
                write!(f, "the destination {addr:#x} is not {align}-byte aligned")
            }
            TensorCopyProblem::UnfencedInit { offset } => write!(
                f,
                "the memory barrier at window offset {offset} was initialised without a fence.proxy.async after it: the tensor memory accelerator may not see it"
            ),
        }
    }
}

/// What went wrong in a thread-block cluster. Blocks are named by their
/// rank in the cluster (`%ctaid.x` modulo the cluster's size).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClusterProblem {
    /// `mapa` of an address outside the block's shared window (`window`
    /// bytes), or of a rank outside the cluster of `blocks`.
    Mapa {
        addr: u32,
        rank: u32,
        blocks: u32,
        window: u32,
    },
    /// `ld.shared::cluster` of an address in no block's shared window.
    Address { addr: u64 },
    /// A load of block `rank`'s shared byte at window `offset`, which no
    /// thread of that block wrote.
    Unwritten { rank: u32, offset: u32 },
    /// A load of block `rank`'s shared byte at window `offset`, which its
    /// thread `writer` wrote with no cluster barrier between that write
    /// and this load.
    Unordered {
        rank: u32,
        offset: u32,
        writer: [u32; 3],
    },
    /// A write to the block's shared byte at window `offset`, which block
    /// `reader` of the cluster read with no cluster barrier since.
    Overwrite { offset: u32, reader: u32 },
    /// A load of block `rank`'s shared memory after that block exited.
    ReadAfterExit { rank: u32 },
    /// The block's last thread exits while block `reader` of the cluster
    /// has read its shared memory with no cluster barrier since: the read
    /// may come after the exit.
    ExitWhileRead { reader: u32 },
    /// A multicast tensor copy to the blocks of `mask`, which names none,
    /// or a block outside the cluster of `blocks`.
    Mask { mask: u16, blocks: u32 },
    /// An arrival or tensor copy from another block of the cluster at the
    /// memory barrier at window offset `offset`, whose init its thread did
    /// not release to the cluster (`fence.mbarrier_init.release.cluster`
    /// after it).
    UnreleasedInit { offset: u32 },
    /// An arrival at, or a tensor copy to, block `rank`'s shared memory
    /// after that block exited.
    SendAfterExit { rank: u32 },
    /// The block's last thread exits while the last arrival of block
    /// `rank`'s thread `thread` at one of its memory barriers is ordered
    /// before none of its threads' waits: the arrival may come after the
    /// exit.
    ExitBeforeArrival { rank: u32, thread: [u32; 3] },
    /// An arrival at, or a tensor copy to, block `rank`'s shared byte at
    /// window `offset`, which that block's thread `other_thread` wrote (or
    /// read) before with nothing ordering the two: no cluster barrier
    /// between them, and no memory barrier that thread arrived at (or one
    /// ordered after it) and this one waited at.
    RemoteRace {
        rank: u32,
        offset: u32,
        other_thread: [u32; 3],
        other_wrote: bool,
    },
    /// `barrier.cluster.wait` by a thread that has not arrived.
    WaitWithoutArrive,
    /// A second `barrier.cluster.arrive` with no wait between the two.
    ArriveTwice,
    /// A thread waits at the cluster's barrier, which thread
    /// `other_thread` of block `rank` never reaches: it has exited without
    /// arriving, or it waits at a `bar.sync` (pc `other_pc`).
    Deadlock {
        rank: u32,
        other_thread: [u32; 3],
        other_pc: Option<u32>,
    },
}

impl fmt::Display for ClusterProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClusterProblem::Mapa {
                addr,
                rank,
                blocks,
                window,
            } => write!(
                f,
                "mapa of {addr:#x} in block {rank}: the address must lie in the {window}-byte shared window and the block in the cluster of {blocks}"
            ),
            ClusterProblem::Address { addr } => write!(
                f,
                "a cluster access of {addr:#x}, which is in no block's shared window (map addresses with mapa)"
            ),
            ClusterProblem::Mask { mask, blocks } => write!(
                f,
                "a multicast tensor copy to the blocks of mask {mask:#06b}, which must name one or more of the cluster's {blocks}"
            ),
            ClusterProblem::UnreleasedInit { offset } => write!(
                f,
                "another block of the cluster reaches the memory barrier at window offset {offset}, whose init was not released to the cluster (fence.mbarrier_init.release.cluster after it, then a cluster barrier)"
            ),
            ClusterProblem::RemoteRace {
                rank,
                offset,
                other_thread,
                other_wrote,
            } => write!(
                f,
                "an access from another block of the cluster to block {rank}'s shared byte at window offset {offset}, which its thread {other_thread:?} {} with nothing ordering the two (a cluster barrier between them, or a memory barrier that thread arrived at and this one waited at)",
                if *other_wrote { "wrote" } else { "read" }
            ),
            ClusterProblem::ExitBeforeArrival { rank, thread } => write!(
                f,
                "the block exits while block {rank}'s thread {thread:?} arrives at one of its memory barriers with no wait of its threads ordered after that arrival: the arrival may come after the exit"
            ),
            ClusterProblem::SendAfterExit { rank } => write!(
                f,
                "an arrival at or a tensor copy to block {rank}'s shared memory after that block exited"
            ),
            ClusterProblem::Unwritten { rank, offset } => write!(
                f,
                "load of block {rank}'s shared memory at window +{offset}, which no thread of that block wrote"
            ),
            ClusterProblem::Unordered {
                rank,
                offset,
                writer,
            } => write!(
                f,
                "load of block {rank}'s shared memory at window +{offset}, which its thread {} wrote with no cluster barrier between the write and this load",
                Xyz(*writer)
            ),
            ClusterProblem::Overwrite { offset, reader } => write!(
                f,
                "write to shared memory at window +{offset}, which block {reader} of the cluster read with no cluster barrier since"
            ),
            ClusterProblem::ReadAfterExit { rank } => write!(
                f,
                "load of block {rank}'s shared memory after that block exited"
            ),
            ClusterProblem::ExitWhileRead { reader } => write!(
                f,
                "the block exits while block {reader} of its cluster has read its shared memory with no cluster barrier since: the read may come after the exit"
            ),
            ClusterProblem::WaitWithoutArrive => {
                write!(
                    f,
                    "barrier.cluster.wait with no barrier.cluster.arrive before it"
                )
            }
            ClusterProblem::ArriveTwice => write!(
                f,
                "a second barrier.cluster.arrive with no barrier.cluster.wait between the two"
            ),
            ClusterProblem::Deadlock {
                rank,
                other_thread,
                other_pc: Some(pc),
            } => write!(
                f,
                "deadlock: thread {} of block {rank} waits at bar.sync (pc {pc}) while this thread waits at the cluster barrier",
                Xyz(*other_thread)
            ),
            ClusterProblem::Deadlock {
                rank,
                other_thread,
                other_pc: None,
            } => write!(
                f,
                "deadlock: thread {} of block {rank} exited without arriving at the cluster barrier this thread waits at",
                Xyz(*other_thread)
            ),
        }
    }
}

/// Where the lane that did not arrive at a warp-collective instruction is.
fn lane_state(f: &mut fmt::Formatter<'_>, thread: [u32; 3], state: LaneState) -> fmt::Result {
    match state {
        LaneState::Missing => write!(f, "does not exist (partial warp)"),
        LaneState::Exited => write!(f, "(thread {}) has exited", Xyz(thread)),
        LaneState::AtShuffle { pc } => write!(
            f,
            "(thread {}) waits at a different shfl.sync (pc {pc})",
            Xyz(thread)
        ),
        LaneState::AtCollective { pc } => write!(
            f,
            "(thread {}) waits at a different collective instruction (pc {pc})",
            Xyz(thread)
        ),
    }
}

/// `(x, y, z)`
struct Xyz([u32; 3]);

impl fmt::Display for Xyz {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({}, {}, {})", self.0[0], self.0[1], self.0[2])
    }
}

fn space_name(space: Space) -> &'static str {
    match space {
        Space::Global | Space::GlobalReadOnly => "global",
        Space::Shared => "shared",
        Space::SharedCluster => "cluster shared",
    }
}

fn access_name(access: Access) -> &'static str {
    match access {
        Access::Load => "load",
        Access::Store => "store",
    }
}

fn rw(write: bool) -> &'static str {
    if write { "write" } else { "read" }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FaultKind::OutOfBounds {
                space,
                access,
                addr,
                size,
                param,
                offset,
                limit,
            } => {
                let what = format!(
                    "out-of-bounds {} {} of {size} bytes at {addr:#x}",
                    space_name(*space),
                    access_name(*access)
                );
                match (space, param) {
                    (Space::Global | Space::GlobalReadOnly, Some(p)) => write!(
                        f,
                        "{what} (param_{p} {offset:+}); param_{p} holds {limit} bytes"
                    ),
                    (Space::Global | Space::GlobalReadOnly, None) => {
                        write!(f, "{what}, which points into no parameter's buffer")
                    }
                    (Space::Shared | Space::SharedCluster, _) => write!(
                        f,
                        "{what} (window {offset:+}); the shared window holds {limit} bytes"
                    ),
                }
            }
            FaultKind::MisalignedAccess {
                space,
                access,
                addr,
                size,
            } => write!(
                f,
                "misaligned {} {} of {size} bytes at {addr:#x} (must be a multiple of {size})",
                space_name(*space),
                access_name(*access)
            ),
            FaultKind::UninitializedShared { addr, offset } => write!(
                f,
                "load of uninitialised shared byte at {addr:#x} (window +{offset}): no thread of this block wrote it"
            ),
            FaultKind::SharedRace {
                addr,
                offset,
                first_thread,
                first_was_write,
                second_is_write,
            } => write!(
                f,
                "shared-memory race at {addr:#x} (window +{offset}): this thread's {} and thread {}'s {} have no bar.sync between them",
                rw(*second_is_write),
                Xyz(*first_thread),
                rw(*first_was_write)
            ),
            FaultKind::UninitializedRegister { reg } => {
                write!(f, "register {reg} is read before it is written")
            }
            FaultKind::DivisionByZero => write!(f, "integer division by zero"),
            FaultKind::BarrierDivergence {
                other_thread,
                other_pc,
            } => write!(
                f,
                "barrier divergence: thread {} waits at a different bar.sync (pc {other_pc})",
                Xyz(*other_thread)
            ),
            FaultKind::BarrierDeadlock {
                other_thread,
                other_pc,
            } => write!(
                f,
                "deadlock: this warp-collective instruction needs thread {} of the same warp, which waits at a barrier (pc {other_pc})",
                Xyz(*other_thread)
            ),
            FaultKind::ShuffleDivergence {
                lane,
                other_thread,
                other,
            } => {
                write!(
                    f,
                    "shfl.sync divergence: not all 32 lanes arrived; lane {lane} "
                )?;
                lane_state(f, *other_thread, *other)
            }
            FaultKind::CollectiveDivergence {
                lane,
                other_thread,
                other,
            } => {
                write!(
                    f,
                    "warp-collective divergence: all 32 lanes must execute this instruction together, but lane {lane} "
                )?;
                lane_state(f, *other_thread, *other)
            }
            FaultKind::AsyncCopyPending {
                access,
                addr,
                offset,
                copier,
                copy_pc,
                tensor: true,
            } => write!(
                f,
                "{} of shared memory with an outstanding tensor copy at {addr:#x} (window +{offset}): thread {}'s cp.async.bulk.tensor at pc {copy_pc} lands only as its memory barrier's phase completes; wait for that phase (mbarrier.try_wait.parity) first",
                match access {
                    Access::Load => "read",
                    Access::Store => "write",
                },
                Xyz(*copier)
            ),
            FaultKind::AsyncCopyPending {
                access,
                addr,
                offset,
                copier,
                copy_pc,
                tensor: false,
            } => write!(
                f,
                "{} of shared memory with an outstanding cp.async at {addr:#x} (window +{offset}): thread {}'s cp.async at pc {copy_pc} has not landed; wait for its group with cp.async.wait_group (and bar.sync before other threads use it)",
                match access {
                    Access::Load => "read",
                    Access::Store => "write",
                },
                Xyz(*copier)
            ),
            FaultKind::AsyncCopySize { bytes, src_bytes } => write!(
                f,
                "cp.async of {bytes} bytes given a source size of {src_bytes} bytes (at most {bytes})"
            ),
            FaultKind::GlobalRace {
                param,
                offset,
                other,
            } => write!(
                f,
                "store to byte {offset} of parameter {param}, which block {} stored another value in this launch: blocks race on global memory (the result depends on which runs last)",
                Xyz(*other)
            ),
            FaultKind::UnorderedLoad {
                param,
                offset,
                other,
                missing: FenceSide::Release,
            } => write!(
                f,
                "load of byte {offset} of parameter {param}, which block {} stored in this launch without a fence after the store: the load may see the old value (a missing fence.acq_rel.gpu before the writer's atomic)",
                Xyz(*other)
            ),
            FaultKind::UnorderedLoad {
                param,
                offset,
                other,
                missing: FenceSide::Acquire,
            } => write!(
                f,
                "load of byte {offset} of parameter {param}, which block {} stored in this launch, without a fence between this block's atomic and the load: the load may see the old value (a missing fence.acq_rel.gpu after the atomic)",
                Xyz(*other)
            ),
            FaultKind::WarpgroupDivergence {
                lane,
                other_thread,
                other,
            } => {
                write!(
                    f,
                    "warpgroup divergence: all 128 threads of the warpgroup must execute this wgmma instruction together, but thread {lane} of the warpgroup "
                )?;
                lane_state(f, *other_thread, *other)
            }
            FaultKind::WgmmaOperands { reason } => write!(f, "wgmma operands: {reason}"),
            FaultKind::WgmmaUnfenced { reg } => write!(
                f,
                "wgmma.mma_async uses accumulator {reg}, which another instruction wrote with no wgmma.fence since"
            ),
            FaultKind::WgmmaPending { reg } => write!(
                f,
                "register {reg} is accessed while a wgmma.mma_async that writes it is in flight (no wgmma.wait_group has completed it)"
            ),
            FaultKind::WgmmaInFlightAtExit { groups } => write!(
                f,
                "the warpgroup exits with {groups} wgmma group(s) in flight (wait for them with wgmma.wait_group 0)"
            ),
            FaultKind::WgmmaOverwrite { addr, offset } => write!(
                f,
                "write to shared memory at {addr:#x} (window +{offset}), which an in-flight wgmma.mma_async reads: wait for its group with wgmma.wait_group first"
            ),
            FaultKind::AsyncProxyUnfenced {
                addr,
                offset,
                writer,
            } => write!(
                f,
                "wgmma.mma_async reads shared memory at {addr:#x} (window +{offset}), which thread {} wrote with no fence.proxy.async after the write: the async proxy may not see it",
                Xyz(*writer)
            ),
            FaultKind::Cluster { problem } => write!(f, "cluster: {problem}"),
            FaultKind::NamedBarrier { id, problem } => write!(f, "named barrier {id}: {problem}"),
            FaultKind::Mbarrier { offset, problem } => {
                write!(f, "memory barrier at window +{offset}: {problem}")
            }
            FaultKind::TensorCopy { problem } => write!(f, "tensor copy: {problem}"),
            FaultKind::RegisterCount {
                count,
                current,
                raise,
            } => {
                let (action, way) = if *raise {
                    ("inc", "raises")
                } else {
                    ("dec", "lowers")
                };
                write!(
                    f,
                    "setmaxnreg.{action} to {count} registers, but the warpgroup has {current} already: .{action} only {way} the count"
                )
            }
            FaultKind::RegisterPool {
                count,
                current,
                free,
            } => write!(
                f,
                "deadlock: setmaxnreg.inc from {current} to {count} registers takes {} of the block's pool, which has {free} free, and no thread is left to give any back",
                count.saturating_sub(*current) * 128
            ),
            FaultKind::StepLimit { limit } => write!(
                f,
                "thread executed more than {limit} instructions (infinite loop?)"
            ),
            FaultKind::Trap => write!(f, "the thread executed `trap`"),
            FaultKind::InvalidKernel { reason } => write!(f, "invalid kernel: {reason}"),
            FaultKind::InvalidLaunch { reason } => write!(f, "invalid launch: {reason}"),
        }
    }
}
