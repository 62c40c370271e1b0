//! Launching a compiled variant: the per-context module cache and the
//! checks that make a launch from safe generated code sound.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use cudarc::driver::sys::{CUdeviceptr, CUfunction_attribute};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig,
    PushKernelArg, SyncOnDrop,
};
use cudarc::nvrtc::Ptx;

use crate::__private::check_len;
use crate::resident::resident_blocks;
use crate::select::select_among;
use crate::workspace::{Pool, Workspace};
use crate::{Element, Error, KernelInfo, Variant};

mod sealed {
    pub trait Sealed {}
    impl<T: crate::Element> Sealed for cudarc::driver::CudaSlice<T> {}
}

/// A kernel input on the GPU: implemented for `CudaSlice<T>` of every
/// [`Element`] type. Sealed, because a launch trusts the pointer it gives.
pub trait DeviceArg: sealed::Sealed {
    /// The element type's name (`"f32"`, `"f16"`, `"bf16"`).
    fn arg_dtype(&self) -> &'static str;
    /// Number of elements.
    fn arg_len(&self) -> usize;
    /// The context the memory belongs to.
    fn arg_context(&self) -> &Arc<CudaContext>;
    /// The device pointer for reading on `stream`, which first waits for
    /// earlier writes; the guard records the read when dropped after the launch.
    fn arg_ptr<'a>(&'a self, stream: &'a CudaStream) -> (CUdeviceptr, SyncOnDrop<'a>);
}

/// A kernel output on the GPU: implemented for `CudaSlice<T>` of every
/// [`Element`] type. Sealed, like [`DeviceArg`].
pub trait DeviceArgMut: sealed::Sealed {
    /// The element type's name (`"f32"`, `"f16"`, `"bf16"`).
    fn arg_dtype(&self) -> &'static str;
    /// Number of elements.
    fn arg_len(&self) -> usize;
    /// The context the memory belongs to.
    fn arg_context(&self) -> &Arc<CudaContext>;
    /// The device pointer for writing on `stream`, which first waits for
    /// earlier reads and writes; the guard records the write when dropped
    /// after the launch.
    fn arg_ptr_mut<'a>(&'a mut self, stream: &'a CudaStream) -> (CUdeviceptr, SyncOnDrop<'a>);
}

impl<T: Element> DeviceArg for CudaSlice<T> {
    fn arg_dtype(&self) -> &'static str {
        T::DTYPE_NAME
    }

    fn arg_len(&self) -> usize {
        self.len()
    }

    fn arg_context(&self) -> &Arc<CudaContext> {
        self.context()
    }

    fn arg_ptr<'a>(&'a self, stream: &'a CudaStream) -> (CUdeviceptr, SyncOnDrop<'a>) {
        self.device_ptr(stream)
    }
}

impl<T: Element> DeviceArgMut for CudaSlice<T> {
    fn arg_dtype(&self) -> &'static str {
        T::DTYPE_NAME
    }

    fn arg_len(&self) -> usize {
        self.len()
    }

    fn arg_context(&self) -> &Arc<CudaContext> {
        self.context()
    }

    fn arg_ptr_mut<'a>(&'a mut self, stream: &'a CudaStream) -> (CUdeviceptr, SyncOnDrop<'a>) {
        self.device_ptr_mut(stream)
    }
}

/// A variant selected for a context, with its function loaded there.
struct Loaded {
    variant: &'static Variant,
    function: CudaFunction,
    /// The grid it is launched with: the variant's, or for a persistent
    /// variant as many blocks as the GPU holds at once.
    grid: [u32; 3],
    /// Split-K's workspaces, when the variant takes one.
    workspaces: Pool,
}

/// (context handle, kernel address, variants address).
///
/// A filled slot holds the loaded module and through it the context, so the
/// context handle in its key stays valid and cannot be reused by another
/// context; an empty slot (after a failed load) holds nothing that could go stale.
type Key = (usize, usize, usize);

/// One slot per key, filled by the first launch; its own lock serialises
/// loads of the same variant without holding up launches of other kernels.
type Slot = Arc<Mutex<Option<Arc<Loaded>>>>;

static LOADED: LazyLock<Mutex<HashMap<Key, Slot>>> = LazyLock::new(Default::default);

static MODULE_LOADS: AtomicUsize = AtomicUsize::new(0);

/// How many variant modules this process has loaded into CUDA contexts, for
/// tests of the once-per-context cache.
pub fn module_loads() -> usize {
    MODULE_LOADS.load(Ordering::Relaxed)
}

/// Launches `kernel` on `stream`, with the variant selected for the stream's
/// device: one kernel parameter per tensor, the device pointers of `inputs`
/// in order and then of `output`. Returns the variant launched.
///
/// The variant's module is loaded into the stream's context on the first
/// launch there and kept for the life of the process (and with it the
/// context). The launch is asynchronous: errors that happen while the kernel
/// runs surface at the next synchronizing call.
///
/// # Errors
///
/// [`Error::GeneratedCode`] when the tensors do not match `kernel` in number
/// or element type, [`Error::LengthMismatch`], [`Error::ContextMismatch`] when
/// a buffer belongs to another context than `stream`, the errors of
/// [`select_variant`](crate::select_variant), [`Error::RegisterShare`] when the driver compiled
/// every variant that could run to fewer registers than its warpgroups
/// hand each other, and [`Error::Driver`] when loading or launching fails.
pub fn launch(
    stream: &Arc<CudaStream>,
    kernel: &'static KernelInfo,
    variants: &'static [Variant],
    inputs: &[&dyn DeviceArg],
    output: &mut dyn DeviceArgMut,
) -> Result<&'static Variant, Error> {
    if inputs.len() != kernel.inputs.len() {
        return Err(Error::GeneratedCode {
            kernel: kernel.name,
            detail: format!(
                "launch got {} inputs, the kernel declares {}",
                inputs.len(),
                kernel.inputs.len()
            ),
        });
    }
    let context = stream.context();
    for (i, input) in inputs.iter().enumerate() {
        check_arg(
            kernel,
            i,
            input.arg_dtype(),
            input.arg_len(),
            input.arg_context(),
            context,
        )?;
    }
    check_arg(
        kernel,
        inputs.len(),
        output.arg_dtype(),
        output.arg_len(),
        output.arg_context(),
        context,
    )?;

    let loaded = loaded(context, kernel, variants)?;
    let variant = loaded.variant;
    let config = LaunchConfig {
        grid_dim: loaded.grid.into(),
        block_dim: variant.block.into(),
        shared_mem_bytes: variant.dynamic_shared_bytes,
    };

    // Current before the guards wait on events; also surfaces errors that
    // earlier asynchronous work recorded on the context.
    context.bind_to_thread().map_err(|e| {
        Error::driver(
            format!(
                "making the CUDA context current for kernel `{}`",
                kernel.name
            ),
            e,
        )
    })?;
    let mut pointers = Vec::with_capacity(inputs.len() + 1);
    let mut guards = Vec::with_capacity(inputs.len() + 1);
    for input in inputs {
        let (pointer, guard) = input.arg_ptr(stream);
        pointers.push(pointer);
        guards.push(guard);
    }
    let (pointer, guard) = output.arg_ptr_mut(stream);
    pointers.push(pointer);
    guards.push(guard);

    // Split-K's zeroed workspace, from the variant's pool; the stream
    // waits for its last launch.
    let workspace = match variant.workspace_bytes {
        0 => None,
        bytes => Some(
            loaded
                .workspaces
                .take(stream, usize::try_from(bytes).unwrap_or(usize::MAX))
                .map_err(|e| {
                    Error::driver(
                        format!(
                            "getting the {bytes}-byte workspace of kernel `{}`",
                            kernel.name
                        ),
                        e,
                    )
                })?,
        ),
    };
    if let Some(workspace) = &workspace {
        pointers.push(workspace.pointer(stream));
    }
    // Tensor maps of the inputs' buffers, by value after the pointers.
    let maps = variant
        .tensor_maps
        .iter()
        .map(|spec| {
            let input = pointers.get(spec.param).filter(|_| spec.param < inputs.len());
            let Some(&address) = input else {
                return Err(Error::GeneratedCode {
                    kernel: kernel.name,
                    detail: format!(
                        "variant {variant} maps parameter {} by a tensor map, but the kernel has {} inputs",
                        spec.param,
                        inputs.len()
                    ),
                });
            };
            spec.encode(address).map_err(|e| {
                Error::driver(
                    format!(
                        "encoding a tensor map of input {} of kernel `{}` ({variant})",
                        spec.param, kernel.name
                    ),
                    e,
                )
            })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let mut builder = stream.launch_builder(&loaded.function);
    for pointer in &pointers {
        builder.arg(pointer);
    }
    for map in &maps {
        builder.arg(map);
    }
    // SAFETY: the variant's PTX was generated by ktune's build helper for
    // exactly `kernel`: its entry takes one global pointer per tensor, inputs
    // in order then the output, with the element types checked above, and it
    // accesses each tensor only within the length its shape implies (odd
    // sizes are predicated), which is each buffer's length, checked above.
    // Every buffer belongs to the stream's context (checked above); the
    // stream waited for earlier work on them in `arg_ptr`/`arg_ptr_mut`, and
    // the guards, dropped after the launch is queued, record this launch's
    // reads and write so later users wait for it. `output` is borrowed
    // mutably, so no input aliases it. A variant with a workspace takes it
    // last, at least `workspace_bytes` long and with its counters zero, as
    // its lowering requires, used by no launch that may still run: the
    // stream waited for its last one (see `workspace`). Tensor maps follow,
    // each the driver's encoding of an input's whole buffer, through which
    // the kernel only reads.
    let launched = unsafe { builder.launch(config) };
    drop(guards);
    if let Some(Workspace::Pooled(workspace)) = workspace {
        loaded
            .workspaces
            .give_back(workspace, stream, launched.is_ok())
            .map_err(|e| {
                Error::driver(
                    format!(
                        "recording the launch of kernel `{}` ({variant}) on its workspace",
                        kernel.name
                    ),
                    e,
                )
            })?;
    }
    launched
        .map_err(|e| Error::driver(format!("launching kernel `{}` ({variant})", kernel.name), e))?;
    Ok(variant)
}

fn check_arg(
    kernel: &'static KernelInfo,
    index: usize,
    dtype: &'static str,
    len: usize,
    arg_context: &Arc<CudaContext>,
    context: &Arc<CudaContext>,
) -> Result<(), Error> {
    let Some(tensor) = kernel.tensor(index) else {
        return Err(Error::GeneratedCode {
            kernel: kernel.name,
            detail: format!("tensor index {index} is out of range"),
        });
    };
    if tensor.dtype != dtype {
        return Err(Error::GeneratedCode {
            kernel: kernel.name,
            detail: format!(
                "tensor `{}` is declared {} but launch got a {dtype} buffer",
                tensor.name, tensor.dtype
            ),
        });
    }
    check_len(kernel, index, len)?;
    if arg_context.cu_ctx() != context.cu_ctx() {
        return Err(Error::ContextMismatch {
            kernel: kernel.name,
            tensor: tensor.name,
            expected_ordinal: context.ordinal(),
            actual_ordinal: arg_context.ordinal(),
        });
    }
    Ok(())
}

/// The variant for `context`'s device, loaded there: from the cache, or
/// selected and loaded once.
fn loaded(
    context: &Arc<CudaContext>,
    kernel: &'static KernelInfo,
    variants: &'static [Variant],
) -> Result<Arc<Loaded>, Error> {
    let key = (
        context.cu_ctx() as usize,
        std::ptr::from_ref(kernel) as usize,
        variants.as_ptr() as usize,
    );
    let cell = LOADED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry(key)
        .or_default()
        .clone();
    let mut slot = cell.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(loaded) = &*slot {
        return Ok(loaded.clone());
    }
    let loaded = Arc::new(load(context, kernel, variants)?);
    *slot = Some(loaded.clone());
    Ok(loaded)
}

/// Loads `variant`'s module into `context` and finds its entry.
fn load_function(
    context: &Arc<CudaContext>,
    kernel: &'static KernelInfo,
    variant: &'static Variant,
    gpu_name: &str,
) -> Result<CudaFunction, Error> {
    let what = |doing: &str| doing_on(doing, kernel, variant, (context.ordinal(), gpu_name));
    if variant.ptx.contains('\0') || variant.entry.contains('\0') {
        return Err(Error::GeneratedCode {
            kernel: kernel.name,
            detail: format!("variant {variant} contains a NUL byte"),
        });
    }
    let module = context
        .load_module(Ptx::from_src(variant.ptx))
        .map_err(|e| Error::driver(what("loading"), e))?;
    MODULE_LOADS.fetch_add(1, Ordering::Relaxed);
    module
        .load_function(variant.entry)
        .map_err(|e| Error::driver(what(&format!("finding entry `{}` of", variant.entry)), e))
}

/// What the runtime was doing to `variant` of `kernel` on a device
/// (ordinal, name), for a driver error.
fn doing_on(
    doing: &str,
    kernel: &KernelInfo,
    variant: &Variant,
    (ordinal, gpu_name): (usize, &str),
) -> String {
    format!(
        "{doing} kernel `{}` ({variant}) on CUDA device {ordinal} ({gpu_name})",
        kernel.name
    )
}

fn load(
    context: &Arc<CudaContext>,
    kernel: &'static KernelInfo,
    variants: &'static [Variant],
) -> Result<Loaded, Error> {
    let ordinal = context.ordinal();
    let gpu_name = context
        .name()
        .map_err(|e| Error::driver(format!("reading the name of CUDA device {ordinal}"), e))?;
    let (major, minor) = context.compute_capability().map_err(|e| {
        Error::driver(
            format!("reading the compute capability of CUDA device {ordinal}"),
            e,
        )
    })?;
    let cc = (
        u32::try_from(major).unwrap_or(0),
        u32::try_from(minor).unwrap_or(0),
    );
    let device = (ordinal, gpu_name.as_str());
    // A variant whose warpgroups hand registers over needs the share of
    // them it was written for; one the driver gave fewer is passed over.
    let mut refused: Vec<(&'static Variant, u32)> = Vec::new();
    let (variant, function) = loop {
        let usable = |v: &Variant| !refused.iter().any(|(r, _)| std::ptr::eq(*r, v));
        let variant = match select_among(kernel, variants, &gpu_name, cc, usable) {
            Ok(variant) => variant,
            Err(e) => {
                return Err(match refused.first() {
                    Some(&(variant, given)) => Error::RegisterShare {
                        kernel: kernel.name,
                        variant: variant.label(),
                        needed: variant.registers,
                        given,
                    },
                    None => e,
                });
            }
        };
        let function = load_function(context, kernel, variant, &gpu_name)?;
        if variant.registers == 0 {
            break (variant, function);
        }
        let given = context
            .bind_to_thread()
            .and_then(|()| function.num_regs())
            .map_err(|e| {
                let what = doing_on("reading the registers of", kernel, variant, device);
                Error::driver(what, e)
            })?;
        let given = u32::try_from(given).unwrap_or(0);
        if given >= variant.registers {
            break (variant, function);
        }
        refused.push((variant, given));
    };

    let what = |doing: &str| doing_on(doing, kernel, variant, device);
    // Blocks may use more than 48 KiB of dynamic shared memory only after
    // opting in; the attribute stays set on the function.
    if variant.dynamic_shared_bytes > 48 * 1024 {
        let bytes = i32::try_from(variant.dynamic_shared_bytes).unwrap_or(i32::MAX);
        context
            .bind_to_thread()
            .and_then(|()| {
                function.set_attribute(
                    CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    bytes,
                )
            })
            .map_err(|e| {
                Error::driver(
                    what(&format!(
                        "allowing {bytes} bytes of dynamic shared memory for"
                    )),
                    e,
                )
            })?;
    }
    let grid = if variant.persistent {
        let shape = (variant.block, variant.dynamic_shared_bytes, variant.cluster);
        let resident = resident_blocks(&function, &context.default_stream(), shape)
            .map_err(|e| Error::driver(what("sizing the grid of persistent"), e))?;
        [variant.grid[0].min(resident.max(1)), 1, 1]
    } else {
        variant.grid
    };
    Ok(Loaded {
        variant,
        function,
        grid,
        workspaces: Pool::default(),
    })
}
