//! The row in shared memory (`cache = 2`): a fill pass copies every kept
//! pattern's row from global memory into shared memory, as f32, and after
//! one barrier every pass reads its kept loads there instead of global
//! memory. Each pass keeps its loop over the row (thread `t` takes chunks
//! `t, t + T, …`), so a row far longer than the registers hold is still
//! read from DRAM once.
//!
//! **Layout.** After the combine tree's slots ([`super::super::shared_bytes`],
//! a multiple of 16 bytes) and the cluster's, each row of the block has its
//! region: per kept pattern, `extent` f32 values, each pattern's values
//! starting 16 bytes aligned, so that `vector`-wide accesses at positions
//! that are multiples of `vector` are aligned. A row spread over a cluster
//! of `C` blocks has each block keep only its slice of each pattern
//! ([`Slice`]), from the slice's first position.
//! [`CachePlan::shared_bytes_per_row`] is a row's region; a point whose block needs more than the target allows breaks
//! [`Constraint::SharedMemory`](crate::lower::Constraint).
//!
//! **Fill.** Each thread copies its chunks of `vector` values. On targets
//! with `cp.async` (sm_80 and newer), a pattern of f32 values consecutive
//! along the row is copied by `cp.async`, `4 · vector` bytes a copy: the
//! copies need no registers, so a thread starts all of its share of the
//! row before waiting for any (`cp.async.wait_all`, then the barrier), and
//! the whole row is in flight at once. Other patterns (16-bit values,
//! widened to f32 on the way, or values strided along the row) go through
//! registers, up to [`FILL_VALUES`] values per iteration: all the
//! iteration's loads are issued before its first store, so a thread has
//! that many values in flight (a load followed by its store would have
//! one). Either way, chunks past the row's end are skipped (a register
//! load reads a clamped, valid position and skips its store).

use std::collections::HashMap;

use super::{CachePlan, Kept, Pass, chunk_address, load_chunk, slots};
use crate::dtype::DType;
use crate::ir::{Expr, ExprId, Kernel};
use crate::lower::elementwise::load_vec;
use crate::lower::expr::Env;
use crate::lower::rows::{Shape, Slice, Walk, chunk_start, clamped_chunk, strided_loop};
use crate::ptx::Builder;
use crate::ptx::inst::{Addr, ArithOp, Cmp, CpAsyncCache, Op, Operand, Reg, Space, Ty};
use crate::target::SmVersion;

/// The most values a thread loads in one iteration of the fill before it
/// stores them.
pub const FILL_VALUES: u32 = 16;

/// Alignment of each kept pattern's values in shared memory.
const ALIGN: u32 = 16;

impl CachePlan {
    /// Bytes of shared memory a block keeps of one row's kept patterns
    /// with `cache = 2`, for rows read `vector` values at a time spread
    /// over a cluster of `blocks` (1: none): its slice of each pattern as
    /// f32 values, each pattern 16-byte aligned.
    pub fn shared_bytes_per_row(&self, vector: u32, blocks: u32) -> u64 {
        self.kept
            .iter()
            .map(|k| {
                (u64::from(kept_extent(k.extent, vector, blocks)) * 4)
                    .next_multiple_of(u64::from(ALIGN))
            })
            .sum()
    }

    /// Bytes of shared memory one row's fill writes and its passes read
    /// with `cache = 2`: each kept pattern once, then once per pass that
    /// reads it.
    pub fn shared_traffic_per_row(&self) -> u64 {
        let bytes = |kept: usize| u64::from(self.kept[kept].extent) * 4;
        let fill: u64 = (0..self.kept.len()).map(bytes).sum();
        let passes: u64 = self
            .reads
            .keys()
            .map(|pass| self.kept_by(*pass).into_iter().map(bytes).sum::<u64>())
            .sum();
        fill + passes
    }

    /// What the fill of a row asks of each of its `threads_per_row`
    /// threads, reading `vector` values at a time on `target`.
    pub fn fill_cost(
        &self,
        kernel: &Kernel,
        threads_per_row: u32,
        vector: u32,
        target: SmVersion,
    ) -> FillCost {
        let (copied, loaded): (Vec<&Kept>, Vec<&Kept>) = self
            .kept
            .iter()
            .partition(|k| copies_async(kernel, k, target));
        let registers = loaded
            .iter()
            .map(|k| fill_chunks(k.extent, threads_per_row, vector) * vector)
            .max()
            .unwrap_or_default();
        let copies: u32 = copied
            .iter()
            .map(|k| slots(k.extent, threads_per_row, vector) * vector)
            .sum();
        FillCost {
            registers,
            in_flight: registers.max(copies),
        }
    }
}

/// What the fill of a row in shared memory asks of each thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FillCost {
    /// Registers holding values between their load and their store: one
    /// iteration's values of the patterns copied through registers.
    pub registers: u32,
    /// Values in flight at once: a register iteration's, or the thread's
    /// whole share of the patterns copied by `cp.async`, whichever is more.
    pub in_flight: u32,
}

/// The positions of a row of `extent` that a block keeps: all of them, or
/// its slice of a row spread over a cluster of `blocks`.
fn kept_extent(extent: u32, vector: u32, blocks: u32) -> u32 {
    match blocks {
        1 => extent,
        _ => Slice::span(blocks, vector, extent),
    }
}

/// Whether the fill copies kept pattern `k` by `cp.async` on `target`:
/// f32 values (shared memory holds f32, so 16-bit values are widened on
/// the way, through registers), consecutive along the row, so that a
/// chunk's `vector` values are one copy.
fn copies_async(kernel: &Kernel, k: &Kept, target: SmVersion) -> bool {
    target.has_async_copy()
        && kernel.input(k.pattern.tensor).dtype == DType::F32
        && k.index.last() == Some(&k.position)
}

/// Chunks a thread fills per iteration along an extent.
fn fill_chunks(extent: u32, threads_per_row: u32, vector: u32) -> u32 {
    (FILL_VALUES / vector)
        .min(slots(extent, threads_per_row, vector))
        .max(1)
}

/// Pushes `op`, guarded by `inside` when there is one.
fn push_inside(b: &mut Builder, inside: Option<Reg>, op: Op) {
    match inside {
        Some(inside) => b.push_guarded(inside, false, op),
        None => b.push(op),
    }
}

/// The thread's row, filled into shared memory.
pub(in crate::lower::rows) struct SharedRow<'p> {
    plan: &'p CachePlan,
    /// Per kept pattern: the shared address its position 0 would have, so
    /// that its first kept position (the slice's start, with a cluster)
    /// lies at the start of its values.
    rows: Vec<Reg>,
    /// Per kept pattern: the byte offset of its values from its row's.
    offsets: Vec<u32>,
}

impl<'p> SharedRow<'p> {
    /// Copies every kept pattern of the thread's row (`env` binds the row
    /// variables) into the row's region of shared memory, then waits at a
    /// barrier for the whole block's copies: with a cluster, the block's
    /// slice of the row. `offset` is where the rows' regions start in the
    /// dynamic shared memory window.
    pub fn fill(
        b: &mut Builder,
        kernel: &Kernel,
        plan: &'p CachePlan,
        env: &Env,
        (lane, row_in_block): (Reg, Reg),
        (shape, walk): (&Shape, Walk),
        offset: u32,
    ) -> SharedRow<'p> {
        let (threads, vector, blocks) = (walk.threads, walk.vector, shape.cluster);
        let base = b.shared_base();
        let row_bytes = u32::try_from(plan.shared_bytes_per_row(vector, blocks))
            .expect("checked: the rows fit the target's shared memory");
        let region = b.u32_mad(row_in_block, Operand::Int(i64::from(row_bytes)), base);
        let mut offsets = Vec::with_capacity(plan.kept.len());
        let mut next = offset;
        for k in &plan.kept {
            offsets.push(next);
            next += (kept_extent(k.extent, vector, blocks) * 4).next_multiple_of(ALIGN);
        }
        let mut copied = false;
        let mut rows = Vec::with_capacity(plan.kept.len());
        for (k, &offset) in plan.kept.iter().zip(&offsets) {
            // With a cluster, the block's slice: position `p` kept at
            // `p − start`.
            let (start, end, row) = match walk.slice {
                Some(slice) => {
                    let (begin, end) = slice.range(b, k.extent, vector);
                    let start = b.u32_op(ArithOp::Add, begin, lane);
                    let bytes = Operand::Int(i64::from(4 * vector));
                    let before = b.u32_op(ArithOp::Mul, begin, bytes);
                    let row = b.u32_op(ArithOp::Sub, region, before);
                    (start, Some(end), row)
                }
                None => (lane, None, region),
            };
            rows.push(row);
            let chunks = k.extent / vector;
            let unroll = fill_chunks(k.extent, threads * blocks, vector);
            let whole = end.is_none() && chunks.is_multiple_of(threads * unroll);
            let asynchronous = copies_async(kernel, k, shape.target);
            copied |= asynchronous;
            let count = end.map_or(Operand::Int(i64::from(chunks)), Operand::Reg);
            strided_loop(b, start, count, threads * unroll, |b, chunk| {
                let mut pending = Vec::with_capacity(unroll as usize);
                for u in 0..unroll {
                    let chunk = match u {
                        0 => chunk,
                        _ => b.u32_op(ArithOp::Add, chunk, Operand::Int(i64::from(u * threads))),
                    };
                    let (chunk, inside) = match end {
                        Some(end) if u > 0 => {
                            let inside = b.setp(Cmp::Lt, Ty::U32, chunk, end);
                            let last = Operand::Int(i64::from(chunks - 1));
                            (b.u32_op(ArithOp::Min, chunk, last), Some(inside))
                        }
                        _ => clamped_chunk(b, chunk, chunks, u > 0 && !whole),
                    };
                    let first = chunk_start(b, chunk, vector);
                    let dst = Addr {
                        base: b.u32_mad(first, Operand::Int(4), row),
                        offset: i64::from(offset),
                    };
                    if asynchronous {
                        let copy = Op::CpAsync {
                            cache: CpAsyncCache::Ca,
                            dst,
                            src: chunk_address(b, kernel, k, env, first),
                            bytes: 4 * vector,
                            src_bytes: None,
                        };
                        push_inside(b, inside, copy);
                    } else {
                        let values = load_chunk(b, kernel, k, env, first, vector);
                        pending.push((dst, inside, values));
                    }
                }
                for (dst, inside, values) in pending {
                    let store = Op::St {
                        space: Space::Shared,
                        ty: Ty::F32,
                        addr: dst,
                        srcs: values.into_iter().map(Operand::Reg).collect(),
                    };
                    push_inside(b, inside, store);
                }
            });
        }
        if copied {
            b.push(Op::CpAsyncWaitAll);
        }
        b.push(Op::BarSync);
        SharedRow {
            plan,
            rows,
            offsets,
        }
    }

    /// The kept values of `pass`'s loads for the `n` consecutive positions
    /// from the one `env` binds, read from shared memory, element by
    /// element; empty when the pass reads nothing kept.
    pub fn known(
        &self,
        b: &mut Builder,
        kernel: &Kernel,
        pass: Pass,
        env: &Env,
        n: u32,
    ) -> Vec<HashMap<ExprId, Reg>> {
        let Some(reads) = self.plan.reads.get(&pass) else {
            return Vec::new();
        };
        let var = match pass {
            Pass::Reduce(id) => match kernel.expr(id) {
                Expr::Reduce { var, .. } => *var,
                _ => unreachable!("a reduction pass is a reduction"),
            },
            Pass::Outputs => self
                .plan
                .root_position
                .expect("the outputs read kept values along the row's inner variable"),
        };
        let mut values: HashMap<usize, Vec<Reg>> = HashMap::new();
        // The position's address in each distinct row register (one for
        // every pattern, without a cluster).
        let mut bases: HashMap<Reg, Reg> = HashMap::new();
        let mut known = vec![HashMap::new(); n as usize];
        for &(load, kept) in reads {
            let regs = values.entry(kept).or_insert_with(|| {
                let row = self.rows[kept];
                let base = *bases
                    .entry(row)
                    .or_insert_with(|| b.u32_mad(env.index[&var], Operand::Int(4), row));
                let addr = Addr {
                    base,
                    offset: i64::from(self.offsets[kept]),
                };
                load_vec(b, Space::Shared, DType::F32, addr, n)
            });
            for (element, r) in known.iter_mut().zip(regs.iter()) {
                element.insert(load, *r);
            }
        }
        known
    }
}
