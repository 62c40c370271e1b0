//! The heuristic model: an estimate of a schedule point's run time from the
//! target's published figures, without running anything. It ranks points,
//! so it cares about the ratios between them more than absolute times.
//!
//! Every estimate starts from what a block needs (threads, registers,
//! shared memory), the [`occupancy`] that gives, and the number of blocks.
//! Then, per op class:
//!
//! - **Streaming classes** (elementwise, rows, generic) are bound by memory.
//!   The bandwidth a grid reaches follows Little's law: the bytes its
//!   resident threads keep in flight (loads each thread issues before it
//!   needs the first, times resident threads) over the memory latency,
//!   capped by the DRAM peak and by the width of each access (narrow loads
//!   reach less of the peak). Rows add their extra passes over each row
//!   (a softmax's maximum and sum one pass with `online = 1`), from L2
//!   while the rows in
//!   flight across the GPU (every resident block's) fit it and from DRAM
//!   otherwise, unless they keep the row:
//!   in registers (`cache = 1`: one read, all of a thread's loads in
//!   flight at once, but the kept values cost registers and so occupancy,
//!   and each pass folds them one after another, once per wave)
//!   or in shared memory (`cache = 2`: one read, the fill's `cp.async`
//!   copies or loads in flight, but the block's rows cost shared memory, so occupancy, and
//!   the fill and the passes' reads cost shared-memory bandwidth once per
//!   wave); and their reduction trees once per wave (shuffles and one
//!   barrier across warps, or a barrier per level of a shared-memory
//!   tree).
//! - **Contractions** are bound by the slowest of: FFMA issue, instruction
//!   issue and shared-memory bandwidth, per `block_k` step of all the
//!   blocks an SM holds (issue per scheduler: the busiest of the four
//!   holds a quarter of the SM's warps, rounded up, and is busy only part
//!   of the time when they are few, `SCHEDULER_SLACK`); the global-memory latency of a step, which the
//!   other resident blocks hide, and with `stages` above 1 the block's own
//!   `stages - 1` tiles in flight (the more bytes in flight per SM, the
//!   less a step waits, while the ring's shared memory may cost resident
//!   blocks); and L2 traffic (each operand is read once per block tile
//!   across it). Steps are repeated over `K` and blocks in
//!   whole waves over the SMs, so a grid that leaves SMs idle in its last
//!   wave pays for it.
//! - **Tensor-core contractions** likewise, per `block_k` step of the
//!   blocks an SM holds: the `mma` work at
//!   [`Hardware::tensor_flops_per_sm_clock`] (tf32:
//!   [`Hardware::tf32_flops_per_sm_clock`], half of it; derated on sm_90, whose peak
//!   needs `wgmma`: `mma.sync` reaches about `MMA_SYNC_SM90` of it there,
//!   which is why cuBLAS outruns this path on H100; and there only with
//!   `MMA_WARPS_PER_SCHEDULER` warps a scheduler; a warpgroup's
//!   `wgmma`, `wgmma = 1`, is taken at the full rate, from the published
//!   peak: on the H200 (2026-12-04) the measured warpgroup points ran 1.2
//!   to 1.8 times their estimates, the `mma.sync` ones 1.4 to 2.2 times,
//!   so the model ranks the two paths as the GPU does), the shared-memory
//!   bytes the fragment reads (`ldmatrix`, or tf32's 32-bit loads) and
//!   `cp.async` writes, instruction issue (tf32 adds a load and a `cvt` per
//!   fragment register), and
//!   the global-memory latency of a step, which `stages - 1` tiles in
//!   flight (and the other resident blocks) hide, one fewer where a
//!   `wgmma` ring holds a slot for the tile before ([`MmaTiles::held`]);
//!   then L2 and DRAM traffic
//!   and waves as for SIMT tiles.
//!   With `min_blocks = 1` (`.minnctapersm 1`), a thread is assumed to
//!   take all the registers it may have, and the blocks an SM holds
//!   follow; what ptxas does with them (fragments loaded further ahead of
//!   their `mma`s) the model does not see, so it never ranks such a point
//!   above the same tiles without the hint: measurement decides.
//!   Padded rows (`swizzle = 0`) cost a 16-bit `mma.sync` tile's k-step
//!   `PADDED_ROWS_SLOWDOWN` on sm_90: a ratio measured between the same
//!   tiles in both layouts, which the layouts' bank arithmetic does not
//!   explain; besides it, they differ by the padding's shared memory and
//!   a few lane-address registers.
//!   Fragments loaded one k-step ahead (`prefetch = 1`) change when the
//!   loads' latency is paid, not the bytes, instructions or (beyond the
//!   layout's register estimate for a tile of one k-step) the blocks an
//!   SM holds, and the model has no latency of shared-memory results to
//!   hide: both settings score alike, and measurement decides.
//! - **Split-K** (`split_k` above 1) multiplies a contraction's
//!   blocks and divides each one's steps over `K`: a grid too small to
//!   fill the SMs fills more of them. It costs the partial tiles' traffic
//!   (each slice written once and read back once, counted as DRAM bytes)
//!   and, per wave, a serial tail: the store, fence and atomic of every
//!   block and the last block's read of every slice.
//! - **A tail split** (`tail_split` above 1) cuts only the last partial
//!   wave's tiles: the whole tiles' waves take their full steps, then the
//!   split tiles' slices run in waves of their own, a slice's steps and
//!   split-K's serial tail each, with split-K's traffic for those tiles.
//! - **A tensor-core ring's fill**: a block waits a memory latency for
//!   its ring's first copies before its first step (rings of several
//!   slots; one slot waits every step). A persistent block
//!   (`persistent = 1`) copies them for its next tile during the epilogue
//!   of the one before, so only its first tile waits.
//! - **A contraction's epilogue** beyond a plain product's (the output's
//!   expression around the reduction: a bf16 bias and a GELU about 17
//!   instructions an output, counted about as `lower::expr` emits them) holds an SM's products back for its
//!   warp instructions at the issue rate where one block runs alone on
//!   the SM; beside another block, or in ping-pong, it runs while other
//!   warps multiply and costs nothing.
//! - **A producer warpgroup** (`producer` 1, or 2 beside two sets of
//!   warpgroups taking tiles in turn) issues the copies in place of the
//!   warpgroups that multiply, and its threads count in the block's (one
//!   block an SM: `min_blocks = 1`). The products never waiting at a
//!   barrier for another warp's copies, and on persistent blocks the ring
//!   filling during the epilogue, the model does not see: the copies
//!   being the same instructions issued by other warps, such points score
//!   about like the same tiles without a producer, save ping-pong's
//!   hidden epilogue, and measurement decides. With `tma = 1` one thread
//!   issues a copy per tile (per 128-byte panel) in place of the
//!   warpgroup's 16-byte ones. With `cluster_m = 2` the two blocks of a
//!   cluster read each of B's tiles from L2 once between them (its DRAM
//!   traffic is left as it is: the pair's reads of a tile came one after
//!   the other anyway).
//! - **DRAM traffic of contractions**: an operand larger than half of L2
//!   is re-read from DRAM by every wave, as much of it as the wave's
//!   blocks cover: row by row (`group_m = 1`) a wave covers all of B, in
//!   groups of `group_m` block rows only `wave / group_m` columns of it
//!   (and `group_m` rows of A), which is how the grouped walk pays off on
//!   large grids.
//!
//! Every estimate carries its [`Bound`] and the figures it used, so that
//! tools can show why a point ranks where it does.

use serde::Serialize;

use crate::ir::{BinaryOp, Expr, ExprId, Kernel, LetId};
use crate::lower::classify::{OpClass, RowPlan};
use crate::lower::expr;
use crate::lower::matmul::mma::{MmaLayout, MmaTiles};
use crate::lower::matmul::{self, Layout, MatmulPlan, Split, Tiles};
use crate::lower::rows::{CachePlan, Pass, online, shared_bytes};
use crate::lower::{LowerError, Lowering};
use crate::occupancy::{BlockUsage, Occupancy, occupancy};
use crate::ptx::Builder;
use crate::ptx::inst::{Addr, MmaKind, Op, RegClass, Space};
use crate::schedule::Schedule;
use crate::target::{Hardware, SmVersion};

/// Latency of a global load that misses the caches.
const MEMORY_LATENCY_S: f64 = 600e-9;
/// A kernel launch and its drain, whatever it does.
const LAUNCH_S: f64 = 3e-6;
/// L2 bandwidth relative to DRAM's.
pub const L2_OVER_DRAM: f64 = 3.0;
/// Operand tiles whose rows are short runs of contiguous bytes stream
/// slower than their bytes say: on the H200 run, the measured time over
/// the model's fell from about 2.3 to 1.35 as a block's row of B grew from
/// 32 or 64 bytes to 256 or 512 (`bench/gpu/README.md`). Modelled as if a
/// run shorter than this many bytes cost this many bytes of DRAM traffic,
/// as it would if the L2 read DRAM in such units and the rest went unused
/// (its fetch granularity is up to 128 bytes, `cudaLimitMaxL2FetchGranularity`;
/// whether that is the cause is not established). 64 fits that run best
/// (`ktune-bench --fit`: the model's pick among the measured points of
/// `decode_m1` 2.31× slower than the fastest without it, 1.10× with it,
/// and of `decode_m16` 1.36× and 1.00×, the other cases unchanged; with
/// 128 the tf32 SGEMM's rank correlation drops from 0.73 to 0.61).
const DRAM_SEGMENT_BYTES: f64 = 64.0;
/// Shared-memory bytes an SM serves per clock.
const SHARED_BYTES_PER_CLOCK: f64 = 128.0;
/// Warp instructions an SM issues per clock (four schedulers).
const ISSUE_PER_CLOCK: f64 = 4.0;
/// Warp schedulers per SM.
const SCHEDULERS: f64 = 4.0;
/// A scheduler holding `w` warps of a SIMT contraction keeps its pipes
/// busy `w / (w + SCHEDULER_SLACK)` of the time: with few warps, each
/// one's waits (shared loads, barriers) show. Fitted to the three H200
/// visits' measured SIMT schedules (`ktune-bench --fit` on `sgemm_4096`,
/// `sgemm_tf32_4096`, the three long-tail shapes and `demo_ffn_down`, 16
/// case-visits): the mean rank correlation goes from 0.44 without the
/// term to 0.71, and the model's pick among the measured points from
/// 1.41× the fastest (geometric mean) to 1.08×; slack 0.25 and 1 do about
/// as well (0.68 and 0.70), 2 worse (0.62). On the first visit, 33
/// random points a case, the SGEMM's correlation drops from 0.75 to 0.71
/// and the tf32 SGEMM's from 0.73 to 0.58 (its SIMT points now rank below
/// more of its tensor-core ones).
const SCHEDULER_SLACK: f64 = 0.5;
/// The fraction of sm_90's tensor peak `mma.sync` reaches (the rest needs
/// `wgmma`).
const MMA_SYNC_SM90: f64 = 0.6;
/// A pass's loop iteration over a row kept in shared memory: a shared
/// load, the arithmetic waiting on it and the loop's branch. Fitted to the
/// H200 visit of 2026-12-04 (`ktune-bench --fit`, its screened
/// alternatives included), whose row fills copy by `cp.async`: 80, fitted
/// before them, put 4096 softmax rows of 50257 kept in shared memory at
/// 0.97 ms (512 threads) and 0.78 ms (1,024), measured 0.551 and 0.569;
/// with 20 the estimates are 0.61 and 0.61, and the rank correlation over
/// that case's 13 measured points goes from 0.74 to 0.90; 40 gives 0.87,
/// 10 no better than 20.
const SHARED_ITERATION_CYCLES: f64 = 20.0;
/// How many iterations' waits on L2 overlap in a pass over a row kept in
/// shared memory that also reads a tensor from global memory on every
/// iteration (layernorm's weights): fitted, like the above, to the same
/// visit, where such a pass took far less than an L2 latency an
/// iteration (4096 layernorm rows of 50257 in shared memory: 0.864 ms
/// with 512 threads, 0.607 with 1,024, against softmax's 0.551 and
/// 0.569). With 3 the case's rank correlation is 0.67, with 1 0.42.
const L2_WAITS_OVERLAPPED: f64 = 3.0;
/// Warps a scheduler needs to keep sm_90's tensor cores fed with
/// `mma.sync`: with fewer, the `mma` rate falls in proportion. Only on
/// sm_90, where it was measured: the other targets' tensor cores are
/// slower against the same fragment loads, and no run says how many warps
/// they need. Fitted to the H200
/// visits (`ktune-bench --fit`): with 2, the model's pick among the
/// measured points of `llm_4096x11008x4096` goes from 1.51× and 1.50× the
/// fastest to 1.22× (second and third visits), `matmul_bias_gelu_bf16`'s
/// from 1.54× and 1.53× to 1.11× and 1.10×, the batched product's from
/// 1.17× and 1.27× to 1.04× and 1.14×, the demo's `ffn_up` from 1.75× to
/// 1.24×, with the first visit unchanged (its fastest tiles had 8 warps an
/// SM and more); with 4, the first visit's bf16 pick falls to 1.71×.
const MMA_WARPS_PER_SCHEDULER: f64 = 2.0;
/// How much longer a k-step of `mma.sync` tiles takes with operand rows
/// padded by 16 bytes than with the same tiles swizzled (`swizzle = 1`).
/// Measured, not derived: on the H200 (2026-12-04, call 1, the tensor-core
/// defaults' screened alternatives), 27 pairs of points differing only in
/// `swizzle`, over eight cases, ran padded 1.19 times slower (geometric
/// mean; 25 of the 27 slower, 0.96 to 1.41), and ncu counted 42% of a
/// padded bf16 product's shared-memory wavefronts as excess (2026-11-30).
/// The bank arithmetic of the padded rows' `ldmatrix` reads and copies
/// accounts for far less of that excess, so the model does not derive it
/// from the layout. Without it the two layouts scored alike and a
/// build's bounded search spent candidates on padded twins of its
/// swizzled ones; with it the mean rank correlation over the 51
/// case-visits of tensor-core cases (`ktune-bench --fit`) goes from 0.73
/// to 0.77, and the model's pick among the measured points from 1.15 to
/// 1.13 times the fastest (geometric mean).
const PADDED_ROWS_SLOWDOWN: f64 = 1.19;
/// A pass's cycles per value a thread keeps in registers (`cache = 1`):
/// the dependent chain of the pass's fold. Fitted to the three H200 visits
/// (`ktune-bench --fit`): with 8, the model's pick among the measured
/// points of `softmax_8192x4096` goes from 1.56× and 1.57× the fastest to
/// 1.01× and 1.00× (second and third visits), `layernorm_8192x4096`'s from
/// 1.32× to 1.01× and 1.02×, the demo's layernorm from 4.65× to 1.05×;
/// their rank correlations rise from 0.40–0.69 to 0.62–0.78, the demo
/// layernorm's from −0.03 to 0.50. With 16, the first visit's softmax pick
/// falls to 1.29×.
const KEPT_VALUE_CYCLES: f64 = 8.0;
/// Latency of a global load that hits L2.
const L2_LATENCY_S: f64 = 300e-9;
/// Cycles of one shuffle step of a reduction tree, and of a barrier.
const SHUFFLE_CYCLES: f64 = 30.0;
const BARRIER_CYCLES: f64 = 60.0;
/// Cycles a reduction of a row spread over a cluster spends combining the
/// blocks' values: a cluster barrier and a load of distributed shared
/// memory, each a few hundred cycles. Not yet measured: a guess, to be
/// refitted from the first GPU run of cluster points.
const CLUSTER_EXCHANGE_CYCLES: f64 = 800.0;

/// What limits a point's estimated time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// DRAM bandwidth.
    Memory,
    /// Too few bytes in flight to reach the bandwidth.
    Latency,
    /// Arithmetic or instruction issue.
    Compute,
    /// Shared-memory bandwidth.
    SharedMemory,
    /// L2 bandwidth.
    L2,
}

/// The model's estimate for one schedule point.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    pub seconds: f64,
    pub bound: Bound,
    pub occupancy: Occupancy,
    pub threads_per_block: u32,
    pub registers: u32,
    pub shared_bytes: u32,
    pub blocks: u64,
    /// Blocks over what the SMs hold at once.
    pub waves: f64,
    /// FLOPs per byte the kernel must move from DRAM.
    pub intensity: f64,
    /// Values per thread a one-pass rows point keeps in registers (the row
    /// elements each thread owns); 0 for every other point.
    pub cached_per_thread: u32,
}

/// Estimates `schedule`'s run time for `kernel` on `target`; an invalid
/// point is the lowering's error.
pub fn estimate(
    kernel: &Kernel,
    schedule: &Schedule,
    target: SmVersion,
) -> Result<Estimate, LowerError> {
    Model::new(kernel, target).estimate(schedule)
}

/// `points` with their estimates, fastest first (ties keep their order);
/// invalid points are left out.
pub fn rank(kernel: &Kernel, target: SmVersion, points: &[Schedule]) -> Vec<(Schedule, Estimate)> {
    Model::new(kernel, target).rank(points)
}

/// The model of one kernel on one target, with what every estimate needs
/// from the kernel found once (its op class, its arithmetic intensity, a
/// contraction's epilogue): ranking a space estimates thousands of points.
#[derive(Debug, Clone)]
pub struct Model<'k> {
    lowering: Lowering<'k>,
    intensity: f64,
    /// A contraction's epilogue instructions an output
    /// ([`epilogue_instructions`]); 0 for other classes.
    epilogue: f64,
}

impl<'k> Model<'k> {
    pub fn new(kernel: &'k Kernel, target: SmVersion) -> Model<'k> {
        let lowering = Lowering::new(kernel, target);
        let epilogue = match lowering.class() {
            OpClass::Matmul(plan) => epilogue_instructions(kernel, plan),
            _ => 0.0,
        };
        let intensity = kernel.flops() as f64 / kernel.compulsory_bytes().max(1) as f64;
        Model {
            lowering,
            intensity,
            epilogue,
        }
    }

    /// The checks every estimate starts with, to check other points by.
    pub fn lowering(&self) -> &Lowering<'k> {
        &self.lowering
    }

    /// [`estimate`] for this model's kernel and target.
    pub fn estimate(&self, schedule: &Schedule) -> Result<Estimate, LowerError> {
        self.lowering.check(schedule)?;
        let (kernel, target) = (self.lowering.kernel(), self.lowering.target());
        let hw = target.hardware();
        let intensity = self.intensity;
        let (usage, blocks, cost) = match (schedule, self.lowering.class()) {
            (Schedule::Matmul(tiles), OpClass::Matmul(plan)) => {
                return Ok(contraction(&self.product(plan), *tiles));
            }
            (Schedule::Mma(tiles), OpClass::Matmul(plan)) => {
                return Ok(tensor_core(&self.product(plan), *tiles));
            }
            (Schedule::Rows { .. }, OpClass::Rows(plan)) => rows(kernel, plan, schedule, target),
            _ => flat(kernel, schedule),
        };
        let occ = occupancy(usage, target);
        let resident = f64::from(occ.blocks_per_sm.max(1) * target.limits().sm_count);
        let waves = blocks as f64 / resident;
        let threads = blocks as f64 * f64::from(usage.threads);
        let resident_threads = threads.min(resident * f64::from(usage.threads));
        let peak = hw.dram_bandwidth * cost.access_efficiency;
        let little = resident_threads * cost.in_flight_per_thread / MEMORY_LATENCY_S;
        let (bandwidth, bound) = if little < peak {
            (little, Bound::Latency)
        } else {
            (peak, Bound::Memory)
        };
        let clock = f64::from(hw.clock_mhz) * 1e6;
        let seconds = cost.dram_bytes / bandwidth
            + cost.l2_bytes / (hw.dram_bandwidth * L2_OVER_DRAM)
            + waves.ceil() * cost.serial_cycles / clock
            + LAUNCH_S;
        Ok(Estimate {
            seconds,
            bound,
            occupancy: occ,
            threads_per_block: usage.threads,
            registers: usage.registers,
            shared_bytes: usage.shared_bytes,
            blocks,
            waves,
            intensity,
            cached_per_thread: cost.cached_per_thread,
        })
    }

    /// `points` with their estimates, fastest first (ties keep their
    /// order); invalid points are left out.
    pub fn rank(&self, points: &[Schedule]) -> Vec<(Schedule, Estimate)> {
        let mut ranked: Vec<(Schedule, Estimate)> = points
            .iter()
            .filter_map(|p| Some((p.clone(), self.estimate(p).ok()?)))
            .collect();
        ranked.sort_by(|a, b| a.1.seconds.total_cmp(&b.1.seconds));
        ranked
    }

    fn product<'p>(&'p self, plan: &'p MatmulPlan) -> Product<'p> {
        Product {
            kernel: self.lowering.kernel(),
            plan,
            target: self.lowering.target(),
            intensity: self.intensity,
            epilogue: self.epilogue,
        }
    }
}

/// What every estimate of one contraction's points shares.
struct Product<'p> {
    kernel: &'p Kernel,
    plan: &'p MatmulPlan,
    target: SmVersion,
    intensity: f64,
    /// Its epilogue's instructions an output ([`epilogue_instructions`]).
    epilogue: f64,
}

/// How a streaming kernel moves its bytes.
struct Stream {
    dram_bytes: f64,
    /// Re-reads served by L2.
    l2_bytes: f64,
    /// Bytes each thread has in flight before it waits.
    in_flight_per_thread: f64,
    /// The fraction of peak bandwidth its access width reaches.
    access_efficiency: f64,
    /// Cycles per wave spent outside memory (reduction trees).
    serial_cycles: f64,
    /// Values per thread kept in registers.
    cached_per_thread: u32,
}

/// The fraction of peak bandwidth loads of `bytes` each reach: 16-byte
/// accesses reach it; 4-byte ones, issuing four times the instructions,
/// about 85%.
fn access_efficiency(bytes: f64) -> f64 {
    0.8 + 0.2 * (bytes.clamp(1.0, 16.0) / 16.0)
}

fn input_bytes(kernel: &Kernel) -> f64 {
    kernel
        .inputs
        .iter()
        .map(|t| f64::from(t.dtype.size()))
        .sum::<f64>()
}

fn flat(kernel: &Kernel, schedule: &Schedule) -> (BlockUsage, u64, Stream) {
    let len = kernel.len_of(&kernel.output);
    let (block, groups_per_thread, vector) = match *schedule {
        Schedule::Elementwise {
            block,
            per_thread,
            vector,
        } => (block, per_thread, vector),
        Schedule::Generic { block } => (block, 1, 1),
        _ => unreachable!("a flat class"),
    };
    let per_block = u64::from(block * groups_per_thread * vector);
    let elem = input_bytes(kernel).max(f64::from(kernel.output.dtype.size()));
    let registers = (16 + 6 * groups_per_thread * vector).min(255);
    let in_flight = f64::from(groups_per_thread * vector) * elem;
    let access = f64::from(vector) * f64::from(kernel.output.dtype.size());
    let reductions = kernel.flops() as f64 / len.max(1) as f64;
    (
        BlockUsage {
            threads: block,
            registers,
            shared_bytes: 0,
        },
        len.div_ceil(per_block),
        Stream {
            dram_bytes: kernel.compulsory_bytes() as f64,
            l2_bytes: 0.0,
            in_flight_per_thread: in_flight,
            access_efficiency: access_efficiency(access),
            serial_cycles: if matches!(schedule, Schedule::Generic { .. }) {
                reductions
            } else {
                0.0
            },
            cached_per_thread: 0,
        },
    )
}

fn rows(
    kernel: &Kernel,
    plan: &RowPlan,
    schedule: &Schedule,
    target: SmVersion,
) -> (BlockUsage, u64, Stream) {
    let Schedule::Rows {
        threads_per_row,
        rows_per_block,
        vector,
        cache,
        tree,
        online,
        cluster,
    } = *schedule
    else {
        unreachable!("a rows point")
    };
    let rows = plan.rows(kernel);
    let length = plan.length(kernel);
    let elem = input_bytes(kernel);
    // A row spread over a cluster's blocks has their threads together.
    let row_threads = threads_per_row * cluster;
    let busy = (f64::from(length) / f64::from(row_threads * vector)).min(1.0);
    let reductions = plan.reductions().count();
    let passes = reductions as f64;
    let levels = f64::from(threads_per_row.trailing_zeros());
    let tree_cycles = if threads_per_row <= 32 {
        levels * SHUFFLE_CYCLES
    } else if tree == 1 {
        (levels + 1.0) * BARRIER_CYCLES
    } else {
        5.0 * SHUFFLE_CYCLES + 2.0 * BARRIER_CYCLES
    } + if cluster > 1 {
        CLUSTER_EXCHANGE_CYCLES
    } else {
        0.0
    };
    let kept = CachePlan::of(kernel, plan);
    let (cached, fill, kept_shared) = match cache {
        1 => (kept.values_per_thread(row_threads, vector), None, 0),
        2 => (
            0,
            Some(kept.fill_cost(kernel, row_threads, vector, target)),
            u64::from(rows_per_block) * kept.shared_bytes_per_row(vector, cluster),
        ),
        _ => (0, None, 0),
    };
    let cluster_slots = match cluster {
        1 => 0,
        _ => (u64::from(rows_per_block) * reductions as u64 * 4).next_multiple_of(16),
    };
    // Kept values are loaded all at once: a thread's whole share of the row
    // is in flight; the fill of a row in shared memory has its `cp.async`
    // copies (the whole share) or its iteration's loads in flight;
    // otherwise one access per loop iteration.
    let in_flight = match (cached, fill) {
        (0, None) => busy * f64::from(vector),
        (0, Some(fill)) => f64::from(fill.in_flight),
        _ => (f64::from(length) / f64::from(row_threads * vector)).ceil() * f64::from(vector),
    };
    // A fill entirely by `cp.async` has the thread's whole share of the
    // row in flight, whatever its width; the passes then read shared
    // memory. On the H200 (2026-12-04), 8192 rows of 4096 kept in shared
    // memory took 0.070 and 0.073 ms with 4 and 1 values an access (128
    // threads), 0.105 and 0.106 ms (1,024).
    let access_efficiency = match fill {
        Some(fill) if fill.registers == 0 => 1.0,
        _ => access_efficiency(f64::from(vector) * elem),
    };
    let threads = threads_per_row * rows_per_block;
    // ptxas holds a block of 1,024 threads that keeps nothing in registers
    // to 32 a thread, so that two such blocks share an SM (every rows
    // point of the benchmark's dry runs, 24 to 32).
    let registers = match (threads, cached) {
        (1024, 0) => 32,
        _ => 32 + 4 * vector + cached + fill.map_or(0, |f| f.registers),
    };
    let usage = BlockUsage {
        threads,
        registers,
        shared_bytes: (shared_bytes(threads_per_row, rows_per_block, 32, tree)
            + cluster_slots
            + kept_shared) as u32,
    };
    // Without a cache the passes after the first, the outputs' included,
    // read the row again (a pair of reductions, with `online = 1`, in one
    // pass): from L2 while the rows in flight across the GPU (a row of the
    // widest input each) fit it, else from DRAM. (Counting the reductions
    // alone missed the outputs' read, and counted every input's bytes per
    // element: the model's pick among the points measured on the H200 on
    // 2026-12-04 was 1.73 times the fastest for softmax over 8192 rows of
    // 4096 and 2.10 times for layernorm, a one-pass `online` point over
    // ones that keep the row; with the reads counted, 1.00 and 1.00.)
    let paired: u64 = match online {
        0 => 0,
        _ => online::pairs(kernel, plan)
            .iter()
            .map(|pair| kept.pass_bytes(kernel, Pass::Reduce(pair.second)))
            .sum(),
    };
    let re_reads =
        f64::from(rows) * kept.re_read_bytes_per_row(kernel).saturating_sub(paired) as f64;
    let limits = target.limits();
    let blocks_per_sm = occupancy(usage, target).blocks_per_sm;
    let rows_in_flight =
        (u64::from(limits.sm_count) * u64::from(blocks_per_sm) * u64::from(rows_per_block)
            / u64::from(cluster))
        .min(u64::from(rows));
    let widest = kernel
        .inputs
        .iter()
        .map(|t| t.dtype.size())
        .max()
        .unwrap_or(4);
    let from_l2 = rows_in_flight as f64 * f64::from(length) * f64::from(widest)
        <= f64::from(target.hardware().l2_bytes);
    let (dram_re_reads, l2_bytes) = match cache {
        0 if from_l2 => (0.0, re_reads),
        0 => (re_reads, 0.0),
        _ => (0.0, 0.0),
    };
    // A row in shared memory is written once and read by every pass that
    // keeps it, at the SM's shared-memory bandwidth, after the fill. Each
    // pass then walks the thread's share of the row an iteration at a
    // time, waiting on its loads: shared memory's latency, or L2's where
    // the pass also reads a tensor no other pass does (layernorm's weights).
    // With a long row a block holds most of an SM's shared memory, so few
    // warps hide those waits (on the H200, 4096 rows of 50257: 1,024
    // threads a row 1.07 ms, 512 1.69 ms, 256 2.91 ms, 128 5.45 ms).
    // A row kept in registers is loaded at once, then every pass folds a
    // thread's values one after another, with the warps it has left to
    // hide that (as many values a thread keeps, as few warps an SM holds).
    let kept_cycles = match cache {
        1 => f64::from(kept.passes().0) * f64::from(cached) * KEPT_VALUE_CYCLES,
        _ => 0.0,
    };
    let shared_cycles = match cache {
        2 => {
            let resident = f64::from(blocks_per_sm.max(1));
            let bandwidth = resident
                * f64::from(rows_per_block)
                * (kept.shared_traffic_per_row() as f64 / f64::from(cluster))
                / SHARED_BYTES_PER_CLOCK;
            let iterations = (f64::from(length) / f64::from(row_threads * vector)).ceil();
            let (all, global) = kept.passes();
            let l2_cycles = L2_LATENCY_S * f64::from(target.hardware().clock_mhz) * 1e6;
            let latency = iterations
                * (f64::from(all) * SHARED_ITERATION_CYCLES
                    + f64::from(global) * l2_cycles / L2_WAITS_OVERLAPPED);
            bandwidth.max(latency)
        }
        _ => 0.0,
    };
    (
        usage,
        u64::from(rows.div_ceil(rows_per_block)) * u64::from(cluster),
        Stream {
            dram_bytes: kernel.compulsory_bytes() as f64 + dram_re_reads,
            l2_bytes,
            in_flight_per_thread: in_flight * elem,
            access_efficiency,
            serial_cycles: passes * tree_cycles + shared_cycles + kept_cycles,
            cached_per_thread: cached,
        },
    )
}

fn contraction(product: &Product<'_>, tiles: Tiles) -> Estimate {
    let layout =
        Layout::new(product.kernel, product.plan, tiles, product.target).expect("validated");
    let block = Block::new(
        product,
        BlockUsage {
            threads: layout.threads,
            registers: layout.registers,
            shared_bytes: layout.shared_bytes,
        },
        Walk {
            block_m: tiles.block_m,
            block_n: tiles.block_n,
            block_k: tiles.block_k,
            group_m: tiles.group_m,
            split: layout.split,
            k_tiles: layout.k_tiles(),
            fill: false,
            persistent: false,
            ping_pong: false,
            shares_b: 1,
        },
    );
    let (hw, resident) = (&block.hw, block.resident);
    let (tm, tn, bk) = (
        f64::from(tiles.thread_m),
        f64::from(tiles.thread_n),
        f64::from(tiles.block_k),
    );

    // One block_k step of one thread.
    let (fm, fn_) = (f64::from(layout.frag_m), f64::from(layout.frag_n));
    let ffma = tm * tn * bk;
    let shared_loads = bk * ((tm / fm).ceil() + (tn / fn_).ceil());
    // A warp's threads walk `n` first: lanes with the same `m` read the same
    // A fragment (a broadcast), so a warp reads distinct A rows for only
    // ⌈32 / threads_n⌉ of them.
    let lanes_n = f64::from(layout.threads_n).min(32.0);
    let warp_shared_bytes = bk * ((32.0 / lanes_n).ceil() * tm + lanes_n * tn) * 4.0;
    // Through registers, a load and a store per access; by `cp.async`, a
    // copy per access (per element where the store transposes), and the
    // ring's slot arithmetic, commit and wait.
    let staging = match tiles.stages {
        1 => 2.0 * f64::from(layout.a.passes + layout.b.passes),
        _ => f64::from(layout.a.copies() + layout.b.copies()) + 8.0,
    };
    let instructions = ffma + shared_loads + staging + 12.0;
    let warps = f64::from(layout.threads) / 32.0;

    let sm_warps = warps * f64::from(resident);
    let ffma_rate = f64::from(hw.fp32_lanes_per_sm) / 32.0;
    // Warps are dealt to the SM's schedulers in turn; the busiest holds
    // `per_scheduler` of them and keeps its pipes busy only part of the
    // time with few to choose from.
    let per_scheduler = (sm_warps / SCHEDULERS).ceil();
    let busy = per_scheduler / (per_scheduler + SCHEDULER_SLACK);
    let issue = per_scheduler * instructions / (ISSUE_PER_CLOCK / SCHEDULERS) / busy;
    let fma = per_scheduler * ffma / (ffma_rate / SCHEDULERS) / busy;
    let shared = sm_warps * (warp_shared_bytes / SHARED_BYTES_PER_CLOCK).max(shared_loads);
    let memory = block.memory_cycles();
    // One stage: a block waits for its tiles, then computes. More: the
    // copies of `stages - 1` tiles ahead overlap its own steps.
    let latency = match tiles.stages {
        1 => memory + warps * instructions / ISSUE_PER_CLOCK + 2.0 * BARRIER_CYCLES,
        s => {
            (memory / f64::from(s - 1)).max(warps * instructions / ISSUE_PER_CLOCK) + BARRIER_CYCLES
        }
    };
    let step = [
        (fma.max(issue), Bound::Compute),
        (shared, Bound::SharedMemory),
        (latency, Bound::Latency),
    ]
    .into_iter()
    .fold(
        (0.0, Bound::Compute),
        |best, c| if c.0 > best.0 { c } else { best },
    );
    block.estimate(product, step)
}

/// How a contraction's grid covers its output: the block tile, the walk's
/// groups, and split-K's slices of `K` over `k_tiles` steps per block.
struct Walk {
    block_m: u32,
    block_n: u32,
    block_k: u32,
    group_m: u32,
    split: Option<Split>,
    k_tiles: u32,
    /// Whether a block waits for its ring's first copies before its first
    /// step, a memory latency (counted for tensor-core rings of several
    /// slots, which persistent blocks fill ahead).
    fill: bool,
    /// Whether blocks loop over tiles (`persistent = 1`).
    persistent: bool,
    /// Whether two sets of warpgroups take the tiles in turn (`producer =
    /// 2`), one's epilogue beside the other's products.
    ping_pong: bool,
    /// Blocks of a cluster that read each of B's tiles from L2 once
    /// between them (`cluster_m`).
    shares_b: u32,
}

/// What both contraction estimates (SIMT and tensor-core) share: a block's
/// resources and how many an SM holds, its grid, and ([`Block::estimate`])
/// how the cycles of one `block_k` step of the blocks an SM holds become
/// the kernel's time.
struct Block {
    hw: Hardware,
    sm_count: u32,
    clock: f64,
    usage: BlockUsage,
    occupancy: Occupancy,
    /// Blocks an SM holds, at least one.
    resident: u32,
    extents: [u64; 3],
    blocks: u64,
    walk: Walk,
}

impl Block {
    fn new(product: &Product<'_>, usage: BlockUsage, walk: Walk) -> Block {
        let (kernel, plan, target) = (product.kernel, product.plan, product.target);
        let hw = target.hardware();
        let occupancy = occupancy(usage, target);
        let extents = [
            u64::from(plan.m_extent(kernel)),
            u64::from(plan.n_extent(kernel)),
            u64::from(plan.k_extent(kernel)),
        ];
        let tiles = plan.batch_count(kernel)
            * extents[0].div_ceil(u64::from(walk.block_m))
            * extents[1].div_ceil(u64::from(walk.block_n));
        let blocks = match walk.split {
            Some(split) => split.blocks_x(tiles) * u64::from(split.blocks_y()),
            None => tiles,
        };
        Block {
            clock: f64::from(hw.clock_mhz) * 1e6,
            hw,
            sm_count: target.limits().sm_count,
            usage,
            resident: occupancy.blocks_per_sm.max(1),
            occupancy,
            extents,
            blocks,
            walk,
        }
    }

    /// A global memory latency, in cycles.
    fn memory_cycles(&self) -> f64 {
        MEMORY_LATENCY_S * self.clock
    }

    /// The cycles a tile's epilogue holds its SM's products back: its
    /// warp instructions at the SM's issue rate where nothing else
    /// multiplies meanwhile (one block an SM, not in ping-pong); none
    /// where another block's or set's products run beside it.
    fn exposed_epilogue(&self, product: &Product<'_>) -> f64 {
        if self.resident > 1 || self.walk.ping_pong {
            return 0.0;
        }
        let outputs = f64::from(self.walk.block_m) * f64::from(self.walk.block_n);
        outputs * product.epilogue / 32.0 / ISSUE_PER_CLOCK
    }

    /// The estimate from the cycles of one `block_k` step of the blocks an
    /// SM holds and what bounds it: the steps over `K` (and split-K's tail)
    /// in whole waves over the SMs, or the L2 or DRAM traffic when slower.
    fn estimate(self, product: &Product<'_>, (step_cycles, bound): (f64, Bound)) -> Estimate {
        let wave = self.resident * self.sm_count;
        let waves = self.blocks as f64 / f64::from(wave);
        let steps = f64::from(self.walk.k_tiles);
        let tail = split_tail(self.walk.split, self.memory_cycles());
        // A ring of several slots waits for its first tiles' copies before
        // its first step. A persistent block copies them for its next
        // tile while the epilogue of the one before runs: only its first
        // tile waits.
        let fill = match self.walk.fill {
            true => self.memory_cycles(),
            false => 0.0,
        };
        let epilogue = self.exposed_epilogue(product);
        let compute_s = match self.walk.split {
            Some(split) if split.whole > 0 => {
                let whole = f64::from(split.whole) / f64::from(wave);
                let sliced = (self.blocks - u64::from(split.whole)) as f64 / f64::from(wave);
                whole.ceil() * (steps * step_cycles + fill + epilogue)
                    + sliced.ceil()
                        * (f64::from(split.tiles) * step_cycles + tail + fill + epilogue)
            }
            _ if self.walk.persistent => {
                waves.ceil() * (steps * step_cycles + tail + epilogue) + fill
            }
            _ => waves.ceil() * (steps * step_cycles + tail + fill + epilogue),
        } / self.clock;
        let grid = Grid {
            block_m: self.walk.block_m,
            block_n: self.walk.block_n,
            block_k: self.walk.block_k,
            group_m: self.walk.group_m,
            shares_b: self.walk.shares_b,
            wave: u64::from(wave),
            workspace_bytes: split_traffic(self.walk.split),
        };
        let (seconds, bound) = with_memory(
            product.kernel,
            product.plan,
            self.extents,
            grid,
            (compute_s, bound),
            &self.hw,
        );
        Estimate {
            seconds: seconds + LAUNCH_S,
            bound,
            occupancy: self.occupancy,
            threads_per_block: self.usage.threads,
            registers: self.usage.registers,
            shared_bytes: self.usage.shared_bytes,
            blocks: self.blocks,
            waves,
            intensity: product.intensity,
            cached_per_thread: 0,
        }
    }
}

/// Instructions an output element's epilogue takes beyond a plain
/// product's (whose conversion and store the model's fit to plain
/// products covers), about as `lower::expr` emits the output's expression
/// around the contraction's reduction (whose accumulator is free): each
/// function, load (its address, the load and the widening of 16-bit
/// values, and a multiply-add per index past the first) and rounding cast
/// as a scratch kernel counts them, a division as the eight or so machine
/// instructions `div.rn.f32` becomes, a mean's scale and anything else
/// one. For a bf16 bias and a GELU, 17: on the H200 the fused matmul +
/// bias + gelu took 0.02–0.04 ms more than the plain product on the same
/// tiles, one block an SM, against 0.024 ms at this count.
fn epilogue_instructions(kernel: &Kernel, plan: &MatmulPlan) -> f64 {
    fn walk(kernel: &Kernel, plan: &MatmulPlan, id: ExprId, lets: &mut Vec<LetId>) -> f64 {
        if id == plan.reduce {
            return if plan.mean { 1.0 } else { 0.0 };
        }
        if let Expr::Let(l) = kernel.exprs[id.0] {
            if lets.contains(&l) {
                return 0.0;
            }
            lets.push(l);
            return walk(kernel, plan, kernel.lets[l.0].value, lets);
        }
        let mut of = |id| walk(kernel, plan, id, lets);
        match &kernel.exprs[id.0] {
            Expr::Const(_) | Expr::Let(_) => 0.0,
            Expr::Index(_) => 1.0,
            Expr::Cast(dtype, x) => {
                let dtype = *dtype;
                emitted(|b| {
                    let x = b.reg(RegClass::F32);
                    b.round_to(dtype, x);
                }) + of(*x)
            }
            Expr::Not(x) => 1.0 + of(*x),
            Expr::Load { tensor, index } => {
                let dtype = kernel.input(*tensor).dtype;
                let load = emitted(|b| {
                    let base = b.reg(RegClass::B64);
                    let at = b.reg(RegClass::B32);
                    let addr = b.global_addr(base, at, dtype.size());
                    b.load(
                        Space::GlobalReadOnly,
                        dtype,
                        Addr {
                            base: addr,
                            offset: 0,
                        },
                    );
                });
                load + index.len().saturating_sub(1) as f64
            }
            Expr::Unary(op, x) => {
                let op = *op;
                emitted(|b| {
                    let x = b.reg(RegClass::F32);
                    expr::unary(b, op, x);
                }) + of(*x)
            }
            Expr::Binary(op, x, y) => {
                let own = if *op == BinaryOp::Div { 8.0 } else { 1.0 };
                own + of(*x) + of(*y)
            }
            Expr::Compare(_, x, y) | Expr::Logic(_, x, y) => 1.0 + of(*x) + of(*y),
            Expr::Select(c, x, y) => 1.0 + of(*c) + of(*x) + of(*y),
            // Another reduction around the contraction's is the generic
            // lowering's, which the model does not cost this way.
            Expr::Reduce { body, .. } => of(*body),
        }
    }
    walk(kernel, plan, kernel.root, &mut Vec::new())
}

/// The instructions `emit` puts in a scratch kernel, its labels and the
/// `ret` that ends it aside.
fn emitted(emit: impl FnOnce(&mut Builder)) -> f64 {
    let mut b = Builder::new();
    emit(&mut b);
    let kernel = b.finish(String::new(), 0, 32, 0);
    let instructions = kernel.body.iter();
    instructions
        .filter(|i| !matches!(i.op, Op::Ret | Op::Label(_)))
        .count() as f64
}

/// Split-K's serial cycles per wave: every block stores its partial tile
/// and counts its arrival (a fence and an atomic, about two memory
/// latencies), then the last one reads every slice back, half a latency
/// per slice (L2).
fn split_tail(split: Option<Split>, memory_cycles: f64) -> f64 {
    split.map_or(0.0, |s| (2.0 + 0.5 * f64::from(s.slices)) * memory_cycles)
}

/// Split-K's partial tiles: each slice written once and read back once.
fn split_traffic(split: Option<Split>) -> f64 {
    split.map_or(0.0, |s| {
        2.0 * f64::from(s.slices) * f64::from(s.slice_bytes)
    })
}

/// A contraction's grid: its tiles, how blocks walk them, and how many
/// blocks run at once.
#[derive(Debug, Clone, Copy)]
struct Grid {
    block_m: u32,
    block_n: u32,
    block_k: u32,
    group_m: u32,
    /// See [`Walk::shares_b`].
    shares_b: u32,
    /// Blocks resident on all SMs at once.
    wave: u64,
    /// Split-K's partial tiles, written and read back.
    workspace_bytes: f64,
}

/// A contraction's time given its compute time and bound: the slower of
/// that, L2 traffic (each operand read once per block tile across it) and
/// DRAM traffic ([`operand_dram_bytes`] beside the other tensors), with
/// what bounds it.
fn with_memory(
    kernel: &Kernel,
    plan: &MatmulPlan,
    [m, n, k]: [u64; 3],
    grid: Grid,
    compute: (f64, Bound),
    hw: &Hardware,
) -> (f64, Bound) {
    let size =
        |operand: &matmul::MatmulOperand| f64::from(kernel.input(operand.tensor).dtype.size());
    let (a_bytes, b_bytes) = (
        m as f64 * k as f64 * size(&plan.a),
        n as f64 * k as f64 * size(&plan.b),
    );
    let (tiles_m, tiles_n) = (
        m.div_ceil(u64::from(grid.block_m)),
        n.div_ceil(u64::from(grid.block_n)),
    );
    let batch = plan.batch_count(kernel) as f64;
    let a_l2 = a_bytes * tiles_n as f64;
    let b_l2 = b_bytes * tiles_m.div_ceil(u64::from(grid.shares_b)) as f64;
    // A block tile's rows of an operand are runs of contiguous bytes (along
    // `k` or along `m`/`n`, whichever has stride 1); from DRAM, a run
    // shorter than a segment costs a whole one (see DRAM_SEGMENT_BYTES).
    let waste = |operand: &matmul::MatmulOperand, across: u32, extent: u64| {
        let run = if operand.stride_k == 1 {
            u64::from(grid.block_k).min(k)
        } else if operand.stride_x == 1 {
            u64::from(across).min(extent)
        } else {
            1
        };
        (DRAM_SEGMENT_BYTES / (run as f64 * size(operand))).max(1.0)
    };
    let (a_waste, b_waste) = (
        waste(&plan.a, grid.block_m, m),
        waste(&plan.b, grid.block_n, n),
    );
    let l2_s = batch * (a_l2 + b_l2) / (hw.dram_bandwidth * L2_OVER_DRAM);
    let [a_dram, b_dram] = operand_dram_bytes([a_bytes, b_bytes], [tiles_m, tiles_n], grid, hw);
    let rereads =
        batch * ((a_dram.min(a_l2) * a_waste - a_bytes) + (b_dram.min(b_l2) * b_waste - b_bytes));
    let dram_s = (kernel.compulsory_bytes() as f64 + rereads.max(0.0) + grid.workspace_bytes)
        / hw.dram_bandwidth;
    [(l2_s, Bound::L2), (dram_s, Bound::Memory)]
        .into_iter()
        .fold(
            compute,
            |slowest, c| if c.0 > slowest.0 { c } else { slowest },
        )
}

/// The DRAM bytes of A and B for one batch element: an operand that fits
/// half of L2 is read once; a larger one is read again by every wave, which
/// reads the rows of A and the columns of B its blocks cover. Row by row, a
/// wave covers all of B's columns; in groups of `group_m` block rows, a
/// wave covers `group_m` rows and only `wave / group_m` columns.
fn operand_dram_bytes(
    [a_bytes, b_bytes]: [f64; 2],
    [tiles_m, tiles_n]: [u64; 2],
    grid: Grid,
    hw: &Hardware,
) -> [f64; 2] {
    let tiles = tiles_m * tiles_n;
    let wave = grid.wave.clamp(1, tiles);
    let group = u64::from(grid.group_m).min(tiles_m);
    let (rows, columns) = if wave >= group * tiles_n {
        (
            (group * wave.div_ceil(group * tiles_n)).min(tiles_m),
            tiles_n,
        )
    } else {
        (group.min(wave), wave.div_ceil(group))
    };
    let waves = tiles.div_ceil(wave) as f64;
    let fits = |bytes: f64| bytes <= f64::from(hw.l2_bytes) / 2.0;
    let a = if fits(a_bytes) {
        a_bytes
    } else {
        waves * a_bytes * rows as f64 / tiles_m as f64
    };
    let b = if fits(b_bytes) {
        b_bytes
    } else {
        waves * b_bytes * columns as f64 / tiles_n as f64
    };
    [a.max(a_bytes), b.max(b_bytes)]
}

fn tensor_core(product: &Product<'_>, tiles: MmaTiles) -> Estimate {
    let target = product.target;
    let layout = MmaLayout::new(product.kernel, product.plan, tiles, target).expect("validated");
    // With `min_blocks = 1` ptxas may give a thread as many registers as
    // one block leaves it, and takes most (202 to 246 on sm_90 for tiles
    // whose layout estimate is 140 to 208): assume all of them.
    let limits = target.limits();
    let registers = match tiles.min_blocks {
        0 => layout.registers,
        _ => limits
            .max_registers_per_thread
            .min(limits.registers_per_sm / layout.threads),
    };
    let block = Block::new(
        product,
        BlockUsage {
            threads: layout.threads,
            registers,
            shared_bytes: layout.shared_bytes,
        },
        Walk {
            block_m: tiles.block_m,
            block_n: tiles.block_n,
            block_k: tiles.block_k,
            group_m: tiles.group_m,
            split: layout.split,
            k_tiles: layout.k_tiles(),
            fill: tiles.stages > 1,
            persistent: tiles.persistent == 1,
            ping_pong: tiles.producer == 2,
            shares_b: tiles.cluster_m,
        },
    );
    let hw = &block.hw;
    let (bm, bn, bk) = (
        f64::from(tiles.block_m),
        f64::from(tiles.block_n),
        f64::from(tiles.block_k),
    );
    let (wm, wn) = (f64::from(tiles.warp_m), f64::from(tiles.warp_n));
    let warpgroups = tiles.wgmma == 1;
    // Warps, or with `wgmma` warpgroups: the readers of operand tiles.
    let readers = f64::from(tiles.warps());
    let warps = f64::from(layout.threads / 32);

    // One block_k step of one block.
    let peak = match layout.kind {
        MmaKind::F16 | MmaKind::Bf16 => hw.tensor_flops_per_sm_clock,
        MmaKind::Tf32 => hw.tf32_flops_per_sm_clock,
    };
    let mma_rate = f64::from(peak)
        * if target == SmVersion::Sm90 && !warpgroups {
            MMA_SYNC_SM90
        } else {
            1.0
        };
    let mma_cycles = 2.0 * bm * bn * bk / mma_rate;
    // Every warp (warpgroup) reads its A rows and B columns; the copies
    // write both tiles.
    let element = f64::from(layout.a.element_bytes);
    let shared_bytes = (readers * (wm + wn) + bm + bn) * bk * element;
    let shared_cycles = shared_bytes / SHARED_BYTES_PER_CLOCK;
    let k_steps = bk / f64::from(layout.kind.k());
    let copies = f64::from(layout.a.passes + layout.b.passes);
    let issued = if tiles.producer >= 1 {
        // The consumers' warps issue their warpgroup's `wgmma`s and
        // descriptors, the producer's four the copies; in ping-pong one
        // set of consumers a tile.
        let consumers = f64::from((layout.threads - 128) / 32 / tiles.consumer_sets());
        // With `tma = 1` one thread issues a copy a tile or panel.
        let producer = if tiles.tma == 1 {
            3.0 * f64::from(layout.a.panels + layout.b.panels) + 16.0
        } else {
            4.0 * (3.0 * copies + 16.0)
        };
        consumers * ((wm / 64.0) * k_steps * 2.0 + 24.0) + producer
    } else if warpgroups {
        // Each warp issues its warpgroup's `wgmma`s (64 rows each) and
        // their descriptors; no fragments.
        warps * ((wm / 64.0) * k_steps * 2.0 + 3.0 * copies + 24.0)
    } else {
        let mmas = (wm / 16.0) * (wn / 8.0) * k_steps;
        // Fragment reads per k-step: an `ldmatrix.x4` per 16×16 of A and
        // of B, or for tf32 a 32-bit load and a `cvt` per fragment
        // register.
        let fragment_reads = match layout.kind {
            MmaKind::F16 | MmaKind::Bf16 => wm / 16.0 + wn / 16.0,
            MmaKind::Tf32 => 2.0 * (wm / 16.0 * 4.0 + wn / 8.0 * 2.0),
        } * k_steps;
        warps * (mmas + fragment_reads + 3.0 * copies + 16.0)
    };
    let issue_cycles = issued / ISSUE_PER_CLOCK;

    // On sm_90, a scheduler with fewer than `MMA_WARPS_PER_SCHEDULER` warps
    // waits out its fragment loads between `mma`s (`wgmma` loads none).
    let sm_blocks = f64::from(block.resident);
    let per_scheduler = sm_blocks * warps / SCHEDULERS;
    let fed = match target {
        SmVersion::Sm90 if !warpgroups => (per_scheduler / MMA_WARPS_PER_SCHEDULER).min(1.0),
        _ => 1.0,
    };
    let compute = sm_blocks * mma_cycles.max(issue_cycles) / fed;
    let shared = sm_blocks * shared_cycles;
    // `stages - 1` tiles are in flight while one is computed, one fewer
    // when a slot is held for `wgmma`s in flight; with one stage nothing
    // overlaps the copies.
    let memory = block.memory_cycles();
    let latency = match tiles.stages {
        1 => 0.0,
        _ => memory / f64::from(tiles.tiles_in_flight()),
    } + BARRIER_CYCLES;
    let (busy, mut bound) = [
        (compute, Bound::Compute),
        (shared, Bound::SharedMemory),
        (latency, Bound::Latency),
    ]
    .into_iter()
    .fold(
        (0.0, Bound::Compute),
        |best, c| if c.0 > best.0 { c } else { best },
    );
    let step_cycles = if tiles.stages == 1 {
        bound = Bound::Latency;
        busy + memory
    } else {
        busy
    } * padded_rows_slowdown(&layout, target);
    block.estimate(product, (step_cycles, bound))
}

/// [`PADDED_ROWS_SLOWDOWN`] for `mma.sync` tiles of 16-bit operands in
/// padded rows on sm_90, where it was measured; 1 otherwise (tf32 tiles
/// are always padded, `wgmma`'s always swizzled).
fn padded_rows_slowdown(layout: &MmaLayout, target: SmVersion) -> f64 {
    let padded = !layout.a.swizzled && matches!(layout.kind, MmaKind::F16 | MmaKind::Bf16);
    if padded && target == SmVersion::Sm90 {
        PADDED_ROWS_SLOWDOWN
    } else {
        1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::space::candidates;
    use crate::test_kernels::{matmul, matmul_bias_gelu, rows_with, softmax};

    fn seconds(k: &Kernel, s: Schedule) -> f64 {
        estimate(k, &s, SmVersion::Sm90).expect("valid").seconds
    }

    fn mm(block: u32, thread: u32, block_k: u32) -> Schedule {
        Schedule::Matmul(Tiles {
            block_m: block,
            block_n: block,
            block_k,
            thread_m: thread,
            thread_n: thread,
            vector_a: 4,
            vector_b: 4,
            group_m: 1,
            stages: 1,
            split_k: 1,
        })
    }

    fn rows(threads_per_row: u32, rows_per_block: u32, vector: u32) -> Schedule {
        Schedule::Rows {
            threads_per_row,
            rows_per_block,
            vector,
            cache: 0,
            tree: 0,
            online: 0,
            cluster: 1,
        }
    }

    /// A bf16 bias and a GELU take 17 instructions an output: the GELU
    /// 10, the bias's load 6 (address, load, widening), the add 1. A
    /// block alone on its SM issues them between its tiles' products, and
    /// where the products bound the time (a shallow `K`) they add to it;
    /// in ping-pong, beside the other set's products, or beside another
    /// block on the SM, they add nothing.
    #[test]
    fn a_fused_epilogue_costs_where_nothing_multiplies_beside_it() {
        let [fused, plain] = matmul_bias_gelu(4096, 11008, 512);
        let gelu = Model::new(&fused, SmVersion::Sm90).epilogue;
        assert_eq!(gelu, 17.0);
        assert_eq!(Model::new(&plain, SmVersion::Sm90).epilogue, 0.0);
        let coop = MmaTiles {
            block_m: 256,
            block_n: 128,
            block_k: 64,
            warp_m: 128,
            warp_n: 128,
            stages: 4,
            group_m: 8,
            split_k: 1,
            min_blocks: 1,
            swizzle: 1,
            prefetch: 0,
            wgmma: 1,
            tail_split: 1,
            persistent: 1,
            producer: 1,
            tma: 0,
            cluster_m: 1,
        };
        let pong = MmaTiles {
            block_m: 128,
            warp_m: 128,
            producer: 2,
            ..coop
        };
        let extra =
            |t: MmaTiles| seconds(&fused, Schedule::Mma(t)) / seconds(&plain, Schedule::Mma(t));
        assert!(extra(coop) > 1.05, "{}", extra(coop));
        assert!(extra(pong) < 1.01, "{}", extra(pong));
        // 64 × 64 tiles of one warpgroup: several blocks an SM.
        let small = MmaTiles {
            block_m: 64,
            block_n: 64,
            warp_m: 64,
            warp_n: 64,
            stages: 3,
            min_blocks: 0,
            persistent: 0,
            producer: 0,
            ..coop
        };
        let e = estimate(&fused, &Schedule::Mma(small), SmVersion::Sm90).expect("valid");
        assert!(e.occupancy.blocks_per_sm > 1, "{e:?}");
        assert!(extra(small) < 1.01, "{}", extra(small));
    }

    #[test]
    fn every_candidate_has_an_estimate_and_ranks_are_ordered() {
        for k in [softmax(33, 1000), matmul(65, 33, 17)] {
            for target in SmVersion::ALL {
                let points = candidates(&k, target);
                let ranked = rank(&k, target, &points);
                assert_eq!(ranked.len(), points.len());
                assert!(ranked.windows(2).all(|w| w[0].1.seconds <= w[1].1.seconds));
                assert!(
                    ranked
                        .iter()
                        .all(|(_, e)| e.seconds.is_finite() && e.seconds > 0.0)
                );
                assert_eq!(ranked, rank(&k, target, &points));
            }
        }
        let k = matmul(64, 64, 64);
        assert!(estimate(&k, &mm(64, 3, 8), SmVersion::Sm90).is_err());
    }

    #[test]
    fn register_tiles_beat_one_output_per_thread_on_large_products() {
        let k = matmul(4096, 4096, 4096);
        assert!(seconds(&k, mm(128, 8, 16)) < seconds(&k, mm(16, 1, 16)));
        let e = estimate(&k, &mm(128, 8, 16), SmVersion::Sm90).expect("valid");
        assert_ne!(e.bound, Bound::Memory);
        // 2·4096³ FLOPs over three 64 MiB matrices.
        assert!(
            (e.intensity - 2.0 * 4096.0 / 12.0).abs() < 1.0,
            "{}",
            e.intensity
        );
    }

    #[test]
    fn streaming_needs_bytes_in_flight() {
        let k = softmax(8192, 4096);
        // Wide accesses reach more of the bandwidth.
        assert!(seconds(&k, rows(128, 1, 4)) < seconds(&k, rows(128, 1, 1)));
        // One thread per row keeps too few loads in flight.
        let serial = estimate(&k, &rows(1, 32, 4), SmVersion::Sm90).expect("valid");
        assert_eq!(serial.bound, Bound::Latency);
        assert!(seconds(&k, rows(128, 1, 4)) < serial.seconds);
        let best = estimate(&k, &rows(128, 1, 4), SmVersion::Sm90).expect("valid");
        assert_eq!(best.bound, Bound::Memory);
    }

    #[test]
    fn one_pass_rows_save_the_re_reads_and_shared_trees_cost_barriers() {
        for k in [softmax(8192, 1000), softmax(64, 1000), softmax(8192, 4096)] {
            // The heuristic keeps the row, and the model agrees.
            let default = crate::heuristic::heuristic(&k, SmVersion::Sm90);
            assert!(
                matches!(default, Schedule::Rows { cache: 1, .. }),
                "{default:?}"
            );
            let one_pass = estimate(&k, &default, SmVersion::Sm90).expect("valid");
            let passes =
                estimate(&k, &rows_with(default.clone(), 0, 0), SmVersion::Sm90).expect("valid");
            assert!(one_pass.seconds < passes.seconds, "{k:?}");
            assert!(one_pass.registers > passes.registers);
            assert_eq!(one_pass.cached_per_thread, 32);
            assert_eq!(passes.cached_per_thread, 0);
        }
        let k = softmax(8192, 4096);
        assert!(seconds(&k, rows(128, 1, 4)) < seconds(&k, rows_with(rows(128, 1, 4), 0, 1)));
        let tree = estimate(&k, &rows_with(rows(128, 1, 4), 0, 1), SmVersion::Sm90).expect("valid");
        assert_eq!(tree.shared_bytes, 2 * 128 * 4);
    }

    #[test]
    fn fewer_threads_wait_longer_on_a_row_in_shared_memory() {
        // One 201 KB row a block fills an SM's shared memory: each pass
        // over it takes an iteration's wait per value a thread holds, until
        // the row's DRAM time hides them. On the H200, 4096 rows, before
        // the fills copied by `cp.async`: 128 threads 2.18 ms, 256 1.23;
        // on 2026-12-04, with them: 512 0.551 ms, 1,024 0.569 ms.
        let k = softmax(4096, 50257);
        let seconds: Vec<f64> = [128, 256, 512, 1024]
            .map(|t| {
                let point = rows_with(rows(t, 1, 1), 2, 0);
                estimate(&k, &point, SmVersion::Sm90)
                    .expect("valid")
                    .seconds
            })
            .to_vec();
        assert!(seconds[..3].is_sorted_by(|a, b| a > b), "{seconds:?}");
        assert!(seconds[0] > 1.3 * seconds[2], "{seconds:?}");
        assert!((seconds[2] / seconds[3] - 1.0).abs() < 0.05, "{seconds:?}");
    }

    #[test]
    fn a_cluster_spreads_a_kept_row_over_its_blocks() {
        // Rows of 50257 kept in shared memory over a cluster of 4 blocks:
        // four blocks a row, each keeping a quarter of it (plus the
        // cluster's slots for the two reductions), so that two blocks of
        // 1,024 threads share an SM, each with a quarter of the passes'
        // iterations.
        let k = softmax(4096, 50257);
        let spread = |cluster| {
            rows_with(rows(1024, 1, 1), 2, 0)
                .with_knob("cluster", cluster)
                .expect("a rows point")
        };
        let one = estimate(&k, &spread(1), SmVersion::Sm90).expect("valid");
        let four = estimate(&k, &spread(4), SmVersion::Sm90).expect("valid");
        assert_eq!(four.blocks, 4 * one.blocks);
        let quarter = (12_565 * 4u32).next_multiple_of(16);
        assert_eq!(four.shared_bytes, 2 * 32 * 4 + 16 + quarter);
        assert_eq!(
            (one.occupancy.blocks_per_sm, four.occupancy.blocks_per_sm),
            (1, 2)
        );
        // Which is faster is not asserted: the exchange's cost is a guess
        // until a GPU measures clusters.
    }

    #[test]
    fn long_rows_are_read_once_from_shared_memory() {
        // Rows of 50257 f32 values: 201 KB each, too many values for
        // registers; kept in shared memory, one block fills an SM, and is
        // faster than reading the row once for each of its three passes.
        let k = softmax(4096, 50257);
        let kept = rows_with(rows(1024, 1, 1), 2, 0);
        let shared = estimate(&k, &kept, SmVersion::Sm90).expect("valid");
        let passes = estimate(&k, &rows_with(kept, 0, 0), SmVersion::Sm90).expect("valid");
        assert!(shared.seconds < passes.seconds);
        assert_eq!(shared.shared_bytes, 2 * 32 * 4 + 201_040);
        assert_eq!(shared.occupancy.blocks_per_sm, 1);
        assert!(passes.shared_bytes < 1024, "{}", passes.shared_bytes);
        assert_eq!(shared.cached_per_thread, 0);

        // Without a cache, softmax reads its rows again: from L2 while the
        // rows in flight fit it (8192 × 4096), from DRAM when they do not
        // (4096 × 50256: 201 KB for each resident block of 132 SMs).
        let bandwidth = SmVersion::Sm90.hardware().dram_bandwidth;
        for (k, threads, from_dram) in [
            (softmax(8192, 4096), 128, false),
            (softmax(4096, 50256), 512, true),
        ] {
            let e = estimate(&k, &rows(threads, 1, 4), SmVersion::Sm90).expect("valid");
            assert_eq!(e.bound, Bound::Memory);
            let re_read = k.compulsory_bytes() as f64 / 2.0;
            let dram = (k.compulsory_bytes() as f64 + re_read) / bandwidth;
            assert_eq!(e.seconds > dram, from_dram, "{}: {}", k.name, e.seconds);
        }
    }

    #[test]
    fn partial_waves_cost_a_whole_wave() {
        let k = matmul(4096, 4096, 4096);
        let e = estimate(&k, &mm(128, 8, 16), SmVersion::Sm90).expect("valid");
        assert_eq!(e.blocks, 32 * 32);
        let full = f64::from(e.occupancy.blocks_per_sm * 132);
        assert!((e.waves - 1024.0 / full).abs() < 1e-9);
    }

    #[test]
    fn grouped_walks_reread_less_of_operands_larger_than_l2() {
        let grouped = |s: Schedule, group: u32| {
            let mut values = s.knob_values();
            let at = s.kind().knobs().iter().position(|k| *k == "group_m");
            values[at.expect("a contraction knob")] = group;
            s.kind().schedule(&values).expect("same knobs")
        };
        // B (128 MiB) is far larger than L2, and a wave of blocks covers
        // less than one row of 128×128 tiles: row by row, every row of
        // blocks reads all of B from DRAM, which bounds tensor cores.
        let large = bf16_matmul(2048, 65536, 1024);
        let small = bf16_matmul(1024, 1024, 1024);
        for target in [SmVersion::Sm80, SmVersion::Sm90] {
            let point = tc(128, 64, 3);
            let rows = estimate(&large, &point, target).expect("valid");
            assert_eq!(rows.bound, Bound::Memory, "{target}");
            let tiled = seconds_on(&large, grouped(point, 8), target);
            assert!(tiled < rows.seconds, "{target}: {tiled} ≥ {}", rows.seconds);
            // SIMT tiles stay bound by their FFMA work.
            let point = mm(64, 4, 16);
            let rows = seconds_on(&large, point.clone(), target);
            assert!(seconds_on(&large, grouped(point, 8), target) <= rows);
            for point in [tc(64, 32, 3), mm(64, 4, 16)] {
                let rows = seconds_on(&small, point.clone(), target);
                let tiled = seconds_on(&small, grouped(point, 8), target);
                assert_eq!(tiled, rows, "{target}: operands that fit L2");
            }
        }
    }

    #[test]
    fn simt_stages_hide_latency_at_a_cost_in_shared_memory() {
        let k = matmul(4096, 4096, 4096);
        let staged = |s: Schedule, stages: u32| {
            let mut values = s.knob_values();
            let at = s.kind().knobs().iter().position(|k| *k == "stages");
            values[at.expect("a stages knob")] = stages;
            s.kind().schedule(&values).expect("same knobs")
        };
        for target in SmVersion::ALL {
            let point = mm(32, 2, 8);
            let serial = estimate(&k, &point, target).expect("valid");
            assert_eq!(serial.bound, Bound::Latency, "{target}");
            let piped = estimate(&k, &staged(point, 3), target).expect("valid");
            assert!(piped.seconds < serial.seconds, "{target}");
            assert_eq!(piped.shared_bytes, 3 * serial.shared_bytes);
        }
    }

    fn seconds_on(k: &Kernel, s: Schedule, target: SmVersion) -> f64 {
        estimate(k, &s, target).expect("valid").seconds
    }

    fn bf16_matmul(m: u32, n: u32, k: u32) -> Kernel {
        crate::syntax::parse_kernel(
            quote::quote!(shape(M = #m, N = #n, K = #k)),
            quote::quote! {
                fn mm(a: Tensor<bf16, (M, K)>, b: Tensor<bf16, (K, N)>) -> Tensor<bf16, (M, N)> {
                    compute(|m, n| sum(K, |k| a[m][k] * b[k][n]))
                }
            },
        )
        .expect("valid kernel")
    }

    fn tc(block: u32, warp: u32, stages: u32) -> Schedule {
        Schedule::Mma(MmaTiles {
            block_m: block,
            block_n: block,
            block_k: 32,
            warp_m: warp,
            warp_n: warp,
            stages,
            group_m: 1,
            split_k: 1,
            min_blocks: 0,
            swizzle: 0,
            prefetch: 0,
            wgmma: 0,
            tail_split: 1,
            persistent: 0,
            producer: 0,
            tma: 0,
            cluster_m: 1,
        })
    }

    #[test]
    fn tensor_cores_beat_simt_tiles_and_stages_hide_latency() {
        let k = bf16_matmul(4096, 4096, 4096);
        for target in [SmVersion::Sm80, SmVersion::Sm90] {
            let simt = estimate(&k, &mm(128, 8, 16), target).expect("valid");
            let tensor = estimate(&k, &tc(128, 64, 3), target).expect("valid");
            assert!(tensor.seconds < simt.seconds / 2.0, "{target}");
            let serial = estimate(&k, &tc(128, 64, 1), target).expect("valid");
            assert_eq!(serial.bound, Bound::Latency);
            assert!(tensor.seconds < serial.seconds);
        }
        // mma.sync reaches only part of sm_90's tensor peak: less than the
        // 2.8× the peaks and clocks promise over sm_80.
        let a100 = estimate(&k, &tc(128, 64, 3), SmVersion::Sm80).expect("valid");
        let h100 = estimate(&k, &tc(128, 64, 3), SmVersion::Sm90).expect("valid");
        assert!(a100.seconds / h100.seconds < 2.8);
        // The register hint costs a 64×128 tile of 8 warps its second
        // block an SM, and is never estimated faster.
        let tile = |min_blocks| {
            Schedule::Mma(MmaTiles {
                block_m: 64,
                block_n: 128,
                warp_m: 32,
                warp_n: 32,
                min_blocks,
                ..MmaTiles::from_schedule(&tc(128, 64, 3)).expect("an mma point")
            })
        };
        let free = estimate(&k, &tile(0), SmVersion::Sm90).expect("valid");
        let hinted = estimate(&k, &tile(1), SmVersion::Sm90).expect("valid");
        assert_eq!(
            (free.occupancy.blocks_per_sm, hinted.occupancy.blocks_per_sm),
            (2, 1)
        );
        assert_eq!(hinted.registers, 255);
        assert!(hinted.seconds > free.seconds);
        let small = bf16_matmul(65, 40, 40);
        for target in SmVersion::ALL {
            let points = candidates(&small, target);
            assert!(points.iter().any(|p| matches!(p, Schedule::Mma(_))));
            assert_eq!(rank(&small, target, &points).len(), points.len());
        }
    }

    #[test]
    fn padded_rows_cost_measured_time_on_sm90_only() {
        let k = bf16_matmul(4096, 4096, 4096);
        let swizzled = Schedule::Mma(MmaTiles {
            swizzle: 1,
            ..MmaTiles::from_schedule(&tc(128, 64, 3)).expect("an mma point")
        });
        let ratio = |target| {
            let padded = estimate(&k, &tc(128, 64, 3), target).expect("valid");
            let swizzled = estimate(&k, &swizzled, target).expect("valid");
            assert_eq!(
                padded.occupancy.blocks_per_sm, swizzled.occupancy.blocks_per_sm,
                "{target}"
            );
            padded.seconds / swizzled.seconds
        };
        // The slowdown applies to the steps, not the launch.
        let hopper = ratio(SmVersion::Sm90);
        assert!(hopper > 1.15 && hopper <= PADDED_ROWS_SLOWDOWN, "{hopper}");
        assert_eq!(ratio(SmVersion::Sm80), 1.0);
    }

    /// `edit` of warpgroup tiles of 128 × 256 (two warpgroups of 64 × 128,
    /// 4 slots of 64-deep tiles: one block an SM), estimated on `k` on
    /// sm_90.
    fn wide_warpgroups(k: &Kernel, edit: impl FnOnce(MmaTiles) -> MmaTiles) -> Estimate {
        let t = MmaTiles {
            block_n: 256,
            block_k: 64,
            warp_n: 128,
            stages: 4,
            swizzle: 1,
            wgmma: 1,
            ..MmaTiles::from_schedule(&tc(128, 64, 3)).expect("an mma point")
        };
        estimate(k, &Schedule::Mma(edit(t)), SmVersion::Sm90).expect("valid")
    }

    #[test]
    fn a_tail_split_shortens_the_last_wave_of_a_grid_bound_by_its_steps() {
        // 17 × 8 warpgroup tiles of 128 × 256, one block an SM, over a long
        // K: 132 whole tiles, then 4 on 4 of the 132 SMs.
        let k = bf16_matmul(17 * 128, 8 * 256, 16384);
        let point = |tail_split| wide_warpgroups(&k, |t| MmaTiles { tail_split, ..t });
        let [whole, two, four] = [1, 2, 4].map(point);
        // Bound by its steps, which come in waves (not by traffic).
        assert!(
            !matches!(whole.bound, Bound::L2 | Bound::Memory),
            "{whole:?}"
        );
        assert_eq!(whole.occupancy.blocks_per_sm, 1);
        assert_eq!((whole.blocks, two.blocks, four.blocks), (136, 140, 148));
        // Two waves of whole tiles, against one and a half or a quarter,
        // less the reduction's traffic and serial tail.
        let (r2, r4) = (whole.seconds / two.seconds, whole.seconds / four.seconds);
        assert!((1.2..1.34).contains(&r2), "{r2}");
        assert!(r4 > r2 && r4 < 1.6, "{r4}");
    }

    #[test]
    fn persistent_blocks_wait_for_their_rings_first_copies_once() {
        // 34 × 16 warpgroup tiles of 128 × 256, one block an SM: 5 waves
        // over 132 SMs of 8 steps of 64 each.
        let k = bf16_matmul(34 * 128, 16 * 256, 512);
        let point = |persistent| wide_warpgroups(&k, |t| MmaTiles { persistent, ..t });
        let [tile_each, looping] = [0, 1].map(point);
        assert!(
            !matches!(tile_each.bound, Bound::L2 | Bound::Memory),
            "{tile_each:?}"
        );
        assert_eq!((tile_each.blocks, looping.blocks), (544, 544));
        // Four of five fills hidden: about a latency a wave of 8 steps.
        let saved = tile_each.seconds / looping.seconds;
        assert!((1.02..1.15).contains(&saved), "{saved}");
    }

    #[test]
    fn a_wgmma_ring_holding_a_slot_keeps_one_tile_fewer_in_flight() {
        let k = bf16_matmul(4096, 4096, 4096);
        let warpgroup = |stages| {
            Schedule::Mma(MmaTiles {
                block_m: 64,
                block_n: 64,
                warp_m: 64,
                warp_n: 64,
                swizzle: 1,
                wgmma: 1,
                tail_split: 1,
                ..MmaTiles::from_schedule(&tc(64, 64, stages)).expect("an mma point")
            })
        };
        let [two, three, four] =
            [2, 3, 4].map(|s| estimate(&k, &warpgroup(s), SmVersion::Sm90).expect("valid"));
        // Three slots, one held for the tile before's `wgmma`s: one tile in
        // flight, as with two, for more shared memory.
        assert_eq!(two.bound, Bound::Latency);
        assert!(three.seconds >= two.seconds, "{three:?} {two:?}");
        assert!(four.seconds < three.seconds, "{four:?} {three:?}");
        // On warps nothing is held: the third slot is a second tile in
        // flight.
        let [two, three] =
            [2, 3].map(|s| estimate(&k, &tc(64, 32, s), SmVersion::Sm90).expect("valid"));
        assert!(three.seconds < two.seconds, "{three:?} {two:?}");
    }

    /// A cluster of two blocks sharing B's tiles reads B from L2 half as
    /// often: for square 64 × 64 tiles of a square product, whose A and B
    /// each take half of the L2 traffic, three quarters of it in all: the
    /// L2-bound time falls toward that, as far as DRAM's traffic allows.
    #[test]
    fn clusters_sharing_b_read_it_from_l2_once_for_both() {
        let k = bf16_matmul(4096, 4096, 4096);
        let plan = matmul::detect(&k).expect("a contraction");
        let hw = SmVersion::Sm90.hardware();
        let l2 = |shares_b: u32| {
            let grid = Grid {
                block_m: 64,
                block_n: 64,
                block_k: 64,
                group_m: 1,
                shares_b,
                wave: 132,
                workspace_bytes: 0.0,
            };
            with_memory(&k, &plan, [4096; 3], grid, (0.0, Bound::Compute), &hw)
        };
        let (own, shared) = (l2(1), l2(2));
        assert_eq!(own.1, Bound::L2);
        // Then DRAM's traffic may bound it instead.
        let ratio = shared.0 / own.0;
        assert!((0.75 - 1e-9..1.0).contains(&ratio), "{ratio} {shared:?}");
    }

    #[test]
    fn short_rows_of_an_operand_cost_whole_dram_segments() {
        // 16 × 4096 × 4096 bf16: every point streams B from DRAM once.
        let k = bf16_matmul(16, 4096, 4096);
        let tile = |block_n: u32, split_k: u32| {
            Schedule::Mma(MmaTiles {
                block_m: 16,
                block_n,
                block_k: 32,
                warp_m: 16,
                warp_n: 16,
                stages: 3,
                group_m: 1,
                split_k,
                min_blocks: 0,
                swizzle: 0,
                prefetch: 0,
                wgmma: 0,
                tail_split: 1,
                persistent: 0,
                producer: 0,
                tma: 0,
                cluster_m: 1,
            })
        };
        let narrow = estimate(&k, &tile(16, 4), SmVersion::Sm90).unwrap();
        let wide = estimate(&k, &tile(64, 16), SmVersion::Sm90).unwrap();
        // Both fill the GPU (1024 blocks); rows of B 32 bytes long cost 64.
        assert_eq!((narrow.blocks, wide.blocks), (1024, 1024));
        assert_eq!(narrow.bound, Bound::Memory);
        let ratio = narrow.seconds / wide.seconds;
        assert!((1.5..2.5).contains(&ratio), "{ratio}");
    }
}
