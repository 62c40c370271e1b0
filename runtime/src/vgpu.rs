//! The virtual GPU backend: runs a kernel's embedded PTX text on
//! `ktune-vgpu` (with the `vgpu` feature; without it, every entry point
//! returns [`Error::VgpuDisabled`]).

use crate::buffer::Repr;
use crate::{Backend, Buffer, Element, Error, KernelInfo, Ran, Variant};

/// The GPU name and compute capability the virtual GPU selects variants
/// for: an sm_80 GPU of no tuned model, so it runs the baseline variant.
pub(crate) const VGPU_NAME: &str = "ktune virtual GPU (sm_80 variants, on the CPU)";
const VGPU_CAPABILITY: (u32, u32) = (8, 0);

mod sealed {
    pub trait Sealed {}
    impl<T: crate::Element> Sealed for crate::Buffer<T> {}
}

/// A kernel input for the virtual GPU: implemented for [`Buffer`]s of
/// every element type. Sealed.
pub trait HostArg: sealed::Sealed {
    /// The element type's name (`"f32"`, `"f16"`, `"bf16"`).
    fn arg_dtype(&self) -> &'static str;
    /// Number of elements.
    fn arg_len(&self) -> usize;
    /// Where the elements live.
    fn arg_backend(&self) -> Backend;
    /// The elements as a GPU holds them (little-endian); empty for a GPU buffer.
    fn arg_bytes(&self) -> Vec<u8>;
}

/// A kernel output for the virtual GPU: implemented for [`Buffer`]s of
/// every element type. Sealed.
pub trait HostArgMut: HostArg {
    /// Overwrites a host buffer's elements with `bytes` (little-endian, as
    /// many as the buffer holds); does nothing to a GPU buffer.
    fn set_arg_bytes(&mut self, bytes: &[u8]);
}

impl<T: Element> HostArg for Buffer<T> {
    fn arg_dtype(&self) -> &'static str {
        T::DTYPE_NAME
    }

    fn arg_len(&self) -> usize {
        self.len()
    }

    fn arg_backend(&self) -> Backend {
        self.backend()
    }

    fn arg_bytes(&self) -> Vec<u8> {
        match &self.repr {
            Repr::Host(data) => data.iter().flat_map(|x| to_bytes(*x)).collect(),
            Repr::Cuda(_) => Vec::new(),
        }
    }
}

impl<T: Element> HostArgMut for Buffer<T> {
    fn set_arg_bytes(&mut self, bytes: &[u8]) {
        if let Repr::Host(data) = &mut self.repr {
            let size = std::mem::size_of::<T>();
            for (x, b) in data.iter_mut().zip(bytes.chunks_exact(size)) {
                *x = from_bytes(b);
            }
        }
    }
}

/// An element's bytes in GPU memory. `f16` and `bf16` widen to `f32`
/// exactly, so they go through it.
fn to_bytes<T: Element>(x: T) -> Vec<u8> {
    let x = x.to_f32();
    match T::DTYPE_NAME {
        "f16" => half::f16::from_f32(x).to_bits().to_le_bytes().to_vec(),
        "bf16" => half::bf16::from_f32(x).to_bits().to_le_bytes().to_vec(),
        _ => x.to_le_bytes().to_vec(),
    }
}

fn from_bytes<T: Element>(b: &[u8]) -> T {
    let value = match (T::DTYPE_NAME, b) {
        ("f16", &[lo, hi]) => half::f16::from_bits(u16::from_le_bytes([lo, hi])).to_f32(),
        ("bf16", &[lo, hi]) => half::bf16::from_bits(u16::from_le_bytes([lo, hi])).to_f32(),
        (_, &[a, b, c, d]) => f32::from_le_bytes([a, b, c, d]),
        _ => f32::NAN,
    };
    T::from_f32(value)
}

/// Runs `kernel` on the virtual GPU: the variant an sm_80 GPU would get,
/// its PTX text parsed (once per variant), inputs copied in, the output
/// poisoned before and copied back after.
///
/// # Errors
///
/// [`Error::VgpuDisabled`] without the `vgpu` feature;
/// [`Error::BackendMismatch`] for a GPU buffer; [`Error::LengthMismatch`];
/// [`Error::Vgpu`] when the virtual GPU stops the kernel, the embedded PTX
/// cannot be read, or an output element was never written.
pub fn run_vgpu(
    kernel: &'static KernelInfo,
    variants: &'static [Variant],
    inputs: &[&dyn HostArg],
    output: &mut dyn HostArgMut,
) -> Result<Ran, Error> {
    if inputs.len() != kernel.inputs.len() {
        return Err(Error::GeneratedCode {
            kernel: kernel.name,
            detail: format!(
                "the virtual GPU got {} inputs, the kernel declares {}",
                inputs.len(),
                kernel.inputs.len()
            ),
        });
    }
    for (i, arg) in inputs.iter().enumerate() {
        check_arg(kernel, i, *arg)?;
    }
    check_arg(kernel, inputs.len(), &*output)?;
    let variant = crate::select_variant(kernel, variants, VGPU_NAME, VGPU_CAPABILITY)?;
    enabled::run(kernel, variant, inputs, output)?;
    Ok(Ran::vgpu(variant))
}

fn check_arg(kernel: &'static KernelInfo, tensor: usize, arg: &dyn HostArg) -> Result<(), Error> {
    crate::__private::check_len(kernel, tensor, arg.arg_len())?;
    let info = kernel.tensor(tensor).ok_or_else(|| Error::GeneratedCode {
        kernel: kernel.name,
        detail: format!("tensor index {tensor} is out of range"),
    })?;
    if arg.arg_backend() != Backend::Cpu {
        return Err(Error::BackendMismatch {
            kernel: kernel.name,
            tensor: info.name,
            expected: Backend::Vgpu,
            actual: arg.arg_backend(),
        });
    }
    if info.dtype != arg.arg_dtype() {
        return Err(Error::GeneratedCode {
            kernel: kernel.name,
            detail: format!(
                "tensor `{}` is declared {} but the virtual GPU got a {} buffer",
                info.name,
                info.dtype,
                arg.arg_dtype()
            ),
        });
    }
    Ok(())
}

#[cfg(not(feature = "vgpu"))]
mod enabled {
    use super::{HostArg, HostArgMut};
    use crate::{Error, KernelInfo, Variant};

    pub(super) fn run(
        _: &'static KernelInfo,
        _: &'static Variant,
        _: &[&dyn HostArg],
        _: &mut dyn HostArgMut,
    ) -> Result<(), Error> {
        Err(Error::VgpuDisabled)
    }
}

#[cfg(feature = "vgpu")]
mod enabled {
    use std::collections::HashMap;
    use std::sync::{Arc, LazyLock, Mutex, PoisonError};

    use ktune_core::DType;
    use ktune_core::lower::Launch;
    use ktune_core::ptx;

    use super::{HostArg, HostArgMut};
    use crate::{Error, KernelInfo, Variant};

    /// Parsed PTX per variant (by address: variants are `static`).
    static PARSED: LazyLock<Mutex<HashMap<usize, Arc<ptx::Kernel>>>> =
        LazyLock::new(Default::default);

    pub(super) fn run(
        kernel: &'static KernelInfo,
        variant: &'static Variant,
        inputs: &[&dyn HostArg],
        output: &mut dyn HostArgMut,
    ) -> Result<(), Error> {
        let fault = |fault: String| Error::Vgpu {
            kernel: kernel.name,
            variant: variant.label(),
            fault,
        };
        let code = parsed(kernel, variant).map_err(fault)?;
        let dtype = DType::from_name(kernel.output.dtype).ok_or_else(|| Error::GeneratedCode {
            kernel: kernel.name,
            detail: format!("unknown output dtype `{}`", kernel.output.dtype),
        })?;
        let params: Vec<Vec<u8>> = inputs.iter().map(|a| a.arg_bytes()).collect();
        let params: Vec<&[u8]> = params.iter().map(Vec::as_slice).collect();
        let launch = Launch {
            grid: variant.grid,
            block: variant.block,
            dynamic_shared_bytes: variant.dynamic_shared_bytes,
            workspace_bytes: variant.workspace_bytes,
            persistent: variant.persistent,
            registers: variant.registers,
        };
        // With a fresh zeroed workspace when the variant takes one.
        let output_bytes = ktune_vgpu::poisoned(dtype, kernel.output.len);
        let (bytes, _) = ktune_vgpu::run_bytes(&code, &launch, &params, output_bytes)
            .map_err(|f| fault(f.to_string()))?;
        if let Some(i) = ktune_vgpu::first_poisoned(dtype, &bytes) {
            return Err(fault(format!(
                "output element {i} of `{}` was never written",
                kernel.output.name
            )));
        }
        output.set_arg_bytes(&bytes);
        Ok(())
    }

    /// The variant's PTX text as an instruction list, parsed on first use.
    fn parsed(
        kernel: &'static KernelInfo,
        variant: &'static Variant,
    ) -> Result<Arc<ptx::Kernel>, String> {
        let key = std::ptr::from_ref(variant) as usize;
        let cache = || PARSED.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(code) = cache().get(&key) {
            return Ok(code.clone());
        }
        let (code, _) =
            ptx::parse(variant.ptx).map_err(|e| format!("cannot read its embedded PTX: {e}"))?;
        let params = kernel.inputs.len() + 1 + usize::from(variant.workspace_bytes > 0);
        if code.entry != variant.entry || code.param_count != params {
            return Err(format!(
                "its embedded PTX has entry `{}` with {} parameters, expected `{}` with {}",
                code.entry, code.param_count, variant.entry, params
            ));
        }
        let code = Arc::new(code);
        cache().insert(key, code.clone());
        Ok(code)
    }
}
