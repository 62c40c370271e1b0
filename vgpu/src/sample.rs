//! The CPU reference at a sample of a kernel's output elements, for
//! kernels too large to evaluate whole: a 4096³ product is 137 GFLOP, hours
//! of [`interp::evaluate`], but one of its output elements is a dot product
//! of 4096 terms.
//!
//! **Sub-problems.** An output dimension is *sampled* when the output's
//! variable is the only index variable over it and its value is never used
//! as a number (`Expr::Index`): then every input element an output element
//! reads lies at that same index along the dimension, and fixing the
//! dimension at one index, sized 1, gives a smaller kernel with the same
//! semantics on the input slices at that index. A matmul's `M` and `N`
//! are sampled (a point is one dot product), a row kernel's row dimensions
//! (a point is one row; the reduced dimension has a second variable), an
//! elementwise kernel's every dimension. Points always include the first
//! and last index of each sampled dimension.
//!
//! **Tolerance.** As for whole outputs ([`crate::verify`]'s module docs):
//! the kernel's relative tolerance, the largest sampled value standing for
//! the output's scale, and with tf32 factors each point's difference from
//! the reference on tf32-rounded factors.

use std::collections::BTreeMap;

use ktune_core::interp;
use ktune_core::ir::{DimId, Expr, Kernel, Tensor};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::numeric::tf32_rna;
use crate::verify::{allowance, relative_tolerance, tf32_factors};

/// The dimensions of `kernel`'s output that a sample may fix (see the
/// [module docs](self)), in the output's order.
pub fn sampled_dims(kernel: &Kernel) -> Vec<DimId> {
    let output_vars = kernel.output_vars();
    kernel
        .output
        .dims
        .iter()
        .zip(&output_vars)
        .filter(|(dim, var)| {
            let over_dim = kernel.vars.iter().filter(|v| v.dim == **dim).count();
            let as_number = kernel
                .exprs
                .iter()
                .any(|e| matches!(e, Expr::Index(v) if v == *var));
            over_dim == 1 && !as_number
        })
        .map(|(dim, _)| *dim)
        .collect()
}

/// The reference at sampled output elements.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Flat (row-major) indices into the output, ascending.
    pub indices: Vec<usize>,
    /// The reference at each index.
    pub want: Vec<f32>,
    /// How far the output may be from `want`, element by element.
    pub tolerance: Vec<f32>,
}

/// One sampled element that is not within its tolerance.
#[derive(Debug, Clone, PartialEq)]
pub struct Mismatch {
    pub index: usize,
    pub got: f32,
    pub want: f32,
    pub tolerance: f32,
}

impl Sample {
    /// The floating-point operations of evaluating `points` sub-problems of
    /// `kernel`, or `None` when no dimension can be sampled.
    pub fn flops(kernel: &Kernel, points: usize) -> Option<u64> {
        let dims = sampled_dims(kernel);
        (!dims.is_empty()).then(|| sub_kernel(kernel, &dims).flops() * points as u64)
    }

    /// The reference at `points` sampled elements (fewer when the sampled
    /// dimensions have fewer index combinations) of `kernel`'s output on
    /// `inputs` (one vector per input, as [`interp::evaluate`] takes them),
    /// drawn with `seed`; `None` when no dimension can be sampled.
    pub fn new<T: AsRef<[f32]>>(
        kernel: &Kernel,
        inputs: &[T],
        points: usize,
        seed: u64,
    ) -> Option<Sample> {
        let dims = sampled_dims(kernel);
        if dims.is_empty() {
            return None;
        }
        let sub = sub_kernel(kernel, &dims);
        let tf32 = tf32_factors(kernel);
        let sizes: Vec<u32> = dims.iter().map(|d| kernel.dim(*d).size).collect();
        let mut rng = StdRng::seed_from_u64(seed);
        let mut at: Vec<Vec<u32>> =
            vec![vec![0; dims.len()], sizes.iter().map(|s| s - 1).collect()];
        let combinations = sizes
            .iter()
            .fold(1u64, |n, s| n.saturating_mul(u64::from(*s)));
        let wanted = (points.max(2) as u64).min(combinations) as usize;
        at.sort();
        at.dedup();
        while at.len() < wanted {
            let point: Vec<u32> = sizes.iter().map(|s| rng.random_range(0..*s)).collect();
            if !at.contains(&point) {
                at.push(point);
            }
        }
        let mut elements = BTreeMap::new();
        for point in &at {
            let fixed: BTreeMap<DimId, u32> =
                dims.iter().copied().zip(point.iter().copied()).collect();
            let mut sub_inputs: Vec<Vec<f32>> = kernel
                .inputs
                .iter()
                .zip(inputs)
                .map(|(t, values)| {
                    let values = values.as_ref();
                    slice(kernel, t, &fixed)
                        .into_iter()
                        .map(|i| values[i])
                        .collect()
                })
                .collect();
            let want = interp::evaluate(&sub, &sub_inputs);
            let difference = match tf32 {
                Some(tensors) => {
                    for t in tensors {
                        for v in &mut sub_inputs[t] {
                            *v = f32::from_bits(tf32_rna(*v));
                        }
                    }
                    let rounded = interp::evaluate(&sub, &sub_inputs);
                    want.iter()
                        .zip(rounded)
                        .map(|(w, r)| (w - r).abs())
                        .collect()
                }
                None => vec![0.0; want.len()],
            };
            for ((index, w), d) in slice(kernel, &kernel.output, &fixed)
                .into_iter()
                .zip(want)
                .zip(difference)
            {
                elements.insert(index, (w, d));
            }
        }
        let scale = elements
            .values()
            .map(|(w, d)| w.abs() + d)
            .filter(|m| m.is_finite())
            .fold(0.0f32, f32::max)
            .max(f32::MIN_POSITIVE);
        let rel = relative_tolerance(kernel);
        let tolerance = elements
            .values()
            .map(|&(w, d)| allowance(rel, scale, w, Some(d)))
            .collect();
        Some(Sample {
            indices: elements.keys().copied().collect(),
            want: elements.values().map(|(w, _)| *w).collect(),
            tolerance,
        })
    }

    /// The first sampled element of `output` (the whole output, row-major)
    /// outside its tolerance; equal values pass, NaN matching NaN.
    pub fn check(&self, output: &[f32]) -> Result<(), Mismatch> {
        for ((&index, &want), &tolerance) in
            self.indices.iter().zip(&self.want).zip(&self.tolerance)
        {
            let got = output.get(index).copied().unwrap_or(f32::NAN);
            let same = got == want || (got.is_nan() && want.is_nan());
            let close = (got - want).abs() <= tolerance;
            if !same && !close {
                return Err(Mismatch {
                    index,
                    got,
                    want,
                    tolerance,
                });
            }
        }
        Ok(())
    }
}

/// `kernel` with the sampled dimensions sized 1.
fn sub_kernel(kernel: &Kernel, dims: &[DimId]) -> Kernel {
    let mut sub = kernel.clone();
    for d in dims {
        sub.dims[d.0].size = 1;
    }
    sub
}

/// The flat indices of `tensor`'s elements at the `fixed` indices of their
/// dimensions, in row-major order: the slice the sub-problem reads (or, for
/// the output, writes).
fn slice(kernel: &Kernel, tensor: &Tensor, fixed: &BTreeMap<DimId, u32>) -> Vec<usize> {
    let strides = kernel.strides_of(tensor);
    let mut indices = vec![0usize];
    for (dim, stride) in tensor.dims.iter().zip(strides) {
        let stride = stride as usize;
        let along: Vec<usize> = match fixed.get(dim) {
            Some(&i) => vec![i as usize * stride],
            None => (0..kernel.dim(*dim).size as usize)
                .map(|i| i * stride)
                .collect(),
        };
        indices = indices
            .iter()
            .flat_map(|base| along.iter().map(move |a| base + a))
            .collect();
    }
    indices
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::*;
    use crate::suite::{catalogue, shaped};
    use crate::verify::random_inputs;
    use ktune_core::syntax::parse_kernel;

    fn names(kernel: &Kernel, dims: &[DimId]) -> Vec<String> {
        dims.iter().map(|d| kernel.dim(*d).name.clone()).collect()
    }

    #[test]
    fn sampled_dims_are_those_each_output_element_reads_at_its_own_index() {
        let matmul = parse_kernel(
            quote!(shape(M = 4, N = 8, K = 16)),
            quote! {
                fn mm(a: Tensor<f32, (M, K)>, b: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
                    compute(|m, n| sum(K, |k| a[m][k] * b[k][n]))
                }
            },
        )
        .expect("parses");
        assert_eq!(names(&matmul, &sampled_dims(&matmul)), ["M", "N"]);
        let softmax = parse_kernel(
            quote!(shape(R = 4, C = 8)),
            quote! {
                fn softmax(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
                    compute(|r, c| {
                        let m = max(C, |j| x[r][j]);
                        exp(x[r][c] - m) / sum(C, |j| exp(x[r][j] - m))
                    })
                }
            },
        )
        .expect("parses");
        assert_eq!(names(&softmax, &sampled_dims(&softmax)), ["R"]);
        // An index used as a number ties each element to its position.
        let ramp = parse_kernel(
            quote!(shape(R = 4, C = 8)),
            quote! {
                fn ramp(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
                    compute(|r, c| x[r][c] * c)
                }
            },
        )
        .expect("parses");
        assert_eq!(names(&ramp, &sampled_dims(&ramp)), ["R"]);
    }

    /// Every catalogue kernel at every shape: the sampled reference is the
    /// whole evaluation at its indices, bit for bit, and the whole
    /// evaluation passes its check; an element moved past its tolerance
    /// fails it, named.
    #[test]
    fn samples_are_the_whole_evaluation_at_their_indices() {
        let mut checked = 0;
        for (seed, kernel) in shaped(&catalogue()).into_iter().enumerate() {
            let inputs = random_inputs(&kernel, seed as u64);
            let Some(sample) = Sample::new(&kernel, &inputs, 5, seed as u64) else {
                continue;
            };
            let whole = interp::evaluate(&kernel, &inputs);
            assert!(!sample.indices.is_empty());
            assert!(sample.indices.windows(2).all(|w| w[0] < w[1]));
            for (&index, &want) in sample.indices.iter().zip(&sample.want) {
                assert_eq!(
                    want.to_bits(),
                    whole[index].to_bits(),
                    "{} {:?} element {index}",
                    kernel.name,
                    kernel.shape().collect::<Vec<_>>()
                );
            }
            // The first and the last element of the output are sampled.
            assert_eq!(sample.indices[0], 0, "{}", kernel.name);
            assert_eq!(sample.indices.last(), Some(&(whole.len() - 1)));
            sample.check(&whole).expect("the reference matches itself");
            let mut wrong = whole.clone();
            let last = sample.indices.len() - 1;
            let index = sample.indices[last];
            wrong[index] += 2.0 * sample.tolerance[last] + 1.0;
            let mismatch = sample.check(&wrong).expect_err("a wrong element fails");
            assert_eq!(mismatch.index, index);
            checked += 1;
        }
        assert!(checked > 50, "{checked} kernels sampled");
    }

    #[test]
    fn slices_select_rows_columns_and_elements() {
        let kernel = parse_kernel(
            quote!(shape(M = 3, K = 4)),
            quote! {
                fn copy(x: Tensor<f32, (M, K)>) -> Tensor<f32, (M, K)> {
                    compute(|m, k| x[m][k])
                }
            },
        )
        .expect("parses");
        let (m, k) = (DimId(0), DimId(1));
        let x = &kernel.inputs[0];
        let at = |fixed: &[(DimId, u32)]| slice(&kernel, x, &fixed.iter().copied().collect());
        assert_eq!(at(&[(m, 1)]), [4, 5, 6, 7]);
        assert_eq!(at(&[(k, 2)]), [2, 6, 10]);
        assert_eq!(at(&[(m, 2), (k, 3)]), [11]);
        assert_eq!(at(&[]), (0..12).collect::<Vec<_>>());
    }

    #[test]
    fn a_large_product_samples_cheaply() {
        let matmul = parse_kernel(
            quote!(shape(M = 4096, N = 4096, K = 4096)),
            quote! {
                fn mm(a: Tensor<f32, (M, K)>, b: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
                    compute(|m, n| sum(K, |k| a[m][k] * b[k][n]))
                }
            },
        )
        .expect("parses");
        // 64 dot products of 4096 terms, against 137 GFLOP for the whole.
        assert_eq!(Sample::flops(&matmul, 64), Some(64 * 2 * 4096));
    }
}
