//! The one error type of the runtime.

use std::fmt;

use cudarc::driver::DriverError;

use crate::Backend;

/// Everything that can go wrong when choosing a device, moving data or
/// running a kernel.
///
/// Every message names the kernel, tensor or value at fault and, where there
/// is one, says what to do about it. Nothing in ktune panics for lack of a
/// GPU: a missing driver or device is an `Err`, and the CPU backend is only
/// used when the application asks for it ([`Device::cpu`](crate::Device::cpu),
/// `KTUNE_BACKEND=cpu`, or [`Device::gpu_or_cpu`](crate::Device::gpu_or_cpu)).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The CUDA driver library could not be loaded.
    #[error(
        "{NO_DRIVER}. Run on a GPU machine, or select the CPU backend with KTUNE_BACKEND=cpu or \
         Device::cpu()"
    )]
    NoDriver,

    /// The driver is there, but there is no GPU with the requested ordinal.
    #[error(
        "{}. Check CUDA_VISIBLE_DEVICES and nvidia-smi, or select the CPU backend with \
         KTUNE_BACKEND=cpu or Device::cpu()",
        no_device(*.ordinal, *.available)
    )]
    NoDevice {
        /// The ordinal that was asked for.
        ordinal: usize,
        /// How many devices the driver reports.
        available: usize,
    },

    /// A CUDA driver call failed.
    #[error("CUDA driver error while {context}: {}", DriverErrorText(.source))]
    Driver {
        /// What ktune was doing, e.g. "loading kernel `softmax` (sm_90 default)".
        context: String,
        /// The driver's error code.
        #[source]
        source: DriverError,
    },

    /// `KTUNE_BACKEND` (or a backend name passed to
    /// [`Backend::from_env_value`](crate::Backend::from_env_value)) holds a
    /// value ktune does not know.
    #[error(
        "KTUNE_BACKEND=`{value}` is not a ktune backend; accepted values are {} \
         (or leave it unset for cuda)",
        crate::backend::accepted_list()
    )]
    InvalidBackend {
        /// The value as it was given.
        value: String,
    },

    /// The virtual GPU backend was asked for, but this build of ktune does
    /// not have it.
    #[error(
        "KTUNE_BACKEND=vgpu needs the `vgpu` feature of the ktune crate: depend on \
         ktune with `features = [\"vgpu\"]` in Cargo.toml, or choose another backend"
    )]
    VgpuDisabled,

    /// The virtual GPU stopped a kernel: an out-of-bounds access, a
    /// shared-memory race, a divergent barrier, an output element never
    /// written, or embedded PTX it cannot read.
    #[error("kernel `{kernel}` ({variant}) on the virtual GPU: {fault}")]
    Vgpu {
        /// The kernel's name.
        kernel: &'static str,
        /// The variant that ran, e.g. `sm_80 default`.
        variant: String,
        /// What went wrong, naming the block, thread and instruction.
        fault: String,
    },

    /// A buffer does not have the number of elements the kernel was compiled for.
    #[error(
        "kernel `{kernel}`: tensor `{tensor}` has {actual} elements, but the kernel was \
         compiled for {expected}; shapes are fixed by #[tuned_kernel(shape(...))]"
    )]
    LengthMismatch {
        /// The kernel's name.
        kernel: &'static str,
        /// The tensor's name in the kernel signature (`out` for the result).
        tensor: &'static str,
        /// Elements the kernel's shape implies.
        expected: usize,
        /// Elements in the buffer that was passed.
        actual: usize,
    },

    /// A buffer lives on another backend than the device the kernel runs on.
    #[error(
        "kernel `{kernel}`: tensor `{tensor}` is a {actual} buffer, but the kernel runs on \
         {expected}; create it with Device::upload/alloc of the device that runs the kernel"
    )]
    BackendMismatch {
        /// The kernel's name.
        kernel: &'static str,
        /// The tensor's name in the kernel signature (`out` for the result).
        tensor: &'static str,
        /// The backend of the device running the kernel.
        expected: Backend,
        /// The backend the buffer lives on.
        actual: Backend,
    },

    /// A device buffer belongs to another CUDA context (usually another GPU)
    /// than the stream the kernel is launched on.
    #[error(
        "kernel `{kernel}`: tensor `{tensor}` was allocated in a CUDA context on device \
         {actual_ordinal}, but the kernel is launched on a stream of another context (device \
         {expected_ordinal}); allocate it with the device that runs the kernel"
    )]
    ContextMismatch {
        /// The kernel's name.
        kernel: &'static str,
        /// The tensor's name in the kernel signature.
        tensor: &'static str,
        /// Ordinal of the launch stream's device.
        expected_ordinal: usize,
        /// Ordinal of the buffer's device.
        actual_ordinal: usize,
    },

    /// None of the kernel's compiled variants can run on this GPU.
    #[error(
        "kernel `{kernel}` has no compiled variant that runs on {device}: ktune generates PTX \
         for sm_80 (Ampere) and newer. Run on a newer GPU, or select the CPU backend with \
         KTUNE_BACKEND=cpu or Device::cpu()"
    )]
    NoVariant {
        /// The kernel's name.
        kernel: &'static str,
        /// The GPU, e.g. "Tesla T4 (sm_75)".
        device: String,
    },

    /// The variants that could run on this GPU hand registers between
    /// their warpgroups (`setmaxnreg`) from a share per thread the driver
    /// did not give them: they would wait forever, and are not launched.
    #[error(
        "kernel `{kernel}`: variant {variant} needs {needed} registers per thread at launch \
         for its warpgroups to hand registers to each other, but the CUDA driver compiled it \
         to {given}, and no other variant runs on this GPU; rebuild with a database record \
         without a producer warpgroup (producer = 0) for this GPU, or select the CPU backend \
         with KTUNE_BACKEND=cpu or Device::cpu()"
    )]
    RegisterShare {
        /// The kernel's name.
        kernel: &'static str,
        /// The variant refused, e.g. `sm_90a default`.
        variant: String,
        /// The registers per thread its `setmaxnreg` counts assume.
        needed: u32,
        /// The registers per thread the driver gave it.
        given: u32,
    },

    /// The compiled variants were generated from another version of the
    /// kernel's source than the one compiled into the program.
    #[error(
        "kernel `{kernel}`: the embedded GPU code was generated from a different version of the \
         kernel's source; rebuild (cargo build) so that ktune's build helper regenerates it, and \
         check that build.rs calls ktune_build"
    )]
    StaleBuild {
        /// The kernel's name.
        kernel: &'static str,
    },

    /// The code generated by `#[tuned_kernel]` does not fit this version of
    /// the runtime: the `ktune` and `ktune-macros` versions differ.
    #[error(
        "kernel `{kernel}`: its generated code does not match this version of the ktune \
         runtime ({detail}); make sure ktune and ktune-macros have the same version, then rebuild"
    )]
    GeneratedCode {
        /// The kernel's name.
        kernel: &'static str,
        /// What did not match.
        detail: String,
    },
}

const NO_DRIVER: &str =
    "no CUDA driver library (libcuda.so) was found: this machine has no usable NVIDIA GPU";

fn no_device(ordinal: usize, available: usize) -> String {
    format!("no CUDA device {ordinal}: the CUDA driver reports {available} device(s)")
}

impl Error {
    /// The message without its advice on what to do, for an application
    /// that has done it already: [`Device::gpu_or_cpu`](crate::Device::gpu_or_cpu)'s
    /// [`fallback_reason`](crate::Device::fallback_reason), on the CPU
    /// backend the message advises. Other errors' messages are whole.
    pub fn without_advice(&self) -> String {
        match self {
            Error::NoDriver => NO_DRIVER.to_owned(),
            Error::NoDevice { ordinal, available } => no_device(*ordinal, *available),
            other => other.to_string(),
        }
    }

    pub(crate) fn driver(context: impl Into<String>, source: DriverError) -> Error {
        Error::Driver {
            context: context.into(),
            source,
        }
    }
}

/// Formats a driver error without calling into the driver library unless it
/// is known to be loaded (`DriverError`'s own `Display` calls
/// `cuGetErrorString`, which panics when libcuda is absent).
struct DriverErrorText<'a>(&'a DriverError);

impl fmt::Display for DriverErrorText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0.0)?;
        if crate::probe::driver_present()
            && let Ok(text) = self.0.error_string()
        {
            write!(f, " ({})", text.to_string_lossy())?;
        }
        Ok(())
    }
}
