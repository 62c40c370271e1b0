//! The contraction lowering on the virtual GPU: odd shapes, layouts, dtypes
//! and epilogues over several schedule points each, against a direct f64
//! computation, with poisoned outputs so that an unwritten element fails.

mod common;

use ktune_core::DType;
use ktune_core::ir::Kernel;
use ktune_core::lower::{Lowered, lower, matmul};
use ktune_core::schedule::Schedule;
use ktune_core::syntax::parse_kernel;
use ktune_core::target::SmVersion;
use ktune_vgpu::verify::encode;

/// What follows the reduction.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Epilogue {
    None,
    /// `gelu(acc + bias[n])`
    BiasGelu,
    /// `let y = acc + bias[n]; y + r[m][n]`
    Residual,
    /// `mean(K, |k| (a as f32) * (0.5 * b))`: a prologue on each operand.
    ScaledMean,
}

#[derive(Debug, Clone, Copy)]
struct Case {
    batch: u32,
    m: u32,
    n: u32,
    k: u32,
    input: DType,
    output: DType,
    /// A stored `(K, M)`, read `x[k][m]`.
    a_transposed: bool,
    /// B stored `(N, K)`, read `w[n][k]`.
    b_transposed: bool,
    /// B shared by every batch element (no batch dimension).
    b_broadcast: bool,
    /// The output stored `(N, M)`.
    out_transposed: bool,
    epilogue: Epilogue,
}

impl Case {
    fn new(batch: u32, m: u32, n: u32, k: u32) -> Case {
        Case {
            batch,
            m,
            n,
            k,
            input: DType::F32,
            output: DType::F32,
            a_transposed: false,
            b_transposed: false,
            b_broadcast: false,
            out_transposed: false,
            epilogue: Epilogue::None,
        }
    }

    fn kernel(&self) -> Kernel {
        let (bd, bi) = if self.batch > 1 {
            ("B, ", "[b]")
        } else {
            ("", "")
        };
        let (wbd, wbi) = if self.b_broadcast { ("", "") } else { (bd, bi) };
        let (a_dims, a_read) = if self.a_transposed {
            ("K, M", format!("x{bi}[k][m]"))
        } else {
            ("M, K", format!("x{bi}[m][k]"))
        };
        let (w_dims, w_read) = if self.b_transposed {
            ("N, K", format!("w{wbi}[n][k]"))
        } else {
            ("K, N", format!("w{wbi}[k][n]"))
        };
        let (ti, to) = (self.input.name(), self.output.name());
        let mut params =
            format!("x: Tensor<{ti}, ({bd}{a_dims})>, w: Tensor<{ti}, ({wbd}{w_dims})>");
        let sum = format!("sum(K, |k| {a_read} * {w_read})");
        let body = match self.epilogue {
            Epilogue::None => sum,
            Epilogue::BiasGelu => {
                params.push_str(", bias: Tensor<f32, (N,)>");
                format!("gelu({sum} + bias[n])")
            }
            Epilogue::Residual => {
                params.push_str(&format!(
                    ", bias: Tensor<f32, (N,)>, r: Tensor<f32, ({bd}M, N)>"
                ));
                format!("{{ let y = {sum} + bias[n]; y + r{bi}[m][n] }}")
            }
            Epilogue::ScaledMean => format!("mean(K, |k| ({a_read} as f32) * (0.5 * {w_read}))"),
        };
        let (out_dims, vars) = if self.out_transposed {
            ("N, M", "n, m")
        } else {
            ("M, N", "m, n")
        };
        let vars = if self.batch > 1 {
            format!("b, {vars}")
        } else {
            vars.to_string()
        };
        let (b, m, n, k) = (self.batch, self.m, self.n, self.k);
        let shape = if self.batch > 1 {
            format!("shape(B = {b}, M = {m}, N = {n}, K = {k})")
        } else {
            format!("shape(M = {m}, N = {n}, K = {k})")
        };
        let item = format!(
            "fn mm({params}) -> Tensor<{to}, ({bd}{out_dims})> {{ compute(|{vars}| {body}) }}"
        );
        parse_kernel(
            shape.parse().expect("attribute tokens"),
            item.parse().expect("item tokens"),
        )
        .unwrap_or_else(|e| panic!("test kernel rejected: {e}\n{item}"))
    }

    /// Random inputs, as the kernel's buffers and as the exact values the
    /// buffers hold.
    fn inputs(&self, seed: u64) -> Vec<(Vec<u8>, Vec<f64>)> {
        let (b, m, n, k) = (
            self.batch as usize,
            self.m as usize,
            self.n as usize,
            self.k as usize,
        );
        let mut tensors = vec![
            buffer(self.input, &common::values(b * m * k, seed)),
            buffer(
                self.input,
                &common::values(if self.b_broadcast { k * n } else { b * k * n }, seed + 1),
            ),
        ];
        if matches!(self.epilogue, Epilogue::BiasGelu | Epilogue::Residual) {
            tensors.push(buffer(DType::F32, &common::values(n, seed + 2)));
        }
        if self.epilogue == Epilogue::Residual {
            tensors.push(buffer(DType::F32, &common::values(b * m * n, seed + 3)));
        }
        tensors
    }

    /// The expected output and, per element, how far a correct kernel may
    /// be from it.
    fn reference(&self, inputs: &[(Vec<u8>, Vec<f64>)]) -> Vec<(f64, f64)> {
        let (bs, ms, ns, ks) = (
            self.batch as usize,
            self.m as usize,
            self.n as usize,
            self.k as usize,
        );
        let x = &inputs[0].1;
        let w = &inputs[1].1;
        let mut out = vec![(f64::NAN, 0.0); bs * ms * ns];
        let wb = if self.b_broadcast { 0 } else { 1 };
        for b in 0..bs {
            for m in 0..ms {
                for n in 0..ns {
                    let (mut acc, mut magnitude) = (0.0f64, 0.0f64);
                    for k in 0..ks {
                        let a = if self.a_transposed {
                            x[(b * ks + k) * ms + m]
                        } else {
                            x[(b * ms + m) * ks + k]
                        };
                        let c = if self.b_transposed {
                            w[(wb * b * ns + n) * ks + k]
                        } else {
                            w[(wb * b * ks + k) * ns + n]
                        };
                        let c = if self.epilogue == Epilogue::ScaledMean {
                            0.5 * c
                        } else {
                            c
                        };
                        acc += a * c;
                        magnitude += (a * c).abs();
                    }
                    // f32 accumulation with fused multiply-adds: each of the K
                    // roundings is at most 2^-24 of a partial sum bounded by
                    // the sum of magnitudes.
                    let mut error = (ks as f64 + 2.0) * f64::from(f32::EPSILON) / 2.0 * magnitude;
                    let value = match self.epilogue {
                        Epilogue::None => acc,
                        Epilogue::ScaledMean => {
                            error /= ks as f64;
                            acc / ks as f64
                        }
                        Epilogue::BiasGelu => {
                            let y = acc + inputs[2].1[n];
                            error = 1.2 * (error + f64::from(f32::EPSILON) * y.abs());
                            gelu(y)
                        }
                        Epilogue::Residual => {
                            let y = acc + inputs[2].1[n] + inputs[3].1[(b * ms + m) * ns + n];
                            error += 2.0 * f64::from(f32::EPSILON) * y.abs();
                            y
                        }
                    };
                    let tolerance = error + f64::from(self.output.tolerance()) * value.abs() + 1e-6;
                    let at = if self.out_transposed {
                        (b * ns + n) * ms + m
                    } else {
                        (b * ms + m) * ns + n
                    };
                    out[at] = (value, tolerance);
                }
            }
        }
        out
    }
}

fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
}

/// A tensor's buffer and the exact values it holds.
fn buffer(dtype: DType, values: &[f32]) -> (Vec<u8>, Vec<f64>) {
    let bytes = encode(dtype, values);
    let exact = decode(dtype, &bytes);
    (bytes, exact)
}

fn decode(dtype: DType, bytes: &[u8]) -> Vec<f64> {
    ktune_vgpu::verify::decode(dtype, bytes)
        .into_iter()
        .map(f64::from)
        .collect()
}

/// Block tiles every case runs with, `(block_m, block_n, block_k, thread_m,
/// thread_n)`, besides the heuristic's choice; each with the widest vector
/// loads the case allows and with scalar loads.
const TILES: [(u32, u32, u32, u32, u32); 7] = [
    (32, 32, 8, 2, 2),
    (64, 64, 16, 4, 4),
    (16, 64, 16, 2, 4),
    (128, 128, 8, 8, 8),
    (1, 32, 4, 1, 1),
    (64, 2, 8, 2, 1),
    (8, 8, 64, 1, 1),
];

fn schedules(kernel: &Kernel, target: SmVersion) -> Vec<Schedule> {
    let plan = matmul::detect(kernel).expect("a contraction");
    let mut out = vec![matmul::heuristic(kernel, &plan, target)];
    // A tile far larger than the problem tests nothing new and costs the
    // interpreter dearly.
    let area =
        plan.m_extent(kernel).next_power_of_two() * plan.n_extent(kernel).next_power_of_two();
    for (block_m, block_n, block_k, thread_m, thread_n) in TILES {
        if block_m * block_n > 64 * area {
            continue;
        }
        let scalar = matmul::Tiles {
            block_m,
            block_n,
            block_k,
            thread_m,
            thread_n,
            vector_a: 1,
            vector_b: 1,
            group_m: 1,
            stages: 1,
            split_k: 1,
        };
        if let Err(e) = lower(kernel, &scalar.to_schedule(), target) {
            panic!("scalar tiles {scalar:?} rejected: {e}");
        }
        let widest = |base: matmul::Tiles, set: fn(matmul::Tiles, u32) -> matmul::Tiles| {
            [8, 4, 2]
                .into_iter()
                .map(|v| set(base, v))
                .find(|t| lower(kernel, &t.to_schedule(), target).is_ok())
                .unwrap_or(base)
        };
        let wide = widest(scalar, |t, v| matmul::Tiles { vector_a: v, ..t });
        let wide = widest(wide, |t, v| matmul::Tiles { vector_b: v, ..t });
        out.push(scalar.to_schedule());
        if wide != scalar {
            out.push(wide.to_schedule());
        }
    }
    out
}

fn run_case(case: Case) {
    let kernel = case.kernel();
    let inputs = case.inputs(u64::from(case.m * 31 + case.n * 7 + case.k));
    let expected = case.reference(&inputs);
    let target = SmVersion::Sm80;
    for schedule in schedules(&kernel, target) {
        let lowered = lower(&kernel, &schedule, target).unwrap_or_else(|e| panic!("{case:?}: {e}"));
        check(&case, &schedule, &lowered, &inputs, &expected);
    }
}

/// Runs a lowered kernel on the virtual GPU and compares every output
/// element (all of which must have been written) with the reference.
fn check(
    case: &Case,
    schedule: &Schedule,
    Lowered { ptx, launch }: &Lowered,
    inputs: &[(Vec<u8>, Vec<f64>)],
    expected: &[(f64, f64)],
) {
    let buffers: Vec<&[u8]> = inputs.iter().map(|(b, _)| b.as_slice()).collect();
    let poisoned = ktune_vgpu::poisoned(case.output, expected.len());
    let (bytes, _) = ktune_vgpu::run_bytes(ptx, launch, &buffers, poisoned)
        .unwrap_or_else(|fault| panic!("{case:?} with {}: {fault}", schedule.to_json()));
    if let Some(i) = ktune_vgpu::first_poisoned(case.output, &bytes) {
        panic!(
            "{case:?} with {}: element {i} never written",
            schedule.to_json()
        );
    }
    let got = decode(case.output, &bytes);
    for (i, (g, (want, tolerance))) in got.iter().zip(expected).enumerate() {
        assert!(
            (g - want).abs() <= *tolerance,
            "{case:?} with {}: element {i} is {g}, expected {want} ± {tolerance}",
            schedule.to_json()
        );
    }
}

/// `(batch, m, n, k)`: tiny ones, then ones that fill and overhang tiles.
const SMALL: [(u32, u32, u32, u32); 3] = [(1, 1, 1, 1), (1, 13, 17, 19), (3, 5, 7, 9)];
const LARGER: [(u32, u32, u32, u32); 3] = [(1, 1, 7, 1025), (1, 33, 65, 31), (1, 64, 64, 24)];

fn plain(shapes: &[(u32, u32, u32, u32)]) {
    for &(b, m, n, k) in shapes {
        run_case(Case::new(b, m, n, k));
    }
}

fn transposed(shapes: &[(u32, u32, u32, u32)]) {
    for &(b, m, n, k) in shapes {
        run_case(Case {
            out_transposed: true,
            b_broadcast: b > 1,
            ..Case::new(b, m, n, k)
        });
        run_case(Case {
            b_transposed: true,
            ..Case::new(b, m, n, k)
        });
        run_case(Case {
            a_transposed: true,
            ..Case::new(b, m, n, k)
        });
    }
}

fn sixteen_bit(shapes: &[(u32, u32, u32, u32)]) {
    for &(b, m, n, k) in shapes {
        for (input, output) in [
            (DType::Bf16, DType::Bf16),
            (DType::F16, DType::F32),
            (DType::F16, DType::F16),
        ] {
            run_case(Case {
                input,
                output,
                b_transposed: input == DType::F16,
                ..Case::new(b, m, n, k)
            });
        }
    }
}

fn epilogues(shapes: &[(u32, u32, u32, u32)]) {
    for &(b, m, n, k) in shapes {
        for epilogue in [Epilogue::BiasGelu, Epilogue::Residual, Epilogue::ScaledMean] {
            let dtype = if epilogue == Epilogue::BiasGelu {
                DType::Bf16
            } else {
                DType::F32
            };
            run_case(Case {
                epilogue,
                input: dtype,
                output: dtype,
                ..Case::new(b, m, n, k)
            });
        }
    }
}

#[test]
fn plain_products_small() {
    plain(&SMALL);
}

#[test]
fn plain_products_larger() {
    plain(&LARGER);
}

#[test]
fn transposed_operands_small() {
    transposed(&SMALL);
}

#[test]
fn transposed_operands_larger() {
    transposed(&LARGER);
}

#[test]
fn sixteen_bit_types_small() {
    sixteen_bit(&SMALL);
}

#[test]
fn sixteen_bit_types_larger() {
    sixteen_bit(&LARGER);
}

#[test]
fn epilogues_and_prologues_small() {
    epilogues(&SMALL);
}

#[test]
fn epilogues_and_prologues_larger() {
    epilogues(&LARGER);
}

#[test]
fn aligned_shapes_use_wide_loads() {
    // Every operand allows 16-byte loads, in both dtypes.
    for input in [DType::F32, DType::Bf16] {
        for b_transposed in [false, true] {
            run_case(Case {
                input,
                b_transposed,
                ..Case::new(2, 32, 64, 16)
            });
        }
    }
}

#[test]
fn random_schedule_points_are_rejected_or_correct() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    let mut rng = StdRng::seed_from_u64(7);
    let target = SmVersion::Sm80;
    let cases = [
        Case::new(1, 20, 36, 44),
        Case {
            input: DType::Bf16,
            b_transposed: true,
            ..Case::new(2, 9, 24, 40)
        },
    ];
    for case in cases {
        let kernel = case.kernel();
        let inputs = case.inputs(11);
        let expected = case.reference(&inputs);
        let (mut accepted, mut rejected) = (0, 0);
        while accepted < 24 {
            let mut pow2 = |max: u32| 1u32 << rng.random_range(0..=max.trailing_zeros());
            let tiles = matmul::Tiles {
                block_m: pow2(64),
                block_n: pow2(64),
                block_k: pow2(64),
                thread_m: pow2(8),
                thread_n: pow2(8),
                vector_a: pow2(8),
                vector_b: pow2(8),
                group_m: pow2(8),
                stages: 1,
                split_k: 1,
            };
            let tiles = matmul::Tiles {
                stages: rng.random_range(1..=4),
                ..tiles
            };
            let tiles = matmul::Tiles {
                split_k: rng.random_range(1..=4),
                ..tiles
            };
            let schedule = tiles.to_schedule();
            let Ok(lowered) = lower(&kernel, &schedule, target) else {
                rejected += 1;
                continue;
            };
            accepted += 1;
            check(&case, &schedule, &lowered, &inputs, &expected);
        }
        assert!(rejected > 0, "the sample should include invalid points");
    }
}

#[test]
fn copies_read_only_what_lies_inside_the_operands() {
    // M = 1, as in a decode step: the tile's other rows of A, and its
    // columns of B past N, are zero-filled rather than read from the
    // clamped last row or column, so every block reads exactly the part of
    // each operand its tile covers, once. K overhangs the last tile too.
    let cases = [
        (
            DType::Bf16,
            r#"{"class":"mma","block_m":16,"block_n":16,"block_k":32,"warp_m":16,"warp_n":16,"stages":3}"#,
            (16, 16),
        ),
        (
            DType::F32,
            r#"{"class":"matmul","block_m":4,"block_n":32,"block_k":16,"thread_m":1,"thread_n":4,"vector_a":4,"vector_b":4,"stages":2}"#,
            (4, 32),
        ),
    ];
    for (input, json, (block_m, block_n)) in cases {
        let case = Case {
            input,
            ..Case::new(1, 1, 72, 72)
        };
        let schedule = Schedule::from_json(json).expect("a schedule");
        let kernel = case.kernel();
        let lowered =
            lower(&kernel, &schedule, SmVersion::Sm80).unwrap_or_else(|e| panic!("{json}: {e}"));
        let inputs = case.inputs(5);
        check(
            &case,
            &schedule,
            &lowered,
            &inputs,
            &case.reference(&inputs),
        );
        let buffers: Vec<&[u8]> = inputs.iter().map(|(b, _)| b.as_slice()).collect();
        let output = ktune_vgpu::poisoned(case.output, 72);
        let (_, stats) = ktune_vgpu::run_bytes(&lowered.ptx, &lowered.launch, &buffers, output)
            .unwrap_or_else(|fault| panic!("{json}: {fault}"));
        let (m, n, k) = (u64::from(case.m), u64::from(case.n), u64::from(case.k));
        let element = u64::from(input.size());
        let expected = (n.div_ceil(block_n) * m * k + m.div_ceil(block_m) * k * n) * element;
        assert_eq!(stats.global_load_bytes, expected, "{json}");
    }
}
