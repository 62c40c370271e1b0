//! Devices on a machine with or without a GPU: every constructor returns,
//! none panics, and errors say what to do.

use ktune::prelude::*;

/// What `KTUNE_BACKEND` asks of this test process (read, never set: tests
/// run in parallel).
fn env_backend() -> Result<Backend, Error> {
    let value = std::env::var(Backend::ENV_VAR).ok();
    Backend::from_env_value(value.as_deref())
}

#[test]
fn cuda_device_is_an_error_not_a_panic_without_a_gpu() {
    if Device::cuda_driver_present() {
        // A GPU machine (or one with a driver and no GPU): an ordinal that
        // cannot exist is still an error, not a panic.
        let err = Device::cuda(usize::MAX).unwrap_err();
        assert!(
            matches!(
                err,
                Error::NoDevice {
                    ordinal: usize::MAX,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("KTUNE_BACKEND=cpu"), "{err}");
    } else {
        let err = Device::cuda(0).unwrap_err();
        assert_eq!(err, Error::NoDriver);
        let message = err.to_string();
        assert!(message.contains("libcuda.so"), "{message}");
        assert!(message.contains("KTUNE_BACKEND=cpu"), "{message}");
        assert!(message.contains("Device::cpu()"), "{message}");
        // And again: the probe is cached, the answer the same.
        assert_eq!(Device::cuda(1).unwrap_err(), Error::NoDriver);
    }
}

#[test]
fn from_env_without_a_gpu_is_an_error_not_a_silent_cpu() {
    if Device::cuda_driver_present() {
        return assert!(Device::from_env().is_ok() || env_backend().is_err());
    }
    match env_backend() {
        Ok(Backend::Cpu) => assert_eq!(Device::from_env().unwrap().backend(), Backend::Cpu),
        Ok(_) => assert_eq!(Device::from_env().unwrap_err(), Error::NoDriver),
        Err(expected) => assert_eq!(Device::from_env().unwrap_err(), expected),
    }
}

#[test]
fn gpu_or_cpu_falls_back_and_says_why() {
    let device = Device::gpu_or_cpu();
    match (device.backend(), env_backend()) {
        (Backend::Cpu, Ok(Backend::Cpu)) => assert!(device.fallback_reason().is_none()),
        (Backend::Cpu, _) => {
            let reason = device.fallback_reason().expect("a reason for the fallback");
            if !Device::cuda_driver_present() && env_backend().is_ok() {
                assert_eq!(reason, &Error::NoDriver);
                // On the CPU already, the user is not told to select it.
                assert!(reason.to_string().contains("select the CPU backend"));
                assert_eq!(
                    reason.without_advice(),
                    "no CUDA driver library (libcuda.so) was found: this machine has no usable \
                     NVIDIA GPU"
                );
            }
        }
        (_, _) => assert!(device.fallback_reason().is_none()),
    }
}

#[test]
fn cpu_device_describes_itself() {
    let cpu = Device::cpu();
    assert_eq!(cpu.backend(), Backend::Cpu);
    let threads = ktune::__private::rayon::current_num_threads();
    assert_eq!(cpu.name(), format!("CPU (reference, {threads} threads)"));
    assert_eq!(cpu.to_string(), cpu.name());
    assert_eq!(cpu.compute_capability(), None);
    assert_eq!(cpu.sm_count(), None);
    assert!(cpu.stream().is_none());
    assert!(cpu.context().is_none());
    assert!(cpu.fallback_reason().is_none());
    assert_eq!(cpu.synchronize(), Ok(()));
    assert!(format!("{cpu:?}").contains("Cpu"));
}

#[test]
fn cpu_buffers_round_trip_every_element_type() {
    let cpu = Device::cpu();
    let a = [1.0f32, -2.5, 3.25];
    assert_eq!(cpu.download(&cpu.upload(&a).unwrap()).unwrap(), a);
    let h = [f16::from_f32(0.5), f16::NEG_INFINITY];
    assert_eq!(cpu.download(&cpu.upload(&h).unwrap()).unwrap(), h);
    let b = [bf16::from_f32(-1.0), bf16::MAX];
    let buffer = cpu.upload(&b).unwrap();
    assert_eq!(buffer.len(), 2);
    assert!(!buffer.is_empty());
    assert_eq!(buffer.backend(), Backend::Cpu);
    assert_eq!(buffer.as_host_slice(), Some(&b[..]));
    assert!(buffer.as_cuda_slice().is_none());
    assert_eq!(cpu.download(&buffer).unwrap(), b);
    assert_eq!(
        format!("{buffer:?}"),
        "Buffer { backend: Cpu, dtype: \"bf16\", len: 2 }"
    );
}

#[test]
fn cpu_alloc_is_zeroed() {
    let cpu = Device::cpu();
    let zeros = cpu.alloc::<bf16>(5).unwrap();
    assert_eq!(cpu.download(&zeros).unwrap(), [bf16::ZERO; 5]);
    let empty = cpu.alloc::<f32>(0).unwrap();
    assert!(empty.is_empty());
}

#[test]
fn buffers_from_host_memory() {
    let mut buffer = ktune::Buffer::from_vec(vec![1.0f32, 2.0]);
    buffer.as_host_slice_mut().unwrap()[1] = 5.0;
    assert_eq!(Device::cpu().download(&buffer).unwrap(), [1.0, 5.0]);
    assert!(buffer.as_cuda_slice_mut().is_none());
}

#[test]
fn an_error_without_its_advice_keeps_what_happened() {
    let error = Error::NoDevice {
        ordinal: 1,
        available: 1,
    };
    let what = "no CUDA device 1: the CUDA driver reports 1 device(s)";
    assert_eq!(error.without_advice(), what);
    assert!(
        error
            .to_string()
            .starts_with(&format!("{what}. Check CUDA_VISIBLE_DEVICES"))
    );
    let invalid = Error::InvalidBackend {
        value: "cdua".into(),
    };
    assert_eq!(invalid.without_advice(), invalid.to_string());
}
