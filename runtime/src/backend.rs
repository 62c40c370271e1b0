//! Backends and the `KTUNE_BACKEND` setting.

use std::fmt;
use std::str::FromStr;

use crate::Error;

/// Where kernels run.
///
/// Every variant exists whatever the crate's features; selecting
/// [`Backend::Vgpu`] without the `vgpu` feature is an
/// [`Error::VgpuDisabled`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// An NVIDIA GPU through the CUDA driver, running the tuned PTX.
    Cuda,
    /// The CPU, running each kernel's reference implementation (parallel
    /// over the output's outermost dimension). Exact, but slow.
    Cpu,
    /// ktune's virtual GPU, on the CPU: parses the PTX embedded in the binary
    /// (the variant an sm_80 GPU would run) and executes it thread by thread
    /// with bounds, race and barrier checks. Very slow; for debugging the
    /// exact code that ships on a machine without a GPU. Needs the `vgpu`
    /// feature of ktune.
    Vgpu,
}

impl Backend {
    /// The environment variable [`Device::from_env`](crate::Device::from_env) reads.
    pub const ENV_VAR: &'static str = "KTUNE_BACKEND";

    /// Every backend, in the order their names are listed in messages.
    pub const ALL: &'static [Backend] = &[Backend::Cpu, Backend::Cuda, Backend::Vgpu];

    /// The backend's name as accepted in `KTUNE_BACKEND` and printed by `Display`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Cuda => "cuda",
            Backend::Cpu => "cpu",
            Backend::Vgpu => "vgpu",
        }
    }

    /// Interprets a value of `KTUNE_BACKEND`: `None` (unset) or an empty
    /// value means [`Backend::Cuda`]; otherwise the value must name a backend
    /// (ASCII case and surrounding whitespace are ignored).
    ///
    /// This is the pure part of [`Device::from_env`](crate::Device::from_env),
    /// for tests and for applications that take the backend from their own
    /// configuration.
    ///
    /// ```
    /// use ktune::{Backend, Error};
    ///
    /// assert_eq!(Backend::from_env_value(None), Ok(Backend::Cuda));
    /// assert_eq!(Backend::from_env_value(Some("cpu")), Ok(Backend::Cpu));
    /// assert!(matches!(
    ///     Backend::from_env_value(Some("gpu")),
    ///     Err(Error::InvalidBackend { value }) if value == "gpu"
    /// ));
    /// ```
    pub fn from_env_value(value: Option<&str>) -> Result<Backend, Error> {
        match value.map(str::trim) {
            None | Some("") => Ok(Backend::Cuda),
            Some(value) => value.parse(),
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Backend {
    type Err = Error;

    /// Parses a backend name (`cpu`, `cuda`, `vgpu`), ignoring ASCII case and
    /// surrounding whitespace.
    fn from_str(s: &str) -> Result<Backend, Error> {
        let name = s.trim();
        Backend::ALL
            .iter()
            .copied()
            .find(|backend| backend.name().eq_ignore_ascii_case(name))
            .ok_or_else(|| Error::InvalidBackend {
                value: s.to_owned(),
            })
    }
}

/// "cpu, cuda, vgpu", for messages.
pub(crate) fn accepted_list() -> String {
    Backend::ALL
        .iter()
        .map(|backend| backend.name())
        .collect::<Vec<_>>()
        .join(", ")
}
