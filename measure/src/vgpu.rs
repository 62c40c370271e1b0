//! Measuring on the virtual GPU: correctness from running the PTX
//! instruction list against the CPU reference, time estimated from what
//! that run did ([`ktune_vgpu::timing`]).

use ktune_core::SmVersion;
use ktune_core::ir::Kernel;
use ktune_core::lower::Lowered;
use ktune_core::schedule::Schedule;
use ktune_vgpu::verify::{Failure, Reference};

use crate::{DeviceInfo, Measured, Rejected};

/// The most floating-point operations ([`Kernel::flops`], at the kernel's
/// shape) of a kernel a search measures on the virtual GPU: it runs the
/// kernel thread by thread and checks it against the CPU reference, which
/// at this size takes about 10 s a candidate here (a 780×800×800 f32
/// matmul, 3 candidates in 33 s; bf16 on tensor cores, 18 s) with
/// ktune-vgpu optimised, and longer than the measurement's 120 s limit
/// without (Cargo compiles a build script's dependencies unoptimised
/// unless the workspace's profile says otherwise).
pub const VGPU_MAX_FLOPS: u64 = 1_000_000_000;

/// A kernel too large to search on the virtual GPU.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{kernel}` is too large for the virtual GPU: {:.2} GFLOP at its shape, where a search there \
     takes kernels up to {:.2} GFLOP",
    *.flops as f64 * 1e-9,
    VGPU_MAX_FLOPS as f64 * 1e-9
)]
pub struct TooLarge {
    pub kernel: String,
    pub flops: u64,
}

/// Whether `kernel` is small enough to search on the virtual GPU.
///
/// # Errors
///
/// [`TooLarge`] above [`VGPU_MAX_FLOPS`].
pub fn vgpu_searchable(kernel: &Kernel) -> Result<(), TooLarge> {
    let flops = kernel.flops();
    if flops > VGPU_MAX_FLOPS {
        return Err(TooLarge {
            kernel: kernel.name.clone(),
            flops,
        });
    }
    Ok(())
}

/// Checks `lowered` (the lowering of `schedule`, perhaps edited by an
/// injection) against `reference`, then estimates its time.
pub(crate) fn measure(
    kernel: &Kernel,
    reference: &Reference,
    schedule: &Schedule,
    target: SmVersion,
    lowered: &Lowered,
) -> Result<Measured, Rejected> {
    let verified = reference
        .check_lowered(schedule, target, lowered)
        .map_err(|e| match e.kind {
            Failure::Lower(_) => Rejected::Invalid(e.to_string()),
            Failure::Fault(_) => Rejected::Fault(e.to_string()),
            Failure::Unwritten { .. } | Failure::Mismatch { .. } => {
                Rejected::WrongResult(e.to_string())
            }
        })?;
    let seconds = ktune_vgpu::timing::estimate(
        &verified.stats,
        &lowered.launch,
        target,
        kernel.compulsory_bytes(),
    );
    let us = seconds * 1e6;
    Ok(Measured {
        median_us: us,
        p10_us: us,
        p90_us: us,
        samples: 1,
        device: DeviceInfo::vgpu(target),
        throttled: false,
        sensors: None,
    })
}
