//! The contraction (matrix product) lowering.
//!
//! # What is a contraction ([`detect`](fn@detect))
//!
//! The kernel's root, looking through lets, contains exactly one reduction,
//! a `sum` (or `mean`) over `k` of a product `a · b` (either order). Each
//! factor reads exactly one tensor, possibly through an elementwise
//! *prologue* of constants and that one load (`x[m][k] as f32`,
//! `0.5 * w[k][n]`), indexed by `k` and output variables only. The output
//! variables only `a` reads are its rows: `m` is the output's contiguous
//! one if it is among them, else the largest (ties: the last); likewise `n`
//! for `b`. When the output's contiguous variable is one of the first
//! factor's rows, the factors swap, so that `n` (which threads walk
//! fastest) is the contiguous one. Every other output variable is a batch
//! variable, read by both factors, by one (broadcast), or by neither. Each
//! factor must have rows of its own: a matrix-vector product is not a
//! contraction here (the rows class streams it).
//!
//! The *epilogue* is the root itself, evaluated per output element with the
//! accumulator standing for the reduction: any elementwise expression,
//! lets (including one that holds the reduction), and loads indexed by
//! output variables (a bias `b[n]`, a residual `r[m][n]`).
//!
//! # The schedule ([`Tiles`])
//!
//! A block computes a `block_m × block_n` tile of one batch element (blocks
//! are numbered along `n`, then `m`, then the batch, in `ctaid.x`, when
//! `group_m` is 1; see below); its
//! `(block_m / thread_m) · (block_n / thread_n)` threads each hold
//! `thread_m × thread_n` accumulators in registers. The main loop walks `K`
//! in steps of `block_k`: the block stages an A tile and a B tile in shared
//! memory as f32, `k`-major (`[k][m]`, `[k][n]`, so that the inner product
//! reads contiguous runs), synchronizes, and every thread runs `block_k`
//! unrolled rank-1 updates of its accumulators. Global loads are coalesced
//! along each operand's contiguous dimension, `vector_a`/`vector_b`
//! elements at a time. Elements past `K` are staged as zeros and rows past
//! `M` or `N` repeat the last row (they only feed outputs that are never
//! stored), so any shape is computed exactly.
//!
//! Vector widths above 1 assume tensors start on 16-byte boundaries (as
//! every CUDA allocation does); the output stores `thread_n.min(4)`
//! elements at once when `n` is contiguous and the extents keep them
//! aligned.
//!
//! # Pipelining (`stages`)
//!
//! With `stages = 1` the tiles go through registers: the loads of one tile
//! are in flight together, then the block waits for them, stores, and
//! computes. With `stages = s` above 1 (sm_80 and newer) the tiles are
//! copied by `cp.async` into a ring of `s` shared-memory slots, `s - 1`
//! tiles ahead of the one computed on, one commit group per tile, and the
//! block waits (`cp.async.wait_group s-2`, then `bar.sync`) only for the
//! tile it is about to compute on (`pipeline`, the tensor-core path's
//! loop). A copy moves `vector` elements at once (`cp.async.cg` for 16
//! bytes, `.ca` for 4 or 8), or one element at a time when the tile is
//! transposed into shared memory (`k`-contiguous operands); elements past
//! `K`, and rows past `M` or `N` (their addresses the last row's, as above), are
//! zero-filled by the copy's source size, so nothing outside the operands
//! is read. Copies move bytes unchanged: they cannot widen a
//! 16-bit operand to the f32 tile or apply a prologue, so such operands
//! keep one stage ([`Constraint::Operands`](crate::lower::Constraint)).
//! The ring costs `s` times the tiles' shared memory.
//!
//! # The grid's walk (`group_m`)
//!
//! Blocks run roughly in `ctaid.x` order, so the blocks resident at once
//! share whatever operand tiles their numbering makes them share. Row by
//! row (`group_m = 1`), a wave covers a few block rows and every block
//! column: all of B passes through L2 for each few rows of A. With
//! `group_m = g`, each batch element's tiles are walked in groups of `g`
//! block rows, down a group's `g` rows before moving to the next column
//! (the grouped ordering of Triton's matmul tutorial): a wave covers `g`
//! rows and `wave / g` columns, so both operands' tiles are re-read from
//! L2 rather than DRAM. The last group has the rows that remain (`M`'s
//! block rows need not be a multiple of `g`). A group as tall as the grid
//! would walk it column by column; the lowering takes `g` below the block
//! row count ([`Constraint::Tiling`](crate::lower::Constraint)).
//!
//! # Split-K (`split_k`)
//!
//! A grid of few output tiles (decode shapes, `M` up to 16) leaves most SMs
//! idle while each block walks a long `K`. With `split_k = s` above 1 the
//! grid has `s` blocks per tile along `%ctaid.y` (`ctaid.x` keeps the tile
//! and batch numbering above), block `y` walking its own contiguous slice
//! of `⌈tiles / s⌉` `K` tiles; the blocks store partial tiles in a global
//! workspace ([`Launch::workspace_bytes`](crate::lower::Launch)) and the
//! last of each tile's blocks to arrive (an atomic counter per tile) adds
//! them up in slice order, runs the epilogue on the sum and resets the
//! counter (`split`). Prologues are unaffected: each slice stages its
//! operands as any tile. A point whose last slice would lie wholly past
//! `K` is rejected ([`Constraint::Split`](crate::lower::Constraint)). The
//! tensor-core path splits `K` the same way.
//!
//! A large grid's last wave over the SMs is often partial: 1376 tiles of
//! 128 × 256 over 132 SMs run 10 whole waves and 56 tiles, which take a
//! whole tile's time while 76 SMs idle. A tensor-core point's `tail_split
//! = s` computes the first `tiles - tiles % sm_count` tiles whole and
//! splits each of the rest `s` ways along `K`, their slices' blocks after
//! the whole tiles' along `%ctaid.x`, added up as split-K's are (`split`).
//!
//! # Tensor cores ([`mma`])
//!
//! Contractions of f16 or bf16 tensors also have a tensor-core lowering
//! ([`Schedule::Mma`]): `mma.sync` on `ldmatrix` fragments, tiles moved by
//! multi-stage `cp.async`. It shares the plan, the block numbering and the
//! epilogue (`output`) with the SIMT lowering.
//!
//! The code is split by pass: `detect` (the plan), `layout` (checking a
//! schedule against the kernel and the target), `stage` (moving tiles from
//! global to shared memory), `pipeline` (the `k` loop over a ring of
//! `cp.async` stages, shared with [`mma`]), `emit` (the rest of the
//! instruction list),
//! `output` (the block's tile and the epilogue, shared with [`mma`]),
//! `split` (split-K's slices, workspace and reduction), `heuristic` (the
//! default schedule).

mod detect;
mod emit;
mod heuristic;
pub(crate) mod layout;
pub mod mma;
mod output;
mod pipeline;
mod split;
mod stage;
#[cfg(test)]
mod tests;

use super::{Lowered, Violation};
use crate::ir::{ExprId, Kernel, TensorId, VarId};
use crate::schedule::Schedule;
pub use crate::schedule::Tiles;
use crate::target::SmVersion;

pub use heuristic::{heuristic, portable};
pub(crate) use layout::Layout;
use layout::Staging;
pub(crate) use pipeline::MAX_STAGES;
pub(crate) use split::Split;
pub use split::{split_k_values, tail_split_values};

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
    /// Element stride along `k` (0 when `K = 1`).
    pub stride_k: u64,
    /// Element stride along each of [`MatmulPlan::batch`] (0 when broadcast).
    pub stride_batch: Vec<u64>,
}

/// One of the two factors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    A,
    B,
}

impl Side {
    fn operand(self, plan: &MatmulPlan) -> &MatmulOperand {
        match self {
            Side::A => &plan.a,
            Side::B => &plan.b,
        }
    }
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

impl Tiles {
    pub fn from_schedule(schedule: &Schedule) -> Option<Tiles> {
        match schedule {
            Schedule::Matmul(tiles) => Some(*tiles),
            _ => None,
        }
    }

    pub fn to_schedule(self) -> Schedule {
        Schedule::Matmul(self)
    }

    pub fn threads(self) -> u32 {
        (self.block_m / self.thread_m.max(1)).saturating_mul(self.block_n / self.thread_n.max(1))
    }
}

/// Lowers a contraction with the given tiles, after checking them.
pub(super) fn lower(
    kernel: &Kernel,
    plan: &MatmulPlan,
    tiles: Tiles,
    target: SmVersion,
) -> Result<Lowered, Violation> {
    let layout = Layout::new(kernel, plan, tiles, target)?;
    Ok(emit::emit(kernel, plan, &layout))
}
