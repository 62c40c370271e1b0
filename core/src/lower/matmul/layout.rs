//! Checking a schedule against a contraction and a target, and deriving
//! everything the emitter needs from it.

use super::output::check_group;
use super::pipeline::MAX_STAGES;
use super::split::{self, Extents, Split};
use super::{MatmulOperand, MatmulPlan, Side, Tiles};
use crate::dtype::DType;
use crate::ir::Kernel;
use crate::lower::{Constraint, Violation, check_block};
use crate::target::SmVersion;

/// Shared-memory padding (in f32 elements) of a tile staged with a
/// transposing store, against bank conflicts; a multiple of 4 keeps rows
/// 16-byte aligned.
const TRANSPOSE_PAD: u32 = 4;

/// The register budget a schedule's estimate must fit.
const REGISTER_BUDGET: u32 = 200;

/// How one operand's tile travels from global to shared memory.
///
/// The tile is `block_x × block_k` (`x` is `m` for A, `n` for B) and lands in
/// shared memory as `[block_k][row]` f32, `row = block_x + pad`. Threads read
/// it from global memory in `rows × cols` order, `cols` along the operand's
/// contiguous dimension, `vector` elements per access, consecutive threads
/// on consecutive vectors (coalesced).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Staging {
    pub dtype: DType,
    /// Whether global `cols` run along `k` (the operand is `k`-contiguous,
    /// like `x[m][k]` or `w[n][k]`): the store to shared memory transposes.
    pub k_major: bool,
    pub vector: u32,
    pub block_x: u32,
    /// f32 elements per shared-memory row (one `k`).
    pub row: u32,
    /// Byte offset of the tile in the dynamic shared-memory window.
    pub offset: u32,
    pub rows: u32,
    /// Vectors per global row.
    pub cols: u32,
    /// Accesses per thread per tile.
    pub passes: u32,
    /// Whether only the first `rows · cols` threads take part (when the tile
    /// has fewer vectors than the block has threads).
    pub partial: bool,
}

impl Staging {
    fn bytes(&self, block_k: u32) -> u32 {
        (block_k * self.row * 4).next_multiple_of(16)
    }

    /// Rows and columns (in elements) a pass moves on from pass 0.
    pub fn pass_step(&self, pass: u32, threads: u32) -> (u32, u32) {
        let units = pass * threads;
        (units / self.cols, (units % self.cols) * self.vector)
    }

    /// `cp.async` copies per thread per tile: one per access, or one per
    /// element when the store transposes.
    pub fn copies(&self) -> u32 {
        self.passes * if self.k_major { self.vector } else { 1 }
    }

    /// Registers live while a tile is in flight.
    fn staged_registers(&self) -> u32 {
        let raw = if self.dtype == DType::F32 {
            0
        } else {
            self.vector.div_ceil(2)
        };
        self.passes * (self.vector + raw + 2)
    }
}

/// Everything the emitter needs, derived from a checked schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    pub tiles: Tiles,
    pub threads: u32,
    /// Threads along `n` and along `m`.
    pub threads_n: u32,
    pub threads_m: u32,
    /// Elements per shared-memory vector read of A and B fragments.
    pub frag_m: u32,
    pub frag_n: u32,
    pub a: Staging,
    pub b: Staging,
    /// Bytes of one ring slot (both tiles); the whole window with one stage.
    pub slot_bytes: u32,
    pub shared_bytes: u32,
    /// Registers per thread, as estimated when checking the tiles.
    pub registers: u32,
    pub m_extent: u32,
    pub n_extent: u32,
    pub k_extent: u32,
    /// How `K` is cut, with `split_k` above 1.
    pub split: Option<Split>,
}

impl Layout {
    pub fn new(
        kernel: &Kernel,
        plan: &MatmulPlan,
        tiles: Tiles,
        target: SmVersion,
    ) -> Result<Layout, Violation> {
        let Tiles {
            block_m,
            block_n,
            block_k,
            thread_m,
            thread_n,
            ..
        } = tiles;
        for (name, value, max) in [
            ("block_m", block_m, 256),
            ("block_n", block_n, 256),
            ("block_k", block_k, 64),
            ("thread_m", thread_m, 16),
            ("thread_n", thread_n, 16),
        ] {
            if !value.is_power_of_two() || value > max {
                return Err(Violation::new(
                    Constraint::Range,
                    format!("{name} = {value}; expected a power of two up to {max}"),
                ));
            }
        }
        check_group(tiles.group_m, block_m, kernel.extent(plan.m))?;
        let stages = tiles.stages;
        if !(1..=MAX_STAGES).contains(&stages) {
            return Err(Violation::new(
                Constraint::Range,
                format!("stages = {stages}; expected 1 to {MAX_STAGES}"),
            ));
        }
        if stages > 1 && !target.has_async_copy() {
            return Err(Violation::new(
                Constraint::Range,
                format!("stages = {stages} needs cp.async, which {target} lacks"),
            ));
        }
        let k_extent = kernel.extent(plan.k);
        let grid = u64::from(kernel.extent(plan.m).div_ceil(block_m))
            * u64::from(kernel.extent(plan.n).div_ceil(block_n))
            * plan.batch_count(kernel);
        let split = Split::new(
            tiles.split_k,
            Extents {
                k_extent,
                block_k,
                grid,
                tile_values: block_m * block_n,
            },
        )?;
        if thread_m > block_m || thread_n > block_n {
            return Err(Violation::new(
                Constraint::Tiling,
                format!(
                    "a thread's {thread_m}×{thread_n} outputs do not fit the {block_m}×{block_n} block tile"
                ),
            ));
        }
        let threads = tiles.threads();
        check_block(threads, target).map_err(|v| Violation {
            reason: format!("(block_m/thread_m)·(block_n/thread_n) gives {}", v.reason),
            ..v
        })?;

        let a = staging(kernel, plan, Side::A, tiles, threads)?;
        let b = staging(kernel, plan, Side::B, tiles, threads)?;
        if stages > 1 {
            for (name, side) in [("A", Side::A), ("B", Side::B)] {
                copyable(kernel, side.operand(plan), name, stages)?;
            }
        }
        let b = Staging {
            offset: a.bytes(block_k),
            ..b
        };
        let slot_bytes = b.offset + b.bytes(block_k);
        let shared_bytes = stages * slot_bytes;
        let max_shared = target.limits().max_shared_per_block;
        if shared_bytes > max_shared {
            let tiles = match stages {
                1 => "the A and B tiles".to_string(),
                s => format!("{s} stages of the A and B tiles"),
            };
            return Err(Violation::new(
                Constraint::SharedMemory,
                format!(
                    "{tiles} need {shared_bytes} bytes of shared memory; {target} allows {max_shared} per block"
                ),
            ));
        }
        // Accumulators live throughout; fragments (two steps' worth, as
        // ptxas overlaps them) and staged tiles take turns. Copies hold no
        // values: a source size per pass, and the ring's two slot offsets.
        let staged = match stages {
            1 => a.staged_registers() + b.staged_registers(),
            _ => a.passes + b.passes + 2,
        };
        let registers = thread_m * thread_n + (2 * (thread_m + thread_n)).max(staged) + 24;
        let budget = REGISTER_BUDGET.min(target.limits().registers_per_sm / threads);
        if registers > budget {
            return Err(Violation::new(
                Constraint::Registers,
                format!(
                    "an estimated {registers} registers per thread ({} accumulators); at most {budget} fit with {threads} threads",
                    thread_m * thread_n
                ),
            ));
        }
        Ok(Layout {
            tiles,
            threads,
            threads_n: block_n / thread_n,
            threads_m: block_m / thread_m,
            frag_m: thread_m.min(4),
            frag_n: thread_n.min(4),
            a,
            b,
            slot_bytes,
            shared_bytes,
            registers,
            m_extent: kernel.extent(plan.m),
            n_extent: kernel.extent(plan.n),
            k_extent,
            split,
        })
    }

    /// `K` tiles each block's loop runs over: all of them, or its slice's.
    pub fn k_tiles(&self) -> u32 {
        split::k_tiles(self.split, self.k_extent, self.tiles.block_k)
    }

    /// Whether the tiles the blocks run over reach past `K` (so loads
    /// need a `k` guard).
    pub fn k_overhangs(&self) -> bool {
        split::k_overhangs(self.split, self.k_extent, self.tiles.block_k)
    }
}

/// Checks that `cp.async` can stage an operand: it copies bytes, so the
/// tile must be the tensor's f32 elements themselves (no widening, no
/// prologue); the transposing store copies them one by one.
fn copyable(
    kernel: &Kernel,
    operand: &MatmulOperand,
    name: &str,
    stages: u32,
) -> Result<(), Violation> {
    let dtype = kernel.input(operand.tensor).dtype;
    let why = if dtype != DType::F32 {
        format!("widens {name}'s {dtype} elements to f32")
    } else if operand.value != operand.load {
        format!("applies a prologue to {name}")
    } else {
        return Ok(());
    };
    Err(Violation::new(
        Constraint::Operands,
        format!(
            "stages = {stages} copies tiles with cp.async, which moves bytes unchanged, but staging {why}"
        ),
    ))
}

/// Chooses how an operand is staged and checks its vector width.
fn staging(
    kernel: &Kernel,
    plan: &MatmulPlan,
    side: Side,
    tiles: Tiles,
    threads: u32,
) -> Result<Staging, Violation> {
    let operand = side.operand(plan);
    let (name, block_x, x_extent, vector) = match side {
        Side::A => ("A", tiles.block_m, kernel.extent(plan.m), tiles.vector_a),
        Side::B => ("B", tiles.block_n, kernel.extent(plan.n), tiles.vector_b),
    };
    let block_k = tiles.block_k;
    let dtype = kernel.input(operand.tensor).dtype;
    let k_extent = kernel.extent(plan.k);
    // A dimension of extent 1 never moves the address: its stride is moot.
    let live = |stride: u64, extent: u32| if extent > 1 { stride } else { 0 };
    let (sx, sk) = (
        live(operand.stride_x, x_extent),
        live(operand.stride_k, k_extent),
    );
    let k_major = match (sk, sx) {
        (1, _) => true,
        (_, 1) => false,
        (0, _) => false,
        (_, 0) => true,
        (sk, sx) => sk <= sx,
    };
    let (contiguous, extent, tile) = if k_major {
        (sk, k_extent, block_k)
    } else {
        (sx, x_extent, block_x)
    };
    let max_vector = 16 / dtype.size();
    if !vector.is_power_of_two() || vector > max_vector {
        return Err(Violation::new(
            Constraint::Range,
            format!(
                "vector_{} = {vector}; expected 1, 2, 4{} for {dtype} elements",
                name.to_lowercase(),
                if max_vector == 8 { " or 8" } else { "" }
            ),
        ));
    }
    if vector > 1 {
        let why = if contiguous > 1 {
            Some(format!(
                "{name} is not contiguous along {}",
                if k_major { "k" } else { "its row" }
            ))
        } else if !extent.is_multiple_of(vector) {
            Some(format!(
                "its contiguous extent {extent} is not a multiple of {vector}"
            ))
        } else if !tile.is_multiple_of(vector) {
            Some(format!(
                "the tile's contiguous extent {tile} is not a multiple of {vector}"
            ))
        } else {
            let strides = std::iter::once((operand.stride_x, x_extent))
                .chain(std::iter::once((operand.stride_k, k_extent)))
                .chain(
                    operand
                        .stride_batch
                        .iter()
                        .zip(&plan.batch)
                        .map(|(s, v)| (*s, kernel.extent(*v))),
                );
            strides
                .filter(|(s, e)| *e > 1 && *s != 1)
                .any(|(s, _)| !s.is_multiple_of(u64::from(vector)))
                .then(|| format!("a stride of {name} is not a multiple of {vector}"))
        };
        if let Some(why) = why {
            return Err(Violation::new(
                Constraint::Alignment,
                format!(
                    "vector_{} = {vector} needs aligned {vector}-element runs, but {why}",
                    name.to_lowercase()
                ),
            ));
        }
    }
    let (rows, cols) = if k_major {
        (block_x, block_k / vector)
    } else {
        (block_k, block_x / vector)
    };
    let units = rows * cols;
    Ok(Staging {
        dtype,
        k_major,
        vector,
        block_x,
        row: block_x + if k_major { TRANSPOSE_PAD } else { 0 },
        offset: 0,
        rows,
        cols,
        passes: units.div_ceil(threads),
        partial: units < threads,
    })
}
