//! The virtual GPU backend: its name and, without the `vgpu` feature, the
//! error that says how to enable it; with the feature (`cargo test -p ktune
//! --features vgpu`), the device and the errors of a run. Runs of real
//! generated PTX against the reference are in `tests/e2e/tests/vgpu.rs`.

mod expanded;

use ktune::{Backend, Error};

#[test]
fn vgpu_is_a_backend_name() {
    assert_eq!(Backend::from_env_value(Some("vgpu")), Ok(Backend::Vgpu));
    assert_eq!(Backend::from_env_value(Some(" VGPU ")), Ok(Backend::Vgpu));
    assert_eq!(Backend::Vgpu.to_string(), "vgpu");
}

#[test]
fn disabled_error_says_how_to_enable_it() {
    let message = Error::VgpuDisabled.to_string();
    assert!(
        message.contains("KTUNE_BACKEND=vgpu needs the `vgpu` feature of the ktune crate"),
        "{message}"
    );
    assert!(message.contains(r#"features = ["vgpu"]"#), "{message}");
}

#[cfg(feature = "vgpu")]
mod enabled {
    use ktune::{Backend, Device, Error};

    use super::expanded;

    #[test]
    fn the_device_keeps_buffers_in_host_memory() -> Result<(), Error> {
        let device = Device::vgpu();
        assert_eq!(device.backend(), Backend::Vgpu);
        assert_eq!(device.compute_capability(), None);
        assert!(device.fallback_reason().is_none());
        assert!(device.to_string().contains("virtual GPU"), "{device}");
        let x = device.upload(&[1.0f32, 2.0])?;
        assert_eq!(x.as_host_slice(), Some(&[1.0, 2.0][..]));
        device.synchronize()?;
        Ok(())
    }

    #[test]
    fn ptx_not_in_the_printed_form_is_an_error_naming_the_line() -> Result<(), Error> {
        // The hand-written PTX of `expanded/` is valid PTX but not the form
        // ktune prints, which is all the virtual GPU reads.
        let device = Device::vgpu();
        let x = device.upload(&[0.5f32; 21])?;
        let mut out = device.alloc::<f32>(21)?;
        let err = expanded::softmax::run(&device, &x, &mut out).unwrap_err();
        let Error::Vgpu {
            kernel,
            variant,
            fault,
        } = &err
        else {
            panic!("expected Error::Vgpu, got {err:?}");
        };
        assert_eq!(*kernel, "softmax");
        assert_eq!(variant, "sm_80 default");
        assert!(
            fault.starts_with("cannot read its embedded PTX: PTX line 1:"),
            "{fault}"
        );
        assert!(
            err.to_string()
                .starts_with("kernel `softmax` (sm_80 default) on the virtual GPU: "),
            "{err}"
        );
        Ok(())
    }

    #[test]
    fn lengths_are_checked_before_running() -> Result<(), Error> {
        let device = Device::vgpu();
        let x = device.upload(&[0.5f32; 20])?;
        let mut out = device.alloc::<f32>(21)?;
        let err = expanded::softmax::run(&device, &x, &mut out).unwrap_err();
        assert!(
            matches!(
                err,
                Error::LengthMismatch {
                    tensor: "x",
                    expected: 21,
                    actual: 20,
                    ..
                }
            ),
            "{err:?}"
        );
        Ok(())
    }
}
