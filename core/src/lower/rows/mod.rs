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
mod tests {
    use quote::quote;

    use crate::ir::Kernel;
    use crate::lower::{Constraint, LowerError, Lowered, lower};
    use crate::ptx::inst::{ArithOp, Op, Operand, Reg, Space, Ty, UnaryOp};
    use crate::schedule::{Class, Schedule};
    use crate::syntax::parse_kernel;
    use crate::target::SmVersion;
    use crate::test_kernels::rows_with;

    fn layernorm(r: u32, c: u32) -> Kernel {
        layernorm_of(quote!(f32), r, c)
    }

    /// Layernorm without weights over rows of `c` values of type `dtype`.
    fn layernorm_of(dtype: proc_macro2::TokenStream, r: u32, c: u32) -> Kernel {
        parse_kernel(
            quote!(shape(R = #r, C = #c)),
            quote! {
                fn layernorm(x: Tensor<#dtype, (R, C)>) -> Tensor<f32, (R, C)> {
                    compute(|r, c| {
                        let mu = mean(C, |j| x[r][j]);
                        let var = mean(C, |j| (x[r][j] - mu) * (x[r][j] - mu));
                        (x[r][c] - mu) * rsqrt(var + 0.00001)
                    })
                }
            },
        )
        .expect("valid kernel")
    }

    fn point(threads_per_row: u32, rows_per_block: u32, vector: u32) -> Schedule {
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

    fn invalid(k: &Kernel, s: Schedule, target: SmVersion) -> String {
        match lower(k, &s, target) {
            Err(LowerError::Invalid { reason, .. }) => reason,
            other => panic!("{s:?} should be invalid, got {other:?}"),
        }
    }

    fn count(l: &Lowered, pred: impl Fn(&Op) -> bool) -> usize {
        l.ptx.body.iter().filter(|i| pred(&i.op)).count()
    }

    #[test]
    fn rejects_invalid_points() {
        let k = layernorm(10, 1025);
        let sm80 = SmVersion::Sm80;
        assert!(invalid(&k, point(0, 1, 1), sm80).contains("power of two"));
        assert!(invalid(&k, point(48, 1, 1), sm80).contains("power of two"));
        assert!(invalid(&k, point(2048, 1, 1), sm80).contains("power of two up to 1024"));
        assert!(invalid(&k, point(32, 0, 1), sm80).contains("0 rows per block"));
        assert!(invalid(&k, point(256, 8, 1), sm80).contains("2048 threads per block"));
        assert!(invalid(&k, point(4, 3, 1), sm80).contains("multiple of 32"));
        // 1025 positions: peeled with cache 0 (see `peel`), not otherwise.
        assert!(lower(&k, &point(32, 1, 2), sm80).is_ok());
        let reason = invalid(&k, rows_with(point(32, 1, 2), 1, 0), sm80);
        assert!(reason.contains("reduced extent `C`"), "{reason}");
        assert!(reason.contains("only with cache 0"), "{reason}");
        let reason = invalid(&layernorm(10, 7), point(32, 1, 4), sm80);
        assert!(reason.contains("shorter than two chunks"), "{reason}");
        assert!(invalid(&k, point(32, 1, 8), sm80).contains("expected 1, 2 or 4"));
        assert!(invalid(&k, point(u32::MAX / 2 + 1, 2, 1), sm80).contains("power of two"));
        let k = layernorm(10, 1024);
        assert!(lower(&k, &point(32, 1, 4), sm80).is_ok());
        assert!(lower(&k, &point(8, 4, 2), sm80).is_ok());

        let constraint = |k: &Kernel, s: Schedule| match lower(k, &s, sm80) {
            Err(LowerError::Invalid { constraint, .. }) => constraint,
            other => panic!("{s:?} should be invalid, got {other:?}"),
        };
        assert!(invalid(&k, rows_with(point(64, 1, 1), 0, 2), sm80).contains("tree 2"));
        assert!(invalid(&k, rows_with(point(32, 2, 1), 0, 1), sm80).contains("within one warp"));
        let reason = invalid(&k, rows_with(point(64, 1, 1), 3, 0), sm80);
        assert!(reason.contains("cache 3"), "{reason}");
        assert!(
            reason.contains("or 2 (one pass, the row in shared memory)"),
            "{reason}"
        );
        // 1024 values per thread on one thread per row; 256 on 4.
        let reason = invalid(&k, rows_with(point(1, 32, 4), 1, 0), sm80);
        assert!(reason.contains("1024 values per thread"), "{reason}");
        assert!(reason.contains("1024 of `x`"), "{reason}");
        assert_eq!(
            constraint(&k, rows_with(point(4, 8, 4), 1, 0)),
            Constraint::Registers
        );
        assert!(lower(&k, &rows_with(point(8, 4, 4), 1, 0), sm80).is_ok());
        // 1024 threads per block leave 64 registers a thread: 24 values.
        assert_eq!(
            constraint(&k, rows_with(point(32, 32, 1), 1, 0)),
            Constraint::Registers
        );
        assert!(lower(&k, &rows_with(point(64, 16, 1), 1, 0), sm80).is_ok());
        assert!(lower(&k, &rows_with(point(64, 1, 4), 1, 1), sm80).is_ok());
        let row_sum = parse_kernel(
            quote!(shape(R = 4, C = 64)),
            quote! {
                fn row_sum(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R,)> {
                    compute(|r| sum(C, |j| x[r][j]))
                }
            },
        )
        .expect("valid kernel");
        let reason = invalid(&row_sum, rows_with(point(32, 1, 1), 1, 0), sm80);
        assert!(reason.contains("keeps nothing"), "{reason}");
        let reason = invalid(&row_sum, rows_with(point(32, 1, 1), 2, 0), sm80);
        assert!(reason.contains("cache 2 keeps nothing"), "{reason}");
    }

    /// The values each global load of `l` moves, in order.
    fn global_loads(l: &Lowered) -> Vec<usize> {
        l.global_accesses()
            .into_iter()
            .filter_map(|(load, n)| load.then_some(n))
            .collect()
    }

    #[test]
    fn one_pass_reads_the_row_once() {
        let k = layernorm(10, 1024);
        // Two reductions and the outputs read `x`: three loops, the
        // variance's with two loads of it.
        let l = lower(&k, &point(128, 3, 4), SmVersion::Sm80).expect("lowers");
        assert_eq!(global_loads(&l), [4, 4, 4, 4]);
        // Kept: 1024 / 4 / 128 = 2 vector loads per thread, before any
        // reduction, and no loop.
        let l = lower(&k, &rows_with(point(128, 3, 4), 1, 0), SmVersion::Sm80).expect("lowers");
        assert_eq!(global_loads(&l), [4, 4]);
        let first_shuffle = l
            .ptx
            .body
            .iter()
            .position(|i| matches!(i.op, Op::Shfl { .. }))
            .expect("a shuffle");
        assert!(last_global_load(&l) < first_shuffle);
        assert_eq!(count(&l, |op| matches!(op, Op::Bra { .. })), 1);
        assert_eq!(count(&l, |op| matches!(op, Op::BarSync)), 2);

        // 1000 = 250 vectors over 128 threads: the second slot is partial,
        // its values drop out of the reductions (selected away) and its
        // stores are guarded.
        let k = layernorm(10, 1000);
        let l = lower(&k, &rows_with(point(128, 1, 4), 1, 0), SmVersion::Sm80).expect("lowers");
        assert_eq!(global_loads(&l), [4, 4]);
        assert_eq!(count(&l, |op| matches!(op, Op::Selp { .. })), 2 * 4);
        let guarded_stores = l
            .ptx
            .body
            .iter()
            .filter(|i| {
                i.guard.is_some()
                    && matches!(
                        i.op,
                        Op::St {
                            space: Space::Global,
                            ..
                        }
                    )
            })
            .count();
        assert_eq!(guarded_stores, 1);
    }

    fn loads(l: &Lowered, space: Space) -> Vec<usize> {
        l.ptx
            .body
            .iter()
            .filter_map(|i| match &i.op {
                Op::Ld { space: s, dsts, .. } if *s == space => Some(dsts.len()),
                _ => None,
            })
            .collect()
    }

    /// The shared stores of `l`: how many values each, and whether guarded.
    fn shared_stores(l: &Lowered) -> Vec<(usize, bool)> {
        l.ptx
            .body
            .iter()
            .filter_map(|i| match &i.op {
                Op::St {
                    space: Space::Shared,
                    srcs,
                    ..
                } => Some((srcs.len(), i.guard.is_some())),
                _ => None,
            })
            .collect()
    }

    /// The `cp.async` copies of `l`: bytes each, and whether guarded.
    fn async_copies(l: &Lowered) -> Vec<(u32, bool)> {
        l.ptx
            .body
            .iter()
            .filter_map(|i| match &i.op {
                Op::CpAsync { bytes, .. } => Some((*bytes, i.guard.is_some())),
                _ => None,
            })
            .collect()
    }

    fn position(l: &Lowered, pred: impl Fn(&Op) -> bool) -> Option<usize> {
        l.ptx.body.iter().position(|i| pred(&i.op))
    }

    /// Where `l`'s last load from global memory is.
    fn last_global_load(l: &Lowered) -> usize {
        l.ptx
            .body
            .iter()
            .rposition(|i| {
                matches!(
                    i.op,
                    Op::Ld {
                        space: Space::Global | Space::GlobalReadOnly,
                        ..
                    }
                )
            })
            .expect("a load")
    }

    #[test]
    fn a_row_in_shared_memory_is_read_from_global_memory_once() {
        let k = layernorm(10, 1024);
        let l = lower(&k, &rows_with(point(128, 3, 4), 2, 0), SmVersion::Sm80).expect("lowers");
        // The fill: 1024 / 4 / 128 = 2 chunks per thread, each one 16-byte
        // `cp.async`, in a loop that always has both in the row; nothing
        // else reads global memory.
        assert_eq!(async_copies(&l), [(16, false), (16, false)]);
        assert!(global_loads(&l).is_empty());
        // Each pass, the variance's too (two loads of `x`), reads the row
        // once from shared memory; the tree reads one slot per reduction.
        assert_eq!(loads(&l, Space::Shared), [4, 1, 4, 1, 4]);
        // Only the warp leaders' slots are stored.
        assert_eq!(shared_stores(&l), [(1, true), (1, true)]);
        // A thread waits for all its copies, then the block at a barrier,
        // before the first pass; then a barrier per reduction.
        assert_eq!(count(&l, |op| matches!(op, Op::BarSync)), 1 + 2);
        let wait = position(&l, |op| matches!(op, Op::CpAsyncWaitAll)).expect("a wait");
        let barrier = position(&l, |op| matches!(op, Op::BarSync)).expect("a barrier");
        let first_read = position(&l, |op| {
            matches!(
                op,
                Op::Ld {
                    space: Space::Shared,
                    ..
                }
            )
        })
        .expect("a shared load");
        assert_eq!(barrier, wait + 1);
        assert!(barrier < first_read);
        // The tree's two slot sets of 4 warps for 3 rows, then 3 rows of
        // 1024 values.
        assert_eq!(l.launch.dynamic_shared_bytes, 2 * 3 * 4 * 4 + 3 * 4096);
        assert_eq!(l.ptx.dynamic_shared_bytes, l.launch.dynamic_shared_bytes);
        assert_eq!(count(&l, |op| matches!(op, Op::Ret)), 1);

        // An odd row, one value at a time: 1025 values over 128 threads
        // are 9 chunks per thread, the 8 past the first guarded (the last
        // of them lies past the row for all lanes but one).
        let k = layernorm(10, 1025);
        let l = lower(&k, &rows_with(point(128, 2, 1), 2, 0), SmVersion::Sm80).expect("lowers");
        let fill: Vec<bool> = async_copies(&l).iter().map(|c| c.1).collect();
        assert_eq!(
            fill,
            [false, true, true, true, true, true, true, true, true]
        );
        assert!(async_copies(&l).iter().all(|c| c.0 == 4));
        assert_eq!(loads(&l, Space::Shared), [1; 5]);
        // Each row's 4100 bytes take 4112, so that the next row starts
        // 16-byte aligned.
        assert_eq!(l.launch.dynamic_shared_bytes, 2 * 2 * 4 * 4 + 2 * 4112);

        // 1000 = 250 vectors over 128 threads: the second chunk of the
        // fill is guarded; the passes loop over the 250 as without a
        // cache.
        let k = layernorm(10, 1000);
        let l = lower(&k, &rows_with(point(128, 1, 4), 2, 1), SmVersion::Sm90).expect("lowers");
        assert_eq!(async_copies(&l), [(16, false), (16, true)]);
        assert_eq!(
            loads(&l, Space::Shared).iter().filter(|n| **n == 4).count(),
            3
        );
        // A shared-memory tree: a barrier after the fill, then 1 + 7 per
        // reduction.
        assert_eq!(count(&l, |op| matches!(op, Op::BarSync)), 1 + 2 * (1 + 7));
        assert_eq!(l.launch.dynamic_shared_bytes, 2 * 128 * 4 + 4000);
    }

    #[test]
    fn a_16_bit_row_is_widened_through_registers_into_shared_memory() {
        let k = layernorm_of(quote!(bf16), 10, 1024);
        let l = lower(&k, &rows_with(point(128, 3, 4), 2, 0), SmVersion::Sm90).expect("lowers");
        // No `cp.async`: the row is stored as f32. Both chunks are loaded
        // before either is stored, then the warp leaders' slots.
        assert_eq!(async_copies(&l), []);
        assert_eq!(count(&l, |op| matches!(op, Op::CpAsyncWaitAll)), 0);
        assert_eq!(global_loads(&l), [4, 4]);
        assert_eq!(
            shared_stores(&l),
            [(4, false), (4, false), (1, true), (1, true)]
        );
        let barrier = position(&l, |op| matches!(op, Op::BarSync)).expect("a barrier");
        assert!(last_global_load(&l) < barrier);
        assert_eq!(loads(&l, Space::Shared), [4, 1, 4, 1, 4]);
        assert_eq!(l.launch.dynamic_shared_bytes, 2 * 3 * 4 * 4 + 3 * 4096);
    }

    #[test]
    fn a_row_in_shared_memory_must_fit_the_target() {
        // A row of 50257 f32 values: 201028 bytes, 201040 aligned.
        let k = layernorm(4, 50257);
        let one = rows_with(point(512, 1, 1), 2, 0);
        let l = lower(&k, &one, SmVersion::Sm90).expect("fits 227 KiB");
        assert_eq!(l.launch.dynamic_shared_bytes, 2 * 16 * 4 + 201_040);
        assert_eq!(async_copies(&l).len(), 16);
        for (s, target) in [
            (one, SmVersion::Sm86),
            (rows_with(point(512, 2, 1), 2, 0), SmVersion::Sm90),
        ] {
            match lower(&k, &s, target) {
                Err(LowerError::Invalid {
                    constraint, reason, ..
                }) => {
                    assert_eq!(constraint, Constraint::SharedMemory);
                    assert!(reason.contains("bytes of shared memory"), "{reason}");
                    let limit = target.limits().max_shared_per_block.to_string();
                    assert!(reason.contains(&limit), "{reason}");
                }
                other => panic!("{s:?} should not fit {target}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_division_by_a_row_value_is_a_multiplication_by_its_reciprocal() {
        let k = parse_kernel(
            quote!(shape(R = 10, C = 1000)),
            quote! {
                fn softmax(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
                    compute(|r, c| {
                        let mx = max(C, |j| x[r][j]);
                        let s = sum(C, |j| exp(x[r][j] - mx));
                        exp(x[r][c] - mx) / s / (x[r][c] + 2.0)
                    })
                }
            },
        )
        .expect("valid kernel");
        let divisions = |l: &Lowered| -> Vec<usize> {
            l.ptx
                .body
                .iter()
                .enumerate()
                .filter(|(_, i)| {
                    matches!(
                        i.op,
                        Op::Arith {
                            op: ArithOp::Div,
                            ..
                        }
                    )
                })
                .map(|(at, _)| at)
                .collect()
        };
        let first_store = |l: &Lowered| {
            position(l, |op| {
                matches!(
                    op,
                    Op::St {
                        space: Space::Global,
                        ..
                    }
                )
            })
            .expect("a store")
        };
        let reciprocals = |l: &Lowered| -> Vec<(usize, Reg)> {
            l.ptx
                .body
                .iter()
                .enumerate()
                .filter_map(|(at, i)| match i.op {
                    Op::Unary {
                        op: UnaryOp::RcpApprox,
                        dst,
                        ..
                    } => Some((at, dst)),
                    _ => None,
                })
                .collect()
        };
        // Elements a thread evaluates in one stretch of code: a chunk of 4
        // in a loop, or with `cache = 1` its 2 slots of 4, unrolled.
        for (cache, elements) in [(0, 4), (1, 8), (2, 4)] {
            let l =
                lower(&k, &rows_with(point(128, 1, 4), cache, 0), SmVersion::Sm90).expect("lowers");
            // `1 / s` once, before the first store; the division by an
            // element's own value stays, once per element.
            let [(at, reciprocal)] = reciprocals(&l)[..] else {
                panic!("cache {cache}: not one reciprocal")
            };
            let divisions = divisions(&l);
            assert!(at < first_store(&l), "cache {cache}");
            assert!(divisions.iter().all(|d| *d > at), "cache {cache}");
            assert_eq!(divisions.len(), elements, "cache {cache}");
            let products = count(
                &l,
                |op| matches!(op, Op::Arith { op: ArithOp::Mul, b, .. } if *b == Operand::Reg(reciprocal)),
            );
            assert_eq!(products, elements, "cache {cache}");
        }
    }

    fn softmax(r: u32, c: u32) -> Kernel {
        parse_kernel(
            quote!(shape(R = #r, C = #c)),
            quote! {
                fn softmax(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
                    compute(|r, c| {
                        let mx = max(C, |j| x[r][j]);
                        let s = sum(C, |j| exp(x[r][j] - mx));
                        exp(x[r][c] - mx) / s
                    })
                }
            },
        )
        .expect("valid kernel")
    }

    fn online(s: Schedule) -> Schedule {
        match s {
            Schedule::Rows {
                threads_per_row,
                rows_per_block,
                vector,
                cache,
                tree,
                ..
            } => Schedule::Rows {
                threads_per_row,
                rows_per_block,
                vector,
                cache,
                tree,
                online: 1,
                cluster: 1,
            },
            other => other,
        }
    }

    #[test]
    fn online_softmax_reads_the_row_twice() {
        let k = softmax(10, 1000);
        let exps = |l: &Lowered| {
            count(l, |op| {
                matches!(
                    op,
                    Op::Unary {
                        op: crate::ptx::inst::UnaryOp::Ex2,
                        ..
                    }
                )
            })
        };
        let two_pass = lower(&k, &point(128, 1, 4), SmVersion::Sm90).expect("lowers");
        assert_eq!(global_loads(&two_pass), [4, 4, 4]);
        // The sum's 4 exponentials a chunk, the outputs' 4.
        assert_eq!(exps(&two_pass), 4 + 4);
        for tree in [0, 1] {
            let l = lower(
                &k,
                &online(rows_with(point(128, 1, 4), 0, tree)),
                SmVersion::Sm90,
            )
            .expect("lowers");
            // The maximum and the sum read a chunk once; the outputs again.
            assert_eq!(global_loads(&l), [4, 4]);
            // A chunk's 4 terms and its rescaling, the rescaling to the
            // row's maximum, the outputs' 4.
            assert_eq!(exps(&l), 4 + 1 + 1 + 4);
            // Still one combine per reduction: across warps, a barrier
            // each (shuffles) or one per level and one to start (a tree).
            let barriers = if tree == 0 { 2 } else { 2 * (1 + 7) };
            assert_eq!(count(&l, |op| matches!(op, Op::BarSync)), barriers);
        }
    }

    #[test]
    fn a_mean_and_variance_read_the_row_once_together() {
        let k = layernorm(10, 1000);
        let two_pass = lower(&k, &point(128, 3, 4), SmVersion::Sm90).expect("lowers");
        // The mean, the variance (two loads of `x`), the outputs.
        assert_eq!(global_loads(&two_pass), [4, 4, 4, 4]);
        let l = lower(&k, &online(point(128, 3, 4)), SmVersion::Sm90).expect("lowers");
        // The thread's first chunk, for its shift; the pass; the outputs.
        assert_eq!(global_loads(&l), [4, 4, 4]);
        // Still one combine per reduction, a barrier each across warps.
        assert_eq!(count(&l, |op| matches!(op, Op::BarSync)), 2);
        // Per value: its difference from the shift, added to the sum and,
        // squared, to the sum of squares (one fused multiply-add).
        // Then `n·K + a`, `n·c + 2a` and `c·(n·c + 2a) + b`.
        let fmas = |l: &Lowered| count(l, |op| matches!(op, Op::Mad { ty: Ty::F32, .. }));
        assert_eq!(fmas(&l) - fmas(&two_pass), 4 + 3);
    }

    #[test]
    fn online_needs_a_pair_and_a_row_read_per_pass() {
        let share = parse_kernel(
            quote!(shape(R = 4, C = 64)),
            quote! {
                fn share(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
                    compute(|r, c| x[r][c] / sum(C, |j| x[r][j]))
                }
            },
        )
        .expect("valid kernel");
        let reason = invalid(&share, online(point(32, 1, 1)), SmVersion::Sm90);
        assert!(reason.contains("online 1 pairs nothing"), "{reason}");
        for cache in [1, 2] {
            let s = online(rows_with(point(32, 1, 1), cache, 0));
            let reason = invalid(&softmax(4, 64), s, SmVersion::Sm90);
            assert!(reason.contains(&format!("with cache {cache}")), "{reason}");
        }
        let s = Class::Rows
            .schedule(&[32, 1, 1, 0, 0, 2, 1])
            .expect("seven knobs");
        let reason = invalid(&softmax(4, 64), s, SmVersion::Sm90);
        assert!(reason.contains("online 2; expected 0"), "{reason}");
    }

    #[test]
    fn clusters_spread_rows_on_sm90_only() {
        let k = softmax(4, 4096);
        let spread = |cluster, cache| {
            Class::Rows
                .schedule(&[1024, 1, 4, cache, 0, 0, cluster])
                .expect("seven knobs")
        };
        for cluster in [3, 16] {
            let reason = invalid(&k, spread(cluster, 0), SmVersion::Sm90);
            assert!(
                reason.contains(&format!("cluster {cluster}; expected 1")),
                "{reason}"
            );
        }
        let reason = invalid(&k, spread(4, 0), SmVersion::Sm80);
        assert!(reason.contains("no thread-block clusters"), "{reason}");
        // Four blocks of 1,024 threads a row: a grid of four blocks a row,
        // a cluster the kernel requires, and one exchange per reduction.
        let lowered = lower(&k, &spread(4, 0), SmVersion::Sm90).expect("valid");
        assert_eq!(lowered.launch.grid, [16, 1, 1]);
        assert_eq!(lowered.ptx.cluster_blocks, 4);
        let waits = count(&lowered, |op| matches!(op, Op::ClusterWait));
        assert_eq!(waits, 3, "two reductions and the wait before the exit");
        let remote = count(&lowered, |op| {
            matches!(
                op,
                Op::Ld {
                    space: Space::SharedCluster,
                    ..
                }
            )
        });
        assert_eq!(
            remote, 2,
            "a block's value a thread, for each of two reductions"
        );
        let few = Class::Rows
            .schedule(&[4, 8, 1, 0, 0, 0, 8])
            .expect("seven knobs");
        let reason = invalid(&k, few, SmVersion::Sm90);
        assert!(reason.contains("must be at least as many"), "{reason}");
        // Kept in shared memory, each block keeps a quarter of the row.
        let whole = lower(&k, &spread(1, 2), SmVersion::Sm90).expect("valid");
        let quarter = lower(&k, &spread(4, 2), SmVersion::Sm90).expect("valid");
        let kept = |l: &Lowered, slots: u32| l.launch.dynamic_shared_bytes - slots;
        // The tree's 2 × 32 slots; with the cluster, 2 reductions' slots.
        assert_eq!(kept(&whole, 256), 4096 * 4);
        assert_eq!(kept(&quarter, 256 + 16), 1024 * 4);
    }

    #[test]
    fn a_row_that_vector_does_not_divide_is_peeled() {
        // Rows of 1025: each pass reads its chunks four values at a time,
        // then its leftover positions one at a time.
        let k = softmax(10, 1025);
        let l = lower(&k, &point(128, 1, 4), SmVersion::Sm90).expect("lowers");
        let (load, store) = (true, false);
        assert_eq!(
            l.global_accesses(),
            [
                (load, 4),
                (load, 1),
                (load, 4),
                (load, 1),
                (load, 4),
                (store, 4),
                (load, 1),
                (store, 1)
            ]
        );
        let l = lower(&k, &online(point(128, 1, 2)), SmVersion::Sm90).expect("lowers");
        assert_eq!(
            l.global_accesses(),
            [
                (load, 2),
                (load, 1),
                (load, 2),
                (store, 2),
                (load, 1),
                (store, 1)
            ]
        );
        // The variance's shift is read from the thread's first chunk.
        let l = lower(
            &k_affine(3, 1025),
            &online(point(64, 1, 4)),
            SmVersion::Sm90,
        )
        .expect("lowers");
        // `g[c]` and `b[c]` start every row aligned, `x[r][·]` and the
        // output do not: the weights are read one value at a time (four
        // each per chunk of outputs).
        assert_eq!(
            l.global_accesses(),
            [
                (load, 4),
                (load, 4),
                (load, 1),
                (load, 4),
                (load, 1),
                (load, 1),
                (load, 1),
                (load, 1),
                (load, 1),
                (load, 1),
                (load, 1),
                (load, 1),
                (store, 4),
                (load, 1),
                (load, 1),
                (load, 1),
                (store, 1)
            ]
        );
        // A row that `vector` divides is not peeled: no leftovers.
        let l = lower(&softmax(10, 1024), &point(128, 1, 4), SmVersion::Sm90).expect("lowers");
        assert!(l.global_accesses().iter().all(|(_, n)| *n == 4));
    }

    /// Layernorm over rows of `c` with a weight and a bias.
    fn k_affine(r: u32, c: u32) -> Kernel {
        parse_kernel(
            quote!(shape(R = #r, C = #c)),
            quote! {
                fn layernorm(x: Tensor<f32, (R, C)>, g: Tensor<f32, (C,)>, b: Tensor<f32, (C,)>)
                    -> Tensor<f32, (R, C)>
                {
                    compute(|r, c| {
                        let mu = mean(C, |j| x[r][j]);
                        let var = mean(C, |j| (x[r][j] - mu) * (x[r][j] - mu));
                        (x[r][c] - mu) * rsqrt(var + 0.00001) * g[c] + b[c]
                    })
                }
            },
        )
        .expect("valid kernel")
    }

    #[test]
    fn a_shared_tree_has_a_barrier_per_level() {
        let k = layernorm(10, 1024);
        let l = lower(&k, &rows_with(point(128, 3, 4), 0, 1), SmVersion::Sm90).expect("lowers");
        // Per reduction: a barrier after the writes and after each of the 7
        // levels of 128 threads.
        assert_eq!(count(&l, |op| matches!(op, Op::BarSync)), 2 * (1 + 7));
        assert_eq!(count(&l, |op| matches!(op, Op::Shfl { .. })), 0);
        assert_eq!(l.launch.dynamic_shared_bytes, 2 * 3 * 128 * 4);
        assert_eq!(count(&l, |op| matches!(op, Op::Ret)), 1);
    }

    #[test]
    fn launch_and_collectives() {
        let k = layernorm(10, 1024);
        // Two reductions across 4 warps: one barrier each, two slot sets.
        let l = lower(&k, &point(128, 3, 4), SmVersion::Sm90).expect("lowers");
        assert_eq!(l.launch.grid, [4, 1, 1]);
        assert_eq!(l.launch.block, [384, 1, 1]);
        assert_eq!(l.launch.dynamic_shared_bytes, 2 * 3 * 4 * 4);
        assert_eq!(l.ptx.dynamic_shared_bytes, l.launch.dynamic_shared_bytes);
        assert_eq!(count(&l, |op| matches!(op, Op::BarSync)), 2);
        // 5 butterfly steps within a warp and 2 across the 4 warps, per reduction.
        assert_eq!(count(&l, |op| matches!(op, Op::Shfl { .. })), 2 * (5 + 2));
        // The only `ret` is the last instruction: no thread leaves before a
        // collective.
        assert_eq!(count(&l, |op| matches!(op, Op::Ret)), 1);
        assert!(matches!(l.ptx.body.last().map(|i| &i.op), Some(Op::Ret)));

        // Sub-warp groups of 8: three butterfly steps, no shared memory.
        let l = lower(&k, &point(8, 4, 1), SmVersion::Sm80).expect("lowers");
        assert_eq!(l.launch.grid, [3, 1, 1]);
        assert_eq!(l.launch.dynamic_shared_bytes, 0);
        assert_eq!(count(&l, |op| matches!(op, Op::BarSync)), 0);
        assert_eq!(count(&l, |op| matches!(op, Op::Shfl { .. })), 2 * 3);

        // One thread per row: no collective at all.
        let l = lower(&k, &point(1, 32, 1), SmVersion::Sm80).expect("lowers");
        assert_eq!(
            count(&l, |op| matches!(op, Op::Shfl { .. } | Op::BarSync)),
            0
        );
    }
}
