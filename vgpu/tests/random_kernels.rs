//! Random kernels through the verification suite: [`ktune_vgpu::random`]'s
//! kernels, each at its two shapes, run under the suite's points (its
//! space sampled family by family, the heuristic's choice on every target,
//! a generic point) on the virtual GPU against the CPU evaluation of its
//! IR.
//!
//! `KTUNE_RANDOM_KERNELS=FIRST..END` runs other seeds (the test's own are
//! fixed); a failure prints the kernel's source.

use std::ops::Range;

use ktune_core::lower::classify::classify;
use ktune_vgpu::random::{self, RandomKernel};
use ktune_vgpu::suite::{self, Entry};

/// The seeds the test runs unless told otherwise.
const SEEDS: Range<u64> = 0..200;

fn seeds() -> Range<u64> {
    match std::env::var("KTUNE_RANDOM_KERNELS") {
        Ok(spec) => random::seeds(&spec).unwrap_or_else(|e| panic!("KTUNE_RANDOM_KERNELS: {e}")),
        Err(_) => SEEDS,
    }
}

#[test]
fn random_kernels_verify_at_every_point_run() {
    let seeds = seeds();
    let generated: Vec<RandomKernel> = seeds.clone().map(random::kernel).collect();
    let entries: Vec<Entry> = generated.iter().map(|g| g.entry.clone()).collect();
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let report = suite::run(&entries, workers, |run| {
        let kernel = &run.reference.kernel().name;
        let checked = std::panic::catch_unwind(|| run.reference.check(run.schedule, run.target));
        let failure = match checked {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(e)) => e.to_string(),
            Err(panic) => {
                let message = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                format!(
                    "kernel `{kernel}` with {} on {}: panicked: {message}",
                    run.schedule.to_json(),
                    run.target
                )
            }
        };
        let source = &generated
            .iter()
            .find(|g| g.entry.kernel.name == *kernel)
            .expect("every kernel was generated")
            .source;
        Err(format!("{failure}\n{source}\n"))
    });
    for failure in &report.failures {
        println!("{failure}");
    }
    println!("{report}");
    assert!(report.failures.is_empty(), "{}", report.failures[0]);
    if seeds == SEEDS {
        let classes: Vec<&str> = entries.iter().map(|e| classify(&e.kernel).name()).collect();
        for class in ["elementwise", "rows", "matmul", "generic"] {
            let n = classes.iter().filter(|c| **c == class).count();
            assert!(
                n >= 3,
                "only {n} of the generated kernels are {class}: {classes:?}"
            );
        }
        assert!(
            report.tensor > 0,
            "no generated contraction ran on tensor cores"
        );
    }
}
