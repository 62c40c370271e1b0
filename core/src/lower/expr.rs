//! Emits the instructions that evaluate one IR expression for one output
//! element (or one row), shared by every schedule.

use std::collections::{HashMap, HashSet};

use crate::ir::{self, BinaryOp, CmpOp, Expr, ExprId, LetId, LogicOp, ReduceOp, VarId};
use crate::ptx::Builder;
use crate::ptx::inst::{Addr, ArithOp, Cmp, Op, Operand, Space, Ty, UnaryOp};
use crate::ptx::inst::{Reg, RegClass};

const LOG2_E: f32 = std::f32::consts::LOG2_E;
const LN_2: f32 = std::f32::consts::LN_2;

/// The value of an evaluated expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value {
    /// An f32 register.
    Num(Reg),
    /// A predicate register.
    Bool(Reg),
}

impl Value {
    /// The register holding the value (f32 or predicate).
    pub fn reg(self) -> Reg {
        match self {
            Value::Num(r) | Value::Bool(r) => r,
        }
    }
}

/// What is known while evaluating expressions in one scope of a kernel.
#[derive(Debug, Default, Clone)]
pub struct Env {
    /// The value of each bound index variable (a 32-bit register).
    pub index: HashMap<VarId, Reg>,
    /// Lets already evaluated in this scope.
    pub lets: HashMap<LetId, Value>,
    /// Reductions a schedule has already computed (cooperatively); any
    /// reduction not found here is evaluated by a sequential loop.
    pub reduced: HashMap<ExprId, Reg>,
    /// Loads a schedule has already issued (as part of a vector access or
    /// once for several elements): the f32 value of a `Load` node for the
    /// element being evaluated.
    pub preloaded: HashMap<ExprId, Reg>,
    /// The global base address of each input tensor.
    pub inputs: Vec<Reg>,
    /// Whether input loads take the read-only path (`ld.global.nc`): set
    /// where the kernel's stores come between them (an output pass), so
    /// that ptxas may move them past those stores, which it may not do
    /// with plain loads (a store might change what they read). Elsewhere
    /// plain loads, which ptxas fits in fewer registers: a row kernel of
    /// five reductions, 128 threads a row, spilled 4 bytes with read-only
    /// loads in its reduction passes.
    pub read_only_inputs: bool,
    /// Per division whose divisor every element of a pass shares: the
    /// divisor's reciprocal, evaluated once before the pass
    /// ([`share_divisors`]); the division is then a multiplication.
    pub reciprocals: HashMap<ExprId, Reg>,
    /// Loads that a chunk of consecutive elements reads one element at a
    /// time although they run along the chunk: their rows do not start
    /// aligned as the chunk does (a peeled row's, `rows::peel`).
    pub scalar_loads: HashSet<ExprId>,
}

impl Env {
    /// The state space of input loads (see [`Env::read_only_inputs`]).
    pub fn input_space(&self) -> Space {
        if self.read_only_inputs {
            Space::GlobalReadOnly
        } else {
            Space::Global
        }
    }
}

/// Evaluates, once, the reciprocal of every divisor under `id` (through the
/// lets `env` has not evaluated, not into reductions) that reads only
/// `shared` index variables, so that each element's division by it is a
/// multiplication: `x · rcp.approx(y)`, within 2 ulp of `x / y` while
/// `1/y` is a normal f32 (`|y|` below 2¹²⁶), and the same infinities and
/// NaNs. A division per element is a long sequence with a call to a slow
/// path, which also keeps ptxas from unrolling the element loop around it;
/// the reciprocal is `rcp.approx`, not `rcp.rn`, because a single call to
/// the slow path in a kernel is enough for ptxas to cap a small kernel at
/// 32 registers (a peeled softmax row of 128 threads spilled at 32, and
/// takes 37 without the call).
pub fn share_divisors(
    b: &mut Builder,
    k: &ir::Kernel,
    env: &mut Env,
    id: ExprId,
    shared: &[VarId],
) {
    match k.expr(id).clone() {
        Expr::Binary(BinaryOp::Div, x, y)
            if k.free_vars(y).iter().all(|v| shared.contains(v))
                && !env.reciprocals.contains_key(&id) =>
        {
            share_divisors(b, k, env, x, shared);
            let y = emit(b, k, env, y).reg();
            let r = b.f32_unary(UnaryOp::RcpApprox, y);
            env.reciprocals.insert(id, r);
        }
        Expr::Let(l) if !env.lets.contains_key(&l) => {
            share_divisors(b, k, env, k.let_(l).value, shared);
        }
        Expr::Let(_) | Expr::Reduce { .. } => {}
        _ => {
            for c in k.children(id) {
                share_divisors(b, k, env, c, shared);
            }
        }
    }
}

/// Evaluates `id` in `env`, emitting instructions into `b`.
///
/// Invariant: every index variable the expression reads is bound in `env`.
pub fn emit(b: &mut Builder, k: &ir::Kernel, env: &mut Env, id: ExprId) -> Value {
    match k.expr(id).clone() {
        Expr::Const(c) => Value::Num(b.f32_imm(c)),
        Expr::Index(v) => Value::Num(b.u32_to_f32(env.index[&v])),
        Expr::Load { tensor, index } => {
            if let Some(r) = env.preloaded.get(&id) {
                return Value::Num(*r);
            }
            let t = k.input(tensor);
            let flat = flat_index(b, env, &index, &k.strides_of(t));
            let addr = b.global_addr(env.inputs[tensor.0], flat, t.dtype.size());
            Value::Num(b.load(
                env.input_space(),
                t.dtype,
                Addr {
                    base: addr,
                    offset: 0,
                },
            ))
        }
        Expr::Let(l) => {
            if let Some(v) = env.lets.get(&l) {
                return *v;
            }
            let v = emit(b, k, env, k.let_(l).value);
            env.lets.insert(l, v);
            v
        }
        Expr::Unary(op, a) => {
            let x = emit(b, k, env, a).reg();
            Value::Num(unary(b, op, x))
        }
        Expr::Binary(BinaryOp::Div, x, _) if env.reciprocals.contains_key(&id) => {
            let x = emit(b, k, env, x).reg();
            Value::Num(b.f32_op(ArithOp::Mul, x, env.reciprocals[&id]))
        }
        Expr::Binary(op, x, y) => {
            let x = emit(b, k, env, x).reg();
            let y = emit(b, k, env, y).reg();
            let op = match op {
                BinaryOp::Add => ArithOp::Add,
                BinaryOp::Sub => ArithOp::Sub,
                BinaryOp::Mul => ArithOp::Mul,
                BinaryOp::Div => ArithOp::Div,
                BinaryOp::Min => ArithOp::Min,
                BinaryOp::Max => ArithOp::Max,
            };
            Value::Num(b.f32_op(op, x, y))
        }
        Expr::Compare(op, x, y) => {
            let x = emit(b, k, env, x).reg();
            let y = emit(b, k, env, y).reg();
            let cmp = match op {
                CmpOp::Lt => Cmp::Lt,
                CmpOp::Le => Cmp::Le,
                CmpOp::Gt => Cmp::Gt,
                CmpOp::Ge => Cmp::Ge,
                CmpOp::Eq => Cmp::Eq,
                CmpOp::Ne => Cmp::Neu,
            };
            Value::Bool(b.setp(cmp, Ty::F32, x, y))
        }
        Expr::Logic(op, x, y) => {
            let x = emit(b, k, env, x).reg();
            let y = emit(b, k, env, y).reg();
            let op = match op {
                LogicOp::And => ArithOp::And,
                LogicOp::Or => ArithOp::Or,
            };
            Value::Bool(b.pred_op(op, x, y))
        }
        Expr::Not(x) => {
            let x = emit(b, k, env, x).reg();
            Value::Bool(b.pred_not(x))
        }
        Expr::Select(c, x, y) => {
            let c = emit(b, k, env, c).reg();
            match (emit(b, k, env, x), emit(b, k, env, y)) {
                (Value::Bool(x), Value::Bool(y)) => {
                    let then = b.pred_op(ArithOp::And, c, x);
                    let not_c = b.pred_not(c);
                    let other = b.pred_op(ArithOp::And, not_c, y);
                    Value::Bool(b.pred_op(ArithOp::Or, then, other))
                }
                (x, y) => Value::Num(b.f32_select(c, x.reg(), y.reg())),
            }
        }
        Expr::Cast(dtype, x) => {
            let x = emit(b, k, env, x).reg();
            Value::Num(b.round_to(dtype, x))
        }
        Expr::Reduce { op, var, body } => {
            if let Some(r) = env.reduced.get(&id) {
                return Value::Num(*r);
            }
            Value::Num(sequential_reduce(b, k, env, op, var, body))
        }
    }
}

/// `Σ index[i] · strides[i]` as a 32-bit element index.
pub fn flat_index(b: &mut Builder, env: &Env, index: &[VarId], strides: &[u64]) -> Operand {
    let mut flat: Option<Reg> = None;
    for (v, stride) in index.iter().zip(strides) {
        let i = env.index[v];
        flat = Some(match flat {
            None if *stride == 1 => i,
            None => b.u32_op(ArithOp::Mul, i, Operand::Int(*stride as i64)),
            Some(acc) => b.u32_mad(i, Operand::Int(*stride as i64), acc),
        });
    }
    flat.map_or(Operand::Int(0), Operand::Reg)
}

/// The identity of a reduction and how to fold one more value into it.
pub fn reduce_init(op: ReduceOp) -> f32 {
    match op {
        ReduceOp::Sum | ReduceOp::Mean => 0.0,
        ReduceOp::Max => f32::NEG_INFINITY,
        ReduceOp::Min => f32::INFINITY,
    }
}

/// The arithmetic that folds a value into a reduction's accumulator.
pub fn reduce_combine(op: ReduceOp) -> ArithOp {
    match op {
        ReduceOp::Sum | ReduceOp::Mean => ArithOp::Add,
        ReduceOp::Max => ArithOp::Max,
        ReduceOp::Min => ArithOp::Min,
    }
}

/// `acc = acc <op> x`, in place.
pub fn fold_into(b: &mut Builder, op: ReduceOp, acc: Reg, x: Reg) {
    b.push(Op::Arith {
        op: reduce_combine(op),
        ty: Ty::F32,
        dst: acc,
        a: acc.into(),
        b: x.into(),
    });
}

/// Applies a mean's division once the sum is complete.
pub fn finish_reduce(b: &mut Builder, op: ReduceOp, acc: Reg, extent: u32) -> Reg {
    match op {
        ReduceOp::Mean => b.f32_op(ArithOp::Mul, acc, Operand::F32(1.0 / extent as f32)),
        _ => acc,
    }
}

fn sequential_reduce(
    b: &mut Builder,
    k: &ir::Kernel,
    env: &mut Env,
    op: ReduceOp,
    var: VarId,
    body: ExprId,
) -> Reg {
    let extent = k.extent(var);
    let acc = b.f32_imm(reduce_init(op));
    let i = b.u32_imm(0);
    let top = b.label();
    b.place(top);
    env.index.insert(var, i);
    let x = emit(b, k, env, body).reg();
    env.index.remove(&var);
    fold_into(b, op, acc, x);
    b.push(Op::Arith {
        op: ArithOp::Add,
        ty: Ty::U32,
        dst: i,
        a: i.into(),
        b: Operand::Int(1),
    });
    let more = b.setp(Cmp::Lt, Ty::U32, i, Operand::Int(i64::from(extent)));
    b.bra_if(more, false, top);
    finish_reduce(b, op, acc, extent)
}

/// `Σ c[i] · x^i`, by Horner's rule with fused multiply-adds.
fn poly(b: &mut Builder, x: Reg, coefficients: &[f32]) -> Reg {
    let mut acc = b.f32_imm(coefficients[coefficients.len() - 1]);
    for c in coefficients.iter().rev().skip(1) {
        acc = b.f32_fma(acc, x, Operand::F32(*c));
    }
    acc
}

/// `e^x`, as `2^(x · log₂ e)` (`ex2.approx`).
pub fn exp(b: &mut Builder, x: Reg) -> Reg {
    let t = b.f32_op(ArithOp::Mul, x, Operand::F32(LOG2_E));
    b.f32_unary(UnaryOp::Ex2, t)
}

/// `sign(x) · magnitude`, for odd functions computed on `|x|`.
fn with_sign_of(b: &mut Builder, x: Reg, magnitude: Reg) -> Reg {
    let negative = b.setp(Cmp::Lt, Ty::F32, x, Operand::F32(0.0));
    let neg = b.f32_unary(UnaryOp::Neg, magnitude);
    b.f32_select(negative, neg, magnitude)
}

/// tanh with relative error near 1e-6: a Taylor polynomial near zero, where
/// `(1 - e^-2|x|) / (1 + e^-2|x|)` would cancel.
fn tanh(b: &mut Builder, x: Reg) -> Reg {
    let a = b.f32_unary(UnaryOp::Abs, x);
    let t = b.f32_op(ArithOp::Mul, a, Operand::F32(-2.0 * LOG2_E));
    let e = b.f32_unary(UnaryOp::Ex2, t);
    let num = b.f32_op(ArithOp::Sub, Operand::F32(1.0), e);
    let den = b.f32_op(ArithOp::Add, Operand::F32(1.0), e);
    let r = b.f32_unary(UnaryOp::RcpApprox, den);
    let big = b.f32_op(ArithOp::Mul, num, r);
    let big = with_sign_of(b, x, big);
    let x2 = b.f32_op(ArithOp::Mul, x, x);
    let p = poly(
        b,
        x2,
        &[1.0, -1.0 / 3.0, 2.0 / 15.0, -17.0 / 315.0, 62.0 / 2835.0],
    );
    let small = b.f32_op(ArithOp::Mul, x, p);
    let is_small = b.setp(Cmp::Lt, Ty::F32, a, Operand::F32(0.125));
    b.f32_select(is_small, small, big)
}

/// erf with absolute error below 2e-7 (Abramowitz & Stegun 7.1.26 away from
/// zero, the Maclaurin series near it, where relative accuracy matters).
fn erf(b: &mut Builder, x: Reg) -> Reg {
    let a = b.f32_unary(UnaryOp::Abs, x);
    let pa = b.f32_fma(a, Operand::F32(0.327_591_1), Operand::F32(1.0));
    let t = b.f32_unary(UnaryOp::RcpApprox, pa);
    let p = poly(
        b,
        t,
        &[
            0.0,
            0.254_829_6,
            -0.284_496_72,
            1.421_413_8,
            -1.453_152,
            1.061_405_4,
        ],
    );
    let a2 = b.f32_op(ArithOp::Mul, a, a);
    let na2 = b.f32_unary(UnaryOp::Neg, a2);
    let e = exp(b, na2);
    let tail = b.f32_op(ArithOp::Mul, p, e);
    let big = b.f32_op(ArithOp::Sub, Operand::F32(1.0), tail);
    let big = with_sign_of(b, x, big);
    let two_over_sqrt_pi = std::f32::consts::FRAC_2_SQRT_PI;
    let x2 = b.f32_op(ArithOp::Mul, x, x);
    let s = poly(
        b,
        x2,
        &[
            two_over_sqrt_pi,
            -two_over_sqrt_pi / 3.0,
            two_over_sqrt_pi / 10.0,
            -two_over_sqrt_pi / 42.0,
            two_over_sqrt_pi / 216.0,
            -two_over_sqrt_pi / 1320.0,
        ],
    );
    let small = b.f32_op(ArithOp::Mul, x, s);
    let is_small = b.setp(Cmp::Lt, Ty::F32, a, Operand::F32(0.5));
    b.f32_select(is_small, small, big)
}

/// erfc of `a ≥ 0` with relative error near 1.2e-7 everywhere, also in the
/// tail where it is far below 1 (the Chebyshev fit of Numerical Recipes'
/// `erfcc`): `t · e^(−a² + P(t))` with `t = 1 / (1 + a/2)`.
fn erfc_nonnegative(b: &mut Builder, a: Reg) -> Reg {
    let half_a = b.f32_fma(a, Operand::F32(0.5), Operand::F32(1.0));
    let t = b.f32_unary(UnaryOp::RcpApprox, half_a);
    let p = poly(
        b,
        t,
        &[
            -1.265_512_2,
            1.000_023_7,
            0.374_091_96,
            0.096_784_18,
            -0.186_288_06,
            0.278_868_07,
            -1.135_204,
            1.488_515_9,
            -0.822_152_23,
            0.170_872_77,
        ],
    );
    let a2 = b.f32_op(ArithOp::Mul, a, a);
    let exponent = b.f32_op(ArithOp::Sub, p, a2);
    let e = exp(b, exponent);
    b.f32_op(ArithOp::Mul, t, e)
}

/// `1 / (1 + e^-x)`. The reciprocal is `rcp.approx` (within 1 ulp, as
/// are the reciprocals of `tanh`, `erf` and `erfc`): the correctly rounded
/// `rcp.rn` has a slow path, a call that keeps ptxas from issuing loads
/// across it, and in an epilogue of 64 outputs a thread (the fused
/// matmul, bias and GELU on warpgroups) that left each output's bias load
/// waiting out its own latency.
fn sigmoid(b: &mut Builder, x: Reg) -> Reg {
    let nx = b.f32_unary(UnaryOp::Neg, x);
    let e = exp(b, nx);
    let den = b.f32_op(ArithOp::Add, e, Operand::F32(1.0));
    b.f32_unary(UnaryOp::RcpApprox, den)
}

/// `op` of `x`, an f32 register.
pub(crate) fn unary(b: &mut Builder, op: ir::UnaryOp, x: Reg) -> Reg {
    use ir::UnaryOp as U;
    match op {
        U::Neg => b.f32_unary(UnaryOp::Neg, x),
        U::Abs => b.f32_unary(UnaryOp::Abs, x),
        U::Sqrt => b.f32_unary(UnaryOp::Sqrt, x),
        U::Rsqrt => b.f32_unary(UnaryOp::Rsqrt, x),
        U::Exp => exp(b, x),
        U::Log => {
            let l = b.f32_unary(UnaryOp::Lg2, x);
            b.f32_op(ArithOp::Mul, l, Operand::F32(LN_2))
        }
        U::Tanh => tanh(b, x),
        U::Erf => erf(b, x),
        U::Relu => b.f32_op(ArithOp::Max, x, Operand::F32(0.0)),
        U::Sigmoid => sigmoid(b, x),
        U::Silu => {
            let s = sigmoid(b, x);
            b.f32_op(ArithOp::Mul, x, s)
        }
        // 0.5·x·(1 + tanh(u)) = x · sigmoid(2u): no cancellation where
        // tanh(u) nears −1, and no division.
        U::GeluTanh => {
            let x2 = b.f32_op(ArithOp::Mul, x, x);
            let cubic = b.f32_fma(x2, Operand::F32(0.044_715), Operand::F32(1.0));
            let scaled = b.f32_op(ArithOp::Mul, x, Operand::F32(2.0 * 0.797_884_6));
            let two_u = b.f32_op(ArithOp::Mul, scaled, cubic);
            let s = sigmoid(b, two_u);
            b.f32_op(ArithOp::Mul, x, s)
        }
        // 0.5·x·(1 + erf(z)) = 0.5·x·erfc(−z): erfc(|z|) where x < 0,
        // 2 − erfc(|z|) elsewhere; no cancellation where erf(z) nears −1.
        U::GeluErf => {
            let a = b.f32_unary(UnaryOp::Abs, x);
            let z = b.f32_op(
                ArithOp::Mul,
                a,
                Operand::F32(std::f32::consts::FRAC_1_SQRT_2),
            );
            let tail = erfc_nonnegative(b, z);
            let rest = b.f32_op(ArithOp::Sub, Operand::F32(2.0), tail);
            let negative = b.setp(Cmp::Lt, Ty::F32, x, Operand::F32(0.0));
            let one_plus = b.f32_select(negative, tail, rest);
            let half_x = b.f32_op(ArithOp::Mul, x, Operand::F32(0.5));
            b.f32_op(ArithOp::Mul, half_x, one_plus)
        }
    }
}

/// A fresh f32 register holding a copy of `src` (for accumulators that a
/// loop updates in place).
pub fn copy_f32(b: &mut Builder, src: Reg) -> Reg {
    let dst = b.reg(RegClass::F32);
    b.push(Op::Mov {
        ty: Ty::F32,
        dst,
        src: src.into(),
    });
    dst
}
