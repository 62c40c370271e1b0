//! The generated-code contract on a real GPU.
//!
//! Every test here is `#[ignore = "needs a GPU ..."]`: on a machine without
//! one, `cargo test` reports them as ignored instead of counting them as
//! passed. On a GPU machine run them with
//! `cargo test -p ktune -- --include-ignored`; there a test fails, rather
//! than passes, when no GPU can be opened.

mod expanded;

use std::sync::Arc;

use expanded::{scale_add, softmax};
use ktune::__private::{self, Variant};
use ktune::prelude::*;

fn gpu() -> Device {
    Device::cuda(0).unwrap_or_else(|e| panic!("this test needs a GPU: {e}"))
}

fn softmax_input() -> Vec<f32> {
    (0..21).map(|i| ((i * 7) % 11) as f32 * 0.5 - 2.0).collect()
}

fn softmax_reference(x: &[f32]) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    softmax::reference(x, &mut out).unwrap();
    out
}

fn assert_close(actual: &[f32], expected: &[f32]) {
    assert_eq!(actual.len(), expected.len());
    for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
        assert!(
            (a - e).abs() <= 1e-5 * e.abs().max(1.0),
            "element {i}: {a} vs {e}"
        );
    }
}

#[test]
#[ignore = "needs a GPU: cargo test -p ktune -- --include-ignored"]
fn gpu_device_describes_itself() {
    let device = gpu();
    assert_eq!(device.backend(), Backend::Cuda);
    assert!(!device.name().is_empty());
    let (major, _) = device.compute_capability().unwrap();
    assert!(major >= 5, "{device}");
    assert!(device.sm_count().unwrap() > 0);
    assert!(device.stream().is_some() && device.context().is_some());
    assert!(device.to_string().starts_with("cuda:0 "), "{device}");
    assert_eq!(device.synchronize(), Ok(()));
    assert!(matches!(
        Device::cuda(usize::MAX),
        Err(Error::NoDevice {
            ordinal: usize::MAX,
            ..
        })
    ));
}

#[test]
#[ignore = "needs a GPU: cargo test -p ktune -- --include-ignored"]
fn buffers_round_trip_through_the_gpu() {
    let device = gpu();
    let a: Vec<f32> = (0..1000).map(|i| i as f32 * 0.25).collect();
    let buffer = device.upload(&a).unwrap();
    assert_eq!(buffer.backend(), Backend::Cuda);
    assert_eq!(buffer.len(), 1000);
    assert!(buffer.as_cuda_slice().is_some() && buffer.as_host_slice().is_none());
    assert_eq!(device.download(&buffer).unwrap(), a);

    let h = [f16::from_f32(1.5), f16::MIN];
    assert_eq!(device.download(&device.upload(&h).unwrap()).unwrap(), h);
    let zeros = device.alloc::<bf16>(300).unwrap();
    assert_eq!(device.download(&zeros).unwrap(), vec![bf16::ZERO; 300]);
}

#[test]
#[ignore = "needs a GPU: cargo test -p ktune -- --include-ignored"]
fn softmax_runs_on_the_gpu_and_matches_the_reference() {
    let device = gpu();
    let x = softmax_input();
    let xb = device.upload(&x).unwrap();
    let mut out = device.alloc::<f32>(21).unwrap();

    let ran = softmax::run(&device, &xb, &mut out).unwrap();
    assert_eq!(ran.backend, Backend::Cuda);
    // The sm_99 variant is newer than any GPU and never picked.
    let variant = ran.variant.unwrap();
    assert_eq!(variant.entry, "softmax_default");
    assert_eq!(ran.to_string(), "cuda sm_80 default");

    assert_close(&device.download(&out).unwrap(), &softmax_reference(&x));
}

#[test]
#[ignore = "needs a GPU: cargo test -p ktune -- --include-ignored"]
fn launch_takes_cudarc_types_directly() {
    let device = gpu();
    let stream = device.stream().unwrap();
    let x = softmax_input();
    let xs = stream.clone_htod(&x).unwrap();
    let mut out = stream.alloc_zeros::<f32>(21).unwrap();
    let variant = softmax::launch(stream, &xs, &mut out).unwrap();
    assert_eq!(variant.entry, "softmax_default");
    assert_close(&stream.clone_dtoh(&out).unwrap(), &softmax_reference(&x));

    // A device made from the application's own stream.
    let own = Device::from_stream(stream.context().new_stream().unwrap()).unwrap();
    assert_eq!(own.name(), device.name());
    let xb = own.upload(&x).unwrap();
    let mut out = own.alloc::<f32>(21).unwrap();
    softmax::run(&own, &xb, &mut out).unwrap();
    assert_close(&own.download(&out).unwrap(), &softmax_reference(&x));
}

#[test]
#[ignore = "needs a GPU: cargo test -p ktune -- --include-ignored"]
fn mixed_dtypes_and_more_than_48_kib_of_dynamic_shared_memory() {
    let device = gpu();
    let x: Vec<bf16> = (0..1000)
        .map(|i| bf16::from_f32(i as f32 / 3.0 - 100.0))
        .collect();
    let w: Vec<f32> = (0..1000).map(|i| 1.0 / (i as f32 + 1.0)).collect();
    let (xb, wb) = (device.upload(&x).unwrap(), device.upload(&w).unwrap());
    let mut out = device.alloc::<bf16>(1000).unwrap();

    let ran = scale_add::run(&device, &xb, &wb, &mut out).unwrap();
    assert_eq!(ran.variant.unwrap().dynamic_shared_bytes, 64 * 1024);

    let mut expected = vec![bf16::ZERO; 1000];
    scale_add::reference(&x, &w, &mut expected).unwrap();
    assert_eq!(device.download(&out).unwrap(), expected);
}

/// A variant of the expanded softmax (sm_80, one warp), tuned on `gpu`
/// where it names one, whose launch needs `registers` per thread.
fn softmax_variant(gpu: Option<&'static str>, entry: &'static str, registers: u32) -> Variant {
    Variant {
        gpu,
        sm: (8, 0),
        arch_specific: false,
        schedule: "{}",
        entry,
        ptx: expanded::SOFTMAX_PTX,
        grid: [1, 1, 1],
        block: [32, 1, 1],
        dynamic_shared_bytes: 0,
        workspace_bytes: 0,
        persistent: false,
        cluster: 1,
        registers,
        tensor_maps: &[],
    }
}

#[test]
#[ignore = "needs a GPU: cargo test -p ktune -- --include-ignored"]
fn the_variant_tuned_on_this_gpu_model_is_launched() {
    let device = gpu();
    let name: &'static str = Box::leak(device.name().to_owned().into_boxed_str());
    let variants: &'static [Variant] = Box::leak(Box::new([
        softmax_variant(None, "softmax_default", 0),
        softmax_variant(Some(name), "softmax_tuned", 0),
    ]));
    let stream = device.stream().unwrap();
    let x = softmax_input();
    let xs = stream.clone_htod(&x).unwrap();
    let mut out = stream.alloc_zeros::<f32>(21).unwrap();
    let variant = __private::launch(stream, &softmax::KERNEL, variants, &[&xs], &mut out).unwrap();
    assert_eq!(variant.entry, "softmax_tuned");
    assert_eq!(variant.label(), format!("sm_80 {name}"));
    assert_close(&stream.clone_dtoh(&out).unwrap(), &softmax_reference(&x));
}

/// A variant stating more registers per thread than the driver gives it
/// (its warpgroups would wait forever for them) is passed over for the
/// next choice, and refused where there is none.
#[test]
#[ignore = "needs a GPU: cargo test -p ktune -- --include-ignored"]
fn a_variant_the_driver_gives_too_few_registers_is_passed_over() {
    let device = gpu();
    let name: &'static str = Box::leak(device.name().to_owned().into_boxed_str());
    let variants: &'static [Variant] = Box::leak(Box::new([
        softmax_variant(None, "softmax_default", 0),
        softmax_variant(Some(name), "softmax_tuned", 255),
    ]));
    let stream = device.stream().unwrap();
    let x = softmax_input();
    let xs = stream.clone_htod(&x).unwrap();
    let mut out = stream.alloc_zeros::<f32>(21).unwrap();
    let variant = __private::launch(stream, &softmax::KERNEL, variants, &[&xs], &mut out).unwrap();
    assert_eq!(variant.entry, "softmax_default");
    assert_close(&stream.clone_dtoh(&out).unwrap(), &softmax_reference(&x));

    let alone: &'static [Variant] =
        Box::leak(Box::new([softmax_variant(None, "softmax_tuned", 255)]));
    match __private::launch(stream, &softmax::KERNEL, alone, &[&xs], &mut out) {
        Err(Error::RegisterShare {
            kernel: "softmax",
            needed: 255,
            given,
            ..
        }) => assert!(given < 255, "{given}"),
        other => panic!("{other:?}"),
    }
}

#[test]
#[ignore = "needs a GPU: cargo test -p ktune -- --include-ignored"]
fn buffers_on_the_wrong_backend_are_rejected() {
    let device = gpu();
    let cpu = Device::cpu();
    let x = softmax_input();

    let host_x = cpu.upload(&x).unwrap();
    let mut gpu_out = device.alloc::<f32>(21).unwrap();
    assert_eq!(
        softmax::run(&device, &host_x, &mut gpu_out).unwrap_err(),
        Error::BackendMismatch {
            kernel: "softmax",
            tensor: "x",
            expected: Backend::Cuda,
            actual: Backend::Cpu
        }
    );

    let gpu_x = device.upload(&x).unwrap();
    let mut host_out = cpu.alloc::<f32>(21).unwrap();
    assert_eq!(
        softmax::run(&cpu, &gpu_x, &mut host_out).unwrap_err(),
        Error::BackendMismatch {
            kernel: "softmax",
            tensor: "x",
            expected: Backend::Cpu,
            actual: Backend::Cuda
        }
    );
    let mut gpu_out = device.alloc::<f32>(21).unwrap();
    let host_x = cpu.upload(&x).unwrap();
    assert!(matches!(
        softmax::run(&cpu, &host_x, &mut gpu_out),
        Err(Error::BackendMismatch { tensor: "out", .. })
    ));
}

#[test]
#[ignore = "needs a GPU: cargo test -p ktune -- --include-ignored"]
fn wrong_lengths_are_rejected_before_launch() {
    let device = gpu();
    let stream: &Arc<_> = device.stream().unwrap();
    let short = stream.alloc_zeros::<f32>(20).unwrap();
    let mut out = stream.alloc_zeros::<f32>(21).unwrap();
    assert_eq!(
        softmax::launch(stream, &short, &mut out).unwrap_err(),
        Error::LengthMismatch {
            kernel: "softmax",
            tensor: "x",
            expected: 21,
            actual: 20
        }
    );
    let x = device.upload(&softmax_input()).unwrap();
    let mut long = device.alloc::<f32>(22).unwrap();
    assert!(matches!(
        softmax::run(&device, &x, &mut long),
        Err(Error::LengthMismatch { tensor: "out", .. })
    ));
}
