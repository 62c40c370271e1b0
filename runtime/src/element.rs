//! Element types of tensors.

use std::fmt::Debug;

use cudarc::driver::{DeviceRepr, ValidAsZeroBits};
use half::{bf16, f16};

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// A type tensors can hold: [`f32`], [`f16`](struct@crate::f16) or [`bf16`].
///
/// Kernels compute in `f32`; 16-bit elements are widened on load and rounded
/// to nearest, ties to even, on store. This trait is sealed: the generated GPU
/// code knows exactly these three types.
///
/// ```
/// use ktune::{Element, bf16};
///
/// assert_eq!(bf16::DTYPE_NAME, "bf16");
/// assert_eq!(bf16::from_f32(1.5).to_f32(), 1.5);
/// ```
pub trait Element:
    sealed::Sealed
    + Copy
    + Default
    + PartialEq
    + PartialOrd
    + Debug
    + Send
    + Sync
    + Unpin
    + DeviceRepr
    + ValidAsZeroBits
    + 'static
{
    /// The name used in kernel signatures: `"f32"`, `"f16"` or `"bf16"`.
    const DTYPE_NAME: &'static str;

    /// Widens to `f32` (exact).
    fn to_f32(self) -> f32;

    /// Rounds an `f32` to this type, to nearest with ties to even (exact for `f32`).
    fn from_f32(value: f32) -> Self;
}

impl Element for f32 {
    const DTYPE_NAME: &'static str = "f32";

    #[inline]
    fn to_f32(self) -> f32 {
        self
    }

    #[inline]
    fn from_f32(value: f32) -> Self {
        value
    }
}

impl Element for f16 {
    const DTYPE_NAME: &'static str = "f16";

    #[inline]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }

    #[inline]
    fn from_f32(value: f32) -> Self {
        f16::from_f32(value)
    }
}

impl Element for bf16 {
    const DTYPE_NAME: &'static str = "bf16";

    #[inline]
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }

    #[inline]
    fn from_f32(value: f32) -> Self {
        bf16::from_f32(value)
    }
}
