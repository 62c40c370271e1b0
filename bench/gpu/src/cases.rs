//! The benchmark cases: each a kernel written in ktune's kernel language
//! (parsed at run time with the one front-end), the shape it is timed at,
//! and a tiny shape of the same kernel for the virtual GPU.
//!
//! The kernel language has no separate batched-matmul form: a batch is one
//! more output dimension that both operands read. The batched case is
//! written `B = 32` products of `(128 × 4096) · (4096 × 128)`, the
//! `4096 × 4096 × 128` problem's operation count (4.3 GFLOP) split the way
//! attention splits it over heads. The decode shapes (`M` = 1, 16, 128) are
//! bf16, like the LLM shapes; the long tail is f32. The square f32 product
//! runs twice: exact, and with `allow_tf32` (tensor cores, against cuBLAS
//! in its tf32 math mode).

use std::fmt::Write as _;

use ktune_core::DType;
use ktune_core::ir::Kernel;
use ktune_core::syntax::parse_kernel;
use proc_macro2::TokenStream;
use serde::Serialize;

/// What a case computes, which decides its baseline and how its output is
/// sampled for the correctness check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// `C = A·B`, optionally batched over `B`.
    Matmul,
    /// `gelu(A·B + bias)`, fused.
    MatmulBiasGelu,
    /// `A·B` with an elementwise epilogue fused (the demo's products),
    /// timed against the product alone.
    MatmulEpilogue,
    /// Softmax over each row.
    Softmax,
    /// Layer normalization over each row, with scale and shift.
    LayerNorm,
    /// Each output element from the inputs at its own position (and
    /// broadcast ones), read and written once.
    Elementwise,
}

/// What a case's ktune kernels are compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Baseline {
    /// The same product through cuBLAS (sgemm for f32, gemmEx with bf16
    /// operands and f32 compute, strided-batched for a batch).
    Cublas,
    /// The product through cuBLAS, then [`BIAS_GELU`] as a separate kernel.
    CublasThenBiasGelu,
    /// cuBLAS's product alone, in the operands' dtype, without the
    /// kernel's epilogue (which favours cuBLAS), checked against the
    /// product's own reference.
    CublasProduct,
    /// A device-to-device copy of the input tensor's bytes: the device's
    /// copy bandwidth, the ceiling of a kernel that reads and writes once.
    Copy,
}

impl Kind {
    pub fn baseline(self) -> Baseline {
        match self {
            Kind::Matmul => Baseline::Cublas,
            Kind::MatmulBiasGelu => Baseline::CublasThenBiasGelu,
            Kind::MatmulEpilogue => Baseline::CublasProduct,
            Kind::Softmax | Kind::LayerNorm | Kind::Elementwise => Baseline::Copy,
        }
    }
}

/// One benchmark case.
#[derive(Debug, Clone, Copy)]
pub struct Case {
    /// A stable name, for `--cases` and the results file.
    pub name: &'static str,
    /// The case's group, also accepted by `--cases`.
    pub group: &'static str,
    pub kind: Kind,
    /// The kernel, a `fn` item of the kernel language without its attribute.
    pub source: &'static str,
    /// The benchmark shape: each size parameter of the kernel.
    pub shape: &'static [(&'static str, u32)],
    /// A shape small enough for the virtual GPU.
    pub tiny: &'static [(&'static str, u32)],
    /// Whether the kernel's attribute says `allow_tf32`.
    pub allow_tf32: bool,
}

/// Why a case's kernel did not parse (a bug in this file, reported rather
/// than panicking).
#[derive(Debug, thiserror::Error)]
#[error("kernel of case `{case}` does not parse: {message}")]
pub struct ParseError {
    pub case: String,
    pub message: String,
}

impl Case {
    /// The kernel at the benchmark shape.
    pub fn kernel(&self) -> Result<Kernel, ParseError> {
        self.kernel_at(self.shape)
    }

    /// The kernel at the tiny shape.
    pub fn tiny_kernel(&self) -> Result<Kernel, ParseError> {
        self.kernel_at(self.tiny)
    }

    /// The kernel with the given sizes.
    pub fn kernel_at(&self, shape: &[(&str, u32)]) -> Result<Kernel, ParseError> {
        parse(self.source, shape, self.allow_tf32).map_err(|message| ParseError {
            case: self.name.to_owned(),
            message,
        })
    }

    /// The operand dtype, the one the case is named for.
    pub fn dtype(&self) -> Result<DType, ParseError> {
        let kernel = self.kernel_at(self.tiny)?;
        Ok(kernel
            .inputs
            .first()
            .map_or(kernel.output.dtype, |t| t.dtype))
    }

    /// `M×N×K`-style text of the shape, in declaration order.
    pub fn shape_text(&self) -> String {
        let sizes: Vec<String> = self.shape.iter().map(|(_, n)| n.to_string()).collect();
        let names: Vec<&str> = self.shape.iter().map(|(d, _)| *d).collect();
        format!("{} = {}", names.join("×"), sizes.join("×"))
    }
}

/// Parses a kernel source with a `shape(...)` attribute built from `shape`,
/// and `allow_tf32` when asked.
pub fn parse(source: &str, shape: &[(&str, u32)], allow_tf32: bool) -> Result<Kernel, String> {
    let mut attr = String::from("shape(");
    for (i, (dim, size)) in shape.iter().enumerate() {
        let sep = if i == 0 { "" } else { ", " };
        let _ = write!(attr, "{sep}{dim} = {size}");
    }
    attr.push(')');
    if allow_tf32 {
        attr.push_str(", allow_tf32");
    }
    let attr: TokenStream = attr.parse().map_err(|e| format!("{e}"))?;
    let item: TokenStream = source.parse().map_err(|e| format!("{e}"))?;
    parse_kernel(attr, item).map_err(|e| e.to_string())
}

/// `A·B` alone, `A` of `m × k` and `B` of `k × n` in `dtype` (f32 or
/// bf16), as cuBLAS computes it for [`Baseline::CublasProduct`].
pub fn plain_product(dtype: DType, [m, n, k]: [u32; 3]) -> Result<Kernel, String> {
    let source = match dtype {
        DType::F32 => MATMUL_F32,
        DType::Bf16 => MATMUL_BF16,
        DType::F16 => return Err("no f16 product".to_owned()),
    };
    parse(source, &[("M", m), ("N", n), ("K", k)], false)
}

const MATMUL_F32: &str =
    "fn matmul_f32(a: Tensor<f32, (M, K)>, b: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
    compute(|m, n| sum(K, |k| a[m][k] * b[k][n]))
}";

const MATMUL_BF16: &str =
    "fn matmul_bf16(a: Tensor<bf16, (M, K)>, b: Tensor<bf16, (K, N)>) -> Tensor<bf16, (M, N)> {
    compute(|m, n| sum(K, |k| a[m][k] * b[k][n]))
}";

const BMM_BF16: &str = "fn bmm_bf16(a: Tensor<bf16, (B, M, K)>, b: Tensor<bf16, (B, K, N)>) -> Tensor<bf16, (B, M, N)> {
    compute(|i, m, n| sum(K, |k| a[i][m][k] * b[i][k][n]))
}";

const MATMUL_BIAS_GELU: &str = "fn matmul_bias_gelu(x: Tensor<bf16, (M, K)>, w: Tensor<bf16, (K, N)>, b: Tensor<f32, (N,)>) -> Tensor<bf16, (M, N)> {
    compute(|m, n| gelu(sum(K, |k| x[m][k] * w[k][n]) + b[n]))
}";

/// The epilogue of the unfused baseline: cuBLAS writes `h = x·w` (bf16),
/// then this kernel (ktune's heuristic schedule) adds the bias and applies
/// GELU, the same formula `MATMUL_BIAS_GELU` fuses.
pub const BIAS_GELU: &str =
    "fn bias_gelu(h: Tensor<bf16, (M, N)>, b: Tensor<f32, (N,)>) -> Tensor<bf16, (M, N)> {
    compute(|m, n| gelu(h[m][n] + b[n]))
}";

/// The demo's kernels (`examples/demo/src/kernels.rs`) in the benchmark's
/// dimension names: its `T`, `D`, `F` become `M`, `K`, `N` in the products
/// (`R`, `C` in softmax, which is [`SOFTMAX`]). Their baseline is cuBLAS's
/// product alone ([`Baseline::CublasProduct`]), or the copy.
const DEMO_LAYERNORM: &str = "fn layernorm(x: Tensor<f32, (T, D)>, gamma: Tensor<f32, (D,)>, beta: Tensor<f32, (D,)>) -> Tensor<bf16, (T, D)> {
    compute(|t, d| {
        let mu = mean(D, |j| x[t][j]);
        let var = mean(D, |j| (x[t][j] - mu) * (x[t][j] - mu));
        (x[t][d] - mu) * rsqrt(var + 1e-5) * gamma[d] + beta[d]
    })
}";

const DEMO_FFN_UP: &str = "fn ffn_up(h: Tensor<bf16, (M, K)>, w1: Tensor<bf16, (K, N)>, b1: Tensor<f32, (N,)>) -> Tensor<f32, (M, N)> {
    compute(|m, n| gelu(sum(K, |k| h[m][k] * w1[k][n]) + b1[n]))
}";

const DEMO_FFN_DOWN: &str = "fn ffn_down(g: Tensor<f32, (M, K)>, w2: Tensor<f32, (K, N)>, b2: Tensor<f32, (N,)>, x: Tensor<f32, (M, N)>) -> Tensor<f32, (M, N)> {
    compute(|m, n| sum(K, |k| g[m][k] * w2[k][n]) + b2[n] + x[m][n])
}";

const SOFTMAX: &str = "fn softmax(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
    compute(|r, c| {
        let mx = max(C, |j| x[r][j]);
        let s = sum(C, |j| exp(x[r][j] - mx));
        exp(x[r][c] - mx) / s
    })
}";

const LAYERNORM: &str = "fn layernorm(x: Tensor<f32, (T, D)>, gamma: Tensor<f32, (D,)>, beta: Tensor<f32, (D,)>) -> Tensor<f32, (T, D)> {
    compute(|t, d| {
        let mu = mean(D, |i| x[t][i]);
        let var = mean(D, |i| (x[t][i] - mu) * (x[t][i] - mu));
        (x[t][d] - mu) * rsqrt(var + 1e-5) * gamma[d] + beta[d]
    })
}";

const fn matmul(
    name: &'static str,
    group: &'static str,
    source: &'static str,
    shape: &'static [(&'static str, u32)],
    tiny: &'static [(&'static str, u32)],
) -> Case {
    Case {
        name,
        group,
        kind: Kind::Matmul,
        source,
        shape,
        tiny,
        allow_tf32: false,
    }
}

/// Every case, in the order they run and are reported.
pub const CASES: &[Case] = &[
    matmul(
        "sgemm_4096",
        "square",
        MATMUL_F32,
        &[("M", 4096), ("N", 4096), ("K", 4096)],
        &[("M", 33), ("N", 47), ("K", 65)],
    ),
    Case {
        allow_tf32: true,
        ..matmul(
            "sgemm_tf32_4096",
            "square",
            MATMUL_F32,
            &[("M", 4096), ("N", 4096), ("K", 4096)],
            &[("M", 33), ("N", 48), ("K", 68)],
        )
    },
    matmul(
        "bf16_gemm_4096",
        "square",
        MATMUL_BF16,
        &[("M", 4096), ("N", 4096), ("K", 4096)],
        &[("M", 33), ("N", 47), ("K", 65)],
    ),
    matmul(
        "llm_4096x11008x4096",
        "llm",
        MATMUL_BF16,
        &[("M", 4096), ("N", 11008), ("K", 4096)],
        &[("M", 17), ("N", 43), ("K", 33)],
    ),
    matmul(
        "bmm_32x128x128x4096",
        "llm",
        BMM_BF16,
        &[("B", 32), ("M", 128), ("N", 128), ("K", 4096)],
        &[("B", 3), ("M", 17), ("N", 23), ("K", 19)],
    ),
    matmul(
        "decode_m1",
        "decode",
        MATMUL_BF16,
        &[("M", 1), ("N", 4096), ("K", 4096)],
        &[("M", 1), ("N", 65), ("K", 129)],
    ),
    matmul(
        "decode_m16",
        "decode",
        MATMUL_BF16,
        &[("M", 16), ("N", 4096), ("K", 4096)],
        &[("M", 16), ("N", 65), ("K", 129)],
    ),
    matmul(
        "decode_m128",
        "decode",
        MATMUL_BF16,
        &[("M", 128), ("N", 4096), ("K", 4096)],
        &[("M", 33), ("N", 65), ("K", 129)],
    ),
    matmul(
        "tail_1000x1000x999",
        "long-tail",
        MATMUL_F32,
        &[("M", 1000), ("N", 1000), ("K", 999)],
        &[("M", 37), ("N", 41), ("K", 43)],
    ),
    matmul(
        "tail_777x3000x513",
        "long-tail",
        MATMUL_F32,
        &[("M", 777), ("N", 3000), ("K", 513)],
        &[("M", 29), ("N", 67), ("K", 23)],
    ),
    matmul(
        "tail_32x8192x8192",
        "long-tail",
        MATMUL_F32,
        &[("M", 32), ("N", 8192), ("K", 8192)],
        &[("M", 32), ("N", 65), ("K", 129)],
    ),
    Case {
        name: "softmax_8192x4096",
        group: "norm",
        kind: Kind::Softmax,
        source: SOFTMAX,
        shape: &[("R", 8192), ("C", 4096)],
        tiny: &[("R", 5), ("C", 129)],
        allow_tf32: false,
    },
    Case {
        name: "softmax_4096x50257",
        group: "norm",
        kind: Kind::Softmax,
        source: SOFTMAX,
        shape: &[("R", 4096), ("C", 50257)],
        tiny: &[("R", 3), ("C", 1025)],
        allow_tf32: false,
    },
    // Rows longer than shared memory holds (a vocabulary of 128256, as
    // Llama 3's): read once per pass, the maximum and the sum in one.
    Case {
        name: "softmax_4096x128256",
        group: "norm",
        kind: Kind::Softmax,
        source: SOFTMAX,
        shape: &[("R", 4096), ("C", 128256)],
        tiny: &[("R", 3), ("C", 2049)],
        allow_tf32: false,
    },
    Case {
        name: "layernorm_8192x4096",
        group: "norm",
        kind: Kind::LayerNorm,
        source: LAYERNORM,
        shape: &[("T", 8192), ("D", 4096)],
        tiny: &[("T", 5), ("D", 129)],
        allow_tf32: false,
    },
    Case {
        name: "layernorm_4096x50257",
        group: "norm",
        kind: Kind::LayerNorm,
        source: LAYERNORM,
        shape: &[("T", 4096), ("D", 50257)],
        tiny: &[("T", 3), ("D", 1025)],
        allow_tf32: false,
    },
    // The second kernel of the fused case's baseline on its own: the LLM
    // shape's activations, read and written once as bf16.
    Case {
        name: "bias_gelu_4096x11008",
        group: "elementwise",
        kind: Kind::Elementwise,
        source: BIAS_GELU,
        shape: &[("M", 4096), ("N", 11008)],
        tiny: &[("M", 5), ("N", 67)],
        allow_tf32: false,
    },
    Case {
        name: "demo_layernorm",
        group: "demo",
        kind: Kind::LayerNorm,
        source: DEMO_LAYERNORM,
        shape: &[("T", 197), ("D", 384)],
        tiny: &[("T", 5), ("D", 33)],
        allow_tf32: false,
    },
    Case {
        kind: Kind::MatmulEpilogue,
        ..matmul(
            "demo_ffn_up",
            "demo",
            DEMO_FFN_UP,
            &[("M", 197), ("K", 384), ("N", 1536)],
            &[("M", 5), ("K", 33), ("N", 47)],
        )
    },
    Case {
        kind: Kind::MatmulEpilogue,
        ..matmul(
            "demo_ffn_down",
            "demo",
            DEMO_FFN_DOWN,
            &[("M", 197), ("K", 1536), ("N", 384)],
            &[("M", 5), ("K", 33), ("N", 47)],
        )
    },
    Case {
        name: "demo_softmax",
        group: "demo",
        kind: Kind::Softmax,
        source: SOFTMAX,
        shape: &[("R", 197), ("C", 384)],
        tiny: &[("R", 5), ("C", 33)],
        allow_tf32: false,
    },
    Case {
        name: "matmul_bias_gelu_bf16",
        group: "fused",
        kind: Kind::MatmulBiasGelu,
        source: MATMUL_BIAS_GELU,
        shape: &[("M", 4096), ("N", 11008), ("K", 4096)],
        tiny: &[("M", 33), ("N", 47), ("K", 65)],
        allow_tf32: false,
    },
];

/// The cases `selector` names: a comma-separated list of case names and
/// group names (`all` for every case). Unknown names are an error that
/// lists the known ones.
pub fn select(selector: &str) -> Result<Vec<&'static Case>, String> {
    let mut chosen: Vec<&'static Case> = Vec::new();
    for word in selector.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        let matched: Vec<&'static Case> = CASES
            .iter()
            .filter(|c| word == "all" || c.name == word || c.group == word)
            .collect();
        if matched.is_empty() {
            let mut known: Vec<&str> = CASES.iter().map(|c| c.name).collect();
            let mut groups: Vec<&str> = CASES.iter().map(|c| c.group).collect();
            groups.dedup();
            known.extend(groups);
            return Err(format!(
                "no case or group `{word}`; known: all, {}",
                known.join(", ")
            ));
        }
        for case in matched {
            if !chosen.iter().any(|c| c.name == case.name) {
                chosen.push(case);
            }
        }
    }
    Ok(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ktune_core::interp;

    #[test]
    fn every_case_parses_at_both_shapes_with_the_same_tensors() {
        for case in CASES {
            let big = case.kernel().unwrap_or_else(|e| panic!("{e}"));
            let tiny = case.tiny_kernel().unwrap_or_else(|e| panic!("{e}"));
            let dims =
                |k: &Kernel| -> Vec<String> { k.dims.iter().map(|d| d.name.clone()).collect() };
            assert_eq!(dims(&big), dims(&tiny), "{}", case.name);
            assert_eq!(big.inputs.len(), tiny.inputs.len());
            for (name, size) in case.shape {
                assert!(
                    big.dims.iter().any(|d| d.name == *name && d.size == *size),
                    "{}: {name}",
                    case.name
                );
            }
        }
    }

    #[test]
    fn names_are_unique_and_selection_works() {
        let mut names: Vec<&str> = CASES.iter().map(|c| c.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), CASES.len());
        assert_eq!(select("all").map(|v| v.len()), Ok(CASES.len()));
        let decode = select("decode,sgemm_4096,decode_m1").expect("known names");
        let picked: Vec<&str> = decode.iter().map(|c| c.name).collect();
        assert_eq!(
            picked,
            ["decode_m1", "decode_m16", "decode_m128", "sgemm_4096"]
        );
        let err = select("sgemm").expect_err("unknown");
        assert!(
            err.contains("sgemm_4096") && err.contains("long-tail"),
            "{err}"
        );
    }

    #[test]
    fn the_catalogue_has_the_issue_shapes_and_dtypes() {
        let find = |name: &str| CASES.iter().find(|c| c.name == name).expect(name);
        assert_eq!(find("sgemm_4096").dtype().ok(), Some(DType::F32));
        assert_eq!(find("bf16_gemm_4096").dtype().ok(), Some(DType::Bf16));
        assert_eq!(
            find("matmul_bias_gelu_bf16").kind.baseline(),
            Baseline::CublasThenBiasGelu
        );
        // The demo's products are timed against cuBLAS's product alone, checked
        // against a plain product of their operands' dtype.
        for name in ["demo_ffn_up", "demo_ffn_down"] {
            let case = find(name);
            assert_eq!(case.kind.baseline(), Baseline::CublasProduct, "{name}");
            let dtype = case.dtype().expect(name);
            let plain = plain_product(dtype, [5, 47, 33]).expect(name);
            assert_eq!(plain.flops(), 2 * 5 * 47 * 33, "{name}");
            assert_eq!(plain.output.dtype, dtype, "{name}");
        }
        let flops = find("bmm_32x128x128x4096").kernel().map(|k| k.flops()).ok();
        assert_eq!(flops, Some(2 * 4096 * 4096 * 128));
        for case in CASES.iter().filter(|c| c.group == "long-tail") {
            assert_eq!(case.dtype().ok(), Some(DType::F32), "{}", case.name);
        }
    }

    #[test]
    fn the_demo_cases_compute_what_the_demos_kernels_compute() {
        // Each demo kernel, parsed from the demo's source at a small shape in
        // its own dimension names, against the case at the same sizes.
        let file = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../examples/demo/src/kernels.rs"
        );
        let text = std::fs::read_to_string(file).expect("the demo's kernels");
        let (mut found, mut diagnostics) = (Vec::new(), Vec::new());
        ktune_build::scan::scan_source(
            std::path::Path::new(file),
            &text,
            &mut found,
            &mut diagnostics,
        );
        assert!(diagnostics.is_empty(), "{diagnostics:?}");
        type Sizes = &'static [(&'static str, u32)];
        let pairs: [(&str, &str, Sizes); 4] = [
            ("layernorm", "demo_layernorm", &[("T", 5), ("D", 33)]),
            ("ffn_up", "demo_ffn_up", &[("T", 5), ("D", 33), ("F", 47)]),
            (
                "ffn_down",
                "demo_ffn_down",
                &[("T", 5), ("D", 47), ("F", 33)],
            ),
            ("softmax", "demo_softmax", &[("T", 5), ("D", 33)]),
        ];
        assert_eq!(found.len(), pairs.len());
        for (name, case, demo_shape) in pairs {
            let demo = found.iter().find(|f| f.kernel.name == name).expect(name);
            let item = &demo.source[demo.source.find("pub fn").expect("a pub fn")..];
            let demo = parse(item, demo_shape, false).expect("the demo's kernel parses");
            let case = CASES.iter().find(|c| c.name == case).expect(case);
            let ours = case.tiny_kernel().expect("parses");
            let inputs: Vec<Vec<f32>> = crate::check::random_inputs(&ours, 7)
                .into_iter()
                .map(|t| t.values)
                .collect();
            let (want, got) = (
                interp::evaluate(&demo, &inputs),
                interp::evaluate(&ours, &inputs),
            );
            assert_eq!(want.len(), got.len(), "{name}");
            let first = want
                .iter()
                .zip(&got)
                .position(|(a, b)| a.to_bits() != b.to_bits());
            assert_eq!(first, None, "{name}: the first element that differs");
        }
    }

    #[test]
    fn the_tf32_case_is_the_sgemm_with_allow_tf32_on_tensor_cores() {
        let find = |name: &str| CASES.iter().find(|c| c.name == name).expect(name);
        let (exact, tf32) = (find("sgemm_4096"), find("sgemm_tf32_4096"));
        assert_eq!((exact.allow_tf32, tf32.allow_tf32), (false, true));
        assert_eq!((exact.source, exact.shape), (tf32.source, tf32.shape));
        for shape in [tf32.shape, tf32.tiny] {
            let kernel = tf32.kernel_at(shape).expect("parses");
            assert!(kernel.allow_tf32);
            let schedule = ktune_core::lower::heuristic(&kernel, ktune_core::SmVersion::Sm80);
            assert_eq!(
                schedule.kind(),
                ktune_core::schedule::Class::Mma,
                "{shape:?}"
            );
        }
    }
}
