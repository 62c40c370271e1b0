//! `db verify` with ptxas: every record's schedule, lowered for its shape
//! and assembled for its GPU, without a GPU.

use std::path::Path;

use ktune_build::ptxas;
use ktune_core::SmVersion;
use ktune_core::db::Database;
use ktune_core::ir::Kernel;

pub(super) enum Outcome {
    NoPtxas,
    Checked {
        assembled: usize,
        /// Record index and what went wrong: ptxas rejected the PTX, or the
        /// kernel spills registers.
        failures: Vec<(usize, String)>,
    },
}

/// Assembles the records not in `skip` (those with problems already
/// reported, which may not lower).
pub(super) fn check(db: &Database, kernels: &[Kernel], skip: &[usize]) -> Outcome {
    let Some(ptxas) = ptxas::find() else {
        return Outcome::NoPtxas;
    };
    let mut jobs: Vec<(usize, String, SmVersion)> = Vec::new();
    let mut failures = Vec::new();
    for (index, r) in db.records.iter().enumerate() {
        if skip.contains(&index) {
            continue;
        }
        let shaped = r.kernel_in(kernels).and_then(|k| r.shaped(k));
        let (Some(shaped), Some(target)) = (shaped, r.gpu.compute_capability.target()) else {
            continue;
        };
        match ktune_core::lower::lower(&shaped, &r.schedule, target) {
            Ok(lowered) => jobs.push((index, ktune_core::ptx::print(&lowered.ptx, target), target)),
            Err(e) => failures.push((index, e.to_string())),
        }
    }
    let assembled = jobs.len();
    failures.extend(assemble_all(&ptxas, &jobs));
    failures.sort_by_key(|(index, _)| *index);
    Outcome::Checked {
        assembled,
        failures,
    }
}

fn assemble_all(ptxas: &Path, jobs: &[(usize, String, SmVersion)]) -> Vec<(usize, String)> {
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                scope.spawn(move || {
                    jobs.iter()
                        .skip(w)
                        .step_by(workers)
                        .filter_map(|(index, ptx, target)| {
                            failure(ptxas::assemble(ptxas, ptx, *target), *target)
                                .map(|message| (*index, message))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

fn failure(result: Result<ptxas::Report, ptxas::Error>, target: SmVersion) -> Option<String> {
    match result {
        Err(e) => Some(e.to_string()),
        Ok(report) if report.spills() => Some(format!(
            "spills registers on {target}: {} bytes stored, {} bytes loaded ({} registers)",
            report.spill_stores, report.spill_loads, report.registers
        )),
        Ok(_) => None,
    }
}
