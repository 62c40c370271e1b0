//! Backends and the `KTUNE_BACKEND` setting.

use std::fmt;
use std::str::FromStr;

use crate::Error;

/// Where kernels run.
///
/// A virtual-GPU backend that executes the generated PTX on the CPU is
/// planned; adding it will add a variant here (generated code matches on
/// this enum and is regenerated with it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// An NVIDIA GPU through the CUDA driver, running the tuned PTX.
    Cuda,
    /// The CPU, running each kernel's reference implementation (parallel
    /// over the output's outermost dimension). Exact, but slow.
    Cpu,
}

impl Backend {
    /// The environment variable [`Device::from_env`](crate::Device::from_env) reads.
    pub const ENV_VAR: &'static str = "KTUNE_BACKEND";

    /// Every backend, in the order their names are listed in messages.
    pub const ALL: &'static [Backend] = &[Backend::Cpu, Backend::Cuda];

    /// The backend's name as accepted in `KTUNE_BACKEND` and printed by `Display`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Cuda => "cuda",
            Backend::Cpu => "cpu",
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

    /// Parses a backend name (`cpu`, `cuda`), ignoring ASCII case and
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

/// "cpu, cuda", for messages.
pub(crate) fn accepted_list() -> String {
    Backend::ALL
        .iter()
        .map(|backend| backend.name())
        .collect::<Vec<_>>()
        .join(", ")
}
