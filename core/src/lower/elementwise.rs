//! The elementwise schedule: threads cover the flat output, each handling
//! `per_thread` groups of `vector` consecutive elements.
//!
//! Group `g` of block `c` is handled by thread `g mod block` in round
//! `g / block`, so each round's accesses are coalesced across the block.
//! Inputs indexed by the output's innermost variable in their own innermost
//! position are read with one vector access per group; inputs that do not
//! depend on it (broadcasts) are read once per group. A group past the end is
//! computed on a clamped (valid) index and not stored, so the code has no
//! branches and every load stays in bounds.
//!
//! Where `vector` does not divide the output's innermost extent (rows of
//! 1025) but divides its element count, groups are *flat*: a group's
//! elements may straddle rows, so each element is evaluated at its own
//! indices. The output's store and the reads of tensors laid out and
//! indexed as the output is (same-shaped operands) start at the group's
//! flat position, aligned as it is, and stay one vector access each; every
//! other load (a broadcast bias, a transposed read) is read per element.

use std::collections::{HashMap, HashSet};

use super::expr::{self, Env};
use super::{Constraint, Launch, Lowered, Violation, check_block, entry_name};
use crate::dtype::DType;
use crate::ir::{Expr, ExprId, Kernel, VarId};
use crate::ptx::Builder;
use crate::ptx::inst::{Addr, ArithOp, Cmp, Op, Operand, Reg, RegClass, Space, Special, Ty};
use crate::target::SmVersion;

/// The most groups one thread may handle (the code is unrolled that often).
pub const MAX_PER_THREAD: u32 = 16;

/// Vector widths (elements per access) a schedule may ask for.
pub const VECTOR_WIDTHS: [u32; 3] = [1, 2, 4];

/// Checks a vector width against the extent of the variable it runs along.
pub(super) fn check_vector(vector: u32, extent: u32, what: &str) -> Result<(), Violation> {
    if !VECTOR_WIDTHS.contains(&vector) {
        return Err(Violation::new(
            Constraint::Range,
            format!("vector width {vector}; expected 1, 2 or 4"),
        ));
    }
    if !extent.is_multiple_of(vector) {
        return Err(Violation::new(
            Constraint::Alignment,
            format!(
                "vector width {vector} does not divide {what} ({extent}), so vector accesses would straddle rows or lose alignment"
            ),
        ));
    }
    Ok(())
}

pub(super) fn check(
    kernel: &Kernel,
    block: u32,
    per_thread: u32,
    vector: u32,
    target: SmVersion,
) -> Result<(), Violation> {
    check_block(block, target)?;
    if per_thread == 0 || per_thread > MAX_PER_THREAD {
        return Err(Violation::new(
            Constraint::Range,
            format!("{per_thread} groups per thread; expected 1 to {MAX_PER_THREAD}"),
        ));
    }
    let innermost = kernel.output_vars().last().map_or(1, |v| kernel.extent(*v));
    let total = kernel.len_of(&kernel.output);
    match check_vector(vector, innermost, "the output's innermost extent") {
        // Flat groups (see the module's docs).
        Err(v) if v.constraint == Constraint::Alignment => {
            if total.is_multiple_of(u64::from(vector)) {
                Ok(())
            } else {
                Err(Violation::new(
                    Constraint::Alignment,
                    format!(
                        "vector width {vector} divides neither the output's innermost extent ({innermost}) nor its element count ({total})"
                    ),
                ))
            }
        }
        checked => checked,
    }
}

/// Whether groups of `vector` elements may straddle the output's rows
/// (flat groups; see the module's docs).
fn flat_groups(kernel: &Kernel, vector: u32) -> bool {
    let innermost = kernel.output_vars().last().map_or(1, |v| kernel.extent(*v));
    !innermost.is_multiple_of(vector)
}

pub(super) fn lower(
    kernel: &Kernel,
    block: u32,
    per_thread: u32,
    vector: u32,
    target: SmVersion,
) -> Result<Lowered, Violation> {
    check(kernel, block, per_thread, vector, target)?;
    let out_vars = kernel.output_vars();
    let last = out_vars.last().copied();

    let total = kernel.len_of(&kernel.output) as u32;
    let groups = total / vector;
    let per_block = block * per_thread;
    let mut b = Builder::new();
    let inputs: Vec<Reg> = (0..kernel.inputs.len()).map(|i| b.param_ptr(i)).collect();
    let out = b.param_ptr(kernel.inputs.len());
    let ctaid = b.special(Special::CtaidX);
    let tid = b.special(Special::TidX);
    let first = b.u32_mad(ctaid, Operand::Int(i64::from(per_block)), tid);
    let out_dtype = kernel.output.dtype;
    let straddling = flat_groups(kernel, vector);

    for round in 0..per_thread {
        let raw = match round {
            0 => first,
            _ => b.u32_op(ArithOp::Add, first, Operand::Int(i64::from(round * block))),
        };
        let inside = b.setp(Cmp::Lt, Ty::U32, raw, Operand::Int(i64::from(groups)));
        let group = b.u32_op(ArithOp::Min, raw, Operand::Int(i64::from(groups - 1)));
        let flat = match vector {
            1 => group,
            _ => b.u32_op(
                ArithOp::Shl,
                group,
                Operand::Int(i64::from(vector.trailing_zeros())),
            ),
        };
        let mut env = Env {
            inputs: inputs.clone(),
            read_only_inputs: true,
            ..Env::default()
        };
        let values = if straddling {
            emit_flat_group(&mut b, kernel, &env, flat, vector)
        } else {
            bind_vars(&mut b, kernel, &out_vars, flat, &mut env.index);
            emit_consecutive(&mut b, kernel, &mut env, kernel.root, last, vector)
        };
        let addr = b.global_addr(out, flat, out_dtype.size());
        store_vec(
            &mut b,
            out_dtype,
            Addr {
                base: addr,
                offset: 0,
            },
            &values,
            Some(inside),
        );
    }

    Ok(Lowered {
        ptx: b.finish(entry_name(kernel), kernel.inputs.len() + 1, block, 0),
        launch: Launch {
            grid: [groups.div_ceil(per_block), 1, 1],
            block: [block, 1, 1],
            dynamic_shared_bytes: 0,
            workspace_bytes: 0,
            persistent: false,
            registers: 0,
        },
    })
}

/// Binds `vars` (row-major, innermost last) to the digits of `flat` in the
/// mixed radix of their extents. `flat` must be below the product of the
/// extents.
pub(super) fn bind_vars(
    b: &mut Builder,
    kernel: &Kernel,
    vars: &[VarId],
    flat: Reg,
    index: &mut HashMap<VarId, Reg>,
) {
    let mut rest = flat;
    for (i, v) in vars.iter().enumerate().rev() {
        let extent = kernel.extent(*v);
        let value = if extent == 1 {
            b.u32_imm(0)
        } else if i == 0 {
            rest
        } else {
            b.u32_op(ArithOp::Rem, rest, Operand::Int(i64::from(extent)))
        };
        index.insert(*v, value);
        if i > 0 && extent > 1 {
            rest = b.u32_op(ArithOp::Div, rest, Operand::Int(i64::from(extent)));
        }
    }
}

/// Evaluates the kernel's root at the `n` flat output positions from `flat`
/// (a multiple of `n`), which may straddle rows: loads at the output's own
/// position are one vector access for the group, the others are read per
/// element at its own indices. Returns one f32 register per element.
fn emit_flat_group(b: &mut Builder, kernel: &Kernel, env: &Env, flat: Reg, n: u32) -> Vec<Reg> {
    let out_vars = kernel.output_vars();
    let out_strides = kernel.strides_of(&kernel.output);
    let mut loads = Vec::new();
    collect_loads(kernel, env, kernel.root, &mut HashSet::new(), &mut loads);
    let mut per_element = vec![HashMap::new(); n as usize];
    for load in loads {
        let Expr::Load { tensor, index } = kernel.expr(load) else {
            continue;
        };
        let t = kernel.input(*tensor);
        if *index != out_vars || kernel.strides_of(t) != out_strides {
            continue;
        }
        load_group(b, env, (load, tensor.0, t.dtype), flat, &mut per_element);
    }
    let mut values = Vec::with_capacity(n as usize);
    for (i, preloaded) in per_element.into_iter().enumerate() {
        let mut element = env.clone();
        let position = match i {
            0 => flat,
            _ => b.u32_op(ArithOp::Add, flat, i as u32),
        };
        bind_vars(b, kernel, &out_vars, position, &mut element.index);
        element.preloaded.extend(preloaded);
        values.push(expr::emit(b, kernel, &mut element, kernel.root).reg());
    }
    values
}

/// Reads the group's values of `load` (of input `tensor`, in `dtype`) with
/// one vector access from flat element `flat`, one value into each
/// element's map.
fn load_group(
    b: &mut Builder,
    env: &Env,
    (load, tensor, dtype): (ExprId, usize, DType),
    flat: impl Into<Operand>,
    per_element: &mut [HashMap<ExprId, Reg>],
) {
    let addr = b.global_addr(env.inputs[tensor], flat, dtype.size());
    let addr = Addr {
        base: addr,
        offset: 0,
    };
    let regs = load_vec(b, env.input_space(), dtype, addr, per_element.len() as u32);
    for (m, r) in per_element.iter_mut().zip(regs) {
        m.insert(load, r);
    }
}

/// How a group of consecutive elements reads one load of its expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// The load does not depend on the variable: once for the group.
    Broadcast,
    /// The variable is the load's innermost index (and no other): one vector
    /// access for the group.
    Vector,
    /// Anything else (a transposed read): once per element.
    Scalar,
}

/// Evaluates `id` for `n` consecutive values of `var`, starting at the value
/// `env` binds it to, and returns one f32 register per value.
///
/// The caller guarantees that `n` divides `var`'s extent and that the
/// starting value is a multiple of `n`, so a vector access along `var` is
/// aligned (tensors are densely packed and their buffers 16-byte aligned) and
/// never crosses into the next row. Lets that do not depend on `var` are
/// evaluated once and stay cached in `env`; the others are evaluated per
/// element.
pub(super) fn emit_consecutive(
    b: &mut Builder,
    kernel: &Kernel,
    env: &mut Env,
    id: ExprId,
    var: Option<VarId>,
    n: u32,
) -> Vec<Reg> {
    emit_consecutive_with(b, kernel, env, id, var, n, Vec::new())
}

/// [`emit_consecutive`] with some loads already in registers: `known[i]`
/// holds the value of those load nodes for the `i`-th element (`known` is
/// empty, or has `n` maps with the same nodes).
pub(super) fn emit_consecutive_with(
    b: &mut Builder,
    kernel: &Kernel,
    env: &mut Env,
    id: ExprId,
    var: Option<VarId>,
    n: u32,
    known: Vec<HashMap<ExprId, Reg>>,
) -> Vec<Reg> {
    let mut per_element = known;
    per_element.resize(n as usize, HashMap::new());
    let var = match var {
        Some(v) if n > 1 => v,
        _ => {
            env.preloaded.extend(per_element.swap_remove(0));
            return vec![expr::emit(b, kernel, env, id).reg()];
        }
    };
    let mut loads = Vec::new();
    let mut seen: HashSet<ExprId> = per_element[0].keys().copied().collect();
    collect_loads(kernel, env, id, &mut seen, &mut loads);
    for load in loads {
        let Expr::Load { tensor, index } = kernel.expr(load) else {
            continue;
        };
        let uses = index.iter().filter(|v| **v == var).count();
        let access = match uses {
            0 => Access::Broadcast,
            1 if index.last() == Some(&var) && !env.scalar_loads.contains(&load) => Access::Vector,
            _ => Access::Scalar,
        };
        match access {
            Access::Broadcast => {
                let r = expr::emit(b, kernel, env, load).reg();
                per_element.iter_mut().for_each(|m| {
                    m.insert(load, r);
                });
            }
            Access::Vector => {
                let t = kernel.input(*tensor);
                let flat = expr::flat_index(b, env, index, &kernel.strides_of(t));
                load_group(b, env, (load, tensor.0, t.dtype), flat, &mut per_element);
            }
            Access::Scalar => {}
        }
    }
    let base = env.index[&var];
    let mut values = Vec::with_capacity(n as usize);
    for (i, preloaded) in per_element.into_iter().enumerate() {
        let mut element = env.clone();
        element.preloaded.extend(preloaded);
        if i > 0 {
            let value = b.u32_op(ArithOp::Add, base, Operand::Int(i as i64));
            element.index.insert(var, value);
        }
        values.push(expr::emit(b, kernel, &mut element, id).reg());
        for (l, v) in element.lets {
            if !kernel.let_(l).deps.contains(&var) {
                env.lets.entry(l).or_insert(v);
            }
        }
    }
    values
}

/// The loads `id` would issue in `env`: through lets not yet evaluated, not
/// into reductions (a schedule computes those separately).
fn collect_loads(
    kernel: &Kernel,
    env: &Env,
    id: ExprId,
    seen: &mut HashSet<ExprId>,
    out: &mut Vec<ExprId>,
) {
    if !seen.insert(id) || env.preloaded.contains_key(&id) || env.reduced.contains_key(&id) {
        return;
    }
    match kernel.expr(id) {
        Expr::Load { .. } => out.push(id),
        Expr::Let(l) if !env.lets.contains_key(l) => {
            collect_loads(kernel, env, kernel.let_(*l).value, seen, out);
        }
        Expr::Let(_) | Expr::Reduce { .. } => {}
        _ => {
            for c in kernel.children(id) {
                collect_loads(kernel, env, c, seen, out);
            }
        }
    }
}

/// Loads `n` (1, 2 or 4) consecutive elements of `dtype` with one access and
/// widens them to f32.
pub(super) fn load_vec(
    b: &mut Builder,
    space: Space,
    dtype: DType,
    addr: Addr,
    n: u32,
) -> Vec<Reg> {
    match (dtype, n) {
        (_, 1) => vec![b.load(space, dtype, addr)],
        (DType::F32, _) => b.load_f32_vec(space, addr, n as usize),
        (DType::F16 | DType::Bf16, _) => {
            let halves: Vec<Reg> = (0..n).map(|_| b.reg(RegClass::B16)).collect();
            b.push(Op::Ld {
                space,
                ty: Ty::B16,
                dsts: halves.clone(),
                addr,
            });
            halves.into_iter().map(|h| b.widen(dtype, h)).collect()
        }
    }
}

/// Stores f32 values as consecutive elements of `dtype` with one access,
/// only where `guard` (if any) holds.
pub(super) fn store_vec(
    b: &mut Builder,
    dtype: DType,
    addr: Addr,
    values: &[Reg],
    guard: Option<Reg>,
) {
    let (ty, srcs) = match dtype {
        DType::F32 => (Ty::F32, values.iter().map(|r| Operand::Reg(*r)).collect()),
        DType::F16 | DType::Bf16 => (
            Ty::B16,
            values
                .iter()
                .map(|r| Operand::Reg(b.narrow(dtype, *r)))
                .collect(),
        ),
    };
    let op = Op::St {
        space: Space::Global,
        ty,
        addr,
        srcs,
    };
    match guard {
        Some(pred) => b.push_guarded(pred, false, op),
        None => b.push(op),
    }
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use crate::ir::Kernel;
    use crate::lower::{LowerError, lower};
    use crate::ptx::inst::{ArithOp, Op, Operand, Space};
    use crate::schedule::Schedule;
    use crate::syntax::parse_kernel;
    use crate::target::SmVersion;

    fn bias_add(r: u32, c: u32) -> Kernel {
        parse_kernel(
            quote!(shape(R = #r, C = #c)),
            quote! {
                fn bias_add(x: Tensor<f16, (R, C)>, b: Tensor<f16, (C,)>, t: Tensor<f32, (C, R)>)
                    -> Tensor<f16, (R, C)>
                {
                    compute(|r, c| x[r][c] + b[c] * t[c][r])
                }
            },
        )
        .expect("valid kernel")
    }

    fn point(block: u32, per_thread: u32, vector: u32) -> Schedule {
        Schedule::Elementwise {
            block,
            per_thread,
            vector,
        }
    }

    fn invalid(k: &Kernel, s: Schedule) -> String {
        match lower(k, &s, SmVersion::Sm80) {
            Err(LowerError::Invalid { reason, .. }) => reason,
            other => panic!("{s:?} should be invalid, got {other:?}"),
        }
    }

    #[test]
    fn rejects_invalid_points() {
        let k = bias_add(3, 1026);
        assert!(invalid(&k, point(0, 1, 1)).contains("threads per block"));
        assert!(invalid(&k, point(48, 1, 1)).contains("multiple of 32"));
        assert!(invalid(&k, point(2048, 1, 1)).contains("up to 1024"));
        assert!(invalid(&k, point(128, 0, 1)).contains("groups per thread"));
        assert!(invalid(&k, point(128, 17, 1)).contains("groups per thread"));
        assert!(invalid(&k, point(128, 1, 3)).contains("vector width 3"));
        // 3 × 1026 elements: groups of 2 (within rows), not of 4.
        let reason = invalid(&k, point(128, 1, 4));
        assert!(
            reason.contains(
                "neither the output's innermost extent (1026) nor its element count (3078)"
            ),
            "{reason}"
        );
        assert!(lower(&k, &point(128, 1, 2), SmVersion::Sm80).is_ok());
    }

    #[test]
    fn flat_groups_straddle_rows() {
        // 4 × 1026 elements: groups of 4 straddle rows of 1026. `x[r][c]`,
        // laid out as the output, is one vector load a group; `b[c]` and
        // the transposed `t[c][r]` are read per element.
        let k = bias_add(4, 1026);
        let l = lower(&k, &point(128, 1, 4), SmVersion::Sm80).expect("lowers");
        let (load, store) = (true, false);
        let mut expected = vec![(load, 4)];
        expected.extend([(load, 1); 8]);
        expected.push((store, 4));
        assert_eq!(l.global_accesses(), expected);
        // Each element of the group has its own indices: four remainders
        // by the row length, one per element.
        let remainders = l
            .ptx
            .body
            .iter()
            .filter(|i| {
                matches!(
                    i.op,
                    Op::Arith {
                        op: ArithOp::Rem,
                        b: Operand::Int(1026),
                        ..
                    }
                )
            })
            .count();
        assert_eq!(remainders, 4);
        // Within rows, a group shares its row's indices.
        let l = lower(&k, &point(128, 1, 2), SmVersion::Sm80).expect("lowers");
        assert_eq!(
            l.global_accesses(),
            [(load, 2), (load, 2), (load, 1), (load, 1), (store, 2)]
        );
    }

    #[test]
    fn rejects_other_classes() {
        let softmax = parse_kernel(
            quote!(shape(R = 2, C = 8)),
            quote! {
                fn softmax(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
                    compute(|r, c| exp(x[r][c]) / sum(C, |j| exp(x[r][j])))
                }
            },
        )
        .expect("valid kernel");
        let err = lower(&softmax, &point(128, 1, 1), SmVersion::Sm80).unwrap_err();
        assert!(matches!(err, LowerError::WrongClass { .. }), "{err}");
        let rows = Schedule::Rows {
            threads_per_row: 32,
            rows_per_block: 4,
            vector: 1,
            cache: 0,
            tree: 0,
            online: 0,
            cluster: 1,
        };
        let err = lower(&bias_add(2, 8), &rows, SmVersion::Sm80).unwrap_err();
        assert!(err.to_string().contains("no reduction"), "{err}");
    }

    #[test]
    fn vector_accesses_and_launch() {
        let k = bias_add(5, 1000);
        let l = lower(&k, &point(128, 3, 4), SmVersion::Sm90).expect("lowers");
        // 5000 elements in groups of 4, 384 groups per block.
        assert_eq!(l.launch.grid, [1250u32.div_ceil(384), 1, 1]);
        assert_eq!(l.launch.block, [128, 1, 1]);
        let widths = |space: Space, store: bool| -> Vec<usize> {
            l.ptx
                .body
                .iter()
                .filter_map(|i| match &i.op {
                    Op::Ld { space: s, dsts, .. } if !store && *s == space => Some(dsts.len()),
                    Op::St { space: s, srcs, .. } if store && *s == space => Some(srcs.len()),
                    _ => None,
                })
                .collect()
        };
        // Per group: x as one vector, b as one vector, t (transposed) per
        // element; one guarded vector store.
        // Inputs are read through the read-only path; nothing else is loaded.
        assert!(widths(Space::Global, false).is_empty());
        let mut loads = widths(Space::GlobalReadOnly, false);
        loads.sort();
        assert_eq!(loads, [[1; 12].as_slice(), &[4; 6]].concat());
        assert_eq!(widths(Space::Global, true), [4, 4, 4]);
        assert!(l.ptx.body.iter().all(|i| !matches!(i.op, Op::Bra { .. })));
    }
}
