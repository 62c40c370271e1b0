//! The virtual GPU backend end to end: catalogue kernels of every class and
//! dtype, run through their generated `run` on `Device::vgpu()` — which
//! parses the PTX the build embedded and executes it — give what the CPU
//! reference gives, within the per-dtype tolerance (normwise: f32 1e-5,
//! f16 and bf16 1e-2), and report the variant that ran.

use ktune::{Device, Element, KernelInfo, Ran};
use ktune_e2e as e2e;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Seeded random values in -2..2 (never all zeros).
fn input<T: Element>(seed: u64, len: usize) -> Vec<T> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..len)
        .map(|_| T::from_f32(rng.random_range(-2.0..2.0)))
        .collect()
}

#[track_caller]
fn assert_close(kernel: &KernelInfo, vgpu: &[f64], cpu: &[f64]) {
    let tolerance = if kernel.output.dtype == "f32" {
        1e-5
    } else {
        1e-2
    };
    let scale = cpu.iter().fold(0.0f64, |m, w| m.max(w.abs())).max(1e-30);
    for (i, (got, want)) in vgpu.iter().zip(cpu).enumerate() {
        let error = (got - want).abs() / scale;
        assert!(
            error <= tolerance,
            "kernel `{}` element {i}: vgpu {got}, cpu {want} (relative error {error:.2e} > {tolerance:.0e})",
            kernel.name
        );
    }
}

/// Runs `kernel` with seeded inputs on the CPU and on the virtual GPU and
/// compares: `same!(kernel, Out, arg: In, ...)`.
macro_rules! same {
    ($kernel:ident, $out:ty, $($arg:ident: $ty:ty),+) => {{
        let info = &e2e::$kernel::KERNEL;
        let mut seed = 0;
        $(let $arg: Vec<$ty> = {
            seed += 1;
            input(seed, info.inputs[seed as usize - 1].len)
        };)+
        let mut results = Vec::new();
        for device in [Device::cpu(), Device::vgpu()] {
            $(let $arg = device.upload(&$arg).expect("host upload");)+
            let mut out = device.alloc::<$out>(info.output.len).expect("host alloc");
            let ran: Ran = e2e::$kernel::run(&device, $(&$arg),+, &mut out)
                .unwrap_or_else(|e| panic!("{e}"));
            let out = device.download(&out).expect("host download");
            results.push((ran, out.iter().map(|x| f64::from(x.to_f32())).collect::<Vec<f64>>()));
        }
        assert_eq!(results[0].0.to_string(), "cpu reference");
        assert_eq!(results[1].0.to_string(), "vgpu sm_80 default");
        assert_close(info, &results[1].1, &results[0].1);
    }};
}

#[test]
fn elementwise_and_broadcast() {
    use ktune::{bf16, f16};
    same!(bias_add, f32, x: f32, b: f32);
    same!(bias_add_f16, f16, x: f16, b: f16);
    same!(scaled_residual_bf16, bf16, x: bf16, r: bf16);
    same!(gelu_erf_f32, f32, x: f32);
    same!(tanh_f32, f32, x: f32);
    same!(mixed_add, bf16, a: f16, b: bf16);
}

#[test]
fn row_reductions_and_normalizations() {
    use ktune::{bf16, f16};
    same!(row_sum, f32, x: f32);
    same!(row_max, f16, x: f16);
    same!(row_mean, f32, x: bf16);
    same!(softmax, f32, x: f32);
    same!(softmax_bf16, bf16, x: bf16);
    same!(causal_softmax, f32, x: f32);
    same!(layernorm, f32, x: f32, gamma: f32, beta: f32);
    same!(layernorm_f16, f16, x: f16, gamma: f16, beta: f16);
}

#[test]
fn matmuls() {
    use ktune::{bf16, f16};
    same!(matmul, f32, a: f32, b: f32);
    same!(matmul_tall, f32, a: f32, b: f32);
    same!(bmm, f32, a: f32, b: f32);
    same!(matmul_f16, f16, a: f16, b: f16);
    same!(linear_bf16, bf16, x: bf16, w: bf16);
    same!(matmul_bias_gelu, f32, x: bf16, w: bf16, b: f32);
    same!(matmul_bias_residual, f32, h: f32, w: f32, b: f32, x: f32);
}
