//! One pass over global memory: what a row keeps of the tensors several
//! passes read. With `cache = 1` each thread loads the row elements it owns
//! once, into registers, and every pass over the row (each reduction, then
//! the row's outputs) reads them there; with `cache = 2` ([`shared`]) the
//! block copies the kept rows into shared memory once and every pass reads
//! them there.
//!
//! **What is kept.** A pass reads a row along its *position*: the variable
//! a reduction runs over, or the row's inner variable when the row's
//! outputs have exactly one. A load whose index is row variables plus the
//! position, once, reads the row of a tensor; two such loads read the same
//! values when they name the same tensor with the same index, position
//! aside (a *pattern*). Patterns that more than one pass reads are kept:
//! softmax's `x[r][·]`, read by its max, its sum and its outputs, is one
//! pattern read three times, so the row is read once instead of three
//! times. This is the single read that online softmax or Welford's
//! algorithm give, had generically from the IR: nothing matches softmax,
//! and any row computation with several passes gets it, at the cost of
//! registers or shared memory; `online` ([`super::online`]) instead saves
//! one read without keeping anything, for the two shapes it recognises.
//! A row whose tensors are
//! each read by one pass has nothing to keep, and `cache` 1 and 2 are out
//! of range there (the space offers them only where they apply).
//!
//! **Who owns what** (`cache = 1`). Position `p` belongs to lane `(p / vector) mod T`
//! (of its block's slice, counted from the slice's start, with `cluster`
//! above 1), in
//! slot `p / (vector · T)`: the split the multi-pass loops use, unrolled
//! over the `⌈E / (vector · T)⌉` slots of a pattern of extent `E`. The
//! elements a thread holds therefore follow from the row length,
//! `threads_per_row` and `vector` (shapes are static), which is why there
//! is no knob for them: one would repeat `threads_per_row`, with all but
//! one of its values invalid for each. [`CachePlan::values_per_thread`]
//! reports them. In the last slot, lanes past the row's end load a clamped
//! (valid) position, and their values drop out: a reduction folds its
//! identity instead, and no output is stored.
//!
//! **Cost.** With `cache = 1`, registers: the kept values, one f32
//! register each, plus [`WORKING_REGISTERS`] for the rest of the row's
//! work, must fit [`REGISTER_BUDGET`] and each thread's share of the
//! register file at the block's size, or the point breaks
//! [`Constraint::Registers`]. With `cache = 2`, shared memory: the block's
//! rows must fit the target's, or the point breaks
//! [`Constraint::SharedMemory`].

mod shared;

use std::collections::{HashMap, HashSet};

pub(super) use shared::SharedRow;

use super::{Slice, Walk, chunk_start, clamped_chunk};
use crate::ir::{Expr, ExprId, Kernel, LetId, TensorId, VarId};
use crate::lower::classify::{RowPlan, RowStep};
use crate::lower::elementwise::{emit_consecutive_with, load_vec, store_vec};
use crate::lower::expr::{self, Env};
use crate::lower::{Constraint, Violation};
use crate::ptx::Builder;
use crate::ptx::inst::{Addr, ArithOp, Cmp, Operand, Reg, Ty};
use crate::target::SmVersion;

/// Registers a one-pass row needs besides its kept values: addresses,
/// indices, accumulators and the temporaries of the expressions.
pub const WORKING_REGISTERS: u32 = 40;

/// The most registers a one-pass row's estimate may reach, below the
/// hardware's 255 so that ptxas keeps room to schedule without spilling.
pub const REGISTER_BUDGET: u32 = 200;

/// A tensor read along a row: its index with the position left open.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Pattern {
    tensor: TensorId,
    index: Vec<Option<VarId>>,
}

/// A pattern kept in registers.
#[derive(Debug, Clone)]
struct Kept {
    pattern: Pattern,
    /// One load of it: its index and the position variable in it.
    index: Vec<VarId>,
    position: VarId,
    extent: u32,
}

impl Kept {
    /// Bytes of one row of it in global memory.
    fn bytes(&self, kernel: &Kernel) -> u64 {
        u64::from(self.extent) * u64::from(kernel.input(self.pattern.tensor).dtype.size())
    }
}

/// A pass over a row: one of its reductions, or its outputs. (The two are
/// kept apart even where the root is itself a reduction, a row's sum: its
/// outputs then read nothing along the row.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pass {
    Reduce(ExprId),
    Outputs,
}

/// The loads a one-pass row keeps in registers.
#[derive(Debug, Clone)]
pub struct CachePlan {
    kept: Vec<Kept>,
    /// Per pass that reads a kept pattern: its load nodes of kept
    /// patterns, each with the pattern's index.
    reads: HashMap<Pass, Vec<(ExprId, usize)>>,
    /// The row's inner variable, when the outputs read kept patterns.
    root_position: Option<VarId>,
    /// Passes over the row (its reductions, then its outputs).
    passes: u32,
    /// Of those, the passes that also read, along the row, a tensor no
    /// other pass reads: it is not kept, so they load it from global
    /// memory on every iteration.
    global_passes: u32,
}

impl CachePlan {
    /// What a one-pass schedule of `plan` keeps.
    pub fn of(kernel: &Kernel, plan: &RowPlan) -> CachePlan {
        let mut passes: Vec<(Pass, VarId, Vec<ExprId>)> = Vec::new();
        for r in plan.reductions() {
            if let Expr::Reduce { var, body, .. } = kernel.expr(r) {
                let mut loads = Vec::new();
                pass_loads(kernel, *body, &HashSet::new(), &mut loads);
                passes.push((Pass::Reduce(r), *var, loads));
            }
        }
        if let [inner] = plan.inner_vars[..] {
            let row_lets: HashSet<LetId> = plan
                .steps
                .iter()
                .filter_map(|s| match s {
                    RowStep::Let(l) => Some(*l),
                    RowStep::Reduce(_) => None,
                })
                .collect();
            let mut loads = Vec::new();
            pass_loads(kernel, kernel.root, &row_lets, &mut loads);
            passes.push((Pass::Outputs, inner, loads));
        }

        let patterns: Vec<Vec<(ExprId, Pattern)>> = passes
            .iter()
            .map(|(_, position, loads)| {
                loads
                    .iter()
                    .filter_map(|l| pattern(kernel, plan, *l, *position).map(|p| (*l, p)))
                    .collect()
            })
            .collect();
        let mut readers: HashMap<&Pattern, usize> = HashMap::new();
        for pass in &patterns {
            let distinct: HashSet<&Pattern> = pass.iter().map(|(_, p)| p).collect();
            for p in distinct {
                *readers.entry(p).or_default() += 1;
            }
        }

        let global_passes = patterns
            .iter()
            .filter(|pass| pass.iter().any(|(_, p)| readers[p] < 2))
            .count();

        let mut kept: Vec<Kept> = Vec::new();
        let mut reads: HashMap<Pass, Vec<(ExprId, usize)>> = HashMap::new();
        let mut root_position = None;
        for ((pass, position, _), loads) in passes.iter().zip(&patterns) {
            for (load, p) in loads {
                if readers[p] < 2 {
                    continue;
                }
                let slot = match kept.iter().position(|k| k.pattern == *p) {
                    Some(slot) => slot,
                    None => {
                        let Expr::Load { index, .. } = kernel.expr(*load) else {
                            unreachable!("patterns come from loads")
                        };
                        kept.push(Kept {
                            pattern: p.clone(),
                            index: index.clone(),
                            position: *position,
                            extent: kernel.extent(*position),
                        });
                        kept.len() - 1
                    }
                };
                reads.entry(*pass).or_default().push((*load, slot));
                if *pass == Pass::Outputs {
                    root_position = Some(*position);
                }
            }
        }
        CachePlan {
            kept,
            reads,
            root_position,
            passes: passes.len() as u32,
            global_passes: global_passes as u32,
        }
    }

    /// Passes over the row, and how many of them read a tensor from global
    /// memory on every iteration besides what is kept.
    pub fn passes(&self) -> (u32, u32) {
        (self.passes, self.global_passes)
    }

    /// Bytes of a row that passes read again when nothing is kept: each
    /// kept pattern once for every pass that reads it after the first.
    pub fn re_read_bytes_per_row(&self, kernel: &Kernel) -> u64 {
        let read: u64 = self
            .reads
            .keys()
            .map(|pass| self.pass_bytes(kernel, *pass))
            .sum();
        let once: u64 = self.kept.iter().map(|k| k.bytes(kernel)).sum();
        read.saturating_sub(once)
    }

    /// Bytes of the kept patterns' rows that `pass` reads.
    pub fn pass_bytes(&self, kernel: &Kernel, pass: Pass) -> u64 {
        self.kept_by(pass)
            .into_iter()
            .map(|k| self.kept[k].bytes(kernel))
            .sum()
    }

    /// The kept patterns `pass` reads, each once.
    fn kept_by(&self, pass: Pass) -> HashSet<usize> {
        self.reads
            .get(&pass)
            .into_iter()
            .flatten()
            .map(|(_, kept)| *kept)
            .collect()
    }

    /// Whether no tensor is read by more than one pass over the row.
    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    /// The values each thread keeps in registers with `threads_per_row`
    /// threads reading `vector` consecutive elements at a time.
    pub fn values_per_thread(&self, threads_per_row: u32, vector: u32) -> u32 {
        self.kept
            .iter()
            .map(|k| slots(k.extent, threads_per_row, vector) * vector)
            .sum()
    }

    /// Checks that the kept values fit the registers of a block of `block`
    /// threads on `target`.
    pub(super) fn check(
        &self,
        kernel: &Kernel,
        threads_per_row: u32,
        vector: u32,
        block: u32,
        target: SmVersion,
    ) -> Result<(), Violation> {
        let values = self.values_per_thread(threads_per_row, vector);
        let budget = REGISTER_BUDGET.min(target.limits().registers_per_sm / block.max(1));
        if WORKING_REGISTERS.saturating_add(values) <= budget {
            return Ok(());
        }
        let each: Vec<String> = self
            .kept
            .iter()
            .map(|k| {
                format!(
                    "{} of `{}`",
                    slots(k.extent, threads_per_row, vector) * vector,
                    kernel.input(k.pattern.tensor).name
                )
            })
            .collect();
        Err(Violation::new(
            Constraint::Registers,
            format!(
                "one pass keeps {values} values per thread in registers ({}, for rows of {} over {threads_per_row} threads); with {block} threads per block a thread has {budget} registers, {WORKING_REGISTERS} of them for the row's other work",
                each.join(", "),
                self.kept.iter().map(|k| k.extent).max().unwrap_or_default()
            ),
        ))
    }
}

/// Chunks of `vector` elements per thread along an extent.
fn slots(extent: u32, threads_per_row: u32, vector: u32) -> u32 {
    (extent / vector).div_ceil(threads_per_row)
}

/// The loads a pass evaluates: through `lets` (the lets evaluated per
/// element), not into reductions (computed as steps of their own).
fn pass_loads(kernel: &Kernel, id: ExprId, lets: &HashSet<LetId>, out: &mut Vec<ExprId>) {
    match kernel.expr(id) {
        Expr::Load { .. } => {
            if !out.contains(&id) {
                out.push(id);
            }
        }
        Expr::Let(l) if !lets.contains(l) => pass_loads(kernel, kernel.let_(*l).value, lets, out),
        Expr::Let(_) | Expr::Reduce { .. } => {}
        _ => {
            for c in kernel.children(id) {
                pass_loads(kernel, c, lets, out);
            }
        }
    }
}

/// The pattern `load` reads along `position`: when its index is row
/// variables and `position` once.
fn pattern(kernel: &Kernel, plan: &RowPlan, load: ExprId, position: VarId) -> Option<Pattern> {
    let Expr::Load { tensor, index } = kernel.expr(load) else {
        return None;
    };
    let along = index.iter().filter(|v| **v == position).count();
    let rest_in_row = index
        .iter()
        .all(|v| *v == position || plan.row_vars.contains(v));
    (along == 1 && rest_in_row).then(|| Pattern {
        tensor: *tensor,
        index: index
            .iter()
            .map(|v| (*v != position).then_some(*v))
            .collect(),
    })
}

/// Loads the `vector` values of kept pattern `k` from position `first` on,
/// in the row `env` binds, widened to f32: one access when the position is
/// the tensor's innermost index, one per value otherwise.
fn load_chunk(
    b: &mut Builder,
    kernel: &Kernel,
    k: &Kept,
    env: &Env,
    first: Reg,
    vector: u32,
) -> Vec<Reg> {
    let dtype = kernel.input(k.pattern.tensor).dtype;
    if k.index.last() == Some(&k.position) {
        let addr = chunk_address(b, kernel, k, env, first);
        return load_vec(b, env.input_space(), dtype, addr, vector);
    }
    (0..vector)
        .map(|i| {
            let position = match i {
                0 => first,
                _ => b.u32_op(ArithOp::Add, first, Operand::Int(i64::from(i))),
            };
            let addr = chunk_address(b, kernel, k, env, position);
            b.load(env.input_space(), dtype, addr)
        })
        .collect()
}

/// The global address of kept pattern `k`'s value at `position` in the row
/// `env` binds.
fn chunk_address(b: &mut Builder, kernel: &Kernel, k: &Kept, env: &Env, position: Reg) -> Addr {
    let t = kernel.input(k.pattern.tensor);
    let mut at = env.clone();
    at.index.insert(k.position, position);
    let flat = expr::flat_index(b, &at, &k.index, &kernel.strides_of(t));
    let base = b.global_addr(env.inputs[k.pattern.tensor.0], flat, t.dtype.size());
    Addr { base, offset: 0 }
}

/// A thread's slots along one extent: the first position of each slot
/// (clamped into the row), and whether the slot is in the row, for the last
/// slot when some lanes run past the end.
struct Slots {
    first: Vec<Reg>,
    inside: Vec<Option<Reg>>,
}

/// The kept values of one row, loaded.
pub(super) struct Cache<'p> {
    plan: &'p CachePlan,
    vector: u32,
    /// Per kept pattern: slot by slot, `vector` values each.
    values: Vec<Vec<Reg>>,
    slots: HashMap<u32, Slots>,
}

impl<'p> Cache<'p> {
    /// Loads every kept value of the thread's row (`env` binds the row
    /// variables), all before the first is used.
    pub fn load(
        b: &mut Builder,
        kernel: &Kernel,
        plan: &'p CachePlan,
        env: &Env,
        lane: Reg,
        walk: Walk,
    ) -> Cache<'p> {
        let (threads, vector) = (walk.threads, walk.vector);
        let mut slot_map: HashMap<u32, Slots> = HashMap::new();
        for k in &plan.kept {
            slot_map.entry(k.extent).or_insert_with(|| {
                let chunks = k.extent / vector;
                let mut owned = Slots {
                    first: Vec::new(),
                    inside: Vec::new(),
                };
                // A row spread over a cluster: the block's slice, whose end
                // the slots past the shortest slice's check (a slice may be
                // short, or empty). Checking every slot kept a predicate
                // and a clamped position per slot alive until the outputs.
                let (start, end, count, shortest) = match walk.slice {
                    Some(slice) => {
                        let (begin, end) = slice.range(b, k.extent, vector);
                        let start = b.u32_op(ArithOp::Add, begin, lane);
                        let per = Slice::span(slice.blocks, vector, k.extent) / vector;
                        (start, Some(end), per, slice.shortest(k.extent, vector))
                    }
                    None => (lane, None, chunks, chunks),
                };
                for s in 0..count.div_ceil(threads) {
                    let chunk = match s {
                        0 => start,
                        _ => b.u32_op(ArithOp::Add, start, Operand::Int(i64::from(s * threads))),
                    };
                    let (chunk, inside) = match end {
                        Some(_) if (s + 1) * threads <= shortest => (chunk, None),
                        Some(end) => {
                            let inside = b.setp(Cmp::Lt, Ty::U32, chunk, end);
                            let last = Operand::Int(i64::from(chunks - 1));
                            (b.u32_op(ArithOp::Min, chunk, last), Some(inside))
                        }
                        None => clamped_chunk(b, chunk, chunks, (s + 1) * threads > chunks),
                    };
                    let first = chunk_start(b, chunk, vector);
                    owned.first.push(first);
                    owned.inside.push(inside);
                }
                owned
            });
        }
        let values = plan
            .kept
            .iter()
            .map(|k| {
                slot_map[&k.extent]
                    .first
                    .iter()
                    .flat_map(|&first| load_chunk(b, kernel, k, env, first, vector))
                    .collect()
            })
            .collect();
        Cache {
            plan,
            vector,
            values,
            slots: slot_map,
        }
    }

    /// Whether `pass` reads kept values.
    pub fn reads(&self, pass: Pass) -> bool {
        self.plan.reads.contains_key(&pass)
    }

    /// The kept values of `pass`'s loads in slot `slot`, element by element.
    fn known(&self, pass: Pass, slot: usize) -> Vec<HashMap<ExprId, Reg>> {
        let mut known = vec![HashMap::new(); self.vector as usize];
        for &(load, kept) in &self.plan.reads[&pass] {
            for (i, element) in known.iter_mut().enumerate() {
                element.insert(load, self.values[kept][slot * self.vector as usize + i]);
            }
        }
        known
    }

    /// The thread's partial result of reduction `id` (one that
    /// [`Cache::reads`]), folded from the kept values.
    pub fn partial(&self, b: &mut Builder, kernel: &Kernel, env: &Env, id: ExprId) -> Reg {
        let Expr::Reduce { op, var, body } = *kernel.expr(id) else {
            unreachable!("a reduction step")
        };
        let init = expr::reduce_init(op);
        let acc = b.f32_imm(init);
        let slots = &self.slots[&kernel.extent(var)];
        for (s, (&first, inside)) in slots.first.iter().zip(&slots.inside).enumerate() {
            let mut element = env.clone();
            element.index.insert(var, first);
            let known = self.known(Pass::Reduce(id), s);
            let values =
                emit_consecutive_with(b, kernel, &mut element, body, Some(var), self.vector, known);
            for x in values {
                let x = match inside {
                    Some(inside) => b.f32_select(*inside, x, Operand::F32(init)),
                    None => x,
                };
                expr::fold_into(b, op, acc, x);
            }
        }
        acc
    }

    /// Evaluates and stores the row's outputs (when the root
    /// [`Cache::reads`]) from the kept values, slot by slot.
    pub fn outputs(&self, b: &mut Builder, kernel: &Kernel, env: &Env, out: Reg) {
        let var = self
            .plan
            .root_position
            .expect("the root reads kept values along the row's inner variable");
        let out_vars = kernel.output_vars();
        let strides = kernel.strides_of(&kernel.output);
        let dtype = kernel.output.dtype;
        let contiguous = out_vars.last() == Some(&var);
        let slots = &self.slots[&kernel.extent(var)];
        for (s, (&first, inside)) in slots.first.iter().zip(&slots.inside).enumerate() {
            let mut element = env.clone();
            element.index.insert(var, first);
            let known = self.known(Pass::Outputs, s);
            let values = emit_consecutive_with(
                b,
                kernel,
                &mut element,
                kernel.root,
                Some(var),
                self.vector,
                known,
            );
            let groups: Vec<(u32, &[Reg])> = if contiguous {
                vec![(0, &values[..])]
            } else {
                (0..).zip(values.chunks(1)).collect()
            };
            for (i, group) in groups {
                if i > 0 {
                    let position = b.u32_op(ArithOp::Add, first, Operand::Int(i64::from(i)));
                    element.index.insert(var, position);
                }
                let flat = expr::flat_index(b, &element, &out_vars, &strides);
                let base = b.global_addr(out, flat, dtype.size());
                store_vec(b, dtype, Addr { base, offset: 0 }, group, *inside);
            }
        }
    }
}
