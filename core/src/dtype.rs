//! Element types of tensors.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The storage type of a tensor's elements.
///
/// Every computation happens in `f32`; 16-bit types are converted on load and
/// rounded (to nearest even) on store or on an explicit cast.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F32,
    F16,
    Bf16,
}

impl DType {
    pub const ALL: [DType; 3] = [DType::F32, DType::F16, DType::Bf16];

    /// The name used in kernel signatures (`f32`, `f16`, `bf16`).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
        }
    }

    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }

    /// Size of one element in bytes.
    pub fn size(self) -> u32 {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::Bf16 => 2,
        }
    }

    /// The largest relative error expected between two correct evaluations
    /// of the same formula that differ only in the order of f32 operations
    /// and in the rounding of the stored result.
    pub fn tolerance(self) -> f32 {
        match self {
            DType::F32 => 1e-5,
            DType::F16 | DType::Bf16 => 1e-2,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
