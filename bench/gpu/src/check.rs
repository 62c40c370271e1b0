//! Inputs and correctness: random inputs for a case's kernel, the CPU
//! reference at sampled output points, and the check of a GPU output
//! against it.
//!
//! Evaluating a 4096³ product with [`interp::evaluate`] would take hours,
//! so the reference is computed on *sub-problems* ([`ktune_vgpu::sample`]):
//! the same kernel with the output dimensions each element reads at its
//! own index resized to 1, on the slices of the inputs those indices
//! select. For a matmul that is one output element per point (one dot
//! product of length `K`); for a row kernel one whole row. The reference
//! is the kernel's own semantics (f32, as the GPU computes), never a
//! hand-written formula.
//!
//! The output passes when no element still holds the poison it was filled
//! with (every element is scanned, not only the sampled ones) and the
//! sampled points are within a normwise relative tolerance:
//! `‖got − want‖₂ ≤ tol · ‖want‖₂` with `tol` = the output dtype's
//! tolerance (f32 1e-5, f16/bf16 1e-2) plus `(L + 2)·2⁻²⁴` for `L` summed
//! elements (the GPU adds in another order), plus 2⁻⁹ for an `allow_tf32`
//! contraction of f32 tensors: rounding both factors to tf32 moves each
//! product by independent, zero-mean errors of at most 2⁻¹¹ relative per
//! factor, so over random-signed inputs the error's norm is about
//! `2⁻¹¹·√(2/3)` of the output's, and 2⁻⁹ is five times that. A
//! non-finite sampled value fails.

use ktune_core::DType;
use ktune_core::interp;
use ktune_core::ir::{Expr, Kernel, ReduceOp};
use ktune_vgpu::first_poisoned;
use ktune_vgpu::sample::Sample;
use ktune_vgpu::verify::{decode, encode, tf32_factors};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;
use serde::Serialize;

/// Elements generated per independently seeded chunk.
const CHUNK: usize = 1 << 16;

/// One input tensor on the host: its values, each exactly representable in
/// its dtype.
#[derive(Debug, Clone)]
pub struct HostTensor {
    pub dtype: DType,
    pub values: Vec<f32>,
}

impl HostTensor {
    /// The tensor as the GPU holds it (little-endian elements of its dtype).
    pub fn bytes(&self) -> Vec<u8> {
        self.values
            .par_chunks(CHUNK)
            .flat_map_iter(|chunk| encode(self.dtype, chunk))
            .collect()
    }

    pub fn byte_len(&self) -> usize {
        self.values.len() * self.dtype.size() as usize
    }
}

/// Random inputs for `kernel`: magnitudes uniform in `[0.25, 2]`, never
/// zero, with random signs, rounded to each input's dtype. Deterministic in
/// `seed`, and generated in parallel.
pub fn random_inputs(kernel: &Kernel, seed: u64) -> Vec<HostTensor> {
    kernel
        .inputs
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let mut values = vec![0.0f32; kernel.len_of(t) as usize];
            values
                .par_chunks_mut(CHUNK)
                .enumerate()
                .for_each(|(c, chunk)| {
                    let stream = ((i as u64) << 40) ^ c as u64;
                    let mut rng =
                        SmallRng::seed_from_u64(seed ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15));
                    for v in chunk {
                        let x: f32 = rng.random_range(0.25..=2.0);
                        let x = if rng.random_bool(0.5) { -x } else { x };
                        *v = interp::round(t.dtype, x);
                    }
                });
            HostTensor {
                dtype: t.dtype,
                values,
            }
        })
        .collect()
}

/// The CPU reference at sampled points of a kernel's output.
#[derive(Debug, Clone)]
pub struct Reference {
    pub dtype: DType,
    /// Flat (row-major) indices into the output.
    pub indices: Vec<usize>,
    /// The reference value at each index.
    pub values: Vec<f32>,
    /// The normwise relative tolerance.
    pub tolerance: f64,
}

impl Reference {
    /// Evaluates the reference at `points` sampled points (the first and
    /// last indices of the sampled dimensions among them, see
    /// [`ktune_vgpu::sample`]) of `kernel`'s output on `inputs`.
    pub fn sample(
        kernel: &Kernel,
        inputs: &[HostTensor],
        points: usize,
        seed: u64,
    ) -> anyhow::Result<Reference> {
        let values: Vec<&[f32]> = inputs.iter().map(|t| t.values.as_slice()).collect();
        let sample = Sample::new(kernel, &values, points, seed).ok_or_else(|| {
            anyhow::anyhow!(
                "`{}` has no output dimension to sample its reference at",
                kernel.name
            )
        })?;
        Ok(Reference {
            dtype: kernel.output.dtype,
            indices: sample.indices,
            values: sample.want,
            tolerance: tolerance(kernel),
        })
    }

    /// Checks a GPU output (the whole output tensor, as bytes) against the
    /// reference.
    pub fn check(&self, output: &[u8]) -> Check {
        let size = self.dtype.size() as usize;
        let unwritten = output
            .par_chunks(size * CHUNK)
            .enumerate()
            .find_map_first(|(c, chunk)| first_poisoned(self.dtype, chunk).map(|i| c * CHUNK + i));
        let (mut diff, mut norm, mut finite) = (0.0f64, 0.0f64, true);
        for (&index, &want) in self.indices.iter().zip(&self.values) {
            let got = output
                .get(index * size..(index + 1) * size)
                .map_or(f32::NAN, |b| decode(self.dtype, b)[0]);
            finite &= got.is_finite();
            diff += f64::from(got - want).powi(2);
            norm += f64::from(want).powi(2);
        }
        let rel_error = if finite {
            diff.sqrt() / norm.sqrt().max(f64::MIN_POSITIVE)
        } else {
            f64::INFINITY
        };
        Check {
            points: self.indices.len(),
            unwritten,
            rel_error,
            tolerance: self.tolerance,
            ok: unwritten.is_none() && rel_error <= self.tolerance,
        }
    }
}

/// The outcome of [`Reference::check`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Check {
    /// Output elements compared with the reference.
    pub points: usize,
    /// The first output element still holding the poison, if any.
    pub unwritten: Option<usize>,
    /// `‖got − want‖₂ / ‖want‖₂` over the compared elements (infinite when
    /// one of them is not finite).
    pub rel_error: f64,
    pub tolerance: f64,
    pub ok: bool,
}

impl Check {
    /// Why the output failed, in words; `None` when it passed.
    pub fn failure(&self) -> Option<String> {
        if let Some(index) = self.unwritten {
            return Some(format!("output element {index} was never written"));
        }
        (!self.ok).then(|| {
            format!(
                "relative error {:.3e} over {} sampled elements exceeds {:.1e}",
                self.rel_error, self.points, self.tolerance
            )
        })
    }
}

/// The normwise tolerance of a kernel's output (see the module docs).
fn tolerance(kernel: &Kernel) -> f64 {
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
    let tf32 = if tf32_factors(kernel).is_some() {
        TF32_NORMWISE
    } else {
        0.0
    };
    f64::from(kernel.output.dtype.tolerance())
        + (summed as f64 + 2.0) * f64::from(f32::EPSILON) / 2.0
        + tf32
}

/// The normwise allowance of tf32 products (see the module docs).
const TF32_NORMWISE: f64 = 1.0 / 512.0;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cases::CASES;

    #[test]
    fn sampled_references_equal_the_full_evaluation() {
        for case in CASES {
            let kernel = case.tiny_kernel().expect("parses");
            let inputs = random_inputs(&kernel, 7);
            let values: Vec<Vec<f32>> = inputs.iter().map(|t| t.values.clone()).collect();
            let full = interp::evaluate(&kernel, &values);
            let reference =
                Reference::sample(&kernel, &inputs, 6, 3).expect("the sampled dimensions exist");
            assert!(reference.indices.len() >= 2, "{}", case.name);
            assert!(reference.indices.contains(&0));
            assert!(reference.indices.contains(&(full.len() - 1)));
            for (i, v) in reference.indices.iter().zip(&reference.values) {
                assert_eq!(full[*i].to_bits(), v.to_bits(), "{} at {i}", case.name);
            }
        }
    }

    #[test]
    fn checks_catch_unwritten_and_wrong_outputs() {
        let case = CASES
            .iter()
            .find(|c| c.name == "bf16_gemm_4096")
            .expect("case");
        let kernel = case.tiny_kernel().expect("parses");
        let inputs = random_inputs(&kernel, 1);
        let values: Vec<Vec<f32>> = inputs.iter().map(|t| t.values.clone()).collect();
        let full = interp::evaluate(&kernel, &values);
        let reference = Reference::sample(&kernel, &inputs, 16, 2).expect("sample");
        let good = encode(DType::Bf16, &full);
        let check = reference.check(&good);
        assert!(check.ok && check.rel_error == 0.0, "{check:?}");

        let mut unwritten = good.clone();
        let last = unwritten.len() - 2;
        unwritten[last..].copy_from_slice(&ktune_vgpu::POISON_16.to_le_bytes());
        let check = reference.check(&unwritten);
        assert_eq!(check.unwritten, Some(full.len() - 1));
        assert!(check.failure().is_some_and(|f| f.contains("never written")));

        let wrong: Vec<f32> = full.iter().map(|v| v * 1.05).collect();
        let check = reference.check(&encode(DType::Bf16, &wrong));
        assert!(!check.ok && check.rel_error > 0.03, "{check:?}");
        assert!(
            check
                .failure()
                .is_some_and(|f| f.contains("relative error"))
        );
    }

    #[test]
    fn inputs_are_deterministic_nonzero_and_representable() {
        let case = CASES
            .iter()
            .find(|c| c.name == "matmul_bias_gelu_bf16")
            .expect("case");
        let kernel = case.tiny_kernel().expect("parses");
        let a = random_inputs(&kernel, 5);
        let b = random_inputs(&kernel, 5);
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.values, y.values);
            assert!(x.values.iter().all(|v| (0.25..=2.0).contains(&v.abs())));
            assert!(x.values.iter().all(|v| interp::round(x.dtype, *v) == *v));
            assert_eq!(x.bytes().len(), x.byte_len());
        }
        assert_ne!(a[0].values, random_inputs(&kernel, 6)[0].values);
    }
}
