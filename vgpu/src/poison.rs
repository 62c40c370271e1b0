//! Poisoned output buffers, so that elements a kernel never wrote are
//! detected instead of passing for zeros.

use ktune_core::DType;

/// The f32 poison: a quiet NaN with a payload no GPU arithmetic produces
/// (GPUs return the canonical NaN `0x7fffffff`).
pub const POISON_F32: u32 = 0x7fc0_dead;

/// The 16-bit poison: a NaN both as f16 and as bf16, and not the canonical
/// `0x7fff`.
pub const POISON_16: u16 = 0x7fde;

/// A buffer of `elements` elements of `dtype`, every one poisoned.
pub fn poisoned(dtype: DType, elements: usize) -> Vec<u8> {
    match dtype {
        DType::F32 => POISON_F32.to_le_bytes().repeat(elements),
        DType::F16 | DType::Bf16 => POISON_16.to_le_bytes().repeat(elements),
    }
}

/// The index of the first element of `bytes` (elements of `dtype`) that
/// still holds the poison pattern.
pub fn first_poisoned(dtype: DType, bytes: &[u8]) -> Option<usize> {
    match dtype {
        DType::F32 => bytes
            .chunks_exact(4)
            .position(|c| c == POISON_F32.to_le_bytes()),
        DType::F16 | DType::Bf16 => bytes
            .chunks_exact(2)
            .position(|c| c == POISON_16.to_le_bytes()),
    }
}
