//! Tensor maps: the descriptors through which Hopper's tensor memory
//! accelerator copies tiles, which a variant's kernel takes by value
//! after its pointers. The variant table describes each
//! ([`TensorMapSpec`]); the driver encodes it for the buffer of each
//! launch ([`encode`]).

use cudarc::driver::sys::{
    self, CUdeviceptr, CUtensorMap, CUtensorMapDataType, CUtensorMapFloatOOBfill,
    CUtensorMapInterleave, CUtensorMapL2promotion, CUtensorMapSwizzle,
};
use cudarc::driver::{DeviceRepr, DriverError};

/// One tensor map a variant's kernel takes: a tiled view of the buffer of
/// pointer parameter `param`, as the kernel's PTX states it in a comment.
#[derive(Debug)]
pub struct TensorMapSpec {
    /// The pointer parameter (an input) whose buffer the map describes.
    pub param: usize,
    /// The element type: `"f32"`, `"f16"` or `"bf16"`.
    pub dtype: &'static str,
    /// Extents in elements, innermost first.
    pub dims: &'static [u64],
    /// Byte strides of the dimensions after the first.
    pub strides: &'static [u64],
    /// The box one copy moves, in elements, innermost first.
    pub boxed: &'static [u32],
    /// The span in bytes within which a copy permutes each row's 16-byte
    /// chunks (32, 64 or 128), or 0 for none.
    pub swizzle: u32,
}

impl TensorMapSpec {
    /// The map encoded for the buffer at `address`.
    pub fn encode(&self, address: CUdeviceptr) -> Result<EncodedMap, DriverError> {
        encode(
            address,
            self.dtype,
            (self.dims, self.strides, self.boxed),
            self.swizzle,
        )
    }
}

/// A tensor map the driver encoded, passed to a launch by value: its 128
/// bytes, 64-byte aligned, are what the kernel's `.param .align 64 .b8
/// map_i[128]` receives.
#[derive(Debug, Clone, Copy)]
#[repr(transparent)]
pub struct EncodedMap(CUtensorMap);

// SAFETY: `CUtensorMap` is plain bytes (`repr(C)`, 64-byte aligned), the
// layout the kernel's parameter declares.
unsafe impl DeviceRepr for EncodedMap {}

/// Encodes a tiled tensor map of the buffer at `address`: elements of
/// `dtype`, `dims` and `strides` as [`TensorMapSpec`] has them, copies of
/// `boxed` elements, rows permuted within `swizzle` bytes (0: not),
/// elements outside the tensor read as zero. The driver checks what it
/// requires (alignment, ranges) and refuses with an error.
pub fn encode(
    address: CUdeviceptr,
    dtype: &str,
    (dims, strides, boxed): (&[u64], &[u64], &[u32]),
    swizzle: u32,
) -> Result<EncodedMap, DriverError> {
    let invalid = DriverError(sys::CUresult::CUDA_ERROR_INVALID_VALUE);
    let data_type = match dtype {
        "f32" => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
        "f16" => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        "bf16" => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        _ => return Err(invalid),
    };
    let swizzle = match swizzle {
        0 => CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_NONE,
        32 => CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_32B,
        64 => CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_64B,
        128 => CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
        _ => return Err(invalid),
    };
    let rank = dims.len();
    if rank == 0 || strides.len() + 1 != rank || boxed.len() != rank {
        return Err(invalid);
    }
    let element_strides = vec![1u32; rank];
    let mut map = CUtensorMap { opaque: [0; 16] };
    // SAFETY: every array holds `rank` elements (`strides` one fewer, as
    // the call reads), checked above; `map` is written, not read. The call
    // only encodes: it neither reads nor writes the buffer.
    unsafe {
        sys::cuTensorMapEncodeTiled(
            &mut map,
            data_type,
            rank as u32,
            address as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxed.as_ptr(),
            element_strides.as_ptr(),
            CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            swizzle,
            CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
            CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    }
    .result()?;
    Ok(EncodedMap(map))
}
