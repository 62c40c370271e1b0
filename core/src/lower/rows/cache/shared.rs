//! The row in shared memory (`cache = 2`): a fill pass copies every kept
//! pattern's row from global memory into shared memory, as f32, and after
//! one barrier every pass reads its kept loads there instead of global
//! memory. Each pass keeps its loop over the row (thread `t` takes chunks
//! `t, t + T, …`), so a row far longer than the registers hold is still
//! read from DRAM once.
//!
//! **Layout.** After the combine tree's slots ([`super::super::shared_bytes`],
//! a multiple of 16 bytes), each row of the block has its region: per kept
//! pattern, `extent` f32 values, each pattern's values starting 16 bytes
//! aligned, so that `vector`-wide accesses at positions that are multiples
//! of `vector` are aligned. [`CachePlan::shared_bytes_per_row`] is a row's
//! region; a point whose block needs more than the target allows breaks
//! [`Constraint::SharedMemory`](crate::lower::Constraint).
//!
//! **Fill.** Each thread copies its chunks of `vector` values, up to
//! [`FILL_VALUES`] of them per iteration: all the iteration's loads are
//! issued before its first store, so a thread has that many values in
//! flight (a load followed by its store would have one). Chunks past the
//! row's end load a clamped (valid) position and skip their store.

use std::collections::{HashMap, HashSet};

use super::{CachePlan, load_chunk, slots};
use crate::dtype::DType;
use crate::ir::{Expr, ExprId, Kernel};
use crate::lower::elementwise::load_vec;
use crate::lower::expr::Env;
use crate::lower::rows::{Shape, chunk_start, clamped_chunk, strided_loop};
use crate::ptx::Builder;
use crate::ptx::inst::{Addr, ArithOp, Op, Operand, Reg, Space, Ty};

/// The most values a thread loads in one iteration of the fill before it
/// stores them.
pub const FILL_VALUES: u32 = 16;

/// Alignment of each kept pattern's values in shared memory.
const ALIGN: u32 = 16;

impl CachePlan {
    /// Bytes of shared memory one row's kept patterns take with `cache = 2`:
    /// `extent` f32 values per pattern, each pattern 16-byte aligned.
    pub fn shared_bytes_per_row(&self) -> u64 {
        self.kept
            .iter()
            .map(|k| (u64::from(k.extent) * 4).next_multiple_of(u64::from(ALIGN)))
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
            .values()
            .map(|reads| {
                let distinct: HashSet<usize> = reads.iter().map(|(_, kept)| *kept).collect();
                distinct.into_iter().map(bytes).sum::<u64>()
            })
            .sum();
        fill + passes
    }

    /// The values a thread of a row of `threads_per_row` threads loads per
    /// iteration of the fill, `vector` at a time: all of its share when
    /// that is fewer than [`FILL_VALUES`].
    pub fn fill_values(&self, threads_per_row: u32, vector: u32) -> u32 {
        self.kept
            .iter()
            .map(|k| fill_chunks(k.extent, threads_per_row, vector) * vector)
            .max()
            .unwrap_or_default()
    }
}

/// Chunks a thread fills per iteration along an extent.
fn fill_chunks(extent: u32, threads_per_row: u32, vector: u32) -> u32 {
    (FILL_VALUES / vector)
        .min(slots(extent, threads_per_row, vector))
        .max(1)
}

/// The thread's row, filled into shared memory.
pub(in crate::lower::rows) struct SharedRow<'p> {
    plan: &'p CachePlan,
    /// Shared address of the row's region.
    row: Reg,
    /// Per kept pattern: the byte offset of its values from `row`.
    offsets: Vec<u32>,
}

impl<'p> SharedRow<'p> {
    /// Copies every kept pattern of the thread's row (`env` binds the row
    /// variables) into the row's region of shared memory, then waits at a
    /// barrier for the whole block's copies. `offset` is where the rows'
    /// regions start in the dynamic shared memory window.
    pub fn fill(
        b: &mut Builder,
        kernel: &Kernel,
        plan: &'p CachePlan,
        env: &Env,
        (lane, row_in_block): (Reg, Reg),
        shape: &Shape,
        offset: u32,
    ) -> SharedRow<'p> {
        let (threads, vector) = (shape.threads_per_row, shape.vector);
        let base = b.shared_base();
        let row_bytes = u32::try_from(plan.shared_bytes_per_row())
            .expect("checked: the rows fit the target's shared memory");
        let row = b.u32_mad(row_in_block, Operand::Int(i64::from(row_bytes)), base);
        let mut offsets = Vec::with_capacity(plan.kept.len());
        let mut next = offset;
        for k in &plan.kept {
            offsets.push(next);
            next += (k.extent * 4).next_multiple_of(ALIGN);
        }
        for (k, &offset) in plan.kept.iter().zip(&offsets) {
            let chunks = k.extent / vector;
            let unroll = fill_chunks(k.extent, threads, vector);
            let whole = chunks.is_multiple_of(threads * unroll);
            strided_loop(b, lane, chunks, threads * unroll, |b, chunk| {
                let loaded: Vec<(Reg, Option<Reg>, Vec<Reg>)> = (0..unroll)
                    .map(|u| {
                        let chunk = match u {
                            0 => chunk,
                            _ => {
                                b.u32_op(ArithOp::Add, chunk, Operand::Int(i64::from(u * threads)))
                            }
                        };
                        let (chunk, inside) = clamped_chunk(b, chunk, chunks, u > 0 && !whole);
                        let first = chunk_start(b, chunk, vector);
                        let values = load_chunk(b, kernel, k, env, first, vector);
                        (first, inside, values)
                    })
                    .collect();
                for (first, inside, values) in loaded {
                    let base = b.u32_mad(first, Operand::Int(4), row);
                    let store = Op::St {
                        space: Space::Shared,
                        ty: Ty::F32,
                        addr: Addr {
                            base,
                            offset: i64::from(offset),
                        },
                        srcs: values.into_iter().map(Operand::Reg).collect(),
                    };
                    match inside {
                        Some(inside) => b.push_guarded(inside, false, store),
                        None => b.push(store),
                    }
                }
            });
        }
        b.push(Op::BarSync);
        SharedRow { plan, row, offsets }
    }

    /// The kept values of `pass`'s loads (`pass` a reduction's id, or the
    /// root's) for the `n` consecutive positions from the one `env` binds,
    /// read from shared memory, element by element; empty when the pass
    /// reads nothing kept.
    pub fn known(
        &self,
        b: &mut Builder,
        kernel: &Kernel,
        pass: ExprId,
        env: &Env,
        n: u32,
    ) -> Vec<HashMap<ExprId, Reg>> {
        let Some(reads) = self.plan.reads.get(&pass) else {
            return Vec::new();
        };
        let var = match kernel.expr(pass) {
            Expr::Reduce { var, .. } => *var,
            _ => self
                .plan
                .root_position
                .expect("the root reads kept values along the row's inner variable"),
        };
        let base = b.u32_mad(env.index[&var], Operand::Int(4), self.row);
        let mut values: HashMap<usize, Vec<Reg>> = HashMap::new();
        let mut known = vec![HashMap::new(); n as usize];
        for &(load, kept) in reads {
            let regs = values.entry(kept).or_insert_with(|| {
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
