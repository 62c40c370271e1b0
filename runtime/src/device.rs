//! Devices: a CUDA context and stream, the CPU, or the virtual GPU.

use std::fmt;
use std::sync::Arc;

use cudarc::driver::result::DriverError;
use cudarc::driver::sys::{CUdevice_attribute, CUresult};
use cudarc::driver::{CudaContext, CudaStream};

use crate::buffer::Repr;
use crate::{Backend, Buffer, Element, Error, probe};

/// Where kernels run and buffers live: one CUDA GPU (a context and a stream
/// on it), the CPU, or ktune's virtual GPU (host memory, like the CPU).
///
/// Cloning is cheap and shares the context and stream.
///
/// ```no_run
/// # fn main() -> Result<(), ktune::Error> {
/// use ktune::Device;
///
/// let gpu = Device::cuda(0)?;
/// println!("{gpu}"); // cuda:0 NVIDIA H200 (sm_90, 132 SMs)
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Device {
    inner: Inner,
}

#[derive(Clone)]
enum Inner {
    Cuda(Arc<Gpu>),
    Cpu(Arc<Cpu>),
    #[cfg(feature = "vgpu")]
    Vgpu,
}

struct Gpu {
    context: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    name: String,
    compute_capability: (u32, u32),
    sm_count: u32,
}

struct Cpu {
    name: String,
    fallback_reason: Option<Error>,
}

impl Device {
    /// The CUDA GPU with this ordinal (0 is the first), using its primary
    /// context and that context's default stream.
    ///
    /// # Errors
    ///
    /// [`Error::NoDriver`] when the CUDA driver library is not installed (any
    /// machine without an NVIDIA GPU), [`Error::NoDevice`] when the driver
    /// sees no GPU with this ordinal, [`Error::Driver`] when the driver fails.
    /// Never panics, with or without a GPU.
    pub fn cuda(ordinal: usize) -> Result<Device, Error> {
        if !probe::driver_present() {
            return Err(Error::NoDriver);
        }
        let no_device = |available| Error::NoDevice { ordinal, available };
        match cudarc::driver::result::init() {
            Ok(()) => {}
            Err(DriverError(CUresult::CUDA_ERROR_NO_DEVICE)) => return Err(no_device(0)),
            Err(DriverError(CUresult::CUDA_ERROR_STUB_LIBRARY)) => return Err(Error::NoDriver),
            Err(e) => return Err(Error::driver("initialising the CUDA driver (cuInit)", e)),
        }
        let count =
            CudaContext::device_count().map_err(|e| Error::driver("counting CUDA devices", e))?;
        let count = usize::try_from(count).unwrap_or(0);
        if ordinal >= count {
            return Err(no_device(count));
        }
        let context = CudaContext::new(ordinal).map_err(|e| {
            Error::driver(format!("creating a context on CUDA device {ordinal}"), e)
        })?;
        let stream = context.default_stream();
        Device::from_stream(stream)
    }

    /// A device for a stream the application already has (from cudarc), so
    /// that ktune's kernels run in order with the application's own work.
    ///
    /// # Errors
    ///
    /// [`Error::Driver`] when the device's name or attributes cannot be read.
    pub fn from_stream(stream: Arc<CudaStream>) -> Result<Device, Error> {
        let context = stream.context().clone();
        let ordinal = context.ordinal();
        let query = |what: &str| format!("reading the {what} of CUDA device {ordinal}");
        let name = context
            .name()
            .map_err(|e| Error::driver(query("name"), e))?;
        let (major, minor) = context
            .compute_capability()
            .map_err(|e| Error::driver(query("compute capability"), e))?;
        let sm_count = context
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(|e| Error::driver(query("multiprocessor count"), e))?;
        let nonnegative = |v: i32| u32::try_from(v).unwrap_or(0);
        Ok(Device {
            inner: Inner::Cuda(Arc::new(Gpu {
                context,
                stream,
                name,
                compute_capability: (nonnegative(major), nonnegative(minor)),
                sm_count: nonnegative(sm_count),
            })),
        })
    }

    /// The CPU, running each kernel's reference implementation on rayon's
    /// global thread pool.
    pub fn cpu() -> Device {
        Device::cpu_because(None)
    }

    /// ktune's virtual GPU: kernels run the PTX embedded in the binary — the
    /// variant an sm_80 GPU would get, the baseline every build ships —
    /// parsed once per variant and executed on the CPU thread by thread,
    /// with out-of-bounds accesses, shared-memory races, divergent barriers
    /// and unwritten output elements reported as [`Error::Vgpu`]. Buffers
    /// live in host memory. Thousands of times slower than a GPU: for
    /// checking and debugging the code that ships, not for production.
    ///
    /// Needs the `vgpu` feature of ktune.
    #[cfg(feature = "vgpu")]
    pub fn vgpu() -> Device {
        Device { inner: Inner::Vgpu }
    }

    fn cpu_because(fallback_reason: Option<Error>) -> Device {
        let name = format!("CPU (reference, {} threads)", rayon::current_num_threads());
        Device {
            inner: Inner::Cpu(Arc::new(Cpu {
                name,
                fallback_reason,
            })),
        }
    }

    /// The device `KTUNE_BACKEND` asks for: `cpu` gives the CPU; `vgpu` the
    /// virtual GPU ([`Device::vgpu`]); `cuda`, or the variable unset, gives
    /// the first GPU.
    ///
    /// With no GPU this is an error, not a silent switch to the much slower
    /// CPU; applications that accept the CPU as a fallback use
    /// [`Device::gpu_or_cpu`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidBackend`] for a value that names no backend,
    /// [`Error::VgpuDisabled`] for `vgpu` without the `vgpu` feature, and
    /// the errors of [`Device::cuda`].
    pub fn from_env() -> Result<Device, Error> {
        let value = std::env::var_os(Backend::ENV_VAR);
        let value = value.as_ref().map(|v| v.to_string_lossy());
        match Backend::from_env_value(value.as_deref())? {
            Backend::Cpu => Ok(Device::cpu()),
            Backend::Cuda => Device::cuda(0),
            Backend::Vgpu => Device::vgpu_if_enabled(),
        }
    }

    #[cfg(feature = "vgpu")]
    fn vgpu_if_enabled() -> Result<Device, Error> {
        Ok(Device::vgpu())
    }

    #[cfg(not(feature = "vgpu"))]
    fn vgpu_if_enabled() -> Result<Device, Error> {
        Err(Error::VgpuDisabled)
    }

    /// What [`Device::from_env`] gives, or the CPU where that is an error (no
    /// GPU, or a `KTUNE_BACKEND` value ktune does not know); the error is kept
    /// as [`Device::fallback_reason`] so the application can tell its user.
    ///
    /// ```
    /// let device = ktune::Device::gpu_or_cpu();
    /// if let Some(reason) = device.fallback_reason() {
    ///     eprintln!("running on the CPU: {}", reason.without_advice());
    /// }
    /// ```
    pub fn gpu_or_cpu() -> Device {
        Device::from_env().unwrap_or_else(|e| Device::cpu_because(Some(e)))
    }

    /// Whether the CUDA driver library can be loaded on this machine. False
    /// means [`Device::cuda`] returns [`Error::NoDriver`].
    pub fn cuda_driver_present() -> bool {
        probe::driver_present()
    }

    /// The backend kernels run on.
    pub fn backend(&self) -> Backend {
        match &self.inner {
            Inner::Cuda(_) => Backend::Cuda,
            Inner::Cpu(_) => Backend::Cpu,
            #[cfg(feature = "vgpu")]
            Inner::Vgpu => Backend::Vgpu,
        }
    }

    /// The GPU model as the driver names it (the key of ktune's tuning
    /// database), e.g. `"NVIDIA H200"`, or `"CPU (reference, 16 threads)"`.
    pub fn name(&self) -> &str {
        match &self.inner {
            Inner::Cuda(gpu) => &gpu.name,
            Inner::Cpu(cpu) => &cpu.name,
            #[cfg(feature = "vgpu")]
            Inner::Vgpu => crate::vgpu::VGPU_NAME,
        }
    }

    /// The GPU's compute capability `(major, minor)`, e.g. `(9, 0)`; `None` on the CPU.
    pub fn compute_capability(&self) -> Option<(u32, u32)> {
        self.gpu().map(|gpu| gpu.compute_capability)
    }

    /// The GPU's number of streaming multiprocessors; `None` on the CPU.
    pub fn sm_count(&self) -> Option<u32> {
        self.gpu().map(|gpu| gpu.sm_count)
    }

    /// The CUDA context; `None` on the CPU.
    pub fn context(&self) -> Option<&Arc<CudaContext>> {
        self.gpu().map(|gpu| &gpu.context)
    }

    /// The stream kernels are launched on and copies are made on; `None` on
    /// the CPU.
    pub fn stream(&self) -> Option<&Arc<CudaStream>> {
        self.gpu().map(|gpu| &gpu.stream)
    }

    /// Why [`Device::gpu_or_cpu`] chose the CPU; `None` for a device that was
    /// asked for.
    pub fn fallback_reason(&self) -> Option<&Error> {
        match &self.inner {
            Inner::Cpu(cpu) => cpu.fallback_reason.as_ref(),
            Inner::Cuda(_) => None,
            #[cfg(feature = "vgpu")]
            #[cfg(feature = "vgpu")]
            Inner::Vgpu => None,
        }
    }

    /// Waits until all work queued on the device's stream is done (a no-op on
    /// the CPU and the virtual GPU, where kernels finish before they return).
    ///
    /// # Errors
    ///
    /// [`Error::Driver`], which is also where errors of earlier asynchronous
    /// kernel launches show up.
    pub fn synchronize(&self) -> Result<(), Error> {
        match self.gpu() {
            Some(gpu) => gpu
                .stream
                .synchronize()
                .map_err(|e| Error::driver(format!("synchronizing {self}"), e)),
            None => Ok(()),
        }
    }

    /// Copies `data` to a new buffer on this device.
    ///
    /// # Errors
    ///
    /// [`Error::Driver`] when device memory cannot be allocated or written.
    pub fn upload<T: Element>(&self, data: &[T]) -> Result<Buffer<T>, Error> {
        match self.gpu() {
            Some(gpu) => gpu
                .stream
                .clone_htod(data)
                .map(Buffer::from_cuda_slice)
                .map_err(|e| Error::driver(self.copy_context("uploading", data.len()), e)),
            None => Ok(Buffer::from_vec(data.to_vec())),
        }
    }

    /// A new buffer of `len` zeros on this device.
    ///
    /// # Errors
    ///
    /// [`Error::Driver`] when device memory cannot be allocated.
    pub fn alloc<T: Element>(&self, len: usize) -> Result<Buffer<T>, Error> {
        match self.gpu() {
            Some(gpu) => gpu
                .stream
                .alloc_zeros(len)
                .map(Buffer::from_cuda_slice)
                .map_err(|e| Error::driver(self.copy_context("allocating", len), e)),
            None => Ok(Buffer::from_vec(vec![T::default(); len])),
        }
    }

    /// Copies a buffer's contents to the host, after all work queued on it
    /// so far.
    ///
    /// A GPU buffer is read on its own stream, whichever device is asked,
    /// and the copy is complete when this returns.
    ///
    /// # Errors
    ///
    /// [`Error::Driver`], which is also where errors of earlier asynchronous
    /// kernel launches that wrote the buffer show up.
    pub fn download<T: Element>(&self, buffer: &Buffer<T>) -> Result<Vec<T>, Error> {
        match &buffer.repr {
            Repr::Cuda(slice) => {
                let context = || self.copy_context("downloading", slice.len());
                let stream = slice.stream();
                let data = stream
                    .clone_dtoh(slice)
                    .map_err(|e| Error::driver(context(), e))?;
                stream
                    .synchronize()
                    .map_err(|e| Error::driver(context(), e))?;
                Ok(data)
            }
            Repr::Host(data) => Ok(data.clone()),
        }
    }

    fn gpu(&self) -> Option<&Gpu> {
        match &self.inner {
            Inner::Cuda(gpu) => Some(gpu),
            Inner::Cpu(_) => None,
            #[cfg(feature = "vgpu")]
            #[cfg(feature = "vgpu")]
            Inner::Vgpu => None,
        }
    }

    fn copy_context(&self, what: &str, len: usize) -> String {
        format!("{what} {len} elements on {self}")
    }
}

impl fmt::Display for Device {
    /// `cuda:0 NVIDIA H200 (sm_90, 132 SMs)` or `CPU (reference, 16 threads)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            Inner::Cuda(gpu) => {
                let (major, minor) = gpu.compute_capability;
                write!(
                    f,
                    "cuda:{} {} (sm_{major}{minor}, {} SMs)",
                    gpu.context.ordinal(),
                    gpu.name,
                    gpu.sm_count
                )
            }
            Inner::Cpu(cpu) => f.write_str(&cpu.name),
            #[cfg(feature = "vgpu")]
            Inner::Vgpu => f.write_str(crate::vgpu::VGPU_NAME),
        }
    }
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            Inner::Cuda(gpu) => f
                .debug_struct("Device")
                .field("backend", &Backend::Cuda)
                .field("ordinal", &gpu.context.ordinal())
                .field("name", &gpu.name)
                .field("compute_capability", &gpu.compute_capability)
                .field("sm_count", &gpu.sm_count)
                .finish_non_exhaustive(),
            Inner::Cpu(cpu) => f
                .debug_struct("Device")
                .field("backend", &Backend::Cpu)
                .field("name", &cpu.name)
                .field("fallback_reason", &cpu.fallback_reason)
                .finish(),
            #[cfg(feature = "vgpu")]
            Inner::Vgpu => f
                .debug_struct("Device")
                .field("backend", &Backend::Vgpu)
                .finish(),
        }
    }
}
