//! Verification of a lowered kernel against the CPU evaluation of its IR
//! ([`ktune_core::interp::evaluate`]): seeded random inputs, a poisoned
//! output, a run on the virtual GPU, and an element-by-element comparison
//! within a tolerance derived from the kernel.
//!
//! ```
//! use ktune_core::{SmVersion, lower, syntax::parse_kernel};
//! # use quote::quote;
//! let kernel = parse_kernel(
//!     quote!(shape(N = 100)),
//!     quote! { fn double(x: Tensor<f32, N>) -> Tensor<f32, N> { compute(|i| 2.0 * x[i]) } },
//! )?;
//! let schedule = lower::heuristic(&kernel, SmVersion::Sm80);
//! let verified = ktune_vgpu::verify::verify(&kernel, &schedule, SmVersion::Sm80, 1)?;
//! assert_eq!(verified.elements, 100);
//! assert_eq!(verified.max_error, 0.0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Inputs
//!
//! Every input element is uniform in magnitude in `[0.25, 2]`, never zero,
//! with a random sign, rounded to its dtype. The signs are all positive
//! when the kernel applies `log`, `sqrt` or `rsqrt` anywhere, or divides
//! by something containing a reduction (a sum of mixed signs can cancel to
//! almost nothing and make the quotient meaningless).
//!
//! # Tolerance
//!
//! Element `i` passes when it equals the reference (NaN matching NaN), or
//! `|got − want| ≤ rel·|want| + 0.1·rel·scale`, where `scale` is the
//! largest `|want|` of the output and
//! - `rel = 1e-5 + (L + 2)·2⁻²⁴` for f32 results, `L` the total extent of
//!   the kernel's sum and mean reductions: the GPU sums in a different
//!   order (trees of shuffles, per-thread partial sums, fused
//!   multiply-adds), each addition rounding by up to 2⁻²⁴ of a partial sum,
//!   and computes `exp`, `log`, `rsqrt` and `tanh` with approximate
//!   instructions good to a few ulp;
//! - `rel = 1e-2` plus the above when the output is f16 or bf16 or the
//!   kernel casts to one of them anywhere: an f32 difference of one ulp
//!   can move a rounding to the neighbouring 16-bit value.
//!
//! ## Ill-conditioned outputs
//!
//! Where an output is ill-conditioned, rounding anywhere in the kernel
//! moves it by far more than `rel` of its own magnitude: a deviation from
//! a mean of nearly equal values, an `exp` of a large argument, a
//! comparison of two values that are equal in real arithmetic. So the
//! reference is evaluated a second time with every input moved by a
//! seeded random relative amount of at most 2⁻¹⁶, and `|want|` in the
//! formula above becomes the larger of `|want|` and the output's move
//! divided by 2⁻¹⁶: about how far it would move if the inputs moved by
//! their own size (a 16-bit output compared before its rounding). A
//! well-conditioned output moves by at most about its own magnitude, and
//! keeps its tolerance; a wrong kernel, which is wrong at well-conditioned
//! outputs too, still fails there. Kernels that cast to a 16-bit type
//! inside are left out: a move across one of the cast's rounding
//! boundaries would jump by the 16-bit spacing, which `rel`'s 1e-2 covers
//! already. An output that is 0 in real arithmetic whatever the inputs
//! (a sum of deviations from their mean) does not move at all, and gets
//! no more room than before.
//!
//! ## tf32
//!
//! A kernel with `allow_tf32` whose contraction multiplies two f32 tensors
//! may run on tensor cores, which round each factor to tf32 (10 mantissa
//! bits, to nearest: a relative error of at most 2⁻¹¹ each) and accumulate
//! the exact products in f32. Each product `a·b` is then off by at most
//! `(2⁻¹⁰ + 2⁻²²)·|a·b|`, and the sum by at most that times `Σ|a·b|`: the
//! error grows with `K` and with the magnitude of the products, not of
//! their sum, which cancellation can make arbitrarily small (an output
//! element near zero), and the epilogue then scales it by its slope. So
//! the allowance is per element, and exact rather than bounded: element
//! `i` may also differ by `d_i = |want_i − want'_i|`, where `want'` is the
//! reference evaluated with the contraction's two input tensors rounded to
//! tf32 (`cvt.rna`, as the kernel does). A tensor-core result is `want'`
//! up to the f32 summation order, which the terms above allow measured
//! from `|want_i| + d_i ≥ |want'_i|` (and `scale` over both outputs); a SIMT
//! result, exact products, is `want` up to the same. By the bound above,
//! `d_i ≤ (2⁻¹⁰ + 2⁻²²)·Σ|a·b|` for a contraction without epilogue.
//! Between two GPU runs, where no CPU reference is affordable,
//! [`relative_tolerance`] carries a statistical allowance instead
//! ([`TF32_BASELINE`]).

use std::fmt;

use ktune_core::DType;
use ktune_core::interp;
use ktune_core::ir::{BinaryOp, Expr, Kernel, ReduceOp, UnaryOp};
use ktune_core::lower::{LowerError, lower, matmul};
use ktune_core::schedule::Schedule;
use ktune_core::target::SmVersion;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::{BlockOrder, Config, Fault, Stats, first_poisoned, poisoned, run_bytes_with};

/// The seed of the block order of kernels with a workspace.
const BLOCK_ORDER_SEED: u64 = 0x5eed_b10c;

/// A schedule point that computed the reference's result.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Verified {
    /// The largest `|got − want|` over the output.
    pub max_error: f32,
    /// The tolerance at the element where that error occurred.
    pub tolerance: f32,
    /// What the run did on the virtual GPU.
    pub stats: Stats,
    /// Output elements compared (all of them).
    pub elements: usize,
}

/// Why a schedule point failed verification: the kernel, its shape, the
/// schedule and the target, and what went wrong.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifyError {
    pub kernel: String,
    /// The kernel's dimensions, as `(name, size)`.
    pub shape: Vec<(String, u32)>,
    /// Boxed, so that a `Result` carrying the error stays small.
    pub schedule: Box<Schedule>,
    pub target: SmVersion,
    pub kind: Failure,
}

/// What went wrong in a [`VerifyError`].
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// The schedule does not lower for the kernel on the target.
    Lower(Box<LowerError>),
    /// The virtual GPU stopped the kernel.
    Fault(Box<Fault>),
    /// Output element `index` still held the poison after the run.
    Unwritten { index: usize },
    /// Output element `index` is out of tolerance.
    Mismatch {
        index: usize,
        got: f32,
        want: f32,
        tolerance: f32,
    },
}

impl std::error::Error for VerifyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            Failure::Lower(e) => Some(e.as_ref()),
            Failure::Fault(f) => Some(f.as_ref()),
            _ => None,
        }
    }
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shape: Vec<String> = self
            .shape
            .iter()
            .map(|(name, size)| format!("{name} = {size}"))
            .collect();
        write!(
            f,
            "kernel `{}` ({}) with {} on {}: ",
            self.kernel,
            shape.join(", "),
            self.schedule.to_json(),
            self.target
        )?;
        self.kind.fmt(f)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Lower(e) => write!(f, "does not lower: {e}"),
            Failure::Fault(fault) => write!(f, "fault: {fault}"),
            Failure::Unwritten { index } => write!(f, "output element {index} was never written"),
            Failure::Mismatch {
                index,
                got,
                want,
                tolerance,
            } => write!(
                f,
                "output element {index} is {got:e}, the reference says {want:e} ± {tolerance:e}"
            ),
        }
    }
}

/// Lowers `kernel` with `schedule` for `target`, runs it on the virtual GPU
/// on inputs drawn with `seed` and compares every output element with the
/// CPU reference. See the [module docs](self) for the inputs and the
/// tolerance.
pub fn verify(
    kernel: &Kernel,
    schedule: &Schedule,
    target: SmVersion,
    seed: u64,
) -> Result<Verified, VerifyError> {
    Reference::new(kernel, seed).check(schedule, target)
}

/// A kernel with its random inputs and the CPU reference's output, to check
/// many schedule points against one evaluation.
#[derive(Debug, Clone)]
pub struct Reference {
    kernel: Kernel,
    /// The input buffers, as the GPU holds them.
    buffers: Vec<Vec<u8>>,
    want: Vec<f32>,
    /// Per element, `|want − want'|` with `want'` the reference on
    /// tf32-rounded factors (see the [module docs](self)); empty when the
    /// kernel's products are exact.
    tf32: Vec<f32>,
    /// Per element, how far it moves per relative move of the inputs
    /// ([`sensitivity`]); empty for kernels that cast to a 16-bit type.
    sensitivity: Vec<f32>,
    rel: f32,
    scale: f32,
}

impl Reference {
    /// Draws the inputs with `seed` and evaluates the reference.
    pub fn new(kernel: &Kernel, seed: u64) -> Reference {
        let values = random_inputs(kernel, seed);
        Reference::with_inputs(kernel, values)
    }

    /// The reference on given inputs, one vector per kernel input (each
    /// value is rounded to the input's dtype first).
    ///
    /// # Panics
    ///
    /// If the inputs do not match the kernel's inputs in number and length.
    pub fn with_inputs(kernel: &Kernel, mut inputs: Vec<Vec<f32>>) -> Reference {
        for (t, values) in kernel.inputs.iter().zip(&mut inputs) {
            for v in values.iter_mut() {
                *v = interp::round(t.dtype, *v);
            }
        }
        let want = interp::evaluate(kernel, &inputs);
        let sensitivity = if casts_to_sixteen_bit(kernel) {
            Vec::new()
        } else {
            sensitivity(kernel, &inputs, &want)
        };
        let buffers = kernel
            .inputs
            .iter()
            .zip(&inputs)
            .map(|(t, v)| encode(t.dtype, v))
            .collect();
        // The GPU gets the inputs as drawn; only the second reference sees
        // them rounded.
        let tf32: Vec<f32> = match tf32_factors(kernel) {
            Some(tensors) => {
                for t in tensors {
                    for v in &mut inputs[t] {
                        *v = f32::from_bits(crate::numeric::tf32_rna(*v));
                    }
                }
                interp::evaluate(kernel, &inputs)
            }
            None => Vec::new(),
        };
        let scale = want
            .iter()
            .chain(&tf32)
            .filter(|w| w.is_finite())
            .fold(0.0f32, |m, w| m.max(w.abs()))
            .max(f32::MIN_POSITIVE);
        let tf32 = tf32
            .iter()
            .zip(&want)
            .map(|(rounded, exact)| (rounded - exact).abs())
            .collect();
        Reference {
            rel: relative_tolerance(kernel),
            kernel: kernel.clone(),
            buffers,
            want,
            tf32,
            sensitivity,
            scale,
        }
    }

    /// The kernel, at the shape the reference was evaluated at.
    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    /// The reference's output, row-major.
    pub fn output(&self) -> &[f32] {
        &self.want
    }

    /// The input buffers, as the GPU holds them.
    pub fn buffers(&self) -> &[Vec<u8>] {
        &self.buffers
    }

    /// How far output element `index` may be from the reference.
    ///
    /// # Panics
    ///
    /// If `index` is not an element of the output.
    pub fn tolerance(&self, index: usize) -> f32 {
        let moves = self.sensitivity.get(index).copied().unwrap_or(0.0);
        allowance(
            self.rel,
            self.scale,
            self.want[index].abs().max(moves),
            self.tf32.get(index).copied(),
        )
    }

    /// Lowers and checks one schedule point.
    pub fn check(&self, schedule: &Schedule, target: SmVersion) -> Result<Verified, VerifyError> {
        let lowered = lower(&self.kernel, schedule, target)
            .map_err(|e| self.error(schedule, target, Failure::Lower(Box::new(e))))?;
        self.check_lowered(schedule, target, &lowered)
    }

    /// Checks an already lowered kernel (`schedule` and `target` name it in
    /// errors), for instance one whose instructions were edited.
    pub fn check_lowered(
        &self,
        schedule: &Schedule,
        target: SmVersion,
        lowered: &ktune_core::lower::Lowered,
    ) -> Result<Verified, VerifyError> {
        let (bytes, stats) = self
            .run_virtual(lowered)
            .map_err(|f| self.error(schedule, target, Failure::Fault(Box::new(f))))?;
        let (max_error, tolerance) = self
            .compare(&bytes)
            .map_err(|kind| self.error(schedule, target, kind))?;
        Ok(Verified {
            max_error,
            tolerance,
            stats,
            elements: self.want.len(),
        })
    }

    /// Runs a lowered kernel on the virtual GPU, on the reference's inputs
    /// and a poisoned output; returns the output's bytes.
    pub fn run_virtual(
        &self,
        lowered: &ktune_core::lower::Lowered,
    ) -> Result<(Vec<u8>, Stats), Fault> {
        let inputs: Vec<&[u8]> = self.buffers.iter().map(Vec::as_slice).collect();
        let output = poisoned(self.kernel.output.dtype, self.want.len());
        // Blocks that cooperate through a workspace run in a shuffled
        // order, so that none is last by its position in the grid.
        let config = match lowered.launch.workspace_bytes {
            0 => Config::default(),
            _ => Config::default().block_order(BlockOrder::Shuffled(BLOCK_ORDER_SEED)),
        };
        run_bytes_with(&lowered.ptx, &lowered.launch, &inputs, output, &config)
    }

    /// Compares an output, as the device left it (any device, its output
    /// poisoned before the run), with the reference: every element written
    /// and within tolerance. Returns the largest error and the tolerance
    /// where it occurred; the failure names the first element that is not.
    pub fn compare(&self, bytes: &[u8]) -> Result<(f32, f32), Failure> {
        let dtype = self.kernel.output.dtype;
        if let Some(index) = first_poisoned(dtype, bytes) {
            return Err(Failure::Unwritten { index });
        }
        let got = decode(dtype, bytes);
        let (mut max_error, mut at) = (0.0f32, 0.0f32);
        for (index, (&g, &w)) in got.iter().zip(&self.want).enumerate() {
            let tolerance = self.tolerance(index);
            if g == w || (g.is_nan() && w.is_nan()) {
                continue;
            }
            let error = (g - w).abs();
            if error.is_nan() || error > tolerance {
                return Err(Failure::Mismatch {
                    index,
                    got: g,
                    want: w,
                    tolerance,
                });
            }
            if error > max_error {
                (max_error, at) = (error, tolerance);
            }
        }
        Ok((max_error, at))
    }

    /// Names `kind` as a failure of `schedule` on `target` for this
    /// reference's kernel and shape.
    pub fn error(&self, schedule: &Schedule, target: SmVersion, kind: Failure) -> VerifyError {
        VerifyError {
            kernel: self.kernel.name.clone(),
            shape: self.kernel.shape().collect(),
            schedule: Box::new(schedule.clone()),
            target,
            kind,
        }
    }
}

/// A dimension [`with_shape`] could not set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShapeError {
    UnknownDim { kernel: String, dim: String },
    ZeroSize { kernel: String, dim: String },
}

impl std::error::Error for ShapeError {}

impl fmt::Display for ShapeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShapeError::UnknownDim { kernel, dim } => {
                write!(f, "kernel `{kernel}` has no dimension `{dim}`")
            }
            ShapeError::ZeroSize { kernel, dim } => {
                write!(f, "dimension `{dim}` of kernel `{kernel}` must be positive")
            }
        }
    }
}

/// A copy of `kernel` with the named dimensions resized, for shape sweeps.
pub fn with_shape(kernel: &Kernel, sizes: &[(&str, u32)]) -> Result<Kernel, ShapeError> {
    let mut out = kernel.clone();
    for &(name, size) in sizes {
        let dim = out
            .dims
            .iter_mut()
            .find(|d| d.name == name)
            .ok_or_else(|| ShapeError::UnknownDim {
                kernel: kernel.name.clone(),
                dim: name.to_string(),
            })?;
        if size == 0 {
            return Err(ShapeError::ZeroSize {
                kernel: kernel.name.clone(),
                dim: name.to_string(),
            });
        }
        dim.size = size;
    }
    Ok(out)
}

/// How far an element of magnitude `magnitude` (its reference's `|want|`,
/// or more where it is ill-conditioned) may be from its reference, with
/// the kernel's relative tolerance `rel`, the output's `scale` and, with
/// tf32 factors, the element's difference `tf32` from the reference on
/// rounded factors (see the [module docs](self)).
pub(crate) fn allowance(rel: f32, scale: f32, magnitude: f32, tf32: Option<f32>) -> f32 {
    let base = |magnitude: f32| rel * magnitude + 0.1 * rel * scale;
    match tf32 {
        // An infinite output has no finite allowance: nothing more.
        Some(d) if d.is_finite() => base(magnitude + d) + d,
        _ => base(magnitude),
    }
}

/// The largest relative move of an input [`sensitivity`] makes: 2⁻¹⁶.
const NUDGE: f32 = 1.0 / 65536.0;
/// The seed of its moves.
const NUDGE_SEED: u64 = 0x0dd_c0de;

/// Per output element, how far it moves when every input value `x` moves
/// to `x·(1 + 2⁻¹⁶·u)`, each `u` uniform in [-1, 1] and seeded, divided by
/// 2⁻¹⁶ (see the [module docs](self)); 0 where either evaluation is not
/// finite. Moves of random size rather than sign: inputs all moved by the
/// same factor would leave every ratio, and every deviation from a mean of
/// them, as it was. `want` is the kernel's output on `inputs`; a 16-bit
/// output is compared unrounded, as its rounding would turn a move across
/// a rounding boundary into a jump.
fn sensitivity(kernel: &Kernel, inputs: &[Vec<f32>], want: &[f32]) -> Vec<f32> {
    let mut wide = kernel.clone();
    wide.output.dtype = DType::F32;
    let unrounded;
    let want = if kernel.output.dtype == DType::F32 {
        want
    } else {
        unrounded = interp::evaluate(&wide, inputs);
        &unrounded
    };
    let mut rng = StdRng::seed_from_u64(NUDGE_SEED);
    let nudged: Vec<Vec<f32>> = inputs
        .iter()
        .map(|values| {
            values
                .iter()
                .map(|x| x * (1.0 + NUDGE * rng.random_range(-1.0f32..=1.0)))
                .collect()
        })
        .collect();
    interp::evaluate(&wide, &nudged)
        .iter()
        .zip(want)
        .map(|(moved, w)| {
            let moves = (moved - w).abs() / NUDGE;
            if moves.is_finite() { moves } else { 0.0 }
        })
        .collect()
}

/// Random inputs for `kernel`, one vector per input, rounded to each
/// input's dtype (see the [module docs](self)).
pub fn random_inputs(kernel: &Kernel, seed: u64) -> Vec<Vec<f32>> {
    let positive = needs_positive_inputs(kernel);
    let mut rng = StdRng::seed_from_u64(seed);
    kernel
        .inputs
        .iter()
        .map(|t| {
            (0..kernel.len_of(t))
                .map(|_| {
                    let x: f32 = rng.random_range(0.25..=2.0);
                    let x = if !positive && rng.random_bool(0.5) {
                        -x
                    } else {
                        x
                    };
                    interp::round(t.dtype, x)
                })
                .collect()
        })
        .collect()
}

fn needs_positive_inputs(kernel: &Kernel) -> bool {
    kernel.exprs.iter().any(|e| match e {
        Expr::Unary(UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Rsqrt, _) => true,
        Expr::Binary(BinaryOp::Div, _, divisor) => contains_reduce(kernel, *divisor),
        _ => false,
    })
}

/// Whether an expression contains a reduction, looking through lets.
fn contains_reduce(kernel: &Kernel, id: ktune_core::ir::ExprId) -> bool {
    match kernel.expr(id) {
        Expr::Reduce { .. } => true,
        Expr::Let(l) => contains_reduce(kernel, kernel.let_(*l).value),
        _ => kernel
            .children(id)
            .into_iter()
            .any(|c| contains_reduce(kernel, c)),
    }
}

/// What an `allow_tf32` contraction adds to the relative tolerance `rel`
/// between two of its GPU runs, one possibly on tensor cores and the other
/// with exact products: 2⁻⁷. Its absolute part, `0.1 · rel · scale`, is
/// what matters, near zero.
///
/// Unlike the bound in the [module docs](self), which needs `Σ|a·b|` per
/// element, this is statistical. The factors' rounding errors are
/// independent, zero-mean and at most 2⁻¹¹ relative, so a sum's error has
/// a standard deviation of about `2⁻¹¹ · √(2/3) · √Σ(a·b)²`; with random
/// signs (as in verification and measurement) the sums themselves spread
/// as `√Σ(a·b)²`, and the largest of `n` outputs is about `√(2 ln n)` of
/// that (over 4 from a thousand outputs). `0.1 · 2⁻⁷ · scale` is then over
/// six standard deviations of the error; products of one sign only make
/// `scale` grow as `K` rather than `√K`, which allows more.
pub const TF32_BASELINE: f32 = 1.0 / 128.0;

/// The input tensors an `allow_tf32` kernel's tensor cores round to tf32:
/// its contraction's two f32 factors, when it has one that tensor cores
/// take. `None` when every product is exact.
pub fn tf32_factors(kernel: &Kernel) -> Option<[usize; 2]> {
    let plan = matmul::detect(kernel)?;
    let f32_factors = [plan.a.tensor, plan.b.tensor]
        .iter()
        .all(|t| kernel.input(*t).dtype == DType::F32);
    (kernel.allow_tf32 && f32_factors && matmul::mma::applies(kernel, &plan))
        .then_some([plan.a.tensor.0, plan.b.tensor.0])
}

/// The relative error a correct kernel's output may have against the CPU
/// reference: f32 rounding growing with the summed extents, plus the
/// 16-bit rounding when the kernel stores or casts to f16 or bf16. tf32
/// products are allowed for per element by [`Reference`], and by
/// [`TF32_BASELINE`] between GPU runs.
pub fn relative_tolerance(kernel: &Kernel) -> f32 {
    let summed: u64 = kernel
        .exprs
        .iter()
        .filter_map(|e| match e {
            Expr::Reduce {
                op: ReduceOp::Sum | ReduceOp::Mean,
                var,
                ..
            } => Some(u64::from(kernel.extent(*var))),
            _ => None,
        })
        .sum();
    let mut rel = 1e-5 + (summed as f32 + 2.0) * f32::EPSILON / 2.0;
    if kernel.output.dtype != DType::F32 || casts_to_sixteen_bit(kernel) {
        rel += DType::Bf16.tolerance();
    }
    rel
}

/// Whether the kernel casts to f16 or bf16 anywhere.
fn casts_to_sixteen_bit(kernel: &Kernel) -> bool {
    kernel
        .exprs
        .iter()
        .any(|e| matches!(e, Expr::Cast(DType::F16 | DType::Bf16, _)))
}

/// f32 values as `dtype` elements, little-endian, rounded to nearest even.
pub fn encode(dtype: DType, values: &[f32]) -> Vec<u8> {
    match dtype {
        DType::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::F16 => values
            .iter()
            .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
            .collect(),
        DType::Bf16 => values
            .iter()
            .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
            .collect(),
    }
}

/// `dtype` elements, little-endian, widened to f32 (exactly).
pub fn decode(dtype: DType, bytes: &[u8]) -> Vec<f32> {
    match dtype {
        DType::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        DType::F16 => bytes
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        DType::Bf16 => bytes
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use ktune_core::syntax::parse_kernel;
    use quote::quote;

    use super::*;

    fn f32_bytes(values: impl Iterator<Item = f32>) -> Vec<u8> {
        encode(DType::F32, &values.collect::<Vec<f32>>())
    }

    #[test]
    fn ill_conditioned_outputs_get_the_room_their_inputs_move_them_by() {
        // Each row's deviations from its mean, over rows of three values
        // within 1e-6 of one another: the mean's rounding (an ulp of 1,
        // 1.2e-7) is as large as the smallest deviation (1.6e-7).
        let kernel = parse_kernel(
            quote!(shape(R = 2, C = 3)),
            quote! {
                fn deviations(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
                    compute(|r, c| x[r][c] - mean(C, |k| x[r][k]))
                }
            },
        )
        .expect("the kernel parses");
        let close = [1.0, 1.0 + 8.0 * f32::EPSILON, 1.0 - 4.0 * f32::EPSILON];
        let reference = Reference::with_inputs(&kernel, vec![[close, close.map(|x| -x)].concat()]);
        let ulp = f32::EPSILON;
        reference
            .compare(&f32_bytes(reference.output().iter().map(|w| w + ulp)))
            .expect("the mean rounded the other way passes");
        // The room is the tolerance's relative 1e-5 of the row's values,
        // not of the deviations.
        reference
            .compare(&f32_bytes(reference.output().iter().map(|w| w + 1e-4)))
            .expect_err("a deviation off by 1e-4 of its row's values fails");
    }

    #[test]
    fn well_conditioned_outputs_keep_their_tolerance() {
        let kernel = parse_kernel(
            quote!(shape(N = 100)),
            quote! { fn double(x: Tensor<f32, N>) -> Tensor<f32, N> { compute(|i| 2.0 * x[i]) } },
        )
        .expect("the kernel parses");
        let reference = Reference::new(&kernel, 5);
        let rel = relative_tolerance(&kernel);
        let scale = reference
            .output()
            .iter()
            .fold(0.0f32, |m, w| m.max(w.abs()));
        for (i, w) in reference.output().iter().enumerate() {
            let plain = rel * w.abs() + 0.1 * rel * scale;
            let tolerance = reference.tolerance(i);
            // Doubling moves the output by twice an input's move, at most
            // |want| (give or take the nudged input's rounding to f32).
            assert!(
                tolerance >= plain && tolerance <= plain * (1.0 + 1.0 / 256.0),
                "element {i}: {tolerance} against {plain}"
            );
        }
    }
}
