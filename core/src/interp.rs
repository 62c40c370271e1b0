//! A CPU evaluation of the kernel IR with exactly the CPU reference's
//! semantics (the code the macro generates, see `macros/src/reference.rs`),
//! for the consumers that hold a [`Kernel`] but no compiled reference: the
//! verification of lowered kernels on the virtual GPU and the tuner's
//! correctness checks.
//!
//! The rules, as in the reference: every value is an f32 (inputs arrive
//! already widened from their dtype, which is exact); binary operations are
//! IEEE f32; a [`Expr::Cast`] rounds to nearest even into the dtype and
//! widens back; reductions fold left in index order from `0` (sum, mean),
//! `-∞` (max) or `+∞` (min), and a mean is the folded sum divided by the
//! extent (`sum / n`, not `sum * (1/n)`); the unary functions are those of
//! [`unary`]; the output is rounded to its dtype.
//!
//! A let is evaluated once per value of its dependencies and a reduction
//! once per value of its free variables, so a softmax costs what the
//! reference's loops cost, not one row's work per element.

use std::collections::HashMap;

use crate::dtype::DType;
use crate::ir::{BinaryOp, CmpOp, Expr, ExprId, Kernel, LogicOp, ReduceOp, UnaryOp, VarId};

/// Evaluates `kernel` on `inputs` (one vector per kernel input, row-major,
/// each value already widened from the input's dtype) and returns the
/// output, row-major, each element rounded to the output dtype and widened
/// back to f32.
///
/// # Panics
///
/// If `inputs` does not hold one vector of the right length per input.
pub fn evaluate(kernel: &Kernel, inputs: &[Vec<f32>]) -> Vec<f32> {
    assert_eq!(
        inputs.len(),
        kernel.inputs.len(),
        "kernel `{}` has {} inputs",
        kernel.name,
        kernel.inputs.len()
    );
    for (t, values) in kernel.inputs.iter().zip(inputs) {
        assert_eq!(
            values.len() as u64,
            kernel.len_of(t),
            "input `{}` of kernel `{}`",
            t.name,
            kernel.name
        );
    }
    let mut interp = Interp::new(kernel, inputs);
    let vars = kernel.output_vars();
    let total = kernel.len_of(&kernel.output) as usize;
    let dtype = kernel.output.dtype;
    let mut env = vec![0u32; kernel.vars.len()];
    (0..total)
        .map(|flat| {
            let mut rest = flat as u64;
            for v in vars.iter().rev() {
                let extent = u64::from(kernel.extent(*v));
                env[v.0] = (rest % extent) as u32;
                rest /= extent;
            }
            round(dtype, interp.eval(kernel.root, &mut env).num())
        })
        .collect()
}

/// Rounds `x` to nearest even in `dtype` and widens it back to f32.
pub fn round(dtype: DType, x: f32) -> f32 {
    match dtype {
        DType::F32 => x,
        DType::F16 => f16_round(x),
        DType::Bf16 => bf16_round(x),
    }
}

/// The kernel language's unary functions, with the formulas of the runtime's
/// reference math (`ktune::__private::math`), in f32, bit for bit: `erf`
/// and `erfc` are libm's f64 functions rounded once ([`erf`], [`erfc`]),
/// as there.
pub fn unary(op: UnaryOp, x: f32) -> f32 {
    match op {
        UnaryOp::Neg => -x,
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Rsqrt => 1.0 / x.sqrt(),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Abs => x.abs(),
        UnaryOp::Relu => x.max(0.0),
        UnaryOp::Sigmoid => sigmoid(x),
        UnaryOp::Silu => x * sigmoid(x),
        // 0.5·x·(1 + tanh(u)) = x · sigmoid(2u), which does not cancel.
        UnaryOp::GeluTanh => {
            const SQRT_2_OVER_PI: f32 =
                std::f32::consts::FRAC_2_SQRT_PI * std::f32::consts::FRAC_1_SQRT_2;
            x * sigmoid(2.0 * SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x))
        }
        // 0.5·x·(1 + erf(z)) = 0.5·x·erfc(−z), which does not cancel.
        UnaryOp::GeluErf => 0.5 * x * erfc(-x * std::f32::consts::FRAC_1_SQRT_2),
        UnaryOp::Erf => erf(x),
    }
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// The error function in f32: libm's f64 `erf` rounded once (nearly always
/// the correctly rounded value; libm's f32 `erff` is off by an ulp here
/// and there).
pub fn erf(x: f32) -> f32 {
    libm::erf(f64::from(x)) as f32
}

/// The complementary error function in f32, `1 − erf(x)`: libm's f64
/// `erfc` rounded once (its f32 `erfcf` is up to 3 ulps off near 2), also
/// in the tail where it is far below 1.
pub fn erfc(x: f32) -> f32 {
    libm::erfc(f64::from(x)) as f32
}

/// f32 → f16 → f32, rounding to nearest even (subnormals and overflow to
/// infinity included).
fn f16_round(x: f32) -> f32 {
    if !x.is_finite() {
        return x;
    }
    let a = x.abs();
    // Largest finite f16 is 65504; halfway to the next power is 65520.
    if a >= 65520.0 {
        return f32::INFINITY.copysign(x);
    }
    // Quantum: 2^(e - 10) for normal f16 (e ≥ -14), 2^-24 below.
    let e = if a == 0.0 {
        -14
    } else {
        (a.to_bits() >> 23) as i32 - 127
    };
    let q = 2f64.powi(e.max(-14) - 10);
    let r = (f64::from(a) / q).round_ties_even() * q;
    (r as f32).copysign(x)
}

/// f32 → bf16 → f32, rounding to nearest even.
fn bf16_round(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    let bits = x.to_bits();
    let lsb = (bits >> 16) & 1;
    let rounded = bits.wrapping_add(0x7fff + lsb) & 0xffff_0000;
    f32::from_bits(rounded)
}

#[derive(Debug, Clone, Copy)]
enum Val {
    Num(f32),
    Bool(bool),
}

impl Val {
    /// The front-end's type rules make a number where one is expected; a
    /// boolean there reads as NaN rather than panicking.
    fn num(self) -> f32 {
        match self {
            Val::Num(x) => x,
            Val::Bool(_) => f32::NAN,
        }
    }

    fn bool(self) -> bool {
        match self {
            Val::Bool(b) => b,
            Val::Num(x) => x != 0.0,
        }
    }
}

struct Interp<'k> {
    k: &'k Kernel,
    inputs: &'k [Vec<f32>],
    strides: Vec<Vec<u64>>,
    /// Per expression node: the variables a memoized value depends on (the
    /// deps of a let, the free variables of a reduction); empty for other
    /// nodes.
    keys: Vec<Vec<VarId>>,
    memo: HashMap<(usize, u64), Val>,
}

impl<'k> Interp<'k> {
    fn new(k: &'k Kernel, inputs: &'k [Vec<f32>]) -> Interp<'k> {
        let keys = (0..k.exprs.len())
            .map(|i| match k.expr(ExprId(i)) {
                Expr::Reduce { .. } => k.free_vars(ExprId(i)),
                _ => Vec::new(),
            })
            .collect();
        Interp {
            k,
            inputs,
            strides: k.inputs.iter().map(|t| k.strides_of(t)).collect(),
            keys,
            memo: HashMap::new(),
        }
    }

    /// Mixed-radix index of the variables' current values.
    fn key(&self, vars: &[VarId], env: &[u32]) -> u64 {
        vars.iter().fold(0u64, |key, v| {
            key.wrapping_mul(u64::from(self.k.extent(*v)))
                .wrapping_add(u64::from(env[v.0]))
        })
    }

    fn eval(&mut self, id: ExprId, env: &mut Vec<u32>) -> Val {
        let k = self.k;
        match k.expr(id) {
            Expr::Const(c) => Val::Num(*c),
            Expr::Index(v) => Val::Num(env[v.0] as f32),
            Expr::Load { tensor, index } => {
                let flat: u64 = index
                    .iter()
                    .zip(&self.strides[tensor.0])
                    .map(|(v, s)| u64::from(env[v.0]) * s)
                    .sum();
                Val::Num(self.inputs[tensor.0][flat as usize])
            }
            Expr::Let(l) => {
                let let_ = k.let_(*l);
                // Lets share the memo with expression nodes: offset their ids.
                let slot = k.exprs.len() + l.0;
                let key = (slot, self.key(&let_.deps, env));
                if let Some(v) = self.memo.get(&key) {
                    return *v;
                }
                let v = self.eval(let_.value, env);
                self.memo.insert(key, v);
                v
            }
            Expr::Unary(op, a) => Val::Num(unary(*op, self.eval(*a, env).num())),
            Expr::Binary(op, a, b) => {
                let (x, y) = (self.eval(*a, env).num(), self.eval(*b, env).num());
                Val::Num(match op {
                    BinaryOp::Add => x + y,
                    BinaryOp::Sub => x - y,
                    BinaryOp::Mul => x * y,
                    BinaryOp::Div => x / y,
                    BinaryOp::Min => x.min(y),
                    BinaryOp::Max => x.max(y),
                })
            }
            Expr::Compare(op, a, b) => {
                let (x, y) = (self.eval(*a, env).num(), self.eval(*b, env).num());
                Val::Bool(match op {
                    CmpOp::Lt => x < y,
                    CmpOp::Le => x <= y,
                    CmpOp::Gt => x > y,
                    CmpOp::Ge => x >= y,
                    CmpOp::Eq => x == y,
                    CmpOp::Ne => x != y,
                })
            }
            Expr::Logic(op, a, b) => {
                // Both sides are evaluated, as the reference's `&&`/`||` of
                // pure expressions computes the same result either way.
                let (x, y) = (self.eval(*a, env).bool(), self.eval(*b, env).bool());
                Val::Bool(match op {
                    LogicOp::And => x && y,
                    LogicOp::Or => x || y,
                })
            }
            Expr::Not(a) => Val::Bool(!self.eval(*a, env).bool()),
            Expr::Select(c, a, b) => {
                if self.eval(*c, env).bool() {
                    self.eval(*a, env)
                } else {
                    self.eval(*b, env)
                }
            }
            Expr::Cast(dtype, a) => Val::Num(round(*dtype, self.eval(*a, env).num())),
            Expr::Reduce { op, var, body } => {
                let key = (id.0, self.key(&self.keys[id.0], env));
                if let Some(v) = self.memo.get(&key) {
                    return *v;
                }
                let extent = k.extent(*var);
                let mut acc = match op {
                    ReduceOp::Sum | ReduceOp::Mean => 0.0f32,
                    ReduceOp::Max => f32::NEG_INFINITY,
                    ReduceOp::Min => f32::INFINITY,
                };
                for i in 0..extent {
                    env[var.0] = i;
                    let x = self.eval(*body, env).num();
                    acc = match op {
                        ReduceOp::Sum | ReduceOp::Mean => acc + x,
                        ReduceOp::Max => acc.max(x),
                        ReduceOp::Min => acc.min(x),
                    };
                }
                if *op == ReduceOp::Mean {
                    acc /= extent as f32;
                }
                let v = Val::Num(acc);
                self.memo.insert(key, v);
                v
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::*;
    use crate::syntax::parse_kernel;

    fn ulps(a: f32, b: f32) -> u32 {
        (a.to_bits() as i32).abs_diff(b.to_bits() as i32)
    }

    #[test]
    fn erf_and_erfc_are_accurate_and_total() {
        for (x, erf_x) in [
            (0.0f32, 0.0f32),
            (0.5, 0.520_499_9),
            (1.0, 0.842_700_8),
            (2.0, 0.995_322_3),
            (3.0, 0.999_977_9),
            (-1.0, -0.842_700_8),
            (10.0, 1.0),
            (1e-30, 1.128_379_2e-30),
        ] {
            assert!(ulps(erf(x), erf_x) <= 1, "erf({x}) = {}", erf(x));
        }
        // erfc(9) = 4.137e-37, which 1 - erf(9) would give as 0.
        assert!(ulps(erfc(9.0), 4.137_031_7e-37) <= 1, "{}", erfc(9.0));
        assert!(erf(f32::NAN).is_nan() && erfc(f32::NAN).is_nan());
        assert_eq!(erf(f32::INFINITY), 1.0);
        assert_eq!(erfc(f32::INFINITY), 0.0);
        assert_eq!(erfc(f32::NEG_INFINITY), 2.0);
    }

    #[test]
    fn gelu_keeps_its_relative_accuracy_in_the_negative_tail() {
        // 0.5·x·(1 + erf(x/√2)) in f64, where 1 + erf does not cancel yet.
        for (x, want) in [(-3.0f64, -4.049_694_1e-3), (-5.0, -1.433_257_9e-6)] {
            let got = f64::from(unary(UnaryOp::GeluErf, x as f32));
            assert!(
                (got - want).abs() < 1e-6 * want.abs(),
                "gelu_erf({x}) = {got}"
            );
        }
    }

    #[test]
    fn rounding_matches_the_half_crate() {
        let mut s = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..100_000 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let x = f32::from_bits(s as u32);
            if x.is_nan() {
                continue;
            }
            let h = half::f16::from_f32(x).to_f32();
            let b = half::bf16::from_f32(x).to_f32();
            assert_eq!(round(DType::F16, x).to_bits(), h.to_bits(), "f16 {x:e}");
            assert_eq!(round(DType::Bf16, x).to_bits(), b.to_bits(), "bf16 {x:e}");
        }
    }

    #[test]
    fn softmax_rows_sum_to_one_and_follow_the_reference_order() {
        let k = parse_kernel(
            quote!(shape(R = 2, C = 3)),
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
        .expect("valid kernel");
        let x = vec![1.0, 2.0, 3.0, -1.0, 0.5, 0.25];
        let out = evaluate(&k, std::slice::from_ref(&x));
        for r in 0..2 {
            let row = &x[r * 3..][..3];
            let mx = row.iter().fold(f32::NEG_INFINITY, |a, v| a.max(*v));
            let s = row.iter().fold(0.0f32, |a, v| a + (v - mx).exp());
            for c in 0..3 {
                assert_eq!(out[r * 3 + c], (row[c] - mx).exp() / s);
            }
        }
    }

    #[test]
    fn mean_divides_and_casts_round() {
        let k = parse_kernel(
            quote!(shape(N = 3)),
            quote! {
                fn m(x: Tensor<f32, N>) -> Tensor<bf16, N> {
                    compute(|i| (x[i] as bf16) + mean(N, |j| x[j]) + (i as f32))
                }
            },
        )
        .expect("valid kernel");
        let x = vec![1.001, 2.0, 4.0];
        let out = evaluate(&k, std::slice::from_ref(&x));
        let mean = (1.001f32 + 2.0 + 4.0) / 3.0;
        for i in 0..3 {
            let want = round(DType::Bf16, round(DType::Bf16, x[i]) + mean + i as f32);
            assert_eq!(out[i], want);
        }
    }

    #[test]
    fn matmul_with_select_and_transposed_operand() {
        let k = parse_kernel(
            quote!(shape(M = 2, N = 3, K = 4)),
            quote! {
                fn mm(a: Tensor<f32, (M, K)>, b: Tensor<f32, (N, K)>) -> Tensor<f32, (M, N)> {
                    compute(|m, n| {
                        let y = sum(K, |k| a[m][k] * b[n][k]);
                        select(y > 0.0, y, -y)
                    })
                }
            },
        )
        .expect("valid kernel");
        let a: Vec<f32> = (0..8).map(|i| i as f32 - 3.5).collect();
        let b: Vec<f32> = (0..12).map(|i| (i as f32) * 0.5 - 2.0).collect();
        let out = evaluate(&k, &[a.clone(), b.clone()]);
        for m in 0..2 {
            for n in 0..3 {
                let y = (0..4).fold(0.0f32, |acc, k| acc + a[m * 4 + k] * b[n * 4 + k]);
                assert_eq!(out[m * 3 + n], y.abs());
            }
        }
    }

    #[test]
    fn unary_functions_use_the_reference_formulas() {
        assert_eq!(unary(UnaryOp::Relu, -2.0), 0.0);
        assert_eq!(unary(UnaryOp::Rsqrt, 4.0), 0.5);
        assert_eq!(unary(UnaryOp::Sigmoid, 0.0), 0.5);
        assert_eq!(unary(UnaryOp::Silu, 2.0), 2.0 / (1.0 + (-2.0f32).exp()));
        let g = unary(UnaryOp::GeluErf, 1.0);
        assert!((g - 0.841_344_7).abs() < 1e-6, "{g}");
        let g = unary(UnaryOp::GeluTanh, 1.0);
        assert!((g - 0.841_192).abs() < 1e-5, "{g}");
    }
}
