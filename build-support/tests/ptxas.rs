//! Every op class, unary function, dtype and a spread of odd shapes and
//! schedule points, lowered, printed and assembled by ptxas for sm_80 and
//! sm_90: each must assemble without register spills.
//!
//! Needs ptxas: `cargo xtask test` installs it (or set `KTUNE_PTXAS`). The
//! test fails, never passes silently, when it is missing.

use std::fmt::Write;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use ktune_build::ptxas;
use ktune_core::SmVersion;
use ktune_core::ir::Kernel;
use ktune_core::lower::{self, LowerError};
use ktune_core::ptx;
use ktune_core::schedule::{MmaTiles, Schedule, Tiles};
use ktune_core::syntax::parse_kernel;
use proc_macro2::{Ident, Span, TokenStream};
use quote::quote;

const TARGETS: [SmVersion; 2] = [SmVersion::Sm80, SmVersion::Sm90];

fn kernel(attr: TokenStream, item: TokenStream) -> Kernel {
    parse_kernel(attr, item).unwrap_or_else(|e| panic!("test kernel rejected: {e}"))
}

fn dtype(name: &str) -> Ident {
    Ident::new(name, Span::call_site())
}

fn shape2(r: u32, c: u32) -> TokenStream {
    quote!(shape(R = #r, C = #c))
}

/// Softmax over rows of `c` elements of type `t`.
fn softmax(name: &str, t: &Ident, r: u32, c: u32) -> Kernel {
    let name = Ident::new(name, Span::call_site());
    kernel(
        shape2(r, c),
        quote! {
            fn #name(x: Tensor<#t, (R, C)>) -> Tensor<#t, (R, C)> {
                compute(|r, c| {
                    let mx = max(C, |j| x[r][j]);
                    let s = sum(C, |j| exp(x[r][j] - mx));
                    exp(x[r][c] - mx) / s
                })
            }
        },
    )
}

/// Layernorm over rows of `c` elements of type `t`, with a weight and a
/// bias.
fn layernorm(name: &str, t: &Ident, r: u32, c: u32) -> Kernel {
    let name = Ident::new(name, Span::call_site());
    kernel(
        shape2(r, c),
        quote! {
            fn #name(x: Tensor<#t, (R, C)>, g: Tensor<#t, (C,)>, b: Tensor<#t, (C,)>)
                -> Tensor<#t, (R, C)>
            {
                compute(|r, c| {
                    let mu = mean(C, |j| x[r][j]);
                    let var = mean(C, |j| (x[r][j] - mu) * (x[r][j] - mu));
                    (x[r][c] - mu) * rsqrt(var + 0.00001) * g[c] + b[c]
                })
            }
        },
    )
}

/// The kernels of the suite: (kernel, schedules to try besides the heuristic).
fn suite() -> Vec<(Kernel, Vec<Schedule>)> {
    let mut out = Vec::new();

    let unary = [
        "exp", "log", "sqrt", "rsqrt", "tanh", "abs", "relu", "sigmoid", "silu", "gelu",
        "gelu_erf", "erf",
    ];
    for f in unary {
        let name = Ident::new(&format!("unary_{f}"), Span::call_site());
        let func = Ident::new(f, Span::call_site());
        let k = kernel(
            shape2(7, 1025),
            quote! {
                fn #name(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
                    compute(|r, c| -#func(x[r][c]))
                }
            },
        );
        out.push((
            k,
            vec![Schedule::Elementwise {
                block: 128,
                per_thread: 3,
                vector: 1,
            }],
        ));
    }

    for dt in ["f32", "f16", "bf16"] {
        let t = dtype(dt);
        let shapes: &[(u32, u32)] = match dt {
            // 4 × 1025: elementwise groups of 4 straddle rows.
            "f32" => &[(1, 1), (7, 7), (3, 1000), (5, 1025), (4, 1025), (64, 4096)],
            _ => &[(7, 7), (5, 1025), (64, 4096)],
        };
        for &(r, c) in shapes {
            let name = Ident::new(&format!("bias_act_{dt}_{r}x{c}"), Span::call_site());
            out.push((
                kernel(
                    shape2(r, c),
                    quote! {
                        fn #name(x: Tensor<#t, (R, C)>, b: Tensor<#t, (C,)>, s: Tensor<f32, (R,)>)
                            -> Tensor<#t, (R, C)>
                        {
                            compute(|r, c| {
                                let y = x[r][c] + b[c];
                                let z = select(y > 0.0 && !(y > 6.0), y, gelu_erf(y) * s[r]);
                                (silu(z) + tanh(y) * exp(-abs(y)) + sqrt(abs(y)) + rsqrt(abs(y) + 1.0)
                                    + log(abs(y) + 1.0) + sigmoid(y) + relu(y) + erf(y) + gelu(y)
                                    + min(y, 1.0) - max(y, -1.0)) as #t
                            })
                        }
                    },
                ),
                elementwise_points(&[1, 2, 4]),
            ));
            out.push((
                softmax(&format!("softmax_{dt}_{r}x{c}"), &t, r, c),
                rows_points(),
            ));
            out.push((
                layernorm(&format!("layernorm_{dt}_{r}x{c}"), &t, r, c),
                rows_points(),
            ));
        }
    }

    for (r, c) in [(1, 1), (9, 7), (33, 1000), (4, 50257)] {
        let name = Ident::new(&format!("row_stats_{r}x{c}"), Span::call_site());
        out.push((
            kernel(
                shape2(r, c),
                quote! {
                    fn #name(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R,)> {
                        compute(|r| sum(C, |j| x[r][j]) + max(C, |j| x[r][j]) * min(C, |j| x[r][j])
                            - mean(C, |j| x[r][j] - max(C, |k| x[r][k])))
                    }
                },
            ),
            rows_points(),
        ));
        let name = Ident::new(&format!("col_sum_{r}x{c}"), Span::call_site());
        out.push((
            kernel(
                shape2(r, c),
                quote! {
                    fn #name(x: Tensor<bf16, (R, C)>) -> Tensor<f32, (C,)> {
                        compute(|c| sum(R, |i| x[i][c]))
                    }
                },
            ),
            rows_points(),
        ));
    }
    out.push((
        kernel(
            quote!(shape(N = 1000)),
            quote! {
                fn normalize(x: Tensor<f16, N>) -> Tensor<f16, N> {
                    compute(|i| x[i] / sum(N, |j| x[j]))
                }
            },
        ),
        rows_points(),
    ));
    out.push((
        kernel(
            quote!(shape(B = 3, R = 5, C = 64)),
            quote! {
                fn rms_transposed(x: Tensor<f32, (B, R, C)>, w: Tensor<f32, (C,)>) -> Tensor<f32, (C, B, R)> {
                    compute(|c, b, r| {
                        let ms = mean(C, |j| x[b][r][j] * x[b][r][j]);
                        x[b][r][c] * rsqrt(ms + 0.000001) * w[c]
                    })
                }
            },
        ),
        rows_points(),
    ));
    out.push((
        kernel(
            quote!(shape(M = 4096, K = 4096)),
            quote! {
                fn gemv(a: Tensor<f16, (M, K)>, x: Tensor<f16, (K,)>) -> Tensor<f32, (M,)> {
                    compute(|m| sum(K, |k| a[m][k] * x[k]))
                }
            },
        ),
        rows_points(),
    ));
    out.push((
        kernel(
            quote!(shape(M = 33, N = 7, K = 65)),
            quote! {
                fn mm(a: Tensor<f32, (M, K)>, b: Tensor<bf16, (K, N)>, bias: Tensor<f32, (N,)>)
                    -> Tensor<bf16, (M, N)>
                {
                    compute(|m, n| gelu(sum(K, |k| a[m][k] * b[k][n]) + bias[n]))
                }
            },
        ),
        vec![
            Schedule::Generic { block: 32 },
            Schedule::Generic { block: 256 },
        ],
    ));
    // tf32 tensor cores: the heuristic's point, and tiles from one warp of
    // 16×16 to 128×128 blocks, both operand layouts.
    let mma = |block: (u32, u32, u32), warp: (u32, u32), stages: u32| {
        Schedule::Mma(MmaTiles {
            block_m: block.0,
            block_n: block.1,
            block_k: block.2,
            warp_m: warp.0,
            warp_n: warp.1,
            stages,
            group_m: 1,
            split_k: 1,
            min_blocks: 0,
            swizzle: 0,
            prefetch: 0,
            wgmma: 0,
            tail_split: 1,
            persistent: 0,
            producer: 0,
            tma: 0,
            cluster_m: 1,
        })
    };
    let tf32_points = vec![
        mma((16, 16, 16), (16, 16), 1),
        mma((64, 64, 32), (32, 32), 3),
        mma((128, 128, 32), (64, 64), 3),
        mma((64, 128, 64), (64, 32), 2),
    ];
    out.push((
        kernel(
            quote!(shape(M = 65, N = 36, K = 68), allow_tf32),
            quote! {
                fn mm_tf32(a: Tensor<f32, (M, K)>, b: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {
                    compute(|m, n| sum(K, |k| a[m][k] * b[k][n]))
                }
            },
        ),
        tf32_points.clone(),
    ));
    out.push((
        kernel(
            quote!(shape(M = 33, N = 7, K = 20), allow_tf32),
            quote! {
                fn mm_bt_bias_tf32(a: Tensor<f32, (M, K)>, b: Tensor<f32, (N, K)>, bias: Tensor<f32, (N,)>)
                    -> Tensor<f32, (M, N)>
                {
                    compute(|m, n| sum(K, |k| a[m][k] * b[n][k]) + bias[n])
                }
            },
        ),
        tf32_points,
    ));
    // Split-K: slices of `K` added up through a workspace by the last block
    // to arrive (fence, u32 atomic, L2-only loads), with a fused epilogue.
    let split = |block_k, stages, split_k| {
        Schedule::Matmul(Tiles {
            block_m: 8,
            block_n: 64,
            block_k,
            thread_m: 1,
            thread_n: 4,
            vector_a: 4,
            vector_b: 4,
            group_m: 1,
            stages,
            split_k,
        })
    };
    out.push((
        kernel(
            quote!(shape(M = 5, N = 256, K = 1000)),
            quote! {
                fn mm_split(a: Tensor<f32, (M, K)>, b: Tensor<f32, (K, N)>, bias: Tensor<f32, (N,)>)
                    -> Tensor<f32, (M, N)>
                {
                    compute(|m, n| gelu(sum(K, |k| a[m][k] * b[k][n]) + bias[n]))
                }
            },
        ),
        vec![split(16, 1, 2), split(32, 1, 16), split(16, 3, 4)],
    ));
    out.push((
        kernel(
            quote!(shape(M = 1, N = 4096, K = 4096)),
            quote! {
                fn decode_bf16(x: Tensor<bf16, (M, K)>, w: Tensor<bf16, (K, N)>) -> Tensor<bf16, (M, N)> {
                    compute(|m, n| sum(K, |k| x[m][k] * w[k][n]))
                }
            },
        ),
        vec![
            Schedule::Matmul(Tiles {
                block_m: 1,
                block_n: 128,
                block_k: 64,
                thread_m: 1,
                thread_n: 1,
                vector_a: 8,
                vector_b: 8,
                group_m: 1,
                stages: 1,
                split_k: 8,
            }),
            Schedule::Mma(MmaTiles {
                block_m: 16,
                block_n: 64,
                block_k: 32,
                warp_m: 16,
                warp_n: 32,
                stages: 3,
                group_m: 1,
                split_k: 8,
                min_blocks: 0,
                swizzle: 0,
                prefetch: 0,
                wgmma: 0,
                tail_split: 1,
                persistent: 0,
                producer: 0,
                tma: 0,
                cluster_m: 1,
            }),
        ],
    ));
    out.push((
        kernel(
            quote!(shape(M = 17, N = 9, K = 3)),
            quote! {
                fn dist(a: Tensor<f32, (M, K)>, b: Tensor<f32, (N, K)>) -> Tensor<f32, (M, N)> {
                    compute(|i, j| sqrt(sum(K, |k| (a[i][k] - b[j][k]) * (a[i][k] - b[j][k]))))
                }
            },
        ),
        vec![Schedule::Generic { block: 64 }],
    ));
    out.push((
        kernel(
            quote!(shape(R = 7, C = 12)),
            quote! {
                fn transpose_add(x: Tensor<f32, (C, R)>, y: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
                    compute(|r, c| x[c][r] + y[r][c] * (c as f32) - (r as f32))
                }
            },
        ),
        elementwise_points(&[1, 2, 4]),
    ));
    out
}

/// Elementwise points: every block size class, per-thread count and the
/// given vector widths, without taking the full product (ptxas runs cost).
fn elementwise_points(vectors: &[u32]) -> Vec<Schedule> {
    let shapes = [(32, 1), (128, 3), (256, 8), (1024, 2), (256, 16)];
    shapes
        .iter()
        .zip(vectors.iter().cycle())
        .map(|(&(block, per_thread), &vector)| Schedule::Elementwise {
            block,
            per_thread,
            vector,
        })
        .collect()
}

/// Rows points: single-thread rows, sub-warp groups, one warp, several
/// warps and a full 1024-thread block, with every vector width; each in
/// several passes, in one from registers (rows too long to keep are
/// rejected by the registers constraint) and in one from shared memory
/// (rows too long for the target's are rejected by the shared-memory
/// constraint), and rows spanning warps with either tree; then rows spread
/// over clusters of 2, 4 and 8 blocks (sm_90 only), each way.
fn rows_points() -> Vec<Schedule> {
    let clustered = [(64, 3, 2, 2), (256, 1, 1, 4), (1024, 1, 4, 8)]
        .into_iter()
        .flat_map(|(threads_per_row, rows_per_block, vector, cluster)| {
            [(0, 0), (0, 1), (1, 0), (2, 0)].map(|(cache, online)| Schedule::Rows {
                threads_per_row,
                rows_per_block,
                vector,
                cache,
                tree: 0,
                online,
                cluster,
            })
        });
    [
        (1, 32, 1),
        (4, 16, 2),
        (16, 2, 4),
        (32, 4, 1),
        (64, 3, 2),
        (128, 2, 4),
        (256, 1, 1),
        (1024, 1, 4),
    ]
    .into_iter()
    .flat_map(|(threads_per_row, rows_per_block, vector)| {
        let trees = if threads_per_row > 32 { 2 } else { 1 };
        (0..3).flat_map(move |cache| {
            (0..trees).map(move |tree| Schedule::Rows {
                threads_per_row,
                rows_per_block,
                vector,
                cache,
                tree,
                online: 0,
                cluster: 1,
            })
        })
    })
    .chain(clustered)
    .collect()
}

type Outcome = Result<Option<(Row, bool)>, String>;

struct Row {
    kernel: String,
    schedule: String,
    target: SmVersion,
    registers: u32,
    spills: (u32, u32),
    shared: u32,
}

fn check_one(
    ptxas: &Path,
    k: &Kernel,
    schedule: &Schedule,
    target: SmVersion,
) -> Result<Option<Row>, String> {
    let lowered = match lower::lower(k, schedule, target) {
        Ok(l) => l,
        Err(LowerError::Invalid { reason, .. }) => {
            assert!(!reason.is_empty());
            return Ok(None);
        }
        Err(e) => return Err(format!("{}: {}: {e}", k.name, schedule.to_json())),
    };
    let text = ptx::print(&lowered.ptx, target);
    let report = ptxas::assemble(ptxas, &text, target)
        .map_err(|e| format!("{} {} {target}: {e}", k.name, schedule.to_json()))?;
    Ok(Some(Row {
        kernel: k.name.clone(),
        schedule: schedule.to_json(),
        target,
        registers: report.registers,
        spills: (report.spill_stores, report.spill_loads),
        shared: lowered.launch.dynamic_shared_bytes + report.shared_bytes,
    }))
}

#[test]
fn generated_ptx_assembles_without_spills() {
    let Some(ptxas) = ptxas::find() else {
        panic!(
            "ptxas not found: run `cargo xtask test` (it installs ptxas into .venv) or set {}",
            ptxas::PTXAS_ENV
        );
    };
    let mut jobs = Vec::new();
    for (k, points) in suite() {
        for target in TARGETS {
            let heuristic = lower::heuristic(&k, target);
            jobs.push((k.clone(), heuristic.clone(), target, true));
            for p in points.iter().filter(|p| **p != heuristic) {
                jobs.push((k.clone(), p.clone(), target, false));
            }
        }
    }
    // A shared queue: the variants differ a lot in assembly time.
    let next = AtomicUsize::new(0);
    let workers = std::thread::available_parallelism().map_or(4, |n| n.get());
    let mut results: Vec<(usize, Outcome)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                let (ptxas, jobs, next) = (&ptxas, &jobs, &next);
                s.spawn(move || {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some((k, schedule, target, heuristic)) = jobs.get(i) else {
                            break done;
                        };
                        let outcome = match check_one(ptxas, k, schedule, *target) {
                            Ok(None) if *heuristic => Err(format!(
                                "{}: the heuristic schedule {} does not lower for {target}",
                                k.name,
                                schedule.to_json()
                            )),
                            other => other.map(|row| row.map(|r| (r, *heuristic))),
                        };
                        done.push((i, outcome));
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("worker panicked"))
            .collect()
    });
    results.sort_by_key(|(i, _)| *i);

    let mut table = String::new();
    let _ = writeln!(
        table,
        "{:<28} {:<6} {:>4} {:>9} {:>6}  schedule",
        "kernel", "target", "regs", "spill s/l", "smem"
    );
    let mut failures = Vec::new();
    let (mut assembled, mut rejected) = (0, 0);
    for (_, result) in results {
        match result {
            Ok(Some((row, heuristic))) => {
                assembled += 1;
                let _ = writeln!(
                    table,
                    "{:<28} {:<6} {:>4} {:>4}/{:<4} {:>6}  {}{}",
                    row.kernel,
                    row.target.name(),
                    row.registers,
                    row.spills.0,
                    row.spills.1,
                    row.shared,
                    row.schedule,
                    if heuristic { "  (heuristic)" } else { "" }
                );
                if row.spills != (0, 0) {
                    failures.push(format!(
                        "{} {} {}: spills {:?}",
                        row.kernel, row.schedule, row.target, row.spills
                    ));
                }
            }
            Ok(None) => rejected += 1,
            Err(e) => failures.push(e),
        }
    }
    eprintln!("{table}");
    eprintln!("{assembled} variants assembled, {rejected} schedule points rejected as invalid");
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The kernels `ktune_vgpu::random` writes (the random-kernel test's, at
/// the first of their shapes), at their defaults for both targets and at
/// every fourth other point the verification suite runs them at (ptxas
/// runs cost): each valid point assembles, and each default without
/// spills (other points may spill; they are slow, not wrong).
#[test]
fn random_kernels_assemble() {
    let ptxas = ptxas::find().expect("ptxas not found: run `cargo xtask test` or set KTUNE_PTXAS");
    let mut jobs = Vec::new();
    for seed in 0..200 {
        let generated = ktune_vgpu::random::kernel(seed);
        let shape = &generated.entry.shapes[0];
        let k = ktune_vgpu::verify::with_shape(&generated.entry.kernel, shape)
            .expect("its own dimensions");
        let defaults: Vec<(Schedule, SmVersion)> =
            TARGETS.map(|t| (lower::heuristic(&k, t), t)).into();
        let source = generated.source_at(shape);
        for (schedule, target) in &defaults {
            jobs.push((k.clone(), schedule.clone(), *target, true, source.clone()));
        }
        let others = ktune_vgpu::suite::points(&k, seed)
            .into_iter()
            .filter(|point| !defaults.contains(point));
        for (schedule, target) in others.step_by(4) {
            jobs.push((k.clone(), schedule, target, false, source.clone()));
        }
    }
    let rejected = AtomicUsize::new(0);
    let next = AtomicUsize::new(0);
    let workers = std::thread::available_parallelism().map_or(4, |n| n.get());
    let failures: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                let (ptxas, jobs, next, rejected) = (&ptxas, &jobs, &next, &rejected);
                s.spawn(move || {
                    let mut failures = Vec::new();
                    while let Some((k, schedule, target, default, source)) =
                        jobs.get(next.fetch_add(1, Ordering::Relaxed))
                    {
                        let failure = match check_one(ptxas, k, schedule, *target) {
                            Ok(Some(row)) if *default && row.spills != (0, 0) => {
                                Some(format!("the default spills {:?}", row.spills))
                            }
                            Ok(None) if *default => Some("the default does not lower".to_owned()),
                            Ok(None) => {
                                rejected.fetch_add(1, Ordering::Relaxed);
                                None
                            }
                            Ok(Some(_)) => None,
                            Err(e) => Some(e),
                        };
                        if let Some(failure) = failure {
                            failures.push(format!(
                                "{} {} on {target}: {failure}\n{source}",
                                k.name,
                                schedule.to_json()
                            ));
                        }
                    }
                    failures
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("worker panicked"))
            .collect()
    });
    let rejected = rejected.into_inner();
    eprintln!(
        "200 random kernels: {} points assembled, {rejected} rejected as invalid",
        jobs.len() - rejected
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn ptxas_names_its_release() {
    let ptxas = ptxas::find().expect("ptxas not found: run `cargo xtask test` or set KTUNE_PTXAS");
    let version = ptxas::version(&ptxas).expect("ptxas --version runs");
    let release = version.split("release ").nth(1).unwrap_or_default();
    let (major, rest) = release.split_once('.').unwrap_or_default();
    assert!(
        !major.is_empty()
            && major.chars().all(|c| c.is_ascii_digit())
            && rest.starts_with(|c: char| c.is_ascii_digit()),
        "{version}"
    );
}

/// Named barriers as ktune prints them, numbered by a constant or by a
/// register, are PTX that ptxas takes.
#[test]
fn named_barriers_assemble() {
    use ktune_core::ptx::Builder;
    use ktune_core::ptx::inst::{ArithOp, Op, Operand, Special};

    let ptxas = ptxas::find().expect("ptxas not found: run `cargo xtask test` or set KTUNE_PTXAS");
    let mut b = Builder::new();
    let tid = b.special(Special::TidX);
    let warp = b.u32_op(ArithOp::Shr, tid, Operand::Int(5));
    let id = b.u32_op(ArithOp::Add, warp, Operand::Int(3));
    for (id, threads, wait) in [
        (Operand::Int(1), 256, false),
        (Operand::Int(15), 32, true),
        (Operand::Reg(id), 32, true),
    ] {
        b.push(Op::NamedBar { id, threads, wait });
    }
    b.push(Op::BarSync);
    let kernel = b.finish("named".into(), 0, 256, 0);
    for target in TARGETS {
        let text = ptx::print(&kernel, target);
        assert!(text.contains("\tbar.arrive 1, 256;\n"), "{text}");
        assert!(text.contains("\tbar.sync %r2, 32;\n"), "{text}");
        ptxas::assemble(&ptxas, &text, target).unwrap_or_else(|e| panic!("{target}: {e}"));
    }
}

/// A seeded sample of the producer points of two contractions with edges
/// along every dimension, one batched with both operands stored the other
/// way round: of each, points with a producer warpgroup (`producer = 1`)
/// and in ping-pong (`producer = 2`, offered where blocks may loop over
/// tiles, as both kernels' may), each copying by `cp.async` and by tensor
/// maps (`tma = 1`), the latter also in clusters of two blocks sharing
/// B's tiles (`cluster_m = 2`). Each assembles without spills, and where its warpgroups move
/// registers, ptxas gives every thread at launch exactly the share their
/// `setmaxnreg` counts assume (`Launch::registers`).
#[test]
fn producer_points_assemble_without_spills_at_their_launch_share() {
    let ptxas = ptxas::find().expect("ptxas not found: run `cargo xtask test` or set KTUNE_PTXAS");
    let kernels = [
        kernel(
            quote!(shape(M = 4000, N = 11000, K = 4000)),
            quote! {
                fn fused(a: Tensor<bf16, (M, K)>, w: Tensor<bf16, (K, N)>, bias: Tensor<bf16, (N,)>)
                    -> Tensor<bf16, (M, N)>
                {
                    compute(|m, n| gelu(sum(K, |k| a[m][k] * w[k][n]) + bias[n]))
                }
            },
        ),
        kernel(
            quote!(shape(B = 4, M = 1000, N = 3000, K = 520)),
            quote! {
                fn batched(a: Tensor<f16, (B, K, M)>, w: Tensor<f16, (B, N, K)>) -> Tensor<f16, (B, M, N)> {
                    compute(|b, m, n| sum(K, |k| a[b][k][m] * w[b][n][k]))
                }
            },
        ),
    ];
    let target = SmVersion::Sm90;
    let jobs: Vec<(&Kernel, Schedule)> = kernels
        .iter()
        .flat_map(|k| {
            let candidates = ktune_core::space::candidates(k, target);
            [(1, 0, 1), (1, 1, 1), (1, 1, 2), (2, 0, 1), (2, 1, 1)]
                .into_iter()
                .flat_map(move |(producer, tma, cluster_m)| {
                    let fed: Vec<Schedule> = candidates
                        .iter()
                        .filter(|s| {
                            matches!(s, Schedule::Mma(t) if t.producer == producer && t.tma == tma && t.cluster_m == cluster_m)
                        })
                        .cloned()
                        .collect();
                    assert!(
                        fed.len() > 50,
                        "{}: {} points of producer = {producer}, tma = {tma}, cluster_m = {cluster_m}",
                        k.name,
                        fed.len()
                    );
                    ktune_core::space::sample(&fed, 3, 1)
                        .into_iter()
                        .map(move |s| (k, s))
                })
        })
        .collect();
    let reallocating = jobs
        .iter()
        .filter(|(k, s)| lower::lower(k, s, target).is_ok_and(|l| l.launch.registers > 0))
        .count();
    assert!(reallocating >= 3, "{reallocating} of the points reallocate");
    let next = AtomicUsize::new(0);
    let failures: Vec<String> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let mut failures = Vec::new();
                    while let Some((k, schedule)) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
                        let what = format!("{} {}", k.name, schedule.to_json());
                        let lowered = lower::lower(k, schedule, target)
                            .unwrap_or_else(|e| panic!("{what}: {e}"));
                        let text = ptx::print(&lowered.ptx, target);
                        let report = ptxas::assemble(&ptxas, &text, target)
                            .unwrap_or_else(|e| panic!("{what}: {e}"));
                        if report.spills() {
                            failures.push(format!("{what}: spills\n{}", report.log));
                        }
                        let share = lowered.launch.registers;
                        if share > 0 && report.registers != share {
                            failures.push(format!(
                                "{what}: {} registers at launch, not {share}\n{}",
                                report.registers, report.log
                            ));
                        }
                    }
                    failures
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("worker panicked"))
            .collect()
    });
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Rows of 50257 kept in registers (`cache = 1`) over a cluster's blocks,
/// 25 values a thread: only the slots past the shortest block's slice
/// check the slice's end, so ptxas keeps no predicate and clamped position
/// for every slot until the outputs. Softmax took 111 registers, 256
/// threads a block over 8 blocks, and layernorm 128 (ptxas 12.9); now 55
/// and 80, and 64 and 90 at 512 threads over 4 blocks (the bounds leave
/// room for another release of ptxas). None spills.
#[test]
fn rows_kept_in_registers_over_a_cluster_keep_their_values_only() {
    let ptxas = ptxas::find().expect("ptxas not found: run `cargo xtask test` or set KTUNE_PTXAS");
    let f32 = dtype("f32");
    let softmax = softmax("softmax", &f32, 4096, 50257);
    let layernorm = layernorm("layernorm", &f32, 4096, 50257);
    let target = SmVersion::Sm90;
    for (k, threads_per_row, cluster, most) in [
        (&softmax, 256, 8, 64),
        (&softmax, 512, 4, 80),
        (&layernorm, 256, 8, 96),
        (&layernorm, 512, 4, 112),
    ] {
        let schedule = Schedule::Rows {
            threads_per_row,
            rows_per_block: 1,
            vector: 1,
            cache: 1,
            tree: 0,
            online: 0,
            cluster,
        };
        let what = format!("{} {}", k.name, schedule.to_json());
        let lowered = lower::lower(k, &schedule, target).unwrap_or_else(|e| panic!("{what}: {e}"));
        let report = ptxas::assemble(&ptxas, &ptx::print(&lowered.ptx, target), target)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(!report.spills(), "{what}: {}", report.log);
        assert!(
            report.registers <= most,
            "{what}: {} registers, expected at most {most}\n{}",
            report.registers,
            report.log
        );
    }
}
