//! `KTUNE_BACKEND` parsing, through the pure function `from_env` uses (no
//! test sets the process environment).

use ktune::{Backend, Error};

#[test]
fn unset_or_empty_means_cuda() {
    assert_eq!(Backend::from_env_value(None), Ok(Backend::Cuda));
    assert_eq!(Backend::from_env_value(Some("")), Ok(Backend::Cuda));
    assert_eq!(Backend::from_env_value(Some("  ")), Ok(Backend::Cuda));
}

#[test]
fn names_are_accepted_ignoring_case_and_whitespace() {
    assert_eq!(Backend::from_env_value(Some("cpu")), Ok(Backend::Cpu));
    assert_eq!(Backend::from_env_value(Some("CPU")), Ok(Backend::Cpu));
    assert_eq!(Backend::from_env_value(Some(" cpu\n")), Ok(Backend::Cpu));
    assert_eq!(Backend::from_env_value(Some("cuda")), Ok(Backend::Cuda));
    assert_eq!(Backend::from_env_value(Some("Cuda")), Ok(Backend::Cuda));
    assert_eq!("cpu".parse::<Backend>(), Ok(Backend::Cpu));
}

#[test]
fn unknown_values_are_errors_naming_value_and_choices() {
    for value in ["gpu", "vgpu2", "cuda:0", "0", "cpu,cuda"] {
        let err = Backend::from_env_value(Some(value)).unwrap_err();
        assert_eq!(
            err,
            Error::InvalidBackend {
                value: value.to_owned()
            }
        );
        let message = err.to_string();
        assert!(
            message.contains(&format!("KTUNE_BACKEND=`{value}`")),
            "{message}"
        );
        assert!(message.contains("cpu, cuda, vgpu"), "{message}");
    }
}

#[test]
fn display_and_name() {
    assert_eq!(Backend::Cuda.to_string(), "cuda");
    assert_eq!(Backend::Cpu.to_string(), "cpu");
    assert_eq!(Backend::ENV_VAR, "KTUNE_BACKEND");
    for backend in Backend::ALL {
        assert_eq!(backend.name().parse::<Backend>(), Ok(*backend));
    }
}
