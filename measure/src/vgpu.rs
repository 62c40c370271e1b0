//! Measuring on the virtual GPU: correctness from running the PTX
//! instruction list against the CPU reference, time estimated from what
//! that run did ([`ktune_vgpu::timing`]).

use ktune_core::SmVersion;
use ktune_core::ir::Kernel;
use ktune_core::lower::Lowered;
use ktune_core::schedule::Schedule;
use ktune_vgpu::verify::{Failure, Reference};

use crate::{DeviceInfo, Measured, Rejected};

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
