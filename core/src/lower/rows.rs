//! The rows schedule: a group of `threads_per_row` threads per row of the
//! output, `rows_per_block` rows per block.
//!
//! A row first runs the steps of its [`RowPlan`]: each reduction is folded
//! cooperatively (thread `t` takes chunks `t, t + T, …` of `vector`
//! consecutive values), combined across the group with butterfly shuffles
//! and, for groups wider than a warp, across warps through shared memory;
//! every thread ends with the same value. Lets that depend on row variables
//! only are evaluated once. Then the row's elements are spread over its
//! threads the same way and the root is evaluated for each.
//!
//! Every thread executes every shuffle and barrier: a row past the last one
//! computes on a clamped (valid) row index and only skips the final stores.

use super::classify::{RowPlan, RowStep};
use super::elementwise::{bind_vars, check_vector, emit_consecutive, store_vec};
use super::expr::{self, Env};
use super::{Constraint, Launch, Lowered, Violation, check_block, entry_name};
use crate::dtype::DType;
use crate::ir::{Expr, ExprId, Kernel, ReduceOp, VarId};
use crate::ptx::Builder;
use crate::ptx::inst::{
    Addr, ArithOp, Cmp, Op, Operand, Reg, RegClass, ShflMode, Space, Special, Ty,
};
use crate::target::SmVersion;

/// Bytes of shared memory a rows schedule uses: when a row spans several
/// warps, two sets of one f32 slot per warp per row, used by alternate
/// reductions so that one barrier per reduction suffices (a set is written
/// again only after a later barrier, which every thread reaches after its
/// reads of that set).
pub fn shared_bytes(threads_per_row: u32, rows_per_block: u32, warp_size: u32) -> u64 {
    if threads_per_row <= warp_size {
        0
    } else {
        2 * u64::from(rows_per_block) * u64::from(threads_per_row / warp_size) * 4
    }
}

/// The knobs of a rows schedule, checked.
pub(super) struct Shape {
    threads_per_row: u32,
    rows_per_block: u32,
    vector: u32,
    warp: u32,
}

impl Shape {
    fn block(&self) -> u32 {
        self.threads_per_row * self.rows_per_block
    }

    /// Warps per row when a row spans whole warps; 1 otherwise.
    fn warps_per_row(&self) -> u32 {
        (self.threads_per_row / self.warp).max(1)
    }
}

/// A rows schedule's knobs.
#[derive(Debug, Clone, Copy)]
pub(super) struct Knobs {
    pub threads_per_row: u32,
    pub rows_per_block: u32,
    pub vector: u32,
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
    } = knobs;
    let limits = target.limits();
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
    let block = threads_per_row.saturating_mul(rows_per_block);
    check_block(block, target)?;
    for r in plan.reductions() {
        if let Expr::Reduce { var, .. } = kernel.expr(r) {
            let name = &kernel.dim(kernel.var(*var).dim).name;
            check_vector(
                vector,
                kernel.extent(*var),
                &format!("the reduced extent `{name}`"),
            )?;
        }
    }
    let shared = shared_bytes(threads_per_row, rows_per_block, limits.warp_size);
    if shared > u64::from(limits.max_shared_per_block) {
        return Err(Violation::new(
            Constraint::SharedMemory,
            format!(
                "{shared} bytes of shared memory; {target} allows {}",
                limits.max_shared_per_block
            ),
        ));
    }
    Ok(Shape {
        threads_per_row,
        rows_per_block,
        vector,
        warp: limits.warp_size,
    })
}

/// The shared-memory slots of a row that spans several warps.
struct Slots {
    /// Whether this thread is lane 0 of its warp.
    warp_leader: Reg,
    /// Shared address of this thread's warp's slot (first set).
    own: Reg,
    /// Shared address of the slot this thread reads back (first set): that
    /// of warp `lane mod warps` of its row.
    peer: Reg,
    /// Bytes between the two slot sets.
    set_bytes: u32,
    /// Cross-warp reductions done so far (picks the slot set).
    crossings: u32,
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
    } = knobs;
    let extent_of = |vars: &[VarId]| vars.iter().map(|v| kernel.extent(*v)).product::<u32>();
    let rows = extent_of(&plan.row_vars);
    let inner = extent_of(&plan.inner_vars);
    let warps = shape.warps_per_row();
    let shared = shared_bytes(threads_per_row, rows_per_block, shape.warp) as u32;

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
    let row = b.u32_mad(ctaid, Operand::Int(i64::from(rows_per_block)), row_in_block);
    let inside = b.setp(Cmp::Lt, Ty::U32, row, Operand::Int(i64::from(rows)));
    let safe_row = b.u32_op(ArithOp::Min, row, Operand::Int(i64::from(rows - 1)));

    let mut slots = (warps > 1).then(|| {
        let base = b.shared_base();
        let row_slots = b.u32_mad(row_in_block, Operand::Int(i64::from(warps * 4)), base);
        let warp_shift = Operand::Int(i64::from(shape.warp.trailing_zeros()));
        let warp_in_row = b.u32_op(ArithOp::Shr, lane, warp_shift);
        let own = b.u32_mad(warp_in_row, Operand::Int(4), row_slots);
        let warp_lane = b.u32_op(ArithOp::And, tid, Operand::Int(i64::from(shape.warp - 1)));
        let peer_warp = b.u32_op(ArithOp::And, tid, Operand::Int(i64::from(warps - 1)));
        Slots {
            warp_leader: b.setp(Cmp::Eq, Ty::U32, warp_lane, Operand::Int(0)),
            own,
            peer: b.u32_mad(peer_warp, Operand::Int(4), row_slots),
            set_bytes: shared / 2,
            crossings: 0,
        }
    });

    let mut env = Env {
        inputs,
        ..Env::default()
    };
    bind_vars(&mut b, kernel, &plan.row_vars, safe_row, &mut env.index);
    for step in &plan.steps {
        match *step {
            RowStep::Reduce(id) => {
                let value =
                    cooperative_reduce(&mut b, kernel, &mut env, &shape, lane, slots.as_mut(), id);
                env.reduced.insert(id, value);
            }
            RowStep::Let(l) => {
                let value = expr::emit(&mut b, kernel, &mut env, kernel.let_(l).value);
                env.lets.insert(l, value);
            }
        }
    }
    b.bra_if(inside, true, done);

    // The row's elements: groups of `vector` along the output's innermost
    // variable when it indexes within the row, single elements otherwise.
    let out_vars = kernel.output_vars();
    let last = out_vars
        .last()
        .copied()
        .filter(|v| plan.inner_vars.contains(v));
    let group = match last {
        Some(v) if kernel.extent(v).is_multiple_of(vector) => vector,
        _ => 1,
    };
    let out_strides = kernel.strides_of(&kernel.output);
    strided_loop(&mut b, lane, inner / group, threads_per_row, |b, g| {
        let mut element = env.clone();
        let first = match group {
            1 => g,
            _ => b.u32_op(
                ArithOp::Shl,
                g,
                Operand::Int(i64::from(group.trailing_zeros())),
            ),
        };
        bind_vars(b, kernel, &plan.inner_vars, first, &mut element.index);
        let values = emit_consecutive(b, kernel, &mut element, kernel.root, last, group);
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
    b.place(done);

    Ok(Lowered {
        ptx: b.finish(
            entry_name(kernel),
            kernel.inputs.len() + 1,
            shape.block(),
            shared,
        ),
        launch: Launch {
            grid: [rows.div_ceil(rows_per_block), 1, 1],
            block: [shape.block(), 1, 1],
            dynamic_shared_bytes: shared,
        },
    })
}

/// Emits `for (i = start; i < count; i += step) body(i)` with `body` emitted
/// once; threads whose `start` is past `count` skip it.
fn strided_loop(
    b: &mut Builder,
    start: Reg,
    count: u32,
    step: u32,
    body: impl FnOnce(&mut Builder, Reg),
) {
    let skip = b.label();
    let top = b.label();
    let i = b.reg(RegClass::B32);
    b.push(Op::Mov {
        ty: Ty::U32,
        dst: i,
        src: start.into(),
    });
    let outside = b.setp(Cmp::Ge, Ty::U32, i, Operand::Int(i64::from(count)));
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
    let more = b.setp(Cmp::Lt, Ty::U32, i, Operand::Int(i64::from(count)));
    b.bra_if(more, false, top);
    b.place(skip);
}

/// Computes reduction `id` for the thread's row; every thread of the row
/// gets the same value.
fn cooperative_reduce(
    b: &mut Builder,
    kernel: &Kernel,
    env: &mut Env,
    shape: &Shape,
    lane: Reg,
    slots: Option<&mut Slots>,
    id: ExprId,
) -> Reg {
    let Expr::Reduce { op, var, body } = *kernel.expr(id) else {
        return expr::emit(b, kernel, env, id).reg();
    };
    let extent = kernel.extent(var);
    let vector = shape.vector;
    let acc = b.f32_imm(expr::reduce_init(op));
    strided_loop(
        b,
        lane,
        extent / vector,
        shape.threads_per_row,
        |b, chunk| {
            let mut element = env.clone();
            let first = match vector {
                1 => chunk,
                _ => b.u32_op(
                    ArithOp::Shl,
                    chunk,
                    Operand::Int(i64::from(vector.trailing_zeros())),
                ),
            };
            element.index.insert(var, first);
            for x in emit_consecutive(b, kernel, &mut element, body, Some(var), vector) {
                expr::fold_into(b, op, acc, x);
            }
        },
    );

    butterfly(b, op, acc, shape.threads_per_row.min(shape.warp));

    let total = match slots {
        Some(slots) => across_warps(b, shape, slots, op, acc),
        None => acc,
    };
    expr::finish_reduce(b, op, total, extent)
}

/// Combines the per-warp values of a row through shared memory: each warp's
/// leader writes its value to the warp's slot; after the barrier, lane `l` of
/// every warp reads slot `l mod warps` and the warp folds them with a
/// butterfly, so every thread of the row ends with the same bits (each step
/// combines the same two values, in either order, and f32 addition, min and
/// max are commutative).
fn across_warps(b: &mut Builder, shape: &Shape, slots: &mut Slots, op: ReduceOp, acc: Reg) -> Reg {
    let set = i64::from(slots.set_bytes * (slots.crossings % 2));
    slots.crossings += 1;
    b.push_guarded(
        slots.warp_leader,
        false,
        Op::St {
            space: Space::Shared,
            ty: Ty::F32,
            addr: Addr {
                base: slots.own,
                offset: set,
            },
            srcs: vec![acc.into()],
        },
    );
    b.push(Op::BarSync);
    let total = b.load(
        Space::Shared,
        DType::F32,
        Addr {
            base: slots.peer,
            offset: set,
        },
    );
    butterfly(b, op, total, shape.warps_per_row());
    total
}

/// Folds `acc` across the aligned groups of `width` lanes (a power of two up
/// to a warp) with butterfly shuffles, in place; every lane of a group ends
/// with the same value.
fn butterfly(b: &mut Builder, op: ReduceOp, acc: Reg, width: u32) {
    let mut offset = width / 2;
    while offset > 0 {
        let other = b.reg(RegClass::F32);
        b.push(Op::Shfl {
            mode: ShflMode::Bfly,
            dst: other,
            src: acc,
            lane: Operand::Int(i64::from(offset)),
            clamp: 0x1f,
        });
        expr::fold_into(b, op, acc, other);
        offset /= 2;
    }
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use crate::ir::Kernel;
    use crate::lower::{LowerError, Lowered, lower};
    use crate::ptx::inst::Op;
    use crate::schedule::Schedule;
    use crate::syntax::parse_kernel;
    use crate::target::SmVersion;

    fn layernorm(r: u32, c: u32) -> Kernel {
        parse_kernel(
            quote!(shape(R = #r, C = #c)),
            quote! {
                fn layernorm(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
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
        assert!(invalid(&k, point(32, 1, 2), sm80).contains("reduced extent `C`"));
        assert!(invalid(&k, point(32, 1, 8), sm80).contains("expected 1, 2 or 4"));
        assert!(invalid(&k, point(u32::MAX / 2 + 1, 2, 1), sm80).contains("power of two"));
        let k = layernorm(10, 1024);
        assert!(lower(&k, &point(32, 1, 4), sm80).is_ok());
        assert!(lower(&k, &point(8, 4, 2), sm80).is_ok());
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
