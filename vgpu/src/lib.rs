//! A virtual GPU: executes ktune's typed PTX instruction list
//! ([`ktune_core::ptx::Kernel`]) on the CPU, with the block, warp and
//! barrier semantics of the real hardware, and stops with a [`Fault`] that
//! names the block, thread and instruction at the first thing a GPU would
//! get wrong or leave undefined.
//!
//! It is how generated kernels are proved correct on machines without a
//! GPU: run a lowered kernel here on random inputs and odd shapes, compare
//! with the CPU reference, and every out-of-bounds access, shared-memory
//! race or divergent barrier surfaces as an error instead of as a wrong
//! number (or a correct one, by luck).
//!
//! ```
//! use ktune_core::DType;
//! use ktune_core::lower::Launch;
//! use ktune_core::ptx::Builder;
//! use ktune_core::ptx::inst::{Addr, ArithOp, Operand, Space, Special};
//!
//! // out[i] = 2 * in[i], one thread per element.
//! let mut b = Builder::new();
//! let i = b.special(Special::TidX);
//! let (input, output) = (b.param_ptr(0), b.param_ptr(1));
//! let src = b.global_addr(input, i, 4);
//! let x = b.load(Space::Global, DType::F32, Addr { base: src, offset: 0 });
//! let y = b.f32_op(ArithOp::Mul, x, Operand::F32(2.0));
//! let dst = b.global_addr(output, i, 4);
//! b.store(Space::Global, DType::F32, Addr { base: dst, offset: 0 }, y);
//! let kernel = b.finish("double".into(), 2, 64, 0);
//!
//! let launch = Launch { grid: [1, 1, 1], block: [32, 1, 1], dynamic_shared_bytes: 0, workspace_bytes: 0, persistent: false, registers: 0 };
//! let input: Vec<f32> = (0..32).map(|i| i as f32).collect();
//! let (out, stats) = ktune_vgpu::run_f32(&kernel, &launch, &[&input], 32)?;
//! assert_eq!(out[5], 10.0);
//! assert_eq!(stats.global_store_bytes, 32 * 4);
//!
//! // One thread too many: the 33rd thread's store is out of bounds.
//! let launch = Launch { block: [33, 1, 1], ..launch };
//! let input: Vec<f32> = vec![0.0; 33];
//! let fault = ktune_vgpu::run_f32(&kernel, &launch, &[&input], 32).unwrap_err();
//! assert_eq!(fault.thread, [32, 0, 0]);
//! # Ok::<(), ktune_vgpu::Fault>(())
//! ```
//!
//! # Execution model
//!
//! Blocks run one after another, in `%ctaid` order (or a seeded shuffle
//! of it, [`Config::block_order`]), each from fresh registers and
//! uninitialised shared memory; results never depend on that order unless
//! blocks race on global memory or cooperate through it (split-K's last
//! block to arrive; [`verify`] shuffles the blocks of such kernels). A
//! block's stores are visible to every block that runs after it, but a
//! load of another block's store must be ordered after it as on a GPU,
//! by a fence (`fence.acq_rel.gpu`) in the storing block after the store
//! and one in the loading block after its last atomic (see below). Within a block every thread
//! has its own registers and pc and runs alone until it reaches a
//! synchronisation point (`bar.sync`, or a warp-collective `shfl.sync`,
//! `ldmatrix` or `mma.sync`) or exits. Then:
//!
//! - a warp-collective instruction completes when all 32 lanes of the warp
//!   wait at the same one (the only `shfl.sync` member mask ktune emits is
//!   `0xffffffff`; `ldmatrix` and `mma` are `.sync.aligned`); a lane that has
//!   exited, waits elsewhere or does not exist (a partial last warp) is a
//!   [`FaultKind::ShuffleDivergence`] or [`FaultKind::CollectiveDivergence`],
//!   a lane waiting at a barrier a [`FaultKind::BarrierDeadlock`].
//!   `ldmatrix` and `mma` read every lane's operands then, and write every
//!   lane's results, with the PTX ISA's fragment layouts;
//! - a `bar.sync 0` completes when every thread that has not exited waits
//!   at the same `bar.sync` (`bar.sync` is `barrier.sync.aligned`); waiting
//!   at different ones is a [`FaultKind::BarrierDivergence`];
//! - a named barrier (`bar.sync id, n`, `bar.arrive id, n`, `id` 1 to 15,
//!   a constant or a register's value when the thread arrives)
//!   completes when `n` threads, whole warps, have arrived; `bar.arrive`
//!   goes on at once, `bar.sync` waits for the completion. Arriving twice
//!   in a phase, with another count, in part of a warp, at a number out of
//!   range, or waiting where no thread can arrive any more is a
//!   [`FaultKind::NamedBarrier`];
//! - a memory barrier's phase (`mbarrier`, 8 shared bytes an
//!   `mbarrier.init` made one; `shared/mbarrier`) completes when its
//!   expected arrivals are in and its count of transaction bytes, raised
//!   by `mbarrier.arrive.expect_tx` and lowered by the tensor copies that
//!   complete at it, is back to 0 (it may go below first, never past
//!   ±(2^20 − 1)). A `mbarrier.try_wait.parity` that finds its phase
//!   incomplete gives up once, then parks its thread until a phase
//!   completes; one no thread is left to complete is a
//!   [`FaultKind::Mbarrier`] deadlock naming the arrivals and bytes the
//!   phase misses;
//! - a warpgroup-collective instruction (Hopper's `wgmma` family and
//!   `setmaxnreg`) completes when all 128 threads of the warpgroup wait
//!   at the same one (`block/warpgroup`); a `setmaxnreg` moving the
//!   warpgroup's count the wrong way is a [`FaultKind::RegisterCount`],
//!   and, where the launch states each thread's registers, an `.inc` the
//!   block's register pool cannot meet once nothing else in the block can
//!   run a [`FaultKind::RegisterPool`].
//!
//! A `bar.sync` or collective whose guard is false is skipped like any
//! other instruction: the thread does not arrive. Only barriers order
//! shared memory between threads, a collective does not: a completed
//! `bar.sync 0` everything before it against everything after, a named
//! or memory barrier what its arrivals did before arriving against what
//! its waiting threads do after (vector clocks, `order`).
//!
//! `cp.async` reads its global source when it starts and lands in shared
//! memory when the issuing thread's `cp.async.wait_group` (or `wait_all`)
//! completes its commit group; landing is a store by that thread at that
//! point. Until then the destination is in flight: any access to it, by any
//! thread, is a [`FaultKind::AsyncCopyPending`]. `red` and `atom` apply in
//! execution order, which is atomic since threads run one at a time.
//!
//! `cp.async.bulk.tensor` (a tensor copy, sm_90; `tensor_copy`) copies the
//! box of a tensor map ([`Kernel::tensor_maps`], reached by `mov.b64` of
//! `map_i` made generic by `cvta.param.u64`) at its coordinates into shared
//! memory, row-major, each byte placed by the map's swizzle on its shared
//! address, elements outside the tensor zero. It reads its source when it
//! issues and completes its bytes at once as transactions of its memory
//! barrier's current phase; its destination is in flight from the issue
//! until that phase completes, when it lands as the async proxy's write:
//! ordered before the waits that see the phase complete and what those are
//! ordered before (a `bar.sync 0` after such a wait included), not before
//! its own thread's later accesses, and read by `wgmma` with no
//! `fence.proxy.async`. Copies whose phase never completes are dropped
//! when the block ends.
//!
//! # What is checked
//!
//! - Global memory ([`Memory`]): parameter `i` points to its own buffer at a
//!   fake base address; every access must fall inside one buffer
//!   ([`FaultKind::OutOfBounds`], naming the parameter and offset) and be
//!   naturally aligned to its full size, vector length × element size
//!   ([`FaultKind::MisalignedAccess`]).
//! - Shared memory: `kernel.dynamic_shared_bytes` per block at the fake
//!   base [`SHARED_BASE`]; bounds and alignment as above; reading a byte no
//!   thread of the block wrote ([`FaultKind::UninitializedShared`]); a byte
//!   written by one thread and read or written by another with no
//!   completed barrier ordering the two ([`FaultKind::SharedRace`]). Races are found
//!   whatever order the threads happen to run in: a load of a byte nobody
//!   has written yet waits until the other threads reach their next
//!   barrier, and is a race if one of them wrote it meanwhile. A
//!   `cp.async` is checked as a store when it starts and when it lands;
//!   each `ldmatrix` row is a 16-byte load by the lane that addresses it.
//!   A `cp.async` source must be aligned to the copy size and in bounds for
//!   the bytes it reads (none when its source size is 0).
//! - Tensor maps, at launch, as the driver's encoding would take them
//!   ([`ktune_core::ptx::TensorMap::check`]), each of a pointer parameter
//!   whose buffer holds its farthest element ([`FaultKind::InvalidLaunch`]).
//!   A tensor copy's map operand must be exactly a map's generic address,
//!   its coordinates one a dimension of the map, its destination 128-byte
//!   aligned ([`FaultKind::TensorCopy`]) and in the window; it is checked
//!   as a store by its thread when it issues, its barrier must be live,
//!   and an arrival at a phase that waits only for bytes is a
//!   [`FaultKind::Mbarrier`].
//! - Registers read before written ([`FaultKind::UninitializedRegister`]),
//!   integer division by zero, and a per-thread instruction limit
//!   ([`Config::step_limit`], checked at branches) so that an endless loop is
//!   a fault, not a hang.
//! - The instruction list itself, before anything runs: labels, register
//!   ranges, operand widths ([`FaultKind::InvalidKernel`]), and the launch
//!   against the kernel ([`FaultKind::InvalidLaunch`]).
//!
//! - Global stores by two blocks of one launch of different values to the
//!   same byte ([`FaultKind::GlobalRace`]); atomics are exempt.
//! - A global load of a byte another block stored in this launch without
//!   a fence in the storing block after the store, or without one in the
//!   loading block after its last atomic ([`FaultKind::UnorderedLoad`];
//!   fences are counted per block, not per thread).
//!
//! Not checked (yet): other races on global memory (between threads of a
//! block), and
//! anything ptxas checks (register limits, PTX syntax).
//!
//! # Arithmetic
//!
//! Each instruction computes what its printed PTX computes. Integers wrap;
//! shift amounts clamp at the width; `f32` `add`/`sub`/`mul`/`div`/`sqrt`/
//! `rcp` round to nearest even exactly like IEEE (Rust's operators), `fma`
//! is fused, `red`/`atom` `.add.f32` round likewise and flush subnormal
//! inputs and results to zero, `min`/`max` return the non-NaN operand and
//! order -0.0 below +0.0; `cvt` rounds to nearest even into floats (via the `half` crate for
//! f16/bf16) and truncates with saturation into integers (NaN → 0).
//! `rsqrt.approx`, `ex2.approx` and `lg2.approx` are computed in f64 and
//! rounded once, and `rcp.approx` as `rcp.rn`, so they are correctly
//! rounded here but differ from a GPU by up to 2 ulp: compare their results
//! with a tolerance. NaN payloads are
//! not modelled (a GPU returns the canonical NaN `0x7fffffff`, which this
//! does only for `min`/`max` of two NaNs and for f16/bf16 conversions):
//! compare NaNs with `is_nan`. `cvt.rna.tf32.f32` rounds to nearest, ties
//! away from zero. `mma` computes each output element as `C[i][j]` followed
//! by a chain of fused multiply-adds in increasing k (products of f16, bf16
//! and tf32 values are exact; a tf32 operand's low 13 bits are ignored);
//! tensor cores add in another order with their own internal precision, so
//! compare `mma` results with the per-dtype tolerances.

mod async_copy;
mod block;
mod cluster;
mod decode;
mod descriptor;
mod exec;
mod fault;
mod fragment;
mod memory;
mod numeric;
mod order;
mod poison;
pub mod random;
pub mod sample;
mod shared;
pub mod suite;
mod tensor_copy;
pub mod timing;
pub mod verify;

pub use fault::{
    Access, ClusterProblem, Fault, FaultKind, FenceSide, LaneState, MbarrierProblem, NamedProblem,
    TensorCopyProblem,
};
pub use memory::Memory;
pub use poison::{POISON_16, POISON_F32, first_poisoned, poisoned};
pub use shared::SHARED_BASE;

use ktune_core::lower::Launch;
use ktune_core::ptx::Kernel;

/// What a run did, summed over every thread of every block.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Instructions executed, per thread (an instruction whose guard is
    /// false counts: the hardware issues it).
    pub instructions: u64,
    pub blocks: u64,
    pub threads: u64,
    /// Dynamic shared memory per block.
    pub shared_bytes: u32,
    pub global_load_bytes: u64,
    pub global_store_bytes: u64,
    pub shared_load_bytes: u64,
    pub shared_store_bytes: u64,
    /// Completed `bar.sync`s, counted once per block.
    pub barriers: u64,
    /// Completed `shfl.sync`s, counted once per warp.
    pub shuffles: u64,
    /// Floating-point operations done by `mma.sync`, per warp instruction
    /// (`2·m·n·k`).
    pub mma_flops: u64,
    /// Of `mma_flops`, those of tf32 `mma`s (half the 16-bit rate).
    pub tf32_flops: u64,
    /// Shared-memory wavefronts of `ldmatrix`, per warp instruction: each
    /// 8×8 matrix takes as many as the most of its eight 16-byte rows
    /// that share a 16-byte bank group (address / 16 mod 8), so one when
    /// its rows cover the 32 banks, and an `ldmatrix.x4` at least four.
    pub ldmatrix_wavefronts: u64,
    /// `ldmatrix` warp instructions' matrices: the fewest wavefronts they
    /// could take.
    pub ldmatrix_matrices: u64,
}

/// How a run is limited.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    /// The most instructions one thread may execute before the run stops
    /// with [`FaultKind::StepLimit`].
    pub step_limit: u64,
    /// The order blocks run in.
    pub block_order: BlockOrder,
    /// The blocks a persistent kernel ([`Launch::persistent`]) is launched
    /// with, where its grid has more tiles: few, so that each block loops
    /// over several tiles, and blocks end up with different counts. For a
    /// kernel in clusters, rounded down to whole clusters (one at least).
    pub resident_blocks: u32,
}

/// The order a grid's blocks run in, one after another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BlockOrder {
    /// `%ctaid.x` fastest, then `y`, then `z`.
    #[default]
    Index,
    /// A permutation drawn with this seed: a kernel whose blocks cooperate
    /// (split-K's last arrival) must not depend on which runs last.
    Shuffled(u64),
}

impl Default for Config {
    fn default() -> Config {
        Config {
            step_limit: 100_000_000,
            block_order: BlockOrder::Index,
            resident_blocks: 3,
        }
    }
}

impl Config {
    /// Sets the per-thread instruction limit.
    pub fn step_limit(mut self, limit: u64) -> Config {
        self.step_limit = limit;
        self
    }

    /// Sets the order blocks run in.
    pub fn block_order(mut self, order: BlockOrder) -> Config {
        self.block_order = order;
        self
    }

    /// Sets the blocks a persistent kernel is launched with.
    pub fn resident_blocks(mut self, blocks: u32) -> Config {
        self.resident_blocks = blocks;
        self
    }
}

/// Runs `kernel` with `launch` on `params`, one buffer per kernel
/// parameter (inputs, then the output, for a lowered kernel); stores
/// land in the buffers.
pub fn run(kernel: &Kernel, launch: &Launch, params: &mut [Vec<u8>]) -> Result<Stats, Fault> {
    let mut memory = Memory::new(params.iter_mut().map(std::mem::take).collect());
    let result = run_with(kernel, launch, &mut memory, &Config::default());
    for (param, buffer) in params.iter_mut().zip(memory.into_buffers()) {
        *param = buffer;
    }
    result
}

/// [`run`] with an explicit configuration, on a [`Memory`].
pub fn run_with(
    kernel: &Kernel,
    launch: &Launch,
    memory: &mut Memory,
    config: &Config,
) -> Result<Stats, Fault> {
    block::run_grid(kernel, launch, memory, config)
}

/// Runs a lowered kernel: `inputs` are copied into the first buffers,
/// `output` (typically [`poisoned`]) follows them, then a zeroed workspace
/// when the launch asks for one ([`Launch::workspace_bytes`]); returns the
/// output buffer after the run.
pub fn run_bytes(
    kernel: &Kernel,
    launch: &Launch,
    inputs: &[&[u8]],
    output: Vec<u8>,
) -> Result<(Vec<u8>, Stats), Fault> {
    run_bytes_with(kernel, launch, inputs, output, &Config::default())
}

/// [`run_bytes`] with an explicit configuration.
pub fn run_bytes_with(
    kernel: &Kernel,
    launch: &Launch,
    inputs: &[&[u8]],
    output: Vec<u8>,
    config: &Config,
) -> Result<(Vec<u8>, Stats), Fault> {
    let mut buffers: Vec<Vec<u8>> = inputs.iter().map(|b| b.to_vec()).collect();
    buffers.push(output);
    if launch.workspace_bytes > 0 {
        buffers.push(workspace(launch));
    }
    let mut memory = Memory::new(buffers);
    let stats = run_with(kernel, launch, &mut memory, config)?;
    let output = memory.into_buffers().swap_remove(inputs.len());
    Ok((output, stats))
}

/// A zeroed workspace buffer of the size `launch` asks for, as every
/// launcher provides it.
pub fn workspace(launch: &Launch) -> Vec<u8> {
    vec![0; launch.workspace_bytes as usize]
}

/// [`run_bytes`] for f32 tensors: an output of `output_len` elements,
/// poisoned with [`POISON_F32`] before the run (an element still equal to
/// it, bit for bit, was never written).
pub fn run_f32(
    kernel: &Kernel,
    launch: &Launch,
    inputs: &[&[f32]],
    output_len: usize,
) -> Result<(Vec<f32>, Stats), Fault> {
    let inputs: Vec<Vec<u8>> = inputs.iter().map(|x| f32_bytes(x)).collect();
    let inputs: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
    let output = poisoned(ktune_core::DType::F32, output_len);
    let (bytes, stats) = run_bytes(kernel, launch, &inputs, output)?;
    let values = bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Ok((values, stats))
}

/// Little-endian bytes of f32 values, as a GPU buffer holds them.
pub fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|x| x.to_le_bytes()).collect()
}
