//! The contraction (matrix product) lowering.
//!
//! A kernel is a contraction when its value is an elementwise *epilogue* of
//! one `sum(K, |k| a · b)` (or `mean`), where `a` reads one tensor indexed by
//! `k`, the output variable `m` and batch variables, and `b` one tensor
//! indexed by `k`, the output variable `n` and batch variables ([`detect`]).
//! Any layout works (`x[m][k]`, `x[k][m]`, `w[k][n]`, `w[n][k]`, batched,
//! broadcast over a batch variable); the plan records each operand's element
//! strides.
//!
//! The schedule ([`Tiles`]): a block computes a `block_m × block_n` tile of
//! one batch element; its `(block_m / thread_m) · (block_n / thread_n)`
//! threads each hold `thread_m × thread_n` accumulators in registers. The
//! main loop walks `K` in steps of `block_k`: the block stages an A tile and
//! a B tile in shared memory (as f32, `k`-major, so that the inner product
//! reads contiguous runs), synchronizes, and every thread runs `block_k`
//! unrolled rank-1 updates of its accumulators. Out-of-range elements are
//! staged as zeros, so any shape is computed exactly; the epilogue then
//! evaluates the kernel's root for each in-range output element with the
//! accumulator standing for the reduction.
//!
//! The code is split by pass: [`detect`] (the plan), the checks of a
//! schedule (here, [`Layout`]), `stage` (moving tiles from global to shared
//! memory), `emit` (the rest of the instruction list), `heuristic` (the
//! default schedule).

mod detect;
mod emit;
mod heuristic;
mod stage;
#[cfg(test)]
mod tests;

use super::{Lowered, check_block};
use crate::dtype::DType;
use crate::ir::{ExprId, Kernel, TensorId, VarId};
use crate::schedule::Schedule;
use crate::target::SmVersion;

pub use heuristic::heuristic;

/// How a contraction kernel maps onto `C[batch][m][n] = Σ_k A[batch][m][k] ·
/// B[batch][k][n]`, followed by an epilogue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatmulPlan {
    /// The `sum` (or `mean`) node; the epilogue reads the accumulator here.
    pub reduce: ExprId,
    /// Whether the reduction is a mean (the accumulator is scaled by `1/K`).
    pub mean: bool,
    pub m: VarId,
    pub n: VarId,
    /// The reduction variable.
    pub k: VarId,
    /// The other output variables, in output order (broadcast operands have
    /// stride 0 along them).
    pub batch: Vec<VarId>,
    /// The operand indexed by `m`.
    pub a: MatmulOperand,
    /// The operand indexed by `n`.
    pub b: MatmulOperand,
}

/// One factor of the product.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatmulOperand {
    pub tensor: TensorId,
    /// The `Load` node.
    pub load: ExprId,
    /// The factor: the load itself, or an elementwise prologue of it (a cast,
    /// a scale), applied while staging.
    pub value: ExprId,
    /// Element stride along this operand's output variable (`m` for A, `n`
    /// for B).
    pub stride_x: u64,
    /// Element stride along `k`.
    pub stride_k: u64,
    /// Element stride along each of [`MatmulPlan::batch`] (0 when broadcast).
    pub stride_batch: Vec<u64>,
}

/// Recognizes a contraction; `None` for every other kernel.
pub fn detect(kernel: &Kernel) -> Option<MatmulPlan> {
    detect::detect(kernel)
}

impl MatmulPlan {
    pub fn m_extent(&self, kernel: &Kernel) -> u32 {
        kernel.extent(self.m)
    }

    pub fn n_extent(&self, kernel: &Kernel) -> u32 {
        kernel.extent(self.n)
    }

    pub fn k_extent(&self, kernel: &Kernel) -> u32 {
        kernel.extent(self.k)
    }

    /// The number of independent matrix products.
    pub fn batch_count(&self, kernel: &Kernel) -> u64 {
        self.batch
            .iter()
            .map(|v| u64::from(kernel.extent(*v)))
            .product()
    }
}

/// The knobs of [`Schedule::Matmul`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tiles {
    pub block_m: u32,
    pub block_n: u32,
    pub block_k: u32,
    pub thread_m: u32,
    pub thread_n: u32,
    /// Elements per global load of A (1, 2, 4, or 8 for 16-bit types).
    pub vector_a: u32,
    /// Elements per global load of B.
    pub vector_b: u32,
}

impl Tiles {
    pub fn from_schedule(schedule: &Schedule) -> Option<Tiles> {
        match *schedule {
            Schedule::Matmul {
                block_m,
                block_n,
                block_k,
                thread_m,
                thread_n,
                vector_a,
                vector_b,
            } => Some(Tiles {
                block_m,
                block_n,
                block_k,
                thread_m,
                thread_n,
                vector_a,
                vector_b,
            }),
            _ => None,
        }
    }

    pub fn to_schedule(self) -> Schedule {
        Schedule::Matmul {
            block_m: self.block_m,
            block_n: self.block_n,
            block_k: self.block_k,
            thread_m: self.thread_m,
            thread_n: self.thread_n,
            vector_a: self.vector_a,
            vector_b: self.vector_b,
        }
    }

    pub fn threads(self) -> u32 {
        (self.block_m / self.thread_m.max(1)) * (self.block_n / self.thread_n.max(1))
    }
}

/// Lowers a contraction with the given tiles, after checking them.
pub(super) fn lower(
    kernel: &Kernel,
    plan: &MatmulPlan,
    tiles: Tiles,
    target: SmVersion,
) -> Result<Lowered, String> {
    let layout = Layout::new(kernel, plan, tiles, target)?;
    Ok(emit::emit(kernel, plan, &layout))
}

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
pub(super) struct Staging {
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
pub(super) struct Layout {
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
    pub shared_bytes: u32,
    pub m_extent: u32,
    pub n_extent: u32,
    pub k_extent: u32,
}

impl Layout {
    fn new(
        kernel: &Kernel,
        plan: &MatmulPlan,
        tiles: Tiles,
        target: SmVersion,
    ) -> Result<Layout, String> {
        let Tiles {
            block_m,
            block_n,
            block_k,
            thread_m,
            thread_n,
            vector_a,
            vector_b,
        } = tiles;
        for (name, value, max) in [
            ("block_m", block_m, 256),
            ("block_n", block_n, 256),
            ("block_k", block_k, 64),
            ("thread_m", thread_m, 16),
            ("thread_n", thread_n, 16),
        ] {
            if !value.is_power_of_two() || value > max {
                return Err(format!(
                    "{name} = {value}; expected a power of two up to {max}"
                ));
            }
        }
        if thread_m > block_m || thread_n > block_n {
            return Err(format!(
                "a thread's {thread_m}×{thread_n} outputs do not fit the {block_m}×{block_n} block tile"
            ));
        }
        let threads = tiles.threads();
        check_block(threads, target)
            .map_err(|e| format!("(block_m/thread_m)·(block_n/thread_n) gives {e}"))?;

        let a = staging(
            kernel,
            &plan.a,
            "A",
            block_m,
            kernel.extent(plan.m),
            plan,
            tiles.block_k,
            vector_a,
            threads,
        )?;
        let b = staging(
            kernel,
            &plan.b,
            "B",
            block_n,
            kernel.extent(plan.n),
            plan,
            tiles.block_k,
            vector_b,
            threads,
        )?;
        let b = Staging {
            offset: a.bytes(block_k),
            ..b
        };
        let shared_bytes = b.offset + b.bytes(block_k);
        let max_shared = target.limits().max_shared_per_block;
        if shared_bytes > max_shared {
            return Err(format!(
                "the A and B tiles need {shared_bytes} bytes of shared memory; {target} allows {max_shared} per block"
            ));
        }
        // Accumulators live throughout; fragments (two steps' worth, as
        // ptxas overlaps them) and staged tiles take turns.
        let registers = thread_m * thread_n
            + (2 * (thread_m + thread_n)).max(a.staged_registers() + b.staged_registers())
            + 24;
        let budget = REGISTER_BUDGET.min(target.limits().registers_per_sm / threads);
        if registers > budget {
            return Err(format!(
                "an estimated {registers} registers per thread ({} accumulators); at most {budget} fit with {threads} threads",
                thread_m * thread_n
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
            shared_bytes,
            m_extent: kernel.extent(plan.m),
            n_extent: kernel.extent(plan.n),
            k_extent: kernel.extent(plan.k),
        })
    }
}

/// Chooses how an operand is staged and checks its vector width.
#[allow(clippy::too_many_arguments)]
fn staging(
    kernel: &Kernel,
    operand: &MatmulOperand,
    name: &str,
    block_x: u32,
    x_extent: u32,
    plan: &MatmulPlan,
    block_k: u32,
    vector: u32,
    threads: u32,
) -> Result<Staging, String> {
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
        return Err(format!(
            "vector_{} = {vector}; expected 1, 2, 4{} for {dtype} elements",
            name.to_lowercase(),
            if max_vector == 8 { " or 8" } else { "" }
        ));
    }
    if vector > 1 {
        let why = if contiguous > 1 {
            Some(format!(
                "{name} is not contiguous along {}",
                if k_major { "k" } else { "its row" }
            ))
        } else if extent % vector != 0 {
            Some(format!(
                "its contiguous extent {extent} is not a multiple of {vector}"
            ))
        } else if tile % vector != 0 {
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
                .any(|(s, _)| s % u64::from(vector) != 0)
                .then(|| format!("a stride of {name} is not a multiple of {vector}"))
        };
        if let Some(why) = why {
            return Err(format!(
                "vector_{} = {vector} needs aligned {vector}-element runs, but {why}",
                name.to_lowercase()
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
