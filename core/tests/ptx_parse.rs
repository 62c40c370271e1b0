//! `ptx::parse` gives back exactly the kernel `ptx::print` printed, for
//! lowered kernels of every class, dtype and target, and names the line of
//! anything else.

use ktune_core::SmVersion;
use ktune_core::lower::{heuristic, lower};
use ktune_core::ptx::{Kernel, parse, print};
use ktune_core::schedule::Schedule;
use ktune_core::syntax::parse_kernel;
use proc_macro2::TokenStream;
use quote::quote;

/// Kernels of every class (generic, elementwise, rows, matmul) and dtype.
fn catalogue() -> Vec<ktune_core::ir::Kernel> {
    let sources: Vec<(TokenStream, TokenStream)> = vec![
        (
            quote!(shape(R = 100, C = 256)),
            quote! {
                fn broadcast_add(x: Tensor<f32, (R, C)>, b: Tensor<f32, (C,)>) -> Tensor<f32, (R, C)> {
                    compute(|r, c| x[r][c] + b[c])
                }
            },
        ),
        (
            quote!(shape(N = 1000)),
            quote! {
                fn scale(x: Tensor<bf16, (N,)>, w: Tensor<f16, (N,)>) -> Tensor<bf16, (N,)> {
                    compute(|i| silu(2.0 * x[i]) + tanh(w[i]) - erf(x[i] as f16))
                }
            },
        ),
        (
            quote!(shape(R = 64, C = 1000)),
            quote! {
                fn softmax(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
                    compute(|r, c| {
                        let mx = max(C, |j| x[r][j]);
                        let s = sum(C, |j| exp(x[r][j] - mx));
                        exp(x[r][c] - mx) / s
                    })
                }
            },
        ),
        (
            quote!(shape(T = 33, D = 96)),
            quote! {
                fn layernorm(x: Tensor<f32, (T, D)>, g: Tensor<f32, (D,)>, b: Tensor<f32, (D,)>) -> Tensor<f16, (T, D)> {
                    compute(|t, d| {
                        let mu = mean(D, |k| x[t][k]);
                        let var = mean(D, |k| (x[t][k] - mu) * (x[t][k] - mu));
                        (x[t][d] - mu) * rsqrt(var + 1e-5) * g[d] + b[d]
                    })
                }
            },
        ),
        (
            quote!(shape(M = 70, N = 96, K = 64)),
            quote! {
                fn matmul_bias_gelu(a: Tensor<bf16, (M, K)>, w: Tensor<bf16, (K, N)>, b: Tensor<f32, (N,)>) -> Tensor<bf16, (M, N)> {
                    compute(|m, n| gelu(sum(K, |k| a[m][k] * w[k][n]) + b[n]))
                }
            },
        ),
        (
            quote!(shape(M = 33, N = 17, K = 5)),
            quote! {
                fn matmul_t(a: Tensor<f32, (K, M)>, w: Tensor<f32, (N, K)>) -> Tensor<f32, (M, N)> {
                    compute(|m, n| max(sum(K, |k| a[k][m] * w[n][k]), 0.0))
                }
            },
        ),
        (
            quote!(shape(R = 7, C = 9)),
            quote! {
                fn generic_mix(x: Tensor<f32, (R, C)>) -> Tensor<f32, (C, R)> {
                    compute(|c, r| select(x[r][c] > 0.0 && !(x[r][c] > 2.0), sqrt(abs(x[r][c])) * r, min(log(1.0 + x[r][c] * x[r][c]), sigmoid(x[r][c]))))
                }
            },
        ),
    ];
    sources
        .into_iter()
        .map(|(attr, item)| parse_kernel(attr, item).expect("catalogue kernels are valid"))
        .collect()
}

fn round_trip(kernel: &Kernel, target: SmVersion) {
    let text = print(kernel, target);
    let parsed = parse(&text).unwrap_or_else(|e| panic!("{}: {e}\n{text}", kernel.entry));
    assert_eq!(parsed.1, target);
    assert_eq!(parsed.0, *kernel, "{}", kernel.entry);
}

#[test]
fn heuristic_defaults_round_trip_on_every_target() {
    let mut classes = std::collections::BTreeSet::new();
    for kernel in catalogue() {
        for target in SmVersion::ALL {
            let schedule = heuristic(&kernel, target);
            classes.insert(schedule.class());
            let lowered = lower(&kernel, &schedule, target).expect("the default lowers");
            round_trip(&lowered.ptx, target);
        }
    }
    // Generic schedules are covered by `other_schedules_round_trip`.
    assert!(
        ["elementwise", "rows", "matmul"]
            .iter()
            .all(|c| classes.contains(c)),
        "{classes:?}"
    );
}

#[test]
fn other_schedules_round_trip() {
    let kernels = catalogue();
    let find = |name: &str| {
        kernels
            .iter()
            .find(|k| k.name == name)
            .expect("in the catalogue")
    };
    let points = [
        ("broadcast_add", Schedule::Generic { block: 64 }),
        (
            "broadcast_add",
            Schedule::Elementwise {
                block: 128,
                per_thread: 3,
                vector: 2,
            },
        ),
        ("softmax", Schedule::Generic { block: 32 }),
        (
            "softmax",
            Schedule::Rows {
                threads_per_row: 128,
                rows_per_block: 2,
                vector: 1,
            },
        ),
        (
            "layernorm",
            Schedule::Rows {
                threads_per_row: 8,
                rows_per_block: 4,
                vector: 4,
            },
        ),
        (
            "matmul_bias_gelu",
            Schedule::Matmul {
                block_m: 32,
                block_n: 32,
                block_k: 16,
                thread_m: 2,
                thread_n: 4,
                vector_a: 4,
                vector_b: 4,
            },
        ),
        ("matmul_t", Schedule::Generic { block: 128 }),
    ];
    for (name, schedule) in points {
        let lowered = lower(find(name), &schedule, SmVersion::Sm80)
            .unwrap_or_else(|e| panic!("{name} {}: {e}", schedule.to_json()));
        round_trip(&lowered.ptx, SmVersion::Sm80);
    }
}

#[test]
fn errors_name_the_line() {
    let kernel = catalogue().remove(2);
    let lowered = lower(
        &kernel,
        &heuristic(&kernel, SmVersion::Sm80),
        SmVersion::Sm80,
    )
    .expect("the default lowers");
    let text = print(&lowered.ptx, SmVersion::Sm80);
    let line_of = |needle: &str| {
        text.lines()
            .position(|l| l.contains(needle))
            .expect("present")
            + 1
    };

    let broken = text.replacen("shfl.sync.bfly", "shfl.sync.sideways", 1);
    let err = parse(&broken).unwrap_err();
    assert_eq!(err.line, line_of("shfl.sync.bfly"));
    assert!(err.message.contains("sideways"), "{err}");

    let broken = text.replacen("mul.rn.f32", "mul.f32", 1);
    let err = parse(&broken).unwrap_err();
    assert_eq!(err.line, line_of("mul.rn.f32"));
    assert!(
        err.message.contains("not in the form ktune prints"),
        "{err}"
    );

    let broken = text.replacen(".target sm_80", ".target sm_75", 1);
    let err = parse(&broken).unwrap_err();
    assert_eq!(err.line, 5);
    assert!(
        err.to_string()
            .starts_with("PTX line 5: unknown GPU target `sm_75`"),
        "{err}"
    );

    let broken = text.replacen(".version 7.0", ".version 7.8", 1);
    assert_eq!(parse(&broken).unwrap_err().line, 4);

    let truncated: String = text.lines().take(30).map(|l| format!("{l}\n")).collect();
    let err = parse(&truncated).unwrap_err();
    assert_eq!(err.line, 31);
    assert!(err.message.contains("ends before"), "{err}");

    let undeclared = text.replacen("%f1,", "%f999,", 1);
    let err = parse(&undeclared).unwrap_err();
    assert!(err.message.contains("`%f999` is not declared"), "{err}");
}
