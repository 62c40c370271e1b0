//! The generated-code contract on the CPU backend, end to end, and the
//! errors a kernel's `run` gives for buffers that do not fit it. Runs
//! everywhere; the GPU half is in `gpu.rs`.

mod expanded;

use expanded::{scale_add, softmax};
use ktune::__private;
use ktune::prelude::*;

fn softmax_input() -> Vec<f32> {
    (0..21).map(|i| ((i * 7) % 11) as f32 * 0.5 - 2.0).collect()
}

#[test]
fn softmax_runs_on_the_cpu_end_to_end() {
    let device = Device::cpu();
    let x = softmax_input();
    let xb = device.upload(&x).unwrap();
    let mut out = device.alloc::<f32>(21).unwrap();

    let ran = softmax::run(&device, &xb, &mut out).unwrap();
    assert_eq!(ran.backend, Backend::Cpu);
    assert!(ran.variant.is_none());
    assert_eq!(ran.to_string(), "cpu reference");

    let y = device.download(&out).unwrap();
    let mut expected = vec![0.0; 21];
    softmax::reference(&x, &mut expected).unwrap();
    assert_eq!(y, expected);
    for row in y.chunks(7) {
        let sum: f32 = row.iter().sum();
        assert!((sum - 1.0).abs() < 1e-6, "row sums to {sum}");
    }
    // Independent of the generated reference: row 0 by hand.
    let row0 = &x[..7];
    let mx = row0.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let s: f32 = row0.iter().map(|v| (v - mx).exp()).sum();
    assert!((y[3] - (row0[3] - mx).exp() / s).abs() < 1e-7);
}

#[test]
fn mixed_dtype_kernel_runs_on_the_cpu() {
    let device = Device::cpu();
    let x: Vec<bf16> = (0..1000).map(|i| bf16::from_f32(i as f32 / 3.0)).collect();
    let w: Vec<f32> = (0..1000).map(|i| 1.0 / (i as f32 + 1.0)).collect();
    let (xb, wb) = (device.upload(&x).unwrap(), device.upload(&w).unwrap());
    let mut out = device.alloc::<bf16>(1000).unwrap();

    scale_add::run(&device, &xb, &wb, &mut out).unwrap();

    let y = device.download(&out).unwrap();
    for i in 0..1000 {
        assert_eq!(
            y[i],
            bf16::from_f32(2.0 * x[i].to_f32() + w[i]),
            "element {i}"
        );
    }
}

#[test]
fn wrong_input_length_names_kernel_and_tensor() {
    let device = Device::cpu();
    let x = device.upload(&[0.0f32; 20]).unwrap();
    let mut out = device.alloc::<f32>(21).unwrap();
    let err = softmax::run(&device, &x, &mut out).unwrap_err();
    assert_eq!(
        err,
        Error::LengthMismatch {
            kernel: "softmax",
            tensor: "x",
            expected: 21,
            actual: 20
        }
    );
    let message = err.to_string();
    assert!(
        message.contains("`softmax`") && message.contains("`x`"),
        "{message}"
    );
    assert!(
        message.contains("21") && message.contains("20"),
        "{message}"
    );
}

#[test]
fn wrong_output_length_is_reported_and_output_untouched() {
    let device = Device::cpu();
    let x = device.upload(&softmax_input()).unwrap();
    let mut out = device.upload(&[7.0f32; 22]).unwrap();
    let err = softmax::run(&device, &x, &mut out).unwrap_err();
    assert!(matches!(
        err,
        Error::LengthMismatch {
            kernel: "softmax",
            tensor: "out",
            expected: 21,
            actual: 22
        }
    ));
    assert_eq!(device.download(&out).unwrap(), [7.0; 22]);
}

#[test]
fn reference_checks_lengths_too() {
    let mut out = [0.0f32; 21];
    assert!(matches!(
        softmax::reference(&[0.0; 3], &mut out),
        Err(Error::LengthMismatch { tensor: "x", .. })
    ));
    let w = [0.0f32; 1000];
    let mut out = [bf16::ZERO; 1000];
    assert!(matches!(
        scale_add::reference(&[bf16::ZERO; 1000], &w[..999], &mut out),
        Err(Error::LengthMismatch {
            kernel: "scale_add",
            tensor: "w",
            expected: 1000,
            actual: 999
        })
    ));
}

#[test]
fn cpu_buffer_given_to_the_gpu_path_is_a_backend_mismatch() {
    // What `run` does on a CUDA device with a buffer that lives on the host
    // (the opposite case needs a GPU to make the buffer: see gpu.rs).
    let x = Device::cpu().upload(&[0.0f32; 21]).unwrap();
    let err = __private::cuda_slice(&softmax::KERNEL, 0, &x).unwrap_err();
    assert_eq!(
        err,
        Error::BackendMismatch {
            kernel: "softmax",
            tensor: "x",
            expected: Backend::Cuda,
            actual: Backend::Cpu
        }
    );
    let message = err.to_string();
    assert!(
        message.contains("`softmax`") && message.contains("`x`"),
        "{message}"
    );
    assert!(
        message.contains("cpu buffer") && message.contains("runs on cuda"),
        "{message}"
    );

    let mut out = Device::cpu().alloc::<f32>(21).unwrap();
    assert!(matches!(
        __private::cuda_slice_mut(&softmax::KERNEL, 1, &mut out),
        Err(Error::BackendMismatch { tensor: "out", .. })
    ));
}

#[test]
fn tensor_index_out_of_range_is_a_generated_code_error() {
    let err = __private::check_len(&softmax::KERNEL, 2, 21).unwrap_err();
    assert!(
        matches!(
            err,
            Error::GeneratedCode {
                kernel: "softmax",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("ktune-macros"), "{err}");
}

#[test]
fn stale_build_is_detected() {
    assert_eq!(
        __private::check_build(&softmax::KERNEL, softmax::CHECKSUM),
        Ok(())
    );
    let err = __private::check_build(&softmax::KERNEL, "0000").unwrap_err();
    assert_eq!(err, Error::StaleBuild { kernel: "softmax" });
    assert!(err.to_string().contains("rebuild"), "{err}");
    const _: () = assert!(__private::same_checksum(
        softmax::CHECKSUM,
        "0123456789abcdef"
    ));
    assert!(!__private::same_checksum("abc", "abd"));
    assert!(!__private::same_checksum("abc", "ab"));
}

#[test]
fn kernel_info_accessors() {
    let k = &scale_add::KERNEL;
    assert_eq!(k.dim("N"), Some(1000));
    assert_eq!(k.dim("M"), None);
    let names: Vec<_> = k.tensors().map(|t| t.name).collect();
    assert_eq!(names, ["x", "w", "out"]);
    assert_eq!(k.tensor(2).map(|t| t.dtype), Some("bf16"));
    assert!(k.tensor(3).is_none());
}

#[test]
fn the_cuda_path_with_a_cpu_device_is_a_generated_code_error() {
    let err = __private::stream(&Device::cpu(), &softmax::KERNEL).unwrap_err();
    assert!(
        matches!(
            err,
            Error::GeneratedCode {
                kernel: "softmax",
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn variants_are_reachable_for_reports() {
    let labels: Vec<_> = softmax::variants().iter().map(|v| v.label()).collect();
    assert_eq!(labels, ["sm_99 Imaginary GPU 9000", "sm_80 default"]);
}

#[test]
fn devices_and_buffers_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Device>();
    send_sync::<Buffer<bf16>>();
    send_sync::<Error>();
    send_sync::<ktune::Ran>();
}

#[test]
fn for_each_row_covers_every_row_and_tolerates_empty_rows() {
    let mut out = vec![0usize; 12];
    __private::for_each_row(&mut out, 4, |r, row| row.iter_mut().for_each(|v| *v = r));
    assert_eq!(out, [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]);
    let mut none: Vec<f32> = Vec::new();
    __private::for_each_row(&mut none, 0, |_, _| unreachable!());
}
