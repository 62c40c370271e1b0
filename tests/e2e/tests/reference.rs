//! Every catalogue kernel's CPU reference against the same formula evaluated
//! directly in f64, written here from the math (not from the kernel IR), on
//! seeded random inputs; the length checks of `reference`; kernel metadata;
//! and which source changes move a kernel's checksum.
//!
//! Tolerances are normwise (`max |got − want| / max |want|`) per output
//! dtype: f32 1e-5, f16 and bf16 1e-2. A NaN or infinity in the result fails.

use std::f64::consts::PI;

use half::{bf16, f16};
use ktune::{Element, Error, KernelInfo};
use ktune_core::{canon, syntax};
use ktune_e2e as e2e;
use proc_macro2::TokenStream;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

// ---------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------

/// Uniform random values in `lo..hi`, seeded by `seed`; never all zeros.
fn uniform(seed: u64, len: usize, lo: f32, hi: f32) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    let v: Vec<f32> = (0..len).map(|_| rng.random_range(lo..hi)).collect();
    assert!(v.iter().any(|x| *x != 0.0), "degenerate test input");
    v
}

fn to_f16(v: &[f32]) -> Vec<f16> {
    v.iter().map(|x| f16::from_f32(*x)).collect()
}

fn to_bf16(v: &[f32]) -> Vec<bf16> {
    v.iter().map(|x| bf16::from_f32(*x)).collect()
}

/// The values of a tensor, exactly, as f64.
fn wide<T: Element>(v: &[T]) -> Vec<f64> {
    v.iter().map(|x| f64::from(x.to_f32())).collect()
}

/// An output buffer filled with NaN, so that an element the reference does
/// not write fails the comparison.
fn poisoned<T: Element>(len: usize) -> Vec<T> {
    vec![T::from_f32(f32::NAN); len]
}

fn tolerance(kernel: &KernelInfo) -> f64 {
    match kernel.output.dtype {
        "f32" => 1e-5,
        "f16" | "bf16" => 1e-2,
        other => panic!("kernel `{}`: unknown dtype {other}", kernel.name),
    }
}

/// Asserts the normwise relative error of `got` against `want` is within the
/// kernel's tolerance.
#[track_caller]
fn assert_close(kernel: &KernelInfo, got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "kernel `{}`: lengths", kernel.name);
    if let Some(i) = got.iter().position(|g| !g.is_finite()) {
        panic!(
            "kernel `{}`: element {i} is {} (want {})",
            kernel.name, got[i], want[i]
        );
    }
    let scale = want.iter().fold(0.0f64, |m, w| m.max(w.abs()));
    assert!(scale > 0.0, "kernel `{}`: expected all zeros", kernel.name);
    let (worst, diff) = got
        .iter()
        .zip(want)
        .map(|(g, w)| (g - w).abs())
        .enumerate()
        .fold(
            (0, 0.0f64),
            |best, (i, d)| if d > best.1 { (i, d) } else { best },
        );
    let error = diff / scale;
    let tol = tolerance(kernel);
    assert!(
        error <= tol,
        "kernel `{}`: relative error {error:.3e} > {tol:.0e}; worst at element {worst}: got {}, want {}",
        kernel.name,
        got[worst],
        want[worst]
    );
}

/// Runs `kernel::reference` on the inputs into a poisoned output and returns
/// the output as f64; also checks that a too-short first input and a
/// too-long output are `LengthMismatch` errors naming the right tensor.
macro_rules! reference {
    ($k:ident($first:expr $(, $rest:expr)* $(,)?)) => {{
        let info = &e2e::$k::KERNEL;
        let len = info.output.len;
        let mut out = poisoned(len);
        if let Err(e) = e2e::$k::reference(&$first, $(&$rest,)* &mut out) {
            panic!("kernel `{}`: reference failed: {e}", info.name);
        }

        let short = &$first[..$first.len() - 1];
        let mut spare = poisoned(len);
        assert_eq!(
            e2e::$k::reference(short, $(&$rest,)* &mut spare),
            Err(Error::LengthMismatch {
                kernel: info.name,
                tensor: info.inputs[0].name,
                expected: info.inputs[0].len,
                actual: info.inputs[0].len - 1,
            }),
            "kernel `{}`: a short first input",
            info.name
        );
        let mut long = poisoned(len + 1);
        assert_eq!(
            e2e::$k::reference(&$first, $(&$rest,)* &mut long),
            Err(Error::LengthMismatch {
                kernel: info.name,
                tensor: "out",
                expected: len,
                actual: len + 1,
            }),
            "kernel `{}`: a long output",
            info.name
        );
        (info, wide(&out))
    }};
}

/// Checks a kernel: `check!(kernel(inputs...), want)`.
macro_rules! check {
    ($k:ident($($x:expr),+ $(,)?), $want:expr) => {{
        let (info, got) = reference!($k($($x),+));
        assert_close(info, &got, &$want);
    }};
}

// ---------------------------------------------------------------------------
// The math, in f64
// ---------------------------------------------------------------------------

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

fn gelu_tanh(x: f64) -> f64 {
    0.5 * x * (1.0 + ((2.0 / PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh())
}

fn gelu_erf(x: f64) -> f64 {
    0.5 * x * (1.0 + libm::erf(x / 2f64.sqrt()))
}

fn map(x: &[f64], f: impl Fn(f64) -> f64) -> Vec<f64> {
    x.iter().map(|v| f(*v)).collect()
}

fn zip(x: &[f64], y: &[f64], f: impl Fn(f64, f64) -> f64) -> Vec<f64> {
    assert_eq!(x.len(), y.len());
    x.iter().zip(y).map(|(a, b)| f(*a, *b)).collect()
}

/// `x[r][c] + b[c]` over rows of `b.len()`.
fn add_row_vector(x: &[f64], b: &[f64]) -> Vec<f64> {
    x.chunks(b.len())
        .flat_map(|row| row.iter().zip(b).map(|(v, w)| v + w))
        .collect()
}

fn per_row(x: &[f64], cols: usize, f: impl Fn(&[f64]) -> f64) -> Vec<f64> {
    x.chunks(cols).map(f).collect()
}

fn softmax(x: &[f64], cols: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(cols) {
        let mx = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = row.iter().map(|v| (v - mx).exp()).sum();
        out.extend(row.iter().map(|v| (v - mx).exp() / s));
    }
    out
}

fn layernorm(x: &[f64], gamma: &[f64], beta: &[f64]) -> Vec<f64> {
    let n = gamma.len();
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(n) {
        let mu = row.iter().sum::<f64>() / n as f64;
        let var = row.iter().map(|v| (v - mu).powi(2)).sum::<f64>() / n as f64;
        let sd = (var + 1e-5).sqrt();
        for i in 0..n {
            out.push((row[i] - mu) / sd * gamma[i] + beta[i]);
        }
    }
    out
}

fn rmsnorm(x: &[f64], w: &[f64], eps: f64) -> Vec<f64> {
    let n = w.len();
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(n) {
        let rms = (row.iter().map(|v| v * v).sum::<f64>() / n as f64 + eps).sqrt();
        out.extend(row.iter().zip(w).map(|(v, g)| v / rms * g));
    }
    out
}

/// `A·B` for row-major `a` (m × k) and `b` (k × n), or `b` stored as
/// (n × k) when `b_transposed`.
fn matmul(a: &[f64], b: &[f64], m: usize, n: usize, k: usize, b_transposed: bool) -> Vec<f64> {
    assert_eq!((a.len(), b.len()), (m * k, k * n));
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k)
                .map(|p| {
                    let bv = if b_transposed {
                        b[j * k + p]
                    } else {
                        b[p * n + j]
                    };
                    a[i * k + p] * bv
                })
                .sum();
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Elementwise and broadcast
// ---------------------------------------------------------------------------

#[test]
fn bias_add() {
    let x = uniform(1, 13 * 37, -2.0, 2.0);
    let b = uniform(2, 37, -1.0, 1.0);
    check!(bias_add(x, b), add_row_vector(&wide(&x), &wide(&b)));
}

#[test]
fn bias_add_f16() {
    let x = to_f16(&uniform(3, 5 * 129, -2.0, 2.0));
    let b = to_f16(&uniform(4, 129, -1.0, 1.0));
    check!(bias_add_f16(x, b), add_row_vector(&wide(&x), &wide(&b)));
}

#[test]
fn bias_add_bf16() {
    let x = to_bf16(&uniform(5, 7 * 63, -2.0, 2.0));
    let b = to_bf16(&uniform(6, 63, -1.0, 1.0));
    check!(bias_add_bf16(x, b), add_row_vector(&wide(&x), &wide(&b)));
}

#[test]
fn scaled_residual() {
    let x = uniform(7, 1000, -3.0, 3.0);
    let r = uniform(8, 1000, -1.0, 1.0);
    check!(
        scaled_residual(x, r),
        zip(&wide(&x), &wide(&r), |x, r| 0.7 * x + r)
    );
}

#[test]
fn scaled_residual_bf16() {
    let x = to_bf16(&uniform(9, 1023, -3.0, 3.0));
    let r = to_bf16(&uniform(10, 1023, -1.0, 1.0));
    check!(
        scaled_residual_bf16(x, r),
        zip(&wide(&x), &wide(&r), |x, r| 0.5 * x + r)
    );
}

#[test]
fn unary_functions() {
    let x = uniform(11, 1025, -4.0, 4.0);
    let xs = wide(&x);
    check!(silu_f32(x), map(&xs, |v| v * sigmoid(v)));
    check!(sigmoid_f32(x), map(&xs, sigmoid));
    check!(tanh_f32(x), map(&xs, f64::tanh));
    check!(erf_f32(x), map(&xs, libm::erf));
    check!(gelu_erf_f32(x), map(&xs, gelu_erf));
    check!(abs_f32(x), map(&xs, f64::abs));
    check!(relu_f32(x), map(&xs, |v| v.max(0.0)));

    let positive = uniform(12, 1025, 0.05, 20.0);
    let ps = wide(&positive);
    check!(log_f32(positive), map(&ps, f64::ln));
    check!(sqrt_f32(positive), map(&ps, f64::sqrt));
}

#[test]
fn binary_min_max() {
    let x = uniform(13, 1025, -2.0, 2.0);
    let y = uniform(14, 1025, -2.0, 2.0);
    let (xs, ys) = (wide(&x), wide(&y));
    check!(min_f32(x, y), zip(&xs, &ys, f64::min));
    check!(max_f32(x, y), zip(&xs, &ys, f64::max));
}

#[test]
fn sixteen_bit_activations() {
    let x = to_f16(&uniform(15, 9 * 7, -4.0, 4.0));
    check!(silu_f16(x), map(&wide(&x), |v| v * sigmoid(v)));
    let x = to_bf16(&uniform(16, 777, -4.0, 4.0));
    check!(gelu_erf_bf16(x), map(&wide(&x), gelu_erf));
}

#[test]
fn round_to_f16() {
    let x = uniform(17, 1001, -100.0, 100.0);
    let want: Vec<f64> = x
        .iter()
        .map(|v| f16::from_f64(f64::from(*v)).to_f64())
        .collect();
    // The cast must matter: a no-op would miss the f32 tolerance.
    let xs = wide(&x);
    let moved = zip(&xs, &want, |a, b| (a - b).abs())
        .into_iter()
        .fold(0.0, f64::max);
    assert!(moved / 100.0 > 1e-5, "inputs too easy to round: {moved}");
    check!(round_to_f16(x), want);
}

#[test]
fn mixed_add() {
    let a = to_f16(&uniform(18, 515, -8.0, 8.0));
    let b = to_bf16(&uniform(19, 515, -8.0, 8.0));
    check!(mixed_add(a, b), zip(&wide(&a), &wide(&b), |a, b| a + b));
}

// ---------------------------------------------------------------------------
// Row reductions and normalizations
// ---------------------------------------------------------------------------

#[test]
fn row_sum() {
    let x = uniform(20, 9 * 1025, -1.0, 1.0);
    check!(row_sum(x), per_row(&wide(&x), 1025, |r| r.iter().sum()));
}

#[test]
fn row_max() {
    let x = to_f16(&uniform(21, 31 * 7, -5.0, 5.0));
    check!(
        row_max(x),
        per_row(&wide(&x), 7, |r| r
            .iter()
            .copied()
            .fold(f64::NEG_INFINITY, f64::max))
    );
}

#[test]
fn row_mean() {
    let x = to_bf16(&uniform(22, 17, -3.0, 3.0));
    check!(row_mean(x), wide(&x));
    let x = uniform(23, 3 * 1025, -1.0, 2.0);
    check!(
        row_mean_1025(x),
        per_row(&wide(&x), 1025, |r| r.iter().sum::<f64>() / 1025.0)
    );
}

#[test]
fn softmax_rows() {
    let x = uniform(24, 6 * 1025, -4.0, 4.0);
    check!(softmax(x), softmax(&wide(&x), 1025));
    let x = to_f16(&uniform(25, 13 * 7, -4.0, 4.0));
    check!(softmax_f16(x), softmax(&wide(&x), 7));
    let x = to_bf16(&uniform(26, 5 * 129, -4.0, 4.0));
    check!(softmax_bf16(x), softmax(&wide(&x), 129));
    let x = uniform(27, 4, -4.0, 4.0);
    check!(softmax_single(x), [1.0; 4]);
}

#[test]
fn causal_softmax() {
    const T: usize = 19;
    let x = uniform(28, T * T, -4.0, 4.0);
    let xs = wide(&x);
    let mut want = vec![0.0; T * T];
    for r in 0..T {
        let seen = &xs[r * T..r * T + r + 1];
        let mx = seen.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = seen.iter().map(|v| (v - mx).exp()).sum();
        for (c, v) in seen.iter().enumerate() {
            want[r * T + c] = (v - mx).exp() / s;
        }
    }
    check!(causal_softmax(x), want);
}

#[test]
fn layernorms() {
    let x = uniform(29, 5 * 1025, -2.0, 3.0);
    let g = uniform(30, 1025, 0.5, 1.5);
    let b = uniform(31, 1025, -0.5, 0.5);
    check!(
        layernorm(x, g, b),
        layernorm(&wide(&x), &wide(&g), &wide(&b))
    );

    let x = to_bf16(&uniform(32, 9 * 37, -2.0, 3.0));
    let g = uniform(33, 37, 0.5, 1.5);
    let b = uniform(34, 37, -0.5, 0.5);
    check!(
        layernorm_bf16(x, g, b),
        layernorm(&wide(&x), &wide(&g), &wide(&b))
    );

    let x = to_f16(&uniform(35, 11 * 7, -2.0, 3.0));
    let g = to_f16(&uniform(36, 7, 0.5, 1.5));
    let b = to_f16(&uniform(37, 7, -0.5, 0.5));
    check!(
        layernorm_f16(x, g, b),
        layernorm(&wide(&x), &wide(&g), &wide(&b))
    );
}

#[test]
fn rmsnorms() {
    let x = uniform(38, 11 * 129, -2.0, 2.0);
    let w = uniform(39, 129, 0.5, 1.5);
    check!(rmsnorm(x, w), rmsnorm(&wide(&x), &wide(&w), 1e-6));

    let x = to_f16(&uniform(40, 8, -2.0, 2.0));
    let w = to_f16(&uniform(41, 1, 0.5, 1.5));
    check!(rmsnorm_single(x, w), rmsnorm(&wide(&x), &wide(&w), 1e-6));
}

// ---------------------------------------------------------------------------
// Contractions
// ---------------------------------------------------------------------------

/// `a` (m × k) and `b` (k × n), random, and their product in f64.
fn matmul_case(seed: u64, m: usize, n: usize, k: usize) -> (Vec<f32>, Vec<f32>, Vec<f64>) {
    let a = uniform(seed, m * k, -1.0, 1.0);
    let b = uniform(seed + 1, k * n, -1.0, 1.0);
    let want = matmul(&wide(&a), &wide(&b), m, n, k, false);
    (a, b, want)
}

#[test]
fn matmuls_f32() {
    let (a, b, want) = matmul_case(42, 37, 41, 43);
    check!(matmul(a, b), want);
    let (a, b, want) = matmul_case(44, 1, 7, 1025);
    check!(matmul_row(a, b), want);
    let (a, b, want) = matmul_case(46, 513, 3, 5);
    check!(matmul_tall(a, b), want);
}

#[test]
fn linear() {
    let (m, n, k) = (29, 31, 33);
    let x = uniform(48, m * k, -1.0, 1.0);
    let w = uniform(49, n * k, -1.0, 1.0);
    check!(linear(x, w), matmul(&wide(&x), &wide(&w), m, n, k, true));
}

#[test]
fn bmm() {
    let (batch, m, n, k) = (3, 17, 23, 19);
    let a = uniform(50, batch * m * k, -1.0, 1.0);
    let b = uniform(51, batch * k * n, -1.0, 1.0);
    let (aw, bw) = (wide(&a), wide(&b));
    let want: Vec<f64> = (0..batch)
        .flat_map(|i| {
            matmul(
                &aw[i * m * k..(i + 1) * m * k],
                &bw[i * k * n..(i + 1) * k * n],
                m,
                n,
                k,
                false,
            )
        })
        .collect();
    check!(bmm(a, b), want);
}

#[test]
fn matmuls_16_bit() {
    let (m, n, k) = (37, 41, 43);
    let a = to_f16(&uniform(52, m * k, -1.0, 1.0));
    let b = to_f16(&uniform(53, k * n, -1.0, 1.0));
    check!(
        matmul_f16(a, b),
        matmul(&wide(&a), &wide(&b), m, n, k, false)
    );

    let (m, n, k) = (33, 17, 65);
    let x = to_bf16(&uniform(54, m * k, -1.0, 1.0));
    let w = to_bf16(&uniform(55, n * k, -1.0, 1.0));
    check!(
        linear_bf16(x, w),
        matmul(&wide(&x), &wide(&w), m, n, k, true)
    );
}

#[test]
fn matmul_bias_gelu() {
    let (m, n, k) = (33, 47, 65);
    let x = to_bf16(&uniform(56, m * k, -1.0, 1.0));
    let w = to_bf16(&uniform(57, k * n, -1.0, 1.0));
    let b = uniform(58, n, -1.0, 1.0);
    let want = add_row_vector(&matmul(&wide(&x), &wide(&w), m, n, k, false), &wide(&b));
    check!(matmul_bias_gelu(x, w, b), map(&want, gelu_tanh));
}

#[test]
fn matmul_bias_residual() {
    let (m, n, k) = (19, 25, 71);
    let h = uniform(59, m * k, -1.0, 1.0);
    let w = uniform(60, k * n, -1.0, 1.0);
    let b = uniform(61, n, -1.0, 1.0);
    let x = uniform(62, m * n, -1.0, 1.0);
    let want = zip(
        &add_row_vector(&matmul(&wide(&h), &wide(&w), m, n, k, false), &wide(&b)),
        &wide(&x),
        |y, r| y + r,
    );
    check!(matmul_bias_residual(h, w, b, x), want);
}

// ---------------------------------------------------------------------------
// Coverage, length checks on other tensors, metadata
// ---------------------------------------------------------------------------

/// Every kernel in the catalogue is checked by a test above.
#[test]
fn every_catalogue_kernel_is_checked() {
    let source: String = include_str!("reference.rs")
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    let missing: Vec<&str> = e2e::CATALOGUE
        .iter()
        .map(|k| k.name)
        .filter(|name| !source.contains(&format!("check!({name}(")))
        .collect();
    assert!(
        missing.is_empty(),
        "kernels without a reference test: {missing:?}"
    );
}

#[test]
fn length_mismatch_names_the_tensor() {
    let x = vec![0.5f32; 5 * 1025];
    let g = vec![1.0f32; 1025];
    let short = vec![0.0f32; 1024];
    let mut out = vec![0.0f32; 5 * 1025];
    assert_eq!(
        e2e::layernorm::reference(&x, &g, &short, &mut out),
        Err(Error::LengthMismatch {
            kernel: "layernorm",
            tensor: "beta",
            expected: 1025,
            actual: 1024,
        })
    );
    let mut short_out = vec![0.0f32; 5 * 1025 - 1];
    let err = e2e::layernorm::reference(&x, &g, &g, &mut short_out).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("layernorm") && text.contains("`out`") && text.contains("5124"),
        "{text}"
    );
}

fn is_checksum(s: &str) -> bool {
    s.len() == 32
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[test]
fn kernel_metadata() {
    let k = &e2e::bias_add::KERNEL;
    assert_eq!(k.name, "bias_add");
    assert_eq!(k.dims, &[("R", 13), ("C", 37)]);
    assert_eq!(k.inputs.len(), 2);
    let (x, b) = (&k.inputs[0], &k.inputs[1]);
    assert_eq!(
        (x.name, x.dtype, x.dims, x.len),
        ("x", "f32", &["R", "C"][..], 13 * 37)
    );
    assert_eq!(
        (b.name, b.dtype, b.dims, b.len),
        ("b", "f32", &["C"][..], 37)
    );
    assert_eq!(k.output.name, "out");
    assert_eq!((k.output.dims, k.output.len), (&["R", "C"][..], 13 * 37));
    assert!(is_checksum(k.checksum), "{}", k.checksum);
    assert_eq!(k.checksum, e2e::bias_add::CHECKSUM);

    let k = &e2e::bmm::KERNEL;
    assert_eq!(k.dims, &[("B", 3), ("M", 17), ("N", 23), ("K", 19)]);
    assert_eq!(k.dim("K"), Some(19));
    assert_eq!(k.inputs[0].dims, &["B", "M", "K"]);
    assert_eq!(k.inputs[1].dims, &["B", "K", "N"]);
    assert_eq!(
        (k.output.dims, k.output.len),
        (&["B", "M", "N"][..], 3 * 17 * 23)
    );
    assert_eq!(k.flops, 2 * 3 * 17 * 23 * 19);

    let k = &e2e::layernorm_bf16::KERNEL;
    let dtypes: Vec<&str> = k.tensors().map(|t| t.dtype).collect();
    assert_eq!(dtypes, ["bf16", "f32", "f32", "bf16"]);

    let k = &e2e::row_sum::KERNEL;
    assert_eq!((k.output.dims, k.output.len), (&["R"][..], 9));

    for k in e2e::CATALOGUE {
        assert!(is_checksum(k.checksum), "`{}`: {}", k.name, k.checksum);
        assert_eq!(k.output.name, "out", "`{}`", k.name);
    }
    let mut names: Vec<&str> = e2e::CATALOGUE.iter().map(|k| k.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), e2e::CATALOGUE.len(), "kernel names are unique");
}

/// The binary embeds the build's variants: the sm_80 baseline and the sm_90
/// target of `[package.metadata.ktune]`, each PTX for its own target.
#[test]
fn embedded_variants() {
    for variants in [e2e::softmax::variants(), e2e::matmul_bias_gelu::variants()] {
        let sms: Vec<(u32, u32)> = variants.iter().map(|v| v.sm).collect();
        assert_eq!(sms, [(8, 0), (9, 0)]);
        for v in variants {
            assert!(v.gpu.is_none(), "a heuristic default has no GPU model");
            let (major, minor) = v.sm;
            assert!(
                v.ptx.contains(&format!(".target sm_{major}{minor}")),
                "{}",
                &v.ptx[..v.ptx.len().min(400)]
            );
            assert!(
                v.ptx.contains(v.entry),
                "entry `{}` not in the PTX",
                v.entry
            );
            assert!(v.block.iter().product::<u32>() > 0);
            assert!(v.grid.iter().product::<u32>() > 0);
        }
    }
}

/// The checksum the macro compiled in is the one the build helper's scan of
/// the same source computes (one front-end for both).
#[test]
fn macro_and_build_helper_agree_on_checksums() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let scan = ktune_build::scan::scan(root, &[root.join("src")]).expect("the catalogue scans");
    let scanned: Vec<(String, String)> = scan
        .kernels
        .iter()
        .map(|f| (f.kernel.name.clone(), canon::checksum(&f.kernel)))
        .collect();
    let compiled: Vec<(String, String)> = e2e::CATALOGUE
        .iter()
        .map(|k| (k.name.to_owned(), k.checksum.to_owned()))
        .collect();
    assert_eq!(scanned, compiled);
}

// ---------------------------------------------------------------------------
// Checksums: the computation, not its spelling or its shape
// ---------------------------------------------------------------------------

/// The checksum of a kernel given as source text: the attribute's arguments
/// and the fn item, as the macro receives them.
fn checksum(attr: &str, item: &str) -> String {
    let attr: TokenStream = attr.parse().expect("attribute tokens");
    let item: TokenStream = item.parse().expect("item tokens");
    let kernel = syntax::parse_kernel(attr, item).unwrap_or_else(|e| panic!("rejected: {e}"));
    canon::checksum(&kernel)
}

const SHAPE: &str = "shape(R = 8, C = 16)";

const BASE: &str = "
pub fn scale_shift(x: Tensor<f32, (R, C)>, b: Tensor<f32, (C,)>) -> Tensor<f32, (R, C)> {
    compute(|r, c| {
        let y = x[r][c] * 2.0;
        y + b[c]
    })
}";

#[test]
fn checksum_ignores_formatting_and_comments() {
    let base = checksum(SHAPE, BASE);
    assert!(is_checksum(&base), "{base}");
    let same = [
        // One line.
        "pub fn scale_shift(x: Tensor<f32,(R,C)>, b: Tensor<f32,(C,)>) -> Tensor<f32,(R,C)> { compute(|r,c| { let y = x[r][c]*2.0; y+b[c] }) }",
        // Other indentation and line breaks.
        "pub fn scale_shift(
                x: Tensor<f32, (R, C)>,
                b: Tensor<f32, (C,)>,
            ) -> Tensor<f32, (R, C)>
            {
                compute(
                    |r, c| {
                        let y =
                            x[r][c]
                                * 2.0;
                        y
                            + b[c]
                    }
                )
            }",
        // Comments, a doc comment, redundant parentheses, another spelling
        // of the same constant.
        "/// Scales and shifts.
            ///
            /// More prose.
            pub fn scale_shift(x: Tensor<f32, (R, C)>, /* the bias */ b: Tensor<f32, (C,)>) -> Tensor<f32, (R, C)> {
                // Computed once per element.
                compute(|r, c| {
                    let y = (x[r][c]) * 2.00; // doubled
                    ((y + b[c]))
                })
            }",
    ];
    for (i, item) in same.iter().enumerate() {
        assert_eq!(checksum(SHAPE, item), base, "formatting variant {i}");
    }
    assert_eq!(
        checksum("shape( R=8,C =16 )", BASE),
        base,
        "attribute spacing"
    );
}

#[test]
fn checksum_changes_with_the_computation() {
    let base = checksum(SHAPE, BASE);
    let different = [
        ("another constant", BASE.replace("* 2.0", "* 2.5")),
        ("another operator", BASE.replace("y + b[c]", "y - b[c]")),
        (
            "another function",
            BASE.replace("y + b[c]", "exp(y) + b[c]"),
        ),
        (
            "another dtype",
            BASE.replace("x: Tensor<f32", "x: Tensor<bf16"),
        ),
        (
            "another index",
            BASE.replace("b: Tensor<f32, (C,)>", "b: Tensor<f32, (R,)>")
                .replace("b[c]", "b[r]"),
        ),
    ];
    for (what, item) in &different {
        assert_ne!(&checksum(SHAPE, item), &base, "{what}");
    }
}

#[test]
fn checksum_ignores_the_shape_sizes() {
    let base = checksum(SHAPE, BASE);
    assert_eq!(checksum("shape(R = 1, C = 1025)", BASE), base);
    assert_eq!(
        checksum("shape(C = 16, R = 8)", BASE),
        base,
        "dimension order in shape(...)"
    );
}
