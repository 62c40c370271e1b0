//! The virtual GPU against a real one: the verification suite's runs
//! ([`ktune_vgpu::suite`]) executed on both, each output checked against
//! the CPU reference, and the two outputs compared with each other. This
//! module holds the comparison and the results file; the `ktune-bench
//! --agree` binary side runs the kernels.
//!
//! Both devices run the same PTX, so they must agree bit for bit unless the
//! kernel uses an instruction whose result the PTX ISA does not pin down:
//! the approximate functions (`ex2.approx`, `lg2.approx`, `rsqrt.approx`,
//! documented by their error bound only) and the tensor cores' `mma.sync`
//! and `wgmma.mma_async`, whose internal order and precision of
//! accumulation are the hardware's (on the H200, f16 `wgmma` products
//! differ from the virtual GPU's in the last bits, bf16 ones do not).
//! Such runs must agree within the reference's tolerance, element by
//! element.

use ktune_core::ptx;
use ktune_core::ptx::inst::{Op, UnaryOp};
use ktune_vgpu::verify::{Reference, decode};
use serde::Serialize;

use crate::report::GpuInfo;

/// Why two devices running `kernel` may differ in the last bits, or `None`
/// when every instruction's result is exactly specified.
pub fn inexact(kernel: &ptx::Kernel) -> Option<&'static str> {
    kernel.body.iter().find_map(|i| match i.op {
        Op::Unary {
            op: UnaryOp::Ex2, ..
        } => Some("ex2.approx"),
        Op::Unary {
            op: UnaryOp::Lg2, ..
        } => Some("lg2.approx"),
        Op::Unary {
            op: UnaryOp::Rsqrt, ..
        } => Some("rsqrt.approx"),
        Op::Unary {
            op: UnaryOp::RcpApprox,
            ..
        } => Some("rcp.approx"),
        Op::Mma { .. } => Some("mma.sync"),
        Op::Wgmma { .. } => Some("wgmma.mma_async"),
        _ => None,
    })
}

/// How one run's two outputs compare.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Comparison {
    /// Output elements whose bits differ.
    pub differing: usize,
    /// The largest `|a − b|` over the reference's tolerance at that element
    /// (0 when the outputs are identical; above 1 is a disagreement).
    pub worst: f32,
    /// Where `worst` occurred.
    pub index: usize,
}

impl Comparison {
    /// Compares two outputs of `reference`'s kernel, as the devices left
    /// them.
    ///
    /// # Panics
    ///
    /// If the outputs differ in length.
    pub fn of(reference: &Reference, a: &[u8], b: &[u8]) -> Comparison {
        assert_eq!(a.len(), b.len(), "outputs of different sizes");
        let dtype = reference.kernel().output.dtype;
        let (a, b) = (decode(dtype, a), decode(dtype, b));
        let mut out = Comparison {
            differing: 0,
            worst: 0.0,
            index: 0,
        };
        for (index, (&x, &y)) in a.iter().zip(&b).enumerate() {
            if x.to_bits() == y.to_bits() {
                continue;
            }
            out.differing += 1;
            let ratio = if x.is_nan() || y.is_nan() {
                f32::INFINITY
            } else {
                (x - y).abs() / reference.tolerance(index)
            };
            if ratio > out.worst {
                out.worst = ratio;
                out.index = index;
            }
        }
        out
    }

    /// Whether the outputs agree as well as the run's instructions allow:
    /// bit for bit when `inexact` is `None`, else within tolerance.
    pub fn agrees(&self, inexact: Option<&str>) -> bool {
        match inexact {
            None => self.differing == 0,
            Some(_) => self.worst <= 1.0,
        }
    }
}

/// The results file of `ktune-bench --agree`.
#[derive(Debug, Clone, Serialize)]
pub struct AgreeResults {
    pub tool: &'static str,
    pub ktune_version: &'static str,
    pub generator_version: u32,
    /// UTC, ISO 8601.
    pub date: String,
    pub gpu: GpuInfo,
    /// The kernels the suite ran: its catalogue, or random kernels and
    /// their seeds.
    pub catalogue: String,
    /// How the GPU's code was made from the PTX: by the driver, as ktune's
    /// runtime does, or by the named ptxas.
    pub compiled_by: String,
    pub kernels: usize,
    pub shapes: usize,
    /// Runs (kernel, shape, schedule, target) of the suite.
    pub points: usize,
    /// Runs whose PTX is exactly specified, required to agree bit for bit.
    pub exact_points: usize,
    /// Runs that agreed bit for bit (exact or not).
    pub identical_points: usize,
    /// Runs skipped because their target is newer than the GPU.
    pub skipped_points: usize,
    /// Runs left out because their schedule has a producer warpgroup
    /// (`--without-producer`): counted among `points` and the summary's
    /// schedule points, but not run.
    pub left_out_points: usize,
    /// Runs not made because the time budget was spent (counted among
    /// `points` and the summary's schedule points, but not run).
    pub out_of_time_points: usize,
    /// Why the comparison stopped before the suite's end (a run that hung
    /// the GPU, or runs going on far past the budget); `None` when it ran
    /// to the end.
    pub stopped: Option<String>,
    /// Every run that failed: on either device against the reference, or
    /// the two devices against each other.
    pub failures: Vec<String>,
    /// The suite's summary line, with the failures of this comparison.
    pub summary: String,
}

#[cfg(test)]
mod tests {
    use ktune_core::SmVersion;
    use ktune_core::lower::{heuristic, lower, portable_heuristic};

    use super::*;
    use crate::cases::CASES;

    fn case(name: &str) -> &'static crate::cases::Case {
        CASES
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("{name} is a case"))
    }

    fn default_ptx(name: &str) -> ptx::Kernel {
        let kernel = case(name).kernel().expect("parses");
        let schedule = heuristic(&kernel, SmVersion::Sm90);
        lower(&kernel, &schedule, SmVersion::Sm90)
            .expect("the default lowers")
            .ptx
    }

    #[test]
    fn only_approximate_functions_and_tensor_cores_are_inexact() {
        assert_eq!(inexact(&default_ptx("sgemm_4096")), None);
        assert_eq!(
            inexact(&default_ptx("bf16_gemm_4096")),
            Some("wgmma.mma_async")
        );
        let kernel = case("bf16_gemm_4096").kernel().expect("parses");
        let portable = portable_heuristic(&kernel, SmVersion::Sm90);
        let lowered = lower(&kernel, &portable, SmVersion::Sm90).expect("lowers");
        assert_eq!(inexact(&lowered.ptx), Some("mma.sync"));
        assert_eq!(
            inexact(&default_ptx("softmax_8192x4096")),
            Some("ex2.approx")
        );
        assert_eq!(
            inexact(&default_ptx("layernorm_8192x4096")),
            Some("rsqrt.approx")
        );
    }

    #[test]
    fn outputs_compare_bit_for_bit_and_against_the_tolerance() {
        let kernel = case("sgemm_4096").tiny_kernel().expect("parses");
        let reference = Reference::new(&kernel, 3);
        let schedule = heuristic(&kernel, SmVersion::Sm80);
        let lowered = lower(&kernel, &schedule, SmVersion::Sm80).expect("lowers");
        let (out, _) = reference.run_virtual(&lowered).expect("runs");
        reference.compare(&out).expect("matches the reference");

        let same = Comparison::of(&reference, &out, &out);
        assert_eq!(same.differing, 0);
        assert!(same.agrees(None));

        // One ulp off in element 3: not identical, well within tolerance.
        let mut ulp = out.clone();
        ulp[12] ^= 1;
        let close = Comparison::of(&reference, &out, &ulp);
        assert_eq!((close.differing, close.index), (1, 3));
        assert!(close.worst > 0.0 && close.worst < 1.0, "{close:?}");
        assert!(!close.agrees(None));
        assert!(close.agrees(Some("mma.sync")));

        // Element 5 doubled: beyond any tolerance.
        let mut far = out.clone();
        let value = f32::from_le_bytes(far[20..24].try_into().expect("4 bytes")) * 2.0;
        far[20..24].copy_from_slice(&value.to_le_bytes());
        let apart = Comparison::of(&reference, &ulp, &far);
        assert_eq!((apart.differing, apart.index), (2, 5));
        assert!(apart.worst > 1.0, "{apart:?}");
        assert!(!apart.agrees(Some("mma.sync")));
    }
}
