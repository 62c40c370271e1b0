//! What the two contraction estimates, `simt` and `tensor_core`, share:
//! the blocks an SM holds and how the cycles of their `block_k` step
//! become the kernel's time (`Block`), and the operands' L2 and DRAM
//! traffic.
//!
//! - **Waves**: steps are repeated over `K` and blocks in whole waves over
//!   the SMs, so a grid that leaves SMs idle in its last wave pays for it.
//! - **L2 traffic**: each operand is read once per block tile across it;
//!   with `cluster_m = 2` the two blocks of a cluster read each of B's
//!   tiles once between them (its DRAM traffic is left as it is: the
//!   pair's reads of a tile came one after the other anyway).
//! - **DRAM traffic**: an operand larger than half of L2 is re-read from
//!   DRAM by every wave, as much of it as the wave's blocks cover: row by
//!   row (`group_m = 1`) a wave covers all of B, in groups of `group_m`
//!   block rows only `wave / group_m` columns of it (and `group_m` rows of
//!   A), which is how the grouped walk pays off on large grids.
//! - **Split-K** (`split_k` above 1) multiplies a contraction's blocks and
//!   divides each one's steps over `K`: a grid too small to fill the SMs
//!   fills more of them. It costs the partial tiles' traffic (each slice
//!   written once and read back once, counted as DRAM bytes) and, per
//!   wave, a serial tail: the store, fence and atomic of every block and
//!   the last block's read of every slice.
//! - **A tail split** (`tail_split` above 1) cuts only the last partial
//!   wave's tiles: the whole tiles' waves take their full steps, then the
//!   split tiles' slices run in waves of their own, a slice's steps and
//!   split-K's serial tail each, with split-K's traffic for those tiles.
//! - **A tensor-core ring's fill**: a block waits a memory latency for its
//!   ring's first copies before its first step (rings of several slots;
//!   one slot waits every step). A persistent block (`persistent = 1`)
//!   copies them for its next tile during the epilogue of the one before,
//!   so only its first tile waits.
//! - **The epilogue** beyond a plain product's (the output's expression
//!   around the reduction: a bf16 bias and a GELU about 17 instructions
//!   an output, counted about as `lower::expr` emits them) holds an SM's
//!   products back for its warp instructions at the issue rate where one
//!   block runs alone on the SM; beside another block, or in ping-pong,
//!   it runs while other warps multiply and costs nothing.

pub(super) mod simt;
pub(super) mod tensor_core;

use crate::ir::{BinaryOp, Expr, ExprId, Kernel, LetId};
use crate::lower::expr;
use crate::lower::matmul::{self, MatmulPlan, Split};
use crate::occupancy::{BlockUsage, Occupancy, occupancy};
use crate::ptx::Builder;
use crate::ptx::inst::{Addr, Op, RegClass, Space};
use crate::target::{Hardware, SmVersion};

use super::{Bound, Estimate, ISSUE_PER_CLOCK, L2_OVER_DRAM, LAUNCH_S, MEMORY_LATENCY_S};

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

/// What every estimate of one contraction's points shares.
pub(super) struct Product<'p> {
    pub(super) kernel: &'p Kernel,
    pub(super) plan: &'p MatmulPlan,
    pub(super) target: SmVersion,
    pub(super) intensity: f64,
    /// Its epilogue's instructions an output ([`epilogue_instructions`]).
    pub(super) epilogue: f64,
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
pub(super) fn epilogue_instructions(kernel: &Kernel, plan: &MatmulPlan) -> f64 {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lower::matmul::mma::MmaTiles;
    use crate::model::tests::{bf16_matmul, mm, seconds, seconds_on, tc};
    use crate::model::{Model, estimate};
    use crate::schedule::Schedule;
    use crate::test_kernels::{matmul, matmul_bias_gelu};

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
