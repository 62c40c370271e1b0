//! Variants lowered here by ktune-core, for the GPU tests that need a
//! real generated kernel rather than hand-written PTX.

use ktune::__private::Variant;
use ktune_core::lower::lower;
use ktune_core::ptx;
use ktune_core::schedule::Schedule;
use ktune_core::syntax::parse_kernel;
use ktune_core::target::SmVersion;

/// The default-like (untuned) variant of the kernel `source` at `shape`
/// (the attribute's text, `shape(M = 3, …)`), with `schedule` lowered for
/// `target`; an `sm_90a` module (`arch_specific`) where the code needs it.
pub fn variant(source: &str, shape: &str, schedule: &'static str, target: SmVersion) -> Variant {
    let kernel = parse_kernel(shape.parse().unwrap(), source.parse().unwrap()).unwrap();
    let lowered = lower(&kernel, &Schedule::from_json(schedule).unwrap(), target).unwrap();
    Variant {
        gpu: None,
        sm: target.compute_capability(),
        arch_specific: lowered.ptx.is_sm90a(),
        schedule,
        entry: Box::leak(lowered.ptx.entry.clone().into_boxed_str()),
        ptx: Box::leak(ptx::print(&lowered.ptx, target).into_boxed_str()),
        grid: lowered.launch.grid,
        block: lowered.launch.block,
        dynamic_shared_bytes: lowered.launch.dynamic_shared_bytes,
        workspace_bytes: lowered.launch.workspace_bytes,
        persistent: lowered.launch.persistent,
        registers: lowered.launch.registers,
    }
}
