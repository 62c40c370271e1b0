//! Not public API: what `#[tuned_kernel]` expansions and the build helper's
//! output call. Changes with the macro, in lockstep (the crates pin each
//! other's exact version).
//!
//! Generated code contains no `unsafe`: everything that needs it is here.

pub mod math;

pub use cudarc;
pub use half;
pub use rayon;

pub use crate::launch::{DeviceArg, DeviceArgMut, launch, module_loads};
pub use crate::resident::resident_blocks;
pub use crate::select::select_variant;
pub use crate::tensor_map::{EncodedMap, TensorMapSpec, encode as encode_tensor_map};
pub use crate::vgpu::{HostArg, HostArgMut, run_vgpu};
pub use crate::workspace::workspace_allocations;
pub use crate::{Element, KernelInfo, TensorInfo, Variant};

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};

use crate::buffer::Repr;
use crate::{Backend, Buffer, Device, Error};

/// Checks that tensor `tensor` of `kernel` (input `tensor`, or the output
/// for `tensor == kernel.inputs.len()`) has `actual` elements.
///
/// # Errors
///
/// [`Error::LengthMismatch`]; [`Error::GeneratedCode`] for an index out of range.
pub fn check_len(kernel: &'static KernelInfo, tensor: usize, actual: usize) -> Result<(), Error> {
    let info = tensor_info(kernel, tensor)?;
    if actual == info.len {
        Ok(())
    } else {
        Err(Error::LengthMismatch {
            kernel: kernel.name,
            tensor: info.name,
            expected: info.len,
            actual,
        })
    }
}

/// Checks that the build outputs were generated from the kernel source the
/// macro saw: `built_checksum` is the checksum the build helper recorded.
///
/// # Errors
///
/// [`Error::StaleBuild`] when they differ.
pub fn check_build(kernel: &'static KernelInfo, built_checksum: &str) -> Result<(), Error> {
    if kernel.checksum == built_checksum {
        Ok(())
    } else {
        Err(Error::StaleBuild {
            kernel: kernel.name,
        })
    }
}

/// `a == b` in a `const` context, for a compile-time stale-build check:
/// `const _: () = assert!(same_checksum(SOURCE, BUILT), "...");`.
pub const fn same_checksum(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The stream of a CUDA device, for the `Backend::Cuda` arm of a kernel's
/// `run`.
///
/// # Errors
///
/// [`Error::GeneratedCode`] for a CPU device, which `run` never passes here.
pub fn stream<'d>(
    device: &'d Device,
    kernel: &'static KernelInfo,
) -> Result<&'d Arc<CudaStream>, Error> {
    device.stream().ok_or_else(|| Error::GeneratedCode {
        kernel: kernel.name,
        detail: format!("the CUDA path of `run` was taken for {device}"),
    })
}

/// The elements of a CPU buffer passed as tensor `tensor`, length-checked.
///
/// # Errors
///
/// [`Error::BackendMismatch`] for a GPU buffer, [`Error::LengthMismatch`].
pub fn host_slice<'b, T: Element>(
    kernel: &'static KernelInfo,
    tensor: usize,
    buffer: &'b Buffer<T>,
) -> Result<&'b [T], Error> {
    match &buffer.repr {
        Repr::Host(data) => {
            check_len(kernel, tensor, data.len())?;
            Ok(data)
        }
        Repr::Cuda(_) => Err(backend_mismatch(
            kernel,
            tensor,
            Backend::Cpu,
            Backend::Cuda,
        )),
    }
}

/// [`host_slice`], mutably (for the output).
///
/// # Errors
///
/// [`Error::BackendMismatch`] for a GPU buffer, [`Error::LengthMismatch`].
pub fn host_slice_mut<'b, T: Element>(
    kernel: &'static KernelInfo,
    tensor: usize,
    buffer: &'b mut Buffer<T>,
) -> Result<&'b mut [T], Error> {
    match &mut buffer.repr {
        Repr::Host(data) => {
            check_len(kernel, tensor, data.len())?;
            Ok(data)
        }
        Repr::Cuda(_) => Err(backend_mismatch(
            kernel,
            tensor,
            Backend::Cpu,
            Backend::Cuda,
        )),
    }
}

/// The CUDA allocation of a GPU buffer passed as tensor `tensor`, length-checked.
///
/// # Errors
///
/// [`Error::BackendMismatch`] for a CPU buffer, [`Error::LengthMismatch`].
pub fn cuda_slice<'b, T: Element>(
    kernel: &'static KernelInfo,
    tensor: usize,
    buffer: &'b Buffer<T>,
) -> Result<&'b CudaSlice<T>, Error> {
    match &buffer.repr {
        Repr::Cuda(slice) => {
            check_len(kernel, tensor, slice.len())?;
            Ok(slice)
        }
        Repr::Host(_) => Err(backend_mismatch(
            kernel,
            tensor,
            Backend::Cuda,
            Backend::Cpu,
        )),
    }
}

/// [`cuda_slice`], mutably (for the output).
///
/// # Errors
///
/// [`Error::BackendMismatch`] for a CPU buffer, [`Error::LengthMismatch`].
pub fn cuda_slice_mut<'b, T: Element>(
    kernel: &'static KernelInfo,
    tensor: usize,
    buffer: &'b mut Buffer<T>,
) -> Result<&'b mut CudaSlice<T>, Error> {
    match &mut buffer.repr {
        Repr::Cuda(slice) => {
            check_len(kernel, tensor, slice.len())?;
            Ok(slice)
        }
        Repr::Host(_) => Err(backend_mismatch(
            kernel,
            tensor,
            Backend::Cuda,
            Backend::Cpu,
        )),
    }
}

/// Runs `row(i, chunk)` for each `row_len`-element chunk of `out`, in
/// parallel on rayon's pool: the CPU reference's loop over the output's
/// outermost dimension, without the generated code importing rayon's traits.
/// Does nothing when `row_len` is 0.
pub fn for_each_row<T, F>(out: &mut [T], row_len: usize, row: F)
where
    T: Send,
    F: Fn(usize, &mut [T]) + Sync + Send,
{
    use rayon::prelude::*;
    if row_len == 0 {
        return;
    }
    out.par_chunks_mut(row_len)
        .enumerate()
        .for_each(|(i, chunk)| row(i, chunk));
}

fn tensor_info(
    kernel: &'static KernelInfo,
    tensor: usize,
) -> Result<&'static crate::TensorInfo, Error> {
    kernel.tensor(tensor).ok_or_else(|| Error::GeneratedCode {
        kernel: kernel.name,
        detail: format!(
            "tensor index {tensor} is out of range for {} inputs and an output",
            kernel.inputs.len()
        ),
    })
}

fn backend_mismatch(
    kernel: &'static KernelInfo,
    tensor: usize,
    expected: Backend,
    actual: Backend,
) -> Error {
    match tensor_info(kernel, tensor) {
        Ok(info) => Error::BackendMismatch {
            kernel: kernel.name,
            tensor: info.name,
            expected,
            actual,
        },
        Err(e) => e,
    }
}
