//! PTX snapshot tests: the heuristic default of a few representative kernels,
//! printed for sm_80, compared with the reviewed files in `tests/snapshots/`.
//!
//! A change to code generation shows up here as a diff to review. After
//! reviewing, re-bless with `KTUNE_BLESS=1 cargo test -p ktune-core --test snapshots`.

use std::path::PathBuf;

use ktune_core::SmVersion;
use ktune_core::lower::{heuristic, lower};
use ktune_core::ptx::print;
use ktune_core::syntax::parse_kernel;
use quote::quote;

fn check(name: &str, attr: proc_macro2::TokenStream, item: proc_macro2::TokenStream) {
    let kernel = parse_kernel(attr, item).expect("snapshot kernels are valid");
    let schedule = heuristic(&kernel, SmVersion::Sm80);
    let lowered = lower(&kernel, &schedule, SmVersion::Sm80).expect("the heuristic default lowers");
    let ptx = format!(
        "// schedule: {}\n// launch: {:?}\n{}",
        schedule.to_json(),
        lowered.launch,
        print(&lowered.ptx, SmVersion::Sm80)
    );
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(format!("{name}.ptx"));
    if std::env::var_os("KTUNE_BLESS").is_some() {
        std::fs::write(&path, &ptx).expect("write snapshot");
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}; create it with KTUNE_BLESS=1",
            path.display()
        )
    });
    if want != ptx {
        let first = want
            .lines()
            .zip(ptx.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| want.lines().count().min(ptx.lines().count()));
        panic!(
            "{name}: generated PTX differs from {} from line {}:\n  snapshot: {:?}\n  now:      {:?}\nreview the change, then re-bless with KTUNE_BLESS=1",
            path.display(),
            first + 1,
            want.lines().nth(first),
            ptx.lines().nth(first)
        );
    }
}

#[test]
fn broadcast_add() {
    check(
        "broadcast_add",
        quote!(shape(R = 100, C = 256)),
        quote! {
            fn broadcast_add(x: Tensor<f32, (R, C)>, b: Tensor<f32, (C,)>) -> Tensor<f32, (R, C)> {
                compute(|r, c| x[r][c] + b[c])
            }
        },
    );
}

#[test]
fn softmax() {
    check(
        "softmax",
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
    );
}

#[test]
fn matmul_bias_gelu() {
    check(
        "matmul_bias_gelu",
        quote!(shape(M = 1000, N = 1000, K = 999)),
        quote! {
            fn matmul_bias_gelu(
                a: Tensor<bf16, (M, K)>,
                w: Tensor<bf16, (K, N)>,
                b: Tensor<f32, (N,)>,
            ) -> Tensor<bf16, (M, N)> {
                compute(|m, n| gelu(sum(K, |k| a[m][k] * w[k][n]) + b[n]))
            }
        },
    );
}
