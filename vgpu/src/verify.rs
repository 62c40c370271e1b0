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

use std::fmt;

use ktune_core::DType;
use ktune_core::interp;
use ktune_core::ir::{BinaryOp, Expr, Kernel, ReduceOp, UnaryOp};
use ktune_core::lower::{LowerError, lower};
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
    pub schedule: Schedule,
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
        match &self.kind {
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
        let buffers = kernel
            .inputs
            .iter()
            .zip(&inputs)
            .map(|(t, v)| encode(t.dtype, v))
            .collect();
        let scale = want
            .iter()
            .filter(|w| w.is_finite())
            .fold(0.0f32, |m, w| m.max(w.abs()))
            .max(f32::MIN_POSITIVE);
        Reference {
            rel: relative_tolerance(kernel),
            kernel: kernel.clone(),
            buffers,
            want,
            scale,
        }
    }

    /// The reference's output, row-major.
    pub fn output(&self) -> &[f32] {
        &self.want
    }

    /// The input buffers, as the GPU holds them.
    pub fn buffers(&self) -> &[Vec<u8>] {
        &self.buffers
    }

    /// How far element `want` may be from the reference.
    pub fn tolerance(&self, want: f32) -> f32 {
        self.rel * want.abs() + 0.1 * self.rel * self.scale
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
        let dtype = self.kernel.output.dtype;
        let inputs: Vec<&[u8]> = self.buffers.iter().map(Vec::as_slice).collect();
        let output = poisoned(dtype, self.want.len());
        // Blocks that cooperate through a workspace run in a shuffled
        // order, so that none is last by its position in the grid.
        let config = match lowered.launch.workspace_bytes {
            0 => Config::default(),
            _ => Config::default().block_order(BlockOrder::Shuffled(BLOCK_ORDER_SEED)),
        };
        let (bytes, stats) =
            run_bytes_with(&lowered.ptx, &lowered.launch, &inputs, output, &config)
                .map_err(|f| self.error(schedule, target, Failure::Fault(Box::new(f))))?;
        if let Some(index) = first_poisoned(dtype, &bytes) {
            return Err(self.error(schedule, target, Failure::Unwritten { index }));
        }
        let got = decode(dtype, &bytes);
        let (mut max_error, mut at) = (0.0f32, 0.0f32);
        for (index, (&g, &w)) in got.iter().zip(&self.want).enumerate() {
            let tolerance = self.tolerance(w);
            if g == w || (g.is_nan() && w.is_nan()) {
                continue;
            }
            let error = (g - w).abs();
            if error.is_nan() || error > tolerance {
                return Err(self.error(
                    schedule,
                    target,
                    Failure::Mismatch {
                        index,
                        got: g,
                        want: w,
                        tolerance,
                    },
                ));
            }
            if error > max_error {
                (max_error, at) = (error, tolerance);
            }
        }
        Ok(Verified {
            max_error,
            tolerance: at,
            stats,
            elements: got.len(),
        })
    }

    fn error(&self, schedule: &Schedule, target: SmVersion, kind: Failure) -> VerifyError {
        VerifyError {
            kernel: self.kernel.name.clone(),
            shape: self.kernel.shape().collect(),
            schedule: schedule.clone(),
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

/// The relative error a correct kernel's output may have against the CPU
/// reference: f32 rounding growing with the summed extents, plus the
/// 16-bit rounding when the kernel stores or casts to f16 or bf16.
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
    let sixteen_bit = kernel.output.dtype != DType::F32
        || kernel
            .exprs
            .iter()
            .any(|e| matches!(e, Expr::Cast(DType::F16 | DType::Bf16, _)));
    if sixteen_bit {
        rel += DType::Bf16.tolerance();
    }
    rel
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
