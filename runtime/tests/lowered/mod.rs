//! Variants lowered here by ktune-core, for the GPU tests that need a
//! real generated kernel rather than hand-written PTX, and exact inputs
//! for bf16 products and their reference.

#![allow(dead_code)]

use std::sync::Arc;

use ktune::__private::cudarc::driver::CudaStream;
use ktune::__private::{KernelInfo, TensorMapSpec, Variant, launch};
use ktune::bf16;
use ktune_core::lower::lower;
use ktune_core::ptx;
use ktune_core::ptx::inst::Instr;
use ktune_core::schedule::Schedule;
use ktune_core::syntax::parse_kernel;
use ktune_core::target::SmVersion;

/// The default-like (untuned) variant of `matmul(a: Tensor<dtype, (M,
/// K)>, b: Tensor<dtype, (K, N)>) -> Tensor<f32, (M, N)>` at `[M, N, K]`,
/// with `schedule` lowered for `target` and its instructions edited by
/// `edit` (a test that breaks the kernel on purpose; most leave them)
/// before they are printed; an `sm_90a` module (`arch_specific`) where the
/// code needs it.
pub fn matmul(
    dtype: &str,
    [m, n, k]: [usize; 3],
    schedule: &'static str,
    target: SmVersion,
    edit: impl FnOnce(&mut Vec<Instr>),
) -> Variant {
    let source = format!(
        "fn matmul(a: Tensor<{dtype}, (M, K)>, b: Tensor<{dtype}, (K, N)>) -> Tensor<f32, (M, N)> {{
            compute(|m, n| sum(K, |k| a[m][k] * b[k][n]))
        }}"
    );
    let shape = format!("shape(M = {m}, N = {n}, K = {k})");
    let kernel = parse_kernel(shape.parse().unwrap(), source.parse().unwrap()).unwrap();
    let mut lowered = lower(&kernel, &Schedule::from_json(schedule).unwrap(), target).unwrap();
    edit(&mut lowered.ptx.body);
    Variant {
        gpu: None,
        sm: target.compute_capability(),
        arch_specific: lowered.ptx.is_sm90a(),
        schedule,
        entry: Box::leak(lowered.ptx.entry.clone().into_boxed_str()),
        ptx: Box::leak(ptx::print(&lowered.ptx, target).into_boxed_str()),
        grid: lowered.launch.grid,
        block: lowered.launch.block,
        dynamic_shared_bytes: lowered.launch.dynamic_shared_bytes,
        workspace_bytes: lowered.launch.workspace_bytes,
        persistent: lowered.launch.persistent,
        cluster: lowered.ptx.cluster_blocks.max(1),
        registers: lowered.launch.registers,
        tensor_maps: Box::leak(
            lowered
                .ptx
                .tensor_maps
                .iter()
                .map(|m| TensorMapSpec {
                    param: m.param,
                    dtype: m.dtype.name(),
                    dims: Box::leak(m.dims.clone().into_boxed_slice()),
                    strides: Box::leak(m.strides.clone().into_boxed_slice()),
                    boxed: Box::leak(m.boxed.clone().into_boxed_slice()),
                    swizzle: m.swizzle.span().unwrap_or(0),
                })
                .collect(),
        ),
    }
}

/// The [`KernelInfo`](ktune::__private::KernelInfo) of [`matmul`] with
/// operands of `$dtype` (`$bytes` bytes an element) at the constants `M`,
/// `N` and `K` where it is used.
macro_rules! matmul_info {
    ($dtype:literal, $bytes:literal) => {
        ktune::__private::KernelInfo {
            name: "matmul",
            checksum: "0123456789abcdef",
            dims: &[("M", M as u32), ("N", N as u32), ("K", K as u32)],
            inputs: &[
                ktune::__private::TensorInfo {
                    name: "a",
                    dtype: $dtype,
                    dims: &["M", "K"],
                    len: M * K,
                },
                ktune::__private::TensorInfo {
                    name: "b",
                    dtype: $dtype,
                    dims: &["K", "N"],
                    len: K * N,
                },
            ],
            output: ktune::__private::TensorInfo {
                name: "c",
                dtype: "f32",
                dims: &["M", "N"],
                len: M * N,
            },
            flops: (2 * M * N * K) as u64,
            bytes: ($bytes * (M * K + K * N) + 4 * M * N) as u64,
        }
    };
}
pub(crate) use matmul_info;

/// Inputs of a bf16 product `[M, N, K]` in small integers, so that it is
/// exact in f32 whatever the order of summation.
pub fn exact_inputs(seed: usize, [m, n, k]: [usize; 3]) -> (Vec<bf16>, Vec<bf16>) {
    let value =
        |i: usize, salt: usize| bf16::from_f32(((i * 7 + seed * 13 + salt) % 9) as f32 - 4.0);
    let a = (0..m * k).map(|i| value(i, 1)).collect();
    let b = (0..k * n).map(|i| value(i, 5)).collect();
    (a, b)
}

/// The product of `a` (`M × K`) and `b` (`K × N`), row-major.
pub fn product(a: &[bf16], b: &[bf16], [m, n, k]: [usize; 3]) -> Vec<f32> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k)
                .map(|l| a[i * k + l].to_f32() * b[l * n + j].to_f32())
                .sum();
        }
    }
    c
}

/// Launches `variants` of the bf16 product `kernel` (`[M, N, K]`) on the
/// exact inputs of `seed` and checks the output against [`product`];
/// returns the variant launched.
pub fn launch_exact(
    stream: &Arc<CudaStream>,
    (kernel, variants): (&'static KernelInfo, &'static [Variant]),
    shape @ [m, n, _]: [usize; 3],
    seed: usize,
) -> &'static Variant {
    let (a, b) = exact_inputs(seed, shape);
    let a_gpu = stream.clone_htod(&a).unwrap();
    let b_gpu = stream.clone_htod(&b).unwrap();
    let mut out = stream.alloc_zeros::<f32>(m * n).unwrap();
    let variant = launch(stream, kernel, variants, &[&a_gpu, &b_gpu], &mut out).unwrap();
    let got = stream.clone_dtoh(&out).unwrap();
    assert_eq!(got, product(&a, &b, shape), "{variant}, launch {seed}");
    variant
}
