//! Buffers: tensor storage on a GPU or in host memory.

use std::fmt;

use cudarc::driver::CudaSlice;

use crate::{Backend, Element};

/// A tensor's elements, in the memory of the device that runs kernels on it:
/// a CUDA allocation for [`Backend::Cuda`], a `Vec` for [`Backend::Cpu`] and
/// [`Backend::Vgpu`].
///
/// Create buffers with [`Device::upload`](crate::Device::upload) or
/// [`Device::alloc`](crate::Device::alloc), read them back with
/// [`Device::download`](crate::Device::download). A kernel's `run` checks
/// that every buffer it gets lives on the backend of the device it runs on.
///
/// ```
/// # fn main() -> Result<(), ktune::Error> {
/// use ktune::{Backend, Device};
///
/// let cpu = Device::cpu();
/// let x = cpu.upload(&[1.0f32, 2.0, 3.0])?;
/// assert_eq!(x.len(), 3);
/// assert_eq!(x.backend(), Backend::Cpu);
/// assert_eq!(cpu.download(&x)?, [1.0, 2.0, 3.0]);
/// # Ok(()) }
/// ```
pub struct Buffer<T: Element> {
    pub(crate) repr: Repr<T>,
}

pub(crate) enum Repr<T> {
    Cuda(CudaSlice<T>),
    Host(Vec<T>),
}

impl<T: Element> Buffer<T> {
    /// Wraps a cudarc allocation, e.g. one the application already has.
    pub fn from_cuda_slice(slice: CudaSlice<T>) -> Buffer<T> {
        Buffer {
            repr: Repr::Cuda(slice),
        }
    }

    /// Wraps host memory as a CPU-backend buffer.
    pub fn from_vec(data: Vec<T>) -> Buffer<T> {
        Buffer {
            repr: Repr::Host(data),
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::Cuda(slice) => slice.len(),
            Repr::Host(data) => data.len(),
        }
    }

    /// Whether the buffer has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The backend whose memory holds the elements: [`Backend::Cuda`] for
    /// GPU memory, [`Backend::Cpu`] for host memory (which the virtual GPU
    /// backend uses too).
    pub fn backend(&self) -> Backend {
        match &self.repr {
            Repr::Cuda(_) => Backend::Cuda,
            Repr::Host(_) => Backend::Cpu,
        }
    }

    /// The CUDA allocation, for use with cudarc or a kernel's `launch`;
    /// `None` for a CPU buffer.
    pub fn as_cuda_slice(&self) -> Option<&CudaSlice<T>> {
        match &self.repr {
            Repr::Cuda(slice) => Some(slice),
            Repr::Host(_) => None,
        }
    }

    /// The CUDA allocation, mutably; `None` for a CPU buffer.
    pub fn as_cuda_slice_mut(&mut self) -> Option<&mut CudaSlice<T>> {
        match &mut self.repr {
            Repr::Cuda(slice) => Some(slice),
            Repr::Host(_) => None,
        }
    }

    /// The elements of a CPU buffer; `None` for a GPU buffer (use
    /// [`Device::download`](crate::Device::download)).
    pub fn as_host_slice(&self) -> Option<&[T]> {
        match &self.repr {
            Repr::Host(data) => Some(data),
            Repr::Cuda(_) => None,
        }
    }

    /// The elements of a CPU buffer, mutably; `None` for a GPU buffer.
    pub fn as_host_slice_mut(&mut self) -> Option<&mut [T]> {
        match &mut self.repr {
            Repr::Host(data) => Some(data),
            Repr::Cuda(_) => None,
        }
    }
}

impl<T: Element> fmt::Debug for Buffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buffer")
            .field("backend", &self.backend())
            .field("dtype", &T::DTYPE_NAME)
            .field("len", &self.len())
            .finish()
    }
}
