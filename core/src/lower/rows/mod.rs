//! The rows schedule: a group of `threads_per_row` threads per row of the
//! output, `rows_per_block` rows per block.
//!
//! A row first runs the steps of its [`RowPlan`]: each reduction is folded
//! cooperatively (thread `t` takes chunks `t, t + T, …` of `vector`
//! consecutive values), then combined across the row's threads
//! ([`combine`]: butterfly shuffles within a warp and, for rows spanning
//! several warps, shared memory, in one of two trees); every thread ends
//! with the same value. Lets that depend on row variables only are
//! evaluated once. Then the row's elements are spread over its threads the
//! same way and the root is evaluated for each.
//!
//! With `cache = 0` every reduction, and the outputs, read the row from
//! global memory again (softmax reads it three times, the later times from
//! L2 while the rows in flight fit it). With `cache = 1` ([`cache`]) each
//! thread first loads the elements it owns of every tensor that more than
//! one pass reads, into registers, and the passes read them there: one
//! read of the row. With `cache = 2` ([`cache`]'s `shared`) the block first
//! copies those tensors' rows into shared memory, after the combine tree's
//! slots, and waits at one barrier; the passes loop over the row as with
//! `cache = 0` but read those loads from shared memory: one read of the
//! row, however long, as long as the block's rows fit the target's shared
//! memory.
//!
//! With `online = 1` ([`online`]), a maximum and a later sum of `exp` of
//! the same value minus it (softmax's) share one pass over global memory,
//! the sum rescaled as the maximum grows, and so do a mean and a later sum
//! or mean of squared differences from it (a variance, Welford's way):
//! softmax and layernorm read a row twice instead of three times without
//! keeping it.
//!
//! With `cluster = C` above 1 (sm_90), a row is spread over the `C` blocks
//! of a thread-block cluster ([`Slice`]): the cluster's block `k` takes the
//! `k`-th of `C` consecutive slices of the row, a whole number of chunks
//! each, and its threads walk their slice as above. Each reduction is
//! combined within each block, then across the cluster ([`combine`]):
//! every block writes its total to a slot of its shared memory, and after
//! the cluster's barrier each warp reads the `C` slots through distributed
//! shared memory, a lane a slot, and folds them with shuffles, so that every
//! block gets the same bits. With `cache = 2` each block keeps only its
//! slice of the row ([`cache`]). A block keeps its shared memory for the
//! others until a last cluster barrier, whose wait comes just before it
//! exits.
//!
//! Every thread executes every shuffle and barrier: a row past the last one
//! computes on a clamped (valid) row index and only skips the final stores.

mod cache;
mod combine;
pub mod online;
mod peel;

pub use cache::{CachePlan, Pass};
pub use combine::shared_bytes;

use std::collections::HashMap;

use super::classify::{RowPlan, RowStep};
use super::elementwise::{bind_vars, check_vector, emit_consecutive_with, store_vec};
use super::expr::{self, Env};
use super::{Constraint, Launch, Lowered, Violation, check_block, entry_name};
use crate::ir::{Expr, ExprId, Kernel, VarId};
use crate::ptx::Builder;
use crate::ptx::inst::{Addr, ArithOp, Cmp, Op, Operand, Reg, RegClass, Special, Ty};
use crate::target::SmVersion;
use cache::{Cache, SharedRow};
use combine::{Combiner, Tree};
use peel::{Cut, Peel};

/// The knobs of a rows schedule, checked.
pub(super) struct Shape {
    threads_per_row: u32,
    rows_per_block: u32,
    vector: u32,
    warp: u32,
    tree: Tree,
    /// The target, whose instructions the fill of a row in shared memory
    /// chooses between.
    target: SmVersion,
    /// What the row keeps, and where (the `cache` knob).
    keep: Keep,
    /// The pairs of reductions computed in one pass (the `online` knob):
    /// none with `online = 0`.
    pairs: Vec<online::Pair>,
    /// How rows that `vector` does not divide are cut ([`peel`]); `None`
    /// where it divides them.
    peel: Option<Peel>,
    /// Blocks of the cluster a row is spread over (the `cluster` knob).
    cluster: u32,
    /// The row's reductions, each combined across the cluster in a slot of
    /// its own.
    reductions: u32,
}

/// What a row keeps of the tensors more than one pass reads, and where.
enum Keep {
    /// `cache = 0`: nothing; every pass reads global memory.
    Nothing,
    /// `cache = 1`: each thread's elements, in registers.
    Registers(CachePlan),
    /// `cache = 2`: the whole row, in shared memory.
    Shared(CachePlan),
}

impl Shape {
    fn block(&self) -> u32 {
        self.threads_per_row * self.rows_per_block
    }

    /// Warps per row when a row spans whole warps; 1 otherwise.
    fn warps_per_row(&self) -> u32 {
        (self.threads_per_row / self.warp).max(1)
    }

    /// Bytes of the combine tree's slots, at the start of shared memory.
    fn tree_bytes(&self) -> u64 {
        shared_bytes(
            self.threads_per_row,
            self.rows_per_block,
            self.warp,
            self.tree as u32,
        )
    }

    /// Bytes of the slots through which a cluster's blocks combine their
    /// rows' reductions, after the tree's: one f32 a reduction and row.
    fn cluster_bytes(&self) -> u64 {
        match self.cluster {
            1 => 0,
            _ => (u64::from(self.rows_per_block) * u64::from(self.reductions) * 4)
                .next_multiple_of(16),
        }
    }

    /// Bytes of shared memory a block keeps of each of its rows with
    /// `cache = 2`.
    fn kept_bytes_per_row(&self) -> u64 {
        match &self.keep {
            Keep::Shared(kept) => kept.shared_bytes_per_row(self.vector, self.cluster),
            Keep::Nothing | Keep::Registers(_) => 0,
        }
    }

    /// Bytes of shared memory a block uses: the tree's slots, the
    /// cluster's, then with `cache = 2` each of its rows' kept patterns.
    fn shared_bytes(&self) -> u64 {
        self.tree_bytes()
            + self.cluster_bytes()
            + u64::from(self.rows_per_block) * self.kept_bytes_per_row()
    }
}

/// The most blocks a cluster may hold without opting in to more (the
/// portable cluster size).
pub const MAX_CLUSTER: u32 = 8;

/// A rows schedule's knobs.
#[derive(Debug, Clone, Copy)]
pub(super) struct Knobs {
    pub threads_per_row: u32,
    pub rows_per_block: u32,
    pub vector: u32,
    pub cache: u32,
    pub tree: u32,
    pub online: u32,
    pub cluster: u32,
}

pub(super) fn check(
    kernel: &Kernel,
    plan: &RowPlan,
    knobs: Knobs,
    target: SmVersion,
) -> Result<Shape, Violation> {
    let Knobs {
        threads_per_row,
        rows_per_block,
        vector,
        cache,
        tree,
        online,
        cluster,
    } = knobs;
    let limits = target.limits();
    if !cluster.is_power_of_two() || cluster > MAX_CLUSTER {
        return Err(Violation::new(
            Constraint::Range,
            format!(
                "cluster {cluster}; expected 1 (a row's threads in one block) or 2, 4 or 8 blocks of a cluster"
            ),
        ));
    }
    if cluster > 1 && !target.has_clusters() {
        return Err(Violation::new(
            Constraint::Range,
            format!("cluster {cluster}: {target} has no thread-block clusters (sm_90 has)"),
        ));
    }
    if cluster > 1 && cluster > threads_per_row {
        return Err(Violation::new(
            Constraint::Range,
            format!(
                "cluster {cluster} with {threads_per_row} threads per row: a row's threads in each block read the cluster's {cluster} partial results, one each, so they must be at least as many"
            ),
        ));
    }
    if !threads_per_row.is_power_of_two() || threads_per_row > limits.max_threads_per_block {
        return Err(Violation::new(
            Constraint::Range,
            format!(
                "{threads_per_row} threads per row; expected a power of two up to {}",
                limits.max_threads_per_block
            ),
        ));
    }
    if rows_per_block == 0 {
        return Err(Violation::new(Constraint::Range, "0 rows per block"));
    }
    let Some(tree) = Tree::from_knob(tree) else {
        return Err(Violation::new(
            Constraint::Range,
            format!(
                "tree {tree}; expected 0 (shuffles, then shared memory across warps) or 1 (a shared-memory tree)"
            ),
        ));
    };
    if tree == Tree::Shared && threads_per_row <= limits.warp_size {
        return Err(Violation::new(
            Constraint::Range,
            format!(
                "a shared-memory tree (tree 1) combines warps; a row of {threads_per_row} threads is within one warp, which shuffles"
            ),
        ));
    }
    if cache > 2 {
        return Err(Violation::new(
            Constraint::Range,
            format!(
                "cache {cache}; expected 0 (a pass over the row per step), 1 (one pass, in registers) or 2 (one pass, the row in shared memory)"
            ),
        ));
    }
    let pairs = match (online, cache) {
        (0, _) => Vec::new(),
        (1, 0) => {
            let pairs = online::pairs(kernel, plan);
            if pairs.is_empty() {
                return Err(Violation::new(
                    Constraint::Range,
                    "online 1 pairs nothing: no maximum is followed by a sum of `exp` of a value minus it, nor a mean by a sum or mean of squared differences from it",
                ));
            }
            pairs
        }
        (1, _) => {
            return Err(Violation::new(
                Constraint::Range,
                format!(
                    "online 1 saves a read of the row from global memory; with cache {cache} the row is read from there once already"
                ),
            ));
        }
        _ => {
            return Err(Violation::new(
                Constraint::Range,
                format!(
                    "online {online}; expected 0 (a pass per reduction) or 1 (softmax's maximum and sum, or a mean and variance, in one pass)"
                ),
            ));
        }
    };
    let block = threads_per_row.saturating_mul(rows_per_block);
    check_block(block, target)?;
    // A row that `vector` does not divide is peeled where it can be.
    let mut peel = None;
    for r in plan.reductions() {
        if let Expr::Reduce { var, .. } = kernel.expr(r) {
            let name = &kernel.dim(kernel.var(*var).dim).name;
            let checked = check_vector(
                vector,
                kernel.extent(*var),
                &format!("the reduced extent `{name}`"),
            );
            match checked {
                Err(v) if v.constraint != Constraint::Alignment => return Err(v),
                Err(v) if peel.is_none() => {
                    peel = Some(Peel::of(kernel, plan, vector, cache).map_err(|r| v.because(r))?);
                }
                _ => {}
            }
        }
    }
    let keep = match cache {
        0 => Keep::Nothing,
        _ => {
            let kept = CachePlan::of(kernel, plan);
            if kept.is_empty() {
                return Err(Violation::new(
                    Constraint::Range,
                    format!(
                        "cache {cache} keeps nothing: no tensor is read by more than one pass over the row"
                    ),
                ));
            }
            if cache == 1 {
                kept.check(kernel, threads_per_row * cluster, vector, block, target)?;
                Keep::Registers(kept)
            } else {
                Keep::Shared(kept)
            }
        }
    };
    let shape = Shape {
        threads_per_row,
        rows_per_block,
        vector,
        warp: limits.warp_size,
        tree,
        target,
        keep,
        pairs,
        peel,
        cluster,
        reductions: plan.reductions().count() as u32,
    };
    let shared = shape.shared_bytes();
    if shared > u64::from(limits.max_shared_per_block) {
        let rows = match &shape.keep {
            Keep::Shared(_) => format!(
                " ({} for the combine tree, {} for {rows_per_block} kept rows)",
                shape.tree_bytes() + shape.cluster_bytes(),
                u64::from(rows_per_block) * shape.kept_bytes_per_row()
            ),
            Keep::Nothing | Keep::Registers(_) => String::new(),
        };
        return Err(Violation::new(
            Constraint::SharedMemory,
            format!(
                "{shared} bytes of shared memory{rows}; {target} allows {}",
                limits.max_shared_per_block
            ),
        ));
    }
    Ok(shape)
}

pub(super) fn lower(
    kernel: &Kernel,
    plan: &RowPlan,
    knobs: Knobs,
    target: SmVersion,
) -> Result<Lowered, Violation> {
    let shape = check(kernel, plan, knobs, target)?;
    let Knobs {
        threads_per_row,
        rows_per_block,
        vector,
        ..
    } = knobs;
    let extent_of = |vars: &[VarId]| vars.iter().map(|v| kernel.extent(*v)).product::<u32>();
    let rows = extent_of(&plan.row_vars);
    let inner = extent_of(&plan.inner_vars);
    let shared =
        u32::try_from(shape.shared_bytes()).expect("checked: at most the target's shared memory");

    let mut b = Builder::new();
    let done = b.label();
    let inputs: Vec<Reg> = (0..kernel.inputs.len()).map(|i| b.param_ptr(i)).collect();
    let out = b.param_ptr(kernel.inputs.len());
    let tid = b.special(Special::TidX);
    let ctaid = b.special(Special::CtaidX);
    let lane = b.u32_op(
        ArithOp::And,
        tid,
        Operand::Int(i64::from(threads_per_row - 1)),
    );
    let row_in_block = b.u32_op(
        ArithOp::Shr,
        tid,
        Operand::Int(i64::from(threads_per_row.trailing_zeros())),
    );
    // A cluster's blocks share their rows: the block's rank in its
    // cluster picks its slice.
    let (group, slice) = match shape.cluster {
        1 => (ctaid, None),
        blocks => {
            let shift = Operand::Int(i64::from(blocks.trailing_zeros()));
            let group = b.u32_op(ArithOp::Shr, ctaid, shift);
            (group, Some(Slice { blocks, vector }))
        }
    };
    let row = b.u32_mad(group, Operand::Int(i64::from(rows_per_block)), row_in_block);
    let inside = b.setp(Cmp::Lt, Ty::U32, row, Operand::Int(i64::from(rows)));
    let safe_row = b.u32_op(ArithOp::Min, row, Operand::Int(i64::from(rows - 1)));
    let mut combiner = Combiner::new(&mut b, &shape, tid, lane, row_in_block);

    let mut env = Env {
        inputs,
        ..Env::default()
    };
    bind_vars(&mut b, kernel, &plan.row_vars, safe_row, &mut env.index);
    let cut = shape.peel.as_ref().map(|peel| {
        env.scalar_loads.clone_from(peel.scalar_loads());
        peel.cut(&mut b, &env, vector)
    });
    let walk = Walk {
        threads: threads_per_row,
        vector,
        cut,
        slice,
    };
    let cache = match &shape.keep {
        Keep::Registers(kept) => Some(Cache::load(&mut b, kernel, kept, &env, lane, walk)),
        Keep::Nothing | Keep::Shared(_) => None,
    };
    let row = match &shape.keep {
        Keep::Shared(kept) => {
            let offset = u32::try_from(shape.tree_bytes() + shape.cluster_bytes())
                .expect("checked with the rows");
            Some(SharedRow::fill(
                &mut b,
                kernel,
                kept,
                &env,
                (lane, row_in_block),
                (&shape, walk),
                offset,
            ))
        }
        Keep::Nothing | Keep::Registers(_) => None,
    };
    // Second reductions computed in one pass with their first, until
    // their step.
    let mut fused: HashMap<ExprId, Reg> = HashMap::new();
    for step in &plan.steps {
        match *step {
            RowStep::Reduce(id) => {
                let pair = shape.pairs.iter().find(|p| p.first == id);
                let value = match (fused.remove(&id), pair) {
                    (Some(sum), _) => sum,
                    (None, Some(&pair)) => {
                        let (first, second) =
                            online::reduce(&mut b, kernel, &env, walk, lane, &mut combiner, pair);
                        fused.insert(pair.second, second);
                        first
                    }
                    (None, None) => match cache.as_ref().filter(|c| c.reads(Pass::Reduce(id))) {
                        Some(cache) => {
                            let partial = cache.partial(&mut b, kernel, &env, id);
                            combined(&mut b, kernel, &mut combiner, id, partial)
                        }
                        None => cooperative_reduce(
                            &mut b,
                            kernel,
                            &mut env,
                            (walk, row.as_ref()),
                            lane,
                            &mut combiner,
                            id,
                        ),
                    },
                };
                env.reduced.insert(id, value);
            }
            RowStep::Let(l) => {
                let value = expr::emit(&mut b, kernel, &mut env, kernel.let_(l).value);
                env.lets.insert(l, value);
            }
        }
    }
    combiner.release_cluster(&mut b);
    b.bra_if(inside, true, done);

    // The output pass: its stores come between its loads; a division by
    // a value of the row is a multiplication by its reciprocal.
    env.read_only_inputs = true;
    expr::share_divisors(&mut b, kernel, &mut env, kernel.root, &plan.row_vars);
    match cache.as_ref().filter(|c| c.reads(Pass::Outputs)) {
        Some(cache) => cache.outputs(&mut b, kernel, &env, out),
        None => {
            // The row's elements: groups of `vector` along the output's
            // innermost variable when it indexes within the row, single
            // elements otherwise.
            let out_vars = kernel.output_vars();
            let last = out_vars
                .last()
                .copied()
                .filter(|v| plan.inner_vars.contains(v));
            // A peeled row's outputs run along it (its cut follows them).
            let outputs = match last {
                Some(_) if walk.cut.is_some() => walk,
                Some(v) if kernel.extent(v).is_multiple_of(vector) => Walk { cut: None, ..walk },
                _ => Walk {
                    vector: 1,
                    cut: None,
                    ..walk
                },
            };
            let out_strides = kernel.strides_of(&kernel.output);
            outputs.emit(&mut b, lane, inner, |b, first, width| {
                let mut element = env.clone();
                bind_vars(b, kernel, &plan.inner_vars, first, &mut element.index);
                let known = row.as_ref().map_or_else(Vec::new, |row| {
                    row.known(b, kernel, Pass::Outputs, &element, width)
                });
                let values =
                    emit_consecutive_with(b, kernel, &mut element, kernel.root, last, width, known);
                let flat = expr::flat_index(b, &element, &out_vars, &out_strides);
                let addr = b.global_addr(out, flat, kernel.output.dtype.size());
                store_vec(
                    b,
                    kernel.output.dtype,
                    Addr {
                        base: addr,
                        offset: 0,
                    },
                    &values,
                    None,
                );
            });
        }
    }
    b.place(done);
    combiner.hold_for_cluster(&mut b);

    let mut ptx = b.finish(
        entry_name(kernel),
        kernel.inputs.len() + 1,
        shape.block(),
        shared,
    );
    if shape.cluster > 1 {
        ptx.cluster_blocks = shape.cluster;
    }
    Ok(Lowered {
        ptx,
        launch: Launch {
            grid: [rows.div_ceil(rows_per_block) * shape.cluster, 1, 1],
            block: [shape.block(), 1, 1],
            dynamic_shared_bytes: shared,
            workspace_bytes: 0,
            persistent: false,
            registers: 0,
        },
    })
}

/// How a pass's threads walk a row's positions: chunks of `vector`
/// consecutive positions from position 0, thread `t` of the row's `threads`
/// taking chunks `t, t + threads, …`, or a peeled row's [`Cut`]; with a
/// [`Slice`], of the block's slice of the row's chunks.
#[derive(Debug, Clone, Copy)]
pub(super) struct Walk {
    threads: u32,
    vector: u32,
    cut: Option<Cut>,
    slice: Option<Slice>,
}

impl Walk {
    /// Emits the thread's walk over a row of `extent` positions:
    /// `visit(first, width)` for each of its chunks of `width` positions.
    fn emit(
        &self,
        b: &mut Builder,
        lane: Reg,
        extent: u32,
        mut visit: impl FnMut(&mut Builder, Reg, u32),
    ) {
        if let Some(cut) = &self.cut {
            return cut.walk(b, lane, (self.threads, self.vector), self.slice, visit);
        }
        let (start, end) = self.chunks(b, lane, extent);
        strided_loop(b, start, end, self.threads, |b, chunk| {
            let first = chunk_start(b, chunk, self.vector);
            visit(b, first, self.vector);
        });
    }

    /// The thread's first chunk, and the end of the chunks it walks (the
    /// row's, or the block's slice's), along a row of `extent` positions
    /// that the walk's `vector` divides.
    fn chunks(&self, b: &mut Builder, lane: Reg, extent: u32) -> (Reg, Operand) {
        let chunks = extent / self.vector;
        match self.slice {
            None => (lane, Operand::Int(i64::from(chunks))),
            Some(slice) => {
                let (begin, end) = slice.range(b, extent, self.vector);
                (b.u32_op(ArithOp::Add, begin, lane), end.into())
            }
        }
    }

    /// The first position of the thread's first chunk, or of the row's last
    /// chunk for a thread without one.
    fn first_chunk(&self, b: &mut Builder, lane: Reg, extent: u32) -> Reg {
        match &self.cut {
            Some(cut) => cut.first_chunk(b, lane, self.vector, self.slice),
            None => {
                let (start, _) = self.chunks(b, lane, extent);
                let last = Operand::Int(i64::from(extent / self.vector - 1));
                let chunk = b.u32_op(ArithOp::Min, start, last);
                chunk_start(b, chunk, self.vector)
            }
        }
    }
}

/// The block's share of a row spread over the `blocks` blocks of a
/// cluster: the block of rank `k` takes the `k`-th of `blocks` consecutive
/// slices of the row, each `span` positions (the last may be shorter), a
/// whole number of chunks of the rows schedule's `vector` positions, so
/// that a walk one value at a time (a row's outputs) divides the row at the
/// same positions.
#[derive(Debug, Clone, Copy)]
pub(super) struct Slice {
    blocks: u32,
    vector: u32,
}

impl Slice {
    /// The block's rank in its cluster, read where it is used (kept in a
    /// register for the whole kernel, it crowded a 1,024-thread block's
    /// 64 into spilling).
    fn rank(self, b: &mut Builder) -> Reg {
        let ctaid = b.special(Special::CtaidX);
        b.u32_op(
            ArithOp::And,
            ctaid,
            Operand::Int(i64::from(self.blocks - 1)),
        )
    }

    /// Positions each block's slice of a row of `extent` holds (a row
    /// shorter than `vector`, such as a row's single output, is one chunk:
    /// the first block's).
    pub(super) fn span(blocks: u32, vector: u32, extent: u32) -> u32 {
        extent.div_ceil(vector).div_ceil(blocks) * vector
    }

    /// The block's first chunk of `width` positions along a row of `extent`
    /// positions, and the end of its chunks.
    fn range(self, b: &mut Builder, extent: u32, width: u32) -> (Reg, Reg) {
        let per = Slice::span(self.blocks, self.vector, extent) / width;
        let rank = self.rank(b);
        let begin = b.u32_op(ArithOp::Mul, rank, Operand::Int(i64::from(per)));
        let next = b.u32_op(ArithOp::Add, begin, Operand::Int(i64::from(per)));
        let end = b.u32_op(ArithOp::Min, next, Operand::Int(i64::from(extent / width)));
        (begin, end)
    }

    /// Chunks of `width` positions in the shortest block's slice of a row
    /// of `extent` positions (the last block's; none where the others'
    /// cover the row): the slots every block's lanes fill.
    pub(super) fn shortest(self, extent: u32, width: u32) -> u32 {
        let per = Slice::span(self.blocks, self.vector, extent) / width;
        (extent / width).saturating_sub((self.blocks - 1) * per)
    }

    /// The block's first chunk of a peeled row of `extent` positions cut
    /// into `chunks` chunks (at most `extent / vector`: the rows' cuts
    /// differ by one at most), and the end of its chunks: the `k`-th of
    /// `blocks` runs of `⌈(extent / vector) / blocks⌉`, static.
    fn of_chunks(self, b: &mut Builder, extent: u32, chunks: Reg) -> (Reg, Reg) {
        let per = Slice::span(self.blocks, self.vector, extent) / self.vector;
        let rank = self.rank(b);
        let begin = b.u32_op(ArithOp::Mul, rank, Operand::Int(i64::from(per)));
        let next = b.u32_op(ArithOp::Add, begin, Operand::Int(i64::from(per)));
        let end = b.u32_op(ArithOp::Min, next, chunks);
        (begin, end)
    }

    /// Whether the block is its cluster's first, which reads a peeled
    /// row's leftover positions.
    fn first(self, b: &mut Builder) -> Reg {
        let rank = self.rank(b);
        b.setp(Cmp::Eq, Ty::U32, rank, Operand::Int(0))
    }
}

/// Emits `for (i = start; i < count; i += step) body(i)` with `body` emitted
/// once; threads whose `start` is past `count` skip it.
fn strided_loop(
    b: &mut Builder,
    start: Reg,
    count: impl Into<Operand>,
    step: u32,
    body: impl FnOnce(&mut Builder, Reg),
) {
    let count = count.into();
    let skip = b.label();
    let top = b.label();
    let i = b.reg(RegClass::B32);
    b.push(Op::Mov {
        ty: Ty::U32,
        dst: i,
        src: start.into(),
    });
    let outside = b.setp(Cmp::Ge, Ty::U32, i, count);
    b.bra_if(outside, false, skip);
    b.place(top);
    body(b, i);
    b.push(Op::Arith {
        op: ArithOp::Add,
        ty: Ty::U32,
        dst: i,
        a: i.into(),
        b: Operand::Int(i64::from(step)),
    });
    let more = b.setp(Cmp::Lt, Ty::U32, i, count);
    b.bra_if(more, false, top);
    b.place(skip);
}

/// The first position of chunk `chunk`, `width` (a power of two)
/// consecutive positions a chunk.
fn chunk_start(b: &mut Builder, chunk: Reg, width: u32) -> Reg {
    match width {
        1 => chunk,
        _ => b.u32_op(
            ArithOp::Shl,
            chunk,
            Operand::Int(i64::from(width.trailing_zeros())),
        ),
    }
}

/// `chunk` of a slot that may reach past the row's `chunks` (`partial`):
/// clamped to the last chunk, with the predicate of whether it is inside;
/// unchanged, with `None`, when every lane's is inside.
fn clamped_chunk(b: &mut Builder, chunk: Reg, chunks: u32, partial: bool) -> (Reg, Option<Reg>) {
    if !partial {
        return (chunk, None);
    }
    let inside = b.setp(Cmp::Lt, Ty::U32, chunk, Operand::Int(i64::from(chunks)));
    let clamped = b.u32_op(ArithOp::Min, chunk, Operand::Int(i64::from(chunks - 1)));
    (clamped, Some(inside))
}

/// Computes reduction `id` for the thread's row, reading the row from
/// global memory, or its kept loads from the row in shared memory when
/// there is one; every thread of the row gets the same value.
fn cooperative_reduce(
    b: &mut Builder,
    kernel: &Kernel,
    env: &mut Env,
    (walk, row): (Walk, Option<&SharedRow<'_>>),
    lane: Reg,
    combiner: &mut Combiner,
    id: ExprId,
) -> Reg {
    let Expr::Reduce { op, var, body } = *kernel.expr(id) else {
        return expr::emit(b, kernel, env, id).reg();
    };
    let acc = b.f32_imm(expr::reduce_init(op));
    walk.emit(b, lane, kernel.extent(var), |b, first, width| {
        let mut element = env.clone();
        element.index.insert(var, first);
        let known = row.map_or_else(Vec::new, |row| {
            row.known(b, kernel, Pass::Reduce(id), &element, width)
        });
        for x in emit_consecutive_with(b, kernel, &mut element, body, Some(var), width, known) {
            expr::fold_into(b, op, acc, x);
        }
    });
    combined(b, kernel, combiner, id, acc)
}

/// Reduction `id`'s value from the thread's partial result: combined across
/// the row, and divided for a mean.
fn combined(
    b: &mut Builder,
    kernel: &Kernel,
    combiner: &mut Combiner,
    id: ExprId,
    partial: Reg,
) -> Reg {
    let Expr::Reduce { op, var, .. } = *kernel.expr(id) else {
        unreachable!("a reduction step")
    };
    let total = combiner.combine(b, op, partial);
    expr::finish_reduce(b, op, total, kernel.extent(var))
}

#[cfg(test)]
mod tests;
