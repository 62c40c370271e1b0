//! The elementwise and rows lowerings on the virtual GPU: every point of a
//! small grid of knobs (each either rejected as invalid, with a reason, or
//! run; rows in one pass, from registers or shared memory, or several,
//! with either cross-warp tree, a softmax's maximum and sum in one of
//! them or two), odd
//! shapes (rows of 1, 7, 1025 elements; row counts no block size divides),
//! f32/f16/bf16, random inputs and poisoned outputs, against a direct f32
//! interpretation of the IR ([`ktune_core::interp::evaluate`]).

use ktune_core::DType;
use ktune_core::interp::{evaluate, round};
use ktune_core::ir::Kernel;
use ktune_core::lower::{LowerError, lower};
use ktune_core::schedule::Schedule;
use ktune_core::syntax::parse_kernel;
use ktune_core::target::SmVersion;
use ktune_vgpu::verify::{decode, encode};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn kernel(shape: &str, item: &str) -> Kernel {
    parse_kernel(
        shape.parse().expect("attribute tokens"),
        item.parse().expect("item tokens"),
    )
    .unwrap_or_else(|e| panic!("test kernel rejected: {e}\n{item}"))
}

// ---------------------------------------------------------------------------
// Buffers.

/// Random inputs: each input's values (as stored, after rounding to its
/// dtype) and its buffer. Values lie in `[lo, hi)`; never all zeros.
fn random_inputs(k: &Kernel, seed: u64, lo: f32, hi: f32) -> (Vec<Vec<f32>>, Vec<Vec<u8>>) {
    let mut rng = StdRng::seed_from_u64(seed);
    k.inputs
        .iter()
        .map(|t| {
            let values: Vec<f32> = (0..k.len_of(t))
                .map(|_| round(t.dtype, rng.random_range(lo..hi)))
                .collect();
            let bytes = encode(t.dtype, &values);
            (values, bytes)
        })
        .unzip()
}

// ---------------------------------------------------------------------------
// Schedules.

fn rows_grid() -> Vec<Schedule> {
    let groups = [
        (1, 32),
        (1, 64),
        (2, 16),
        (8, 4),
        (8, 12),
        (16, 2),
        (32, 1),
        (32, 3),
        (64, 1),
        (64, 2),
        (128, 3),
        (256, 1),
        (1024, 1),
    ];
    let mut out = Vec::new();
    for (threads_per_row, rows_per_block) in groups {
        // A shared-memory tree only where a row spans several warps.
        let trees: &[u32] = if threads_per_row > 32 { &[0, 1] } else { &[0] };
        for vector in [1, 2, 4] {
            for cache in [0, 1, 2] {
                for &tree in trees {
                    for online in [0, 1] {
                        out.push(Schedule::Rows {
                            threads_per_row,
                            rows_per_block,
                            vector,
                            cache,
                            tree,
                            online,
                            cluster: 1,
                        });
                    }
                }
            }
        }
    }
    out
}

fn elementwise_grid() -> Vec<Schedule> {
    let mut out = Vec::new();
    for block in [32, 64, 256] {
        for per_thread in [1, 2, 3, 16] {
            for vector in [1, 2, 4] {
                out.push(Schedule::Elementwise {
                    block,
                    per_thread,
                    vector,
                });
            }
        }
    }
    out
}

/// Rows points spread over thread-block clusters of 2, 4 and 8 blocks
/// (sm_90): rows within a warp, spanning warps and filling a block, read
/// per pass, in one pass, from registers or from shared memory.
fn cluster_grid() -> Vec<Schedule> {
    let mut out = Vec::new();
    for (threads_per_row, rows_per_block) in [(1, 32), (8, 4), (32, 1), (64, 2), (256, 1)] {
        let trees: &[u32] = if threads_per_row > 32 { &[0, 1] } else { &[0] };
        for vector in [1, 4] {
            for cache in [0, 1, 2] {
                for &tree in trees {
                    for online in [0, 1] {
                        for cluster in [2, 4, 8] {
                            out.push(Schedule::Rows {
                                threads_per_row,
                                rows_per_block,
                                vector,
                                cache,
                                tree,
                                online,
                                cluster,
                            });
                        }
                    }
                }
            }
        }
    }
    out
}

/// Runs `k` under every valid point of `grid` (and the heuristic's choice
/// for each target) on the virtual GPU and compares with the interpreter.
/// Returns how many points ran.
fn check(k: &Kernel, grid: &[Schedule], seed: u64, range: (f32, f32)) -> usize {
    check_at(k, grid, SmVersion::Sm80, seed, range)
}

/// [`check`], with `grid`'s points lowered for `target`.
fn check_at(
    k: &Kernel,
    grid: &[Schedule],
    target: SmVersion,
    seed: u64,
    range: (f32, f32),
) -> usize {
    let (values, buffers) = random_inputs(k, seed, range.0, range.1);
    let want = evaluate(k, &values);
    let dtype = k.output.dtype;
    let scale = want
        .iter()
        .fold(0.0f32, |m, x| m.max(x.abs()))
        .max(f32::MIN_POSITIVE);
    let (rtol, atol) = match dtype {
        DType::F32 => (1e-5, 1e-6 * scale),
        DType::F16 | DType::Bf16 => (1e-2, 1e-3 * scale),
    };
    let inputs: Vec<&[u8]> = buffers.iter().map(Vec::as_slice).collect();

    let mut points: Vec<(Schedule, SmVersion)> = SmVersion::ALL
        .iter()
        .map(|t| (ktune_core::lower::heuristic(k, *t), *t))
        .collect();
    points.extend(grid.iter().map(|s| (s.clone(), target)));
    points.dedup_by(|a, b| a.0 == b.0);
    let mut ran = 0;
    for (schedule, target) in points {
        let lowered = match lower(k, &schedule, target) {
            Ok(l) => l,
            Err(LowerError::Invalid { reason, .. }) => {
                assert!(!reason.is_empty());
                continue;
            }
            Err(e) => panic!("{}: {}: {e}", k.name, schedule.to_json()),
        };
        let context = || format!("{} with {} on {target}", k.name, schedule.to_json());
        let output = ktune_vgpu::poisoned(dtype, want.len());
        let (bytes, _) = ktune_vgpu::run_bytes(&lowered.ptx, &lowered.launch, &inputs, output)
            .unwrap_or_else(|fault| panic!("{}: {fault}", context()));
        if let Some(i) = ktune_vgpu::first_poisoned(dtype, &bytes) {
            panic!("{}: element {i} never written", context());
        }
        let got = decode(dtype, &bytes);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let tolerance = rtol * w.abs() + atol;
            assert!(
                (g - w).abs() <= tolerance || (g.is_nan() && w.is_nan()),
                "{}: element {i} is {g}, expected {w} ± {tolerance}",
                context()
            );
        }
        ran += 1;
    }
    ran
}

// ---------------------------------------------------------------------------
// Rows.

const ROW_SHAPES: [(u32, u32); 6] = [(1, 1), (3, 7), (5, 1025), (9, 64), (2, 1000), (37, 4)];

fn softmax(dt: &str, r: u32, c: u32) -> Kernel {
    kernel(
        &format!("shape(R = {r}, C = {c})"),
        &format!(
            "fn softmax(x: Tensor<{dt}, (R, C)>) -> Tensor<{dt}, (R, C)> {{
                compute(|r, c| {{
                    let mx = max(C, |j| x[r][j]);
                    let s = sum(C, |j| exp(x[r][j] - mx));
                    exp(x[r][c] - mx) / s
                }})
            }}"
        ),
    )
}

#[test]
fn softmax_every_dtype() {
    let grid = rows_grid();
    let mut ran = 0;
    for dt in ["f32", "f16", "bf16"] {
        for (r, c) in ROW_SHAPES {
            ran += check(
                &softmax(dt, r, c),
                &grid,
                u64::from(r * 1000 + c),
                (-3.0, 3.0),
            );
        }
    }
    assert!(ran > 100, "only {ran} points ran");
}

/// Rows spread over a cluster's blocks: each block's partial results
/// combined through the others' shared memory, the row kept by each block
/// in its share, rows shorter than the cluster's threads (blocks with
/// nothing to read) included.
#[test]
fn rows_spread_over_clusters() {
    let grid = cluster_grid();
    let mut ran = 0;
    for (r, c) in [(3, 7), (5, 1025), (2, 1000), (37, 4)] {
        ran += check_at(
            &softmax("f32", r, c),
            &grid,
            SmVersion::Sm90,
            u64::from(r * 1000 + c),
            (-3.0, 3.0),
        );
    }
    for dt in ["f16", "bf16"] {
        ran += check_at(
            &softmax(dt, 9, 64),
            &grid,
            SmVersion::Sm90,
            9064,
            (-3.0, 3.0),
        );
    }
    ran += check_at(
        &layernorm("f32", 5, 1025),
        &grid,
        SmVersion::Sm90,
        51025,
        (-2.0, 2.0),
    );
    assert!(ran > 400, "only {ran} points ran");
    // Without clusters on the target, every point is rejected.
    for s in &grid {
        let reason = match lower(&softmax("f32", 3, 7), s, SmVersion::Sm80) {
            Err(LowerError::Invalid { reason, .. }) => reason,
            other => panic!("{}: {other:?}", s.to_json()),
        };
        assert!(reason.contains("no thread-block clusters"), "{reason}");
    }
}

/// Softmax of scores of which about half are −∞ (`log` of 0), as masked
/// attention scores are: in one pass (`online = 1`), a thread whose first
/// chunks are all −∞ must keep a sum of 0, not NaN.
#[test]
fn softmax_of_masked_scores() {
    let grid = rows_grid();
    let mut ran = 0;
    for (r, c) in [(9u32, 64u32), (2, 1000), (5, 1025)] {
        let k = kernel(
            &format!("shape(R = {r}, C = {c})"),
            "fn masked(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
                compute(|r, c| {
                    let mx = max(C, |j| log(relu(x[r][j])));
                    let s = sum(C, |j| exp(log(relu(x[r][j])) - mx));
                    exp(log(relu(x[r][c])) - mx) / s
                })
            }",
        );
        ran += check(&k, &grid, u64::from(r * 1000 + c), (-1.0, 1.0));
    }
    assert!(ran > 100, "only {ran} points ran");
}

/// Rows that `vector` does not divide are peeled (`rows::peel`): their
/// chunks start at each row's first aligned position, so rows of 1025 and
/// 259 start at each alignment in turn, and rows of 9 have one chunk of 4
/// and up to 5 leftovers (two chunks and one leftover when aligned).
/// Every point of the grid is valid and runs, with 16-bit rows too; a
/// misaligned vector access would fault.
#[test]
fn peeled_rows() {
    let mut grid = Vec::new();
    for (threads_per_row, rows_per_block) in
        [(1, 32), (2, 16), (8, 4), (32, 3), (128, 1), (1024, 1)]
    {
        for vector in [2, 4] {
            for online in [0, 1] {
                grid.push(Schedule::Rows {
                    threads_per_row,
                    rows_per_block,
                    vector,
                    cache: 0,
                    tree: u32::from(threads_per_row > 32),
                    online,
                    cluster: 1,
                });
            }
        }
    }
    let mut ran = 0;
    for (r, c) in [(5u32, 1025u32), (7, 259), (6, 9)] {
        let shape = format!("shape(R = {r}, C = {c})");
        let kernels = [
            softmax("f32", r, c),
            softmax("bf16", r, c),
            kernel(
                &shape,
                "fn layernorm(x: Tensor<f32, (R, C)>, g: Tensor<f32, (C,)>, b: Tensor<f32, (C,)>)
                    -> Tensor<f32, (R, C)>
                {
                    compute(|r, c| {
                        let mu = mean(C, |j| x[r][j]);
                        let var = mean(C, |j| (x[r][j] - mu) * (x[r][j] - mu));
                        (x[r][c] - mu) * rsqrt(var + 0.00001) * g[c] + b[c]
                    })
                }",
            ),
            kernel(
                &shape,
                "fn row_stats(x: Tensor<f16, (R, C)>) -> Tensor<f32, (R,)> {
                    compute(|r| sum(C, |j| x[r][j]) * min(C, |j| x[r][j]))
                }",
            ),
        ];
        for k in &kernels {
            // `row_stats` has no pair of reductions for `online = 1`.
            let points: Vec<Schedule> = grid
                .iter()
                .filter(|p| k.name != "row_stats" || matches!(p, Schedule::Rows { online: 0, .. }))
                .cloned()
                .collect();
            for point in &points {
                assert!(
                    lower(k, point, SmVersion::Sm80).is_ok(),
                    "{} ({r}×{c}): {}",
                    k.name,
                    point.to_json()
                );
            }
            ran += check(k, &points, u64::from(r * 31 + c), (-2.0, 2.0));
        }
    }
    // Three shapes: three kernels with the whole grid, one with half.
    assert!(
        ran >= 3 * (3 * grid.len() + grid.len() / 2),
        "only {ran} points ran"
    );
}

/// Layernorm with weights and a bias over rows of `c` values of `dt`.
fn layernorm(dt: &str, r: u32, c: u32) -> Kernel {
    kernel(
        &format!("shape(R = {r}, C = {c})"),
        &format!(
            "fn layernorm(x: Tensor<{dt}, (R, C)>, g: Tensor<{dt}, (C,)>, b: Tensor<f32, (C,)>)
                -> Tensor<{dt}, (R, C)>
            {{
                compute(|r, c| {{
                    let mu = mean(C, |j| x[r][j]);
                    let var = mean(C, |j| (x[r][j] - mu) * (x[r][j] - mu));
                    let centered = x[r][c] - mu;
                    centered * rsqrt(var + 0.00001) * g[c] + b[c]
                }})
            }}"
        ),
    )
}

#[test]
fn layernorm_with_affine() {
    let grid = rows_grid();
    for dt in ["f32", "bf16"] {
        for (r, c) in ROW_SHAPES {
            check(&layernorm(dt, r, c), &grid, u64::from(r + c), (-2.0, 2.0));
        }
    }
}

#[test]
fn row_statistics_and_nested_reductions() {
    let grid = rows_grid();
    for (r, c) in ROW_SHAPES {
        let k = kernel(
            &format!("shape(R = {r}, C = {c})"),
            "fn row_stats(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R,)> {
                compute(|r| sum(C, |j| x[r][j]) + max(C, |j| x[r][j]) * min(C, |j| x[r][j])
                    - mean(C, |j| x[r][j] - max(C, |k| x[r][k])))
            }",
        );
        check(&k, &grid, u64::from(r * 7 + c), (-2.0, 2.0));
        // A per-element let holding a reduction, and a reduction in the root.
        let k = kernel(
            &format!("shape(R = {r}, C = {c})"),
            "fn shifted(x: Tensor<f32, (R, C)>, w: Tensor<f32, (C,)>) -> Tensor<f32, (R, C)> {
                compute(|r, c| {
                    let y = x[r][c] - max(C, |j| x[r][j]);
                    exp(y) * w[c] / sum(C, |j| exp(x[r][j] - max(C, |k| x[r][k])) * w[j])
                })
            }",
        );
        check(&k, &grid, u64::from(r * 13 + c), (0.5, 2.0));
    }
}

#[test]
fn column_sums_global_reductions_and_transposed_rows() {
    let grid = rows_grid();
    for (r, c) in [(1u32, 1u32), (7, 3), (1025, 5), (4, 130)] {
        let k = kernel(
            &format!("shape(R = {r}, C = {c})"),
            "fn col_sum(x: Tensor<bf16, (R, C)>) -> Tensor<f32, (C,)> {
                compute(|c| sum(R, |i| x[i][c]))
            }",
        );
        check(&k, &grid, u64::from(r + c), (-2.0, 2.0));
    }
    for n in [1u32, 7, 1000, 1025] {
        let k = kernel(
            &format!("shape(N = {n})"),
            "fn normalize(x: Tensor<f16, N>) -> Tensor<f16, N> {
                compute(|i| x[i] / sum(N, |j| x[j]))
            }",
        );
        check(&k, &grid, u64::from(n), (0.5, 2.0));
    }
    for (b, r, c) in [(3u32, 5u32, 64u32), (2, 1, 7), (1, 3, 1)] {
        let k = kernel(
            &format!("shape(B = {b}, R = {r}, C = {c})"),
            "fn rms_transposed(x: Tensor<f32, (B, R, C)>, w: Tensor<f32, (C,)>) -> Tensor<f32, (C, B, R)> {
                compute(|c, b, r| {
                    let ms = mean(C, |j| x[b][r][j] * x[b][r][j]);
                    x[b][r][c] * rsqrt(ms + 0.000001) * w[c]
                })
            }",
        );
        check(&k, &grid, u64::from(b * r * c), (-2.0, 2.0));
    }
    for (m, kk) in [(33u32, 1025u32), (5, 8)] {
        let k = kernel(
            &format!("shape(M = {m}, K = {kk})"),
            "fn gemv(a: Tensor<f16, (M, K)>, x: Tensor<f16, (K,)>) -> Tensor<f32, (M,)> {
                compute(|m| sum(K, |k| a[m][k] * x[k]))
            }",
        );
        check(&k, &grid, u64::from(m + kk), (-1.0, 1.0));
    }
}

// ---------------------------------------------------------------------------
// Elementwise.

const ELEMENTWISE_SHAPES: [(u32, u32); 5] = [(1, 1), (7, 7), (3, 1000), (5, 1025), (33, 4)];

/// Shapes whose rows 4 does not divide but whose element counts it does:
/// groups of 4 straddle rows (rows of 3 are shorter than a group).
const STRADDLING_SHAPES: [(u32, u32); 4] = [(4, 1025), (4, 7), (8, 3), (12, 259)];

/// Groups that straddle rows (`elementwise`'s flat groups): every point
/// of the grid is valid and runs, each element at its own indices, with a
/// same-shaped input read a group at a time beside a broadcast bias, a
/// per-row scale, a transposed input and the indices themselves.
#[test]
fn groups_straddling_rows() {
    let grid = elementwise_grid();
    let mut ran = 0;
    for dt in ["f32", "bf16"] {
        for (r, c) in STRADDLING_SHAPES {
            let k = kernel(
                &format!("shape(R = {r}, C = {c})"),
                &format!(
                    "fn straddle(x: Tensor<{dt}, (R, C)>, b: Tensor<{dt}, (C,)>, s: Tensor<f32, (R,)>,
                        t: Tensor<f32, (C, R)>) -> Tensor<{dt}, (R, C)>
                    {{
                        compute(|r, c| (gelu(x[r][c] + b[c]) * s[r] - t[c][r] + (c as f32) * 0.01
                            - (r as f32)) as {dt})
                    }}"
                ),
            );
            for point in &grid {
                assert!(
                    lower(&k, point, SmVersion::Sm80).is_ok(),
                    "{r}×{c}: {}",
                    point.to_json()
                );
            }
            ran += check(&k, &grid, u64::from(r * 7 + c), (-2.0, 2.0));
        }
    }
    assert!(
        ran >= 2 * STRADDLING_SHAPES.len() * grid.len(),
        "only {ran} points ran"
    );
}

#[test]
fn every_unary_function() {
    let grid = elementwise_grid();
    let functions = [
        ("exp", (-3.0, 3.0)),
        ("log", (0.01, 4.0)),
        ("sqrt", (0.01, 4.0)),
        ("rsqrt", (0.01, 4.0)),
        ("tanh", (-3.0, 3.0)),
        ("abs", (-3.0, 3.0)),
        ("relu", (-3.0, 3.0)),
        ("sigmoid", (-5.0, 5.0)),
        ("silu", (-5.0, 5.0)),
        ("gelu", (-5.0, 5.0)),
        ("gelu_erf", (-5.0, 5.0)),
        ("erf", (-3.0, 3.0)),
    ];
    for (f, range) in functions {
        let k = kernel(
            "shape(R = 5, C = 1000)",
            &format!(
                "fn unary_{f}(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {{
                    compute(|r, c| -{f}(x[r][c]))
                }}"
            ),
        );
        check(&k, &grid[..6], 7, range);
    }
}

#[test]
fn broadcasts_selects_and_casts() {
    let grid = elementwise_grid();
    for dt in ["f32", "f16", "bf16"] {
        for (r, c) in ELEMENTWISE_SHAPES {
            let k = kernel(
                &format!("shape(R = {r}, C = {c})"),
                &format!(
                    "fn bias_act(x: Tensor<{dt}, (R, C)>, b: Tensor<{dt}, (C,)>, s: Tensor<f32, (R,)>)
                        -> Tensor<{dt}, (R, C)>
                    {{
                        compute(|r, c| {{
                            let y = x[r][c] + b[c];
                            let z = select(y > 0.0 && !(y > 1.5), y, gelu_erf(y) * s[r]);
                            (silu(z) + tanh(y) * exp(-abs(y)) + sqrt(abs(y)) + min(y, 1.0)
                                - max(y, -1.0) + sigmoid(y) * relu(y)) as {dt}
                        }})
                    }}"
                ),
            );
            check(&k, &grid, u64::from(r * 3 + c), (-2.0, 2.0));
        }
    }
}

#[test]
fn transposed_and_indexed_inputs() {
    let grid = elementwise_grid();
    for (r, c) in ELEMENTWISE_SHAPES {
        let k = kernel(
            &format!("shape(R = {r}, C = {c})"),
            "fn transpose_add(x: Tensor<f32, (C, R)>, y: Tensor<f32, (R, C)>, d: Tensor<f32, (C, C)>)
                -> Tensor<f32, (R, C)>
            {
                compute(|r, c| x[c][r] + y[r][c] * (c as f32) - (r as f32) + d[c][c])
            }",
        );
        check(&k, &grid, u64::from(r + c), (-2.0, 2.0));
    }
    for (a, b, c) in [(2u32, 3u32, 8u32), (3, 5, 7), (2, 3, 6), (1, 1, 1)] {
        let k = kernel(
            &format!("shape(A = {a}, B = {b}, C = {c})"),
            "fn broadcast3(x: Tensor<f16, (A, B, C)>, y: Tensor<f32, (B, C)>, z: Tensor<f32, (A,)>)
                -> Tensor<f32, (A, B, C)>
            {
                compute(|a, b, c| x[a][b][c] * y[b][c] + z[a])
            }",
        );
        check(&k, &grid, u64::from(a * b * c), (-2.0, 2.0));
    }
}
