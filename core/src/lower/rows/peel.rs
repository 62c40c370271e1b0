//! Vector accesses along rows whose length `vector` does not divide.
//!
//! A row of `E` positions whose length is not a multiple of `vector`
//! starts at a different alignment in each row: with `E = 50257` and
//! `vector = 4`, row `r` of a contiguous `(R, E)` tensor starts `r mod 4`
//! elements past a 16-byte boundary. Such a row is *peeled*: its first
//! `head` positions (0 to `vector − 1`, so that position `head` is aligned)
//! and the positions after its last whole chunk are read one value at a
//! time, and the `(E − head) / vector` chunks between them with vector
//! accesses. `head` follows from the *reference*, the tensor whose row the
//! chunks align: the output when the row's outputs run along it, else the
//! first input read along a reduction. A load whose row starts at another
//! alignment (a `(E,)` weight read in every row) reads its chunk's values
//! one at a time; the others, and the output's stores, are vector
//! accesses.
//!
//! Rows are peeled only with `cache = 0` (kept rows are laid out by
//! static positions), when every reduction and the row's outputs run over
//! the same extent, at least two chunks long.

use std::collections::HashSet;

use super::{Slice, strided_loop};
use crate::ir::{Expr, ExprId, Kernel, VarId};
use crate::lower::classify::RowPlan;
use crate::lower::expr::{self, Env};
use crate::ptx::Builder;
use crate::ptx::inst::{ArithOp, Cmp, Op, Operand, Reg, RegClass, Ty};

/// Why a row cannot be peeled, for the alignment violation's message.
pub(super) type Refusal = &'static str;

/// How rows of a kernel are peeled: what aligns them and which loads
/// cannot follow.
#[derive(Debug)]
pub(super) struct Peel {
    /// The row's extent.
    extent: u32,
    /// The reference's flat index coefficient of each row variable.
    reference: Vec<(VarId, u64)>,
    /// Loads along the row whose rows are not aligned as the reference's:
    /// read one value at a time.
    scalar_loads: HashSet<ExprId>,
}

impl Peel {
    /// The peel of `kernel`'s rows for `vector`, or why there is none.
    pub fn of(kernel: &Kernel, plan: &RowPlan, vector: u32, cache: u32) -> Result<Peel, Refusal> {
        if cache != 0 {
            return Err("rows are peeled (their ends read one value at a time) only with cache 0");
        }
        let mut walked: Vec<VarId> = plan
            .reductions()
            .filter_map(|r| match kernel.expr(r) {
                Expr::Reduce { var, .. } => Some(*var),
                _ => None,
            })
            .collect();
        let out_vars = kernel.output_vars();
        let along_outputs = match plan.inner_vars.as_slice() {
            [] => false,
            [inner] if out_vars.last() == Some(inner) => {
                walked.push(*inner);
                true
            }
            _ => return Err("a row with several inner variables is not peeled"),
        };
        let extent = match walked.first() {
            Some(v) => kernel.extent(*v),
            None => return Err("nothing runs along the row"),
        };
        if walked.iter().any(|v| kernel.extent(*v) != extent) {
            return Err("a row whose passes run over different extents is not peeled");
        }
        if extent < 2 * vector {
            return Err("a row shorter than two chunks is not peeled");
        }
        let loads: Vec<(ExprId, &[VarId], Vec<u64>)> = kernel
            .exprs
            .iter()
            .enumerate()
            .filter_map(|(i, e)| match e {
                Expr::Load { tensor, index }
                    if index.last().is_some_and(|v| walked.contains(v)) =>
                {
                    Some((
                        ExprId(i),
                        index.as_slice(),
                        kernel.strides_of(kernel.input(*tensor)),
                    ))
                }
                _ => None,
            })
            .collect();
        let coefficients = |index: &[VarId], strides: &[u64]| -> Option<Vec<(VarId, u64)>> {
            let (_, row) = index.split_last()?;
            let mut out: Vec<(VarId, u64)> = plan.row_vars.iter().map(|v| (*v, 0)).collect();
            for (v, s) in row.iter().zip(strides) {
                let slot = out.iter_mut().find(|(u, _)| u == v)?;
                slot.1 += s;
            }
            Some(out)
        };
        let reference = if along_outputs {
            coefficients(&out_vars, &kernel.strides_of(&kernel.output))
        } else {
            loads
                .iter()
                .find_map(|(_, index, strides)| coefficients(index, strides))
        }
        .ok_or("no tensor is read along the row with row variables alone")?;
        let scalar_loads = loads
            .iter()
            .filter(|(_, index, strides)| {
                coefficients(index, strides).is_none_or(|c| {
                    c.iter()
                        .zip(&reference)
                        .any(|((_, a), (_, b))| a % u64::from(vector) != b % u64::from(vector))
                })
            })
            .map(|(id, _, _)| *id)
            .collect();
        Ok(Peel {
            extent,
            reference,
            scalar_loads,
        })
    }

    /// The loads that read their chunk's values one at a time.
    pub fn scalar_loads(&self) -> &HashSet<ExprId> {
        &self.scalar_loads
    }

    /// The thread's row's cut, from its row variables (bound in `env`).
    pub fn cut(&self, b: &mut Builder, env: &Env, vector: u32) -> Cut {
        let (vars, strides): (Vec<VarId>, Vec<u64>) = self.reference.iter().copied().unzip();
        let start = match expr::flat_index(b, env, &vars, &strides) {
            Operand::Reg(r) => r,
            constant => {
                let r = b.reg(RegClass::B32);
                b.push(Op::Mov {
                    ty: Ty::U32,
                    dst: r,
                    src: constant,
                });
                r
            }
        };
        // head = −start mod vector; chunks = (E − head) / vector; the
        // subtractions as multiply-adds by −1 and −vector (mod 2³²).
        let negated = b.u32_op(ArithOp::Mul, start, u32::MAX);
        let head = b.u32_op(ArithOp::And, negated, vector - 1);
        let rest = b.u32_mad(head, u32::MAX, self.extent);
        let chunks = b.u32_op(ArithOp::Shr, rest, vector.trailing_zeros());
        Cut {
            head,
            chunks,
            extent: self.extent,
        }
    }
}

/// One row's peel: chunks at `head + vector · i` for `i < chunks`, and the
/// leftover positions before `head` and from `head + vector · chunks` on.
/// Only `head` and `chunks` are kept for the kernel's length; each pass
/// derives what its leftovers need from them (kept too, they had ptxas
/// spill a 1024-thread block held to 32 registers).
#[derive(Debug, Clone, Copy)]
pub(super) struct Cut {
    head: Reg,
    chunks: Reg,
    /// The row's extent.
    extent: u32,
}

impl Cut {
    /// Emits the thread's walk over the row: `visit(position, width)` for
    /// each of its chunks (`vector` wide), then for each of its leftover
    /// positions (1 wide). Thread `lane` of `threads` takes chunks and
    /// leftovers `lane, lane + threads, …`; with a `slice`, of the block's
    /// run of chunks, and the cluster's first block takes the leftovers.
    pub fn walk(
        &self,
        b: &mut Builder,
        lane: Reg,
        (threads, vector): (u32, u32),
        slice: Option<Slice>,
        mut visit: impl FnMut(&mut Builder, Reg, u32),
    ) {
        let (start, end) = match slice {
            Some(slice) => {
                let (begin, end) = slice.of_chunks(b, self.extent, self.chunks);
                (b.u32_op(ArithOp::Add, begin, lane), end)
            }
            None => (lane, self.chunks),
        };
        strided_loop(b, start, end, threads, |b, i| {
            let first = b.u32_mad(i, vector, self.head);
            visit(b, first, vector);
        });
        // The positions the chunks cover, and the `E − body` leftovers.
        let body = b.u32_op(ArithOp::Shl, self.chunks, vector.trailing_zeros());
        let all = b.u32_mad(body, u32::MAX, self.extent);
        let leftovers = match slice {
            Some(slice) => {
                let first = slice.first(b);
                b.u32_select(first, all, 0u32)
            }
            None => all,
        };
        let mut leftover = |b: &mut Builder, i: Reg| {
            let after = b.setp(Cmp::Ge, Ty::U32, i, self.head);
            let skip = b.u32_select(after, body, 0u32);
            let position = b.u32_op(ArithOp::Add, i, skip);
            visit(b, position, 1);
        };
        // At most `2 (vector − 1)` leftovers: one each for that many threads,
        // without a loop.
        if threads >= 2 * (vector - 1) {
            let done = b.label();
            let idle = b.setp(Cmp::Ge, Ty::U32, lane, leftovers);
            b.bra_if(idle, false, done);
            leftover(b, lane);
            b.place(done);
        } else {
            strided_loop(b, lane, leftovers, threads, leftover);
        }
    }

    /// The first position of the thread's first chunk, or of the row's last
    /// chunk for a thread without one.
    pub fn first_chunk(
        &self,
        b: &mut Builder,
        lane: Reg,
        vector: u32,
        slice: Option<Slice>,
    ) -> Reg {
        let start = match slice {
            Some(slice) => {
                let (begin, _) = slice.of_chunks(b, self.extent, self.chunks);
                b.u32_op(ArithOp::Add, begin, lane)
            }
            None => lane,
        };
        let last = b.u32_op(ArithOp::Add, self.chunks, u32::MAX);
        let chunk = b.u32_op(ArithOp::Min, start, last);
        b.u32_mad(chunk, vector, self.head)
    }
}
