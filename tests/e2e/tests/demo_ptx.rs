//! ptxas assembles every PTX file a build emits, without register spills:
//! the demo's kernels and this crate's catalogue, each run through exactly
//! the build helper's code path (`ktune_build::Config`) into a temp dir.
//!
//! Each file is assembled for the target its `.target` directive names;
//! sm_80 files also for sm_90, where the driver JIT-compiles them.
//!
//! Needs ptxas: `cargo xtask test` installs it into the workspace's `.venv`
//! (or set `KTUNE_PTXAS`). Without it these tests fail; they never pass
//! silently.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use ktune_build::ptxas;
use ktune_core::SmVersion;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace root exists")
}

fn ptxas() -> PathBuf {
    ptxas::find().unwrap_or_else(|| {
        panic!(
            "ptxas not found: run `cargo xtask test` (it installs ptxas into .venv/ and runs \
             every test), or set KTUNE_PTXAS to a ptxas executable"
        )
    })
}

// ---------------------------------------------------------------------------
// The check
// ---------------------------------------------------------------------------

/// The target a PTX file's `.target` directive names.
/// The target a PTX file's `.target` directive names, and whether it is
/// the architecture-specific form (`sm_90a`).
fn ptx_target(ptx: &str) -> Option<(SmVersion, bool)> {
    let named = ptx
        .lines()
        .find_map(|l| l.trim().strip_prefix(".target "))
        .and_then(|t| t.split([',', ' ']).next())?;
    match named.strip_suffix('a') {
        Some(portable) => portable.parse().ok().map(|t| (t, true)),
        None => named.parse().ok().map(|t| (t, false)),
    }
}

/// Runs the build helper on the crate at `manifest_dir` (with sm_90 among
/// its targets) into a temp dir, assembles every PTX file it wrote, prints
/// a table of registers and spills, and fails on any rejection or spill.
fn assemble_crate(manifest_dir: &Path, expected_kernels: usize) {
    let ptxas = ptxas();
    let out = tempfile::Builder::new()
        .prefix("ktune-e2e-ptx-")
        .tempdir()
        .expect("a temp dir");
    let report = ktune_build::Config::new()
        .manifest_dir(manifest_dir)
        .out_dir(out.path())
        .cargo_instructions(false)
        .search(false)
        .target(SmVersion::Sm90)
        .build()
        .unwrap_or_else(|e| panic!("the build helper failed on {}: {e}", manifest_dir.display()));
    assert_eq!(report.kernels.len(), expected_kernels, "kernels found");

    let mut files: Vec<PathBuf> = std::fs::read_dir(out.path().join("ktune"))
        .expect("the build wrote ktune/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "ptx"))
        .collect();
    files.sort();
    for (kernel, variants) in &report.kernels {
        for target in [SmVersion::Sm80, SmVersion::Sm90] {
            assert!(
                variants.iter().any(|v| v.target == target),
                "kernel `{kernel}` has no {target} variant"
            );
        }
    }
    let variants: usize = report.kernels.iter().map(|(_, v)| v.len()).sum();
    assert_eq!(files.len(), variants, "one PTX file per variant");

    let mut jobs = Vec::new();
    for file in &files {
        let ptx = std::fs::read_to_string(file).expect("read PTX");
        let name = file
            .file_name()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        let (target, specific) =
            ptx_target(&ptx).unwrap_or_else(|| panic!("{name}: no .target directive"));
        let suffix = if specific { "a" } else { "" };
        assert!(
            name.contains(&format!(".{}{suffix}.", target.name())),
            "{name}: its .target is {target}{suffix}"
        );
        if target == SmVersion::Sm80 {
            jobs.push((name.clone(), ptx.clone(), SmVersion::Sm90));
        }
        jobs.push((name, ptx, target));
    }

    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let results: Vec<Result<ptxas::Report, ptxas::Error>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let (jobs, ptxas) = (&jobs, &ptxas);
                scope.spawn(move || {
                    jobs.iter()
                        .enumerate()
                        .skip(w)
                        .step_by(workers)
                        .map(|(i, (_, ptx, arch))| (i, ptxas::assemble(ptxas, ptx, *arch)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all: Vec<_> = handles
            .into_iter()
            .flat_map(|h| h.join().expect("worker"))
            .collect();
        all.sort_by_key(|(i, _)| *i);
        all.into_iter().map(|(_, r)| r).collect()
    });

    let mut table = format!(
        "{:<44} {:<6} {:>4} {:>8} {:>8} {:>6}\n",
        "file", "arch", "regs", "spill-st", "spill-ld", "smem"
    );
    let mut failures = Vec::new();
    for ((name, _, arch), result) in jobs.iter().zip(&results) {
        match result {
            Ok(a) => {
                let _ = writeln!(
                    table,
                    "{name:<44} {:<6} {:>4} {:>8} {:>8} {:>6}",
                    arch.name(),
                    a.registers,
                    a.spill_stores,
                    a.spill_loads,
                    a.shared_bytes
                );
                if a.spills() {
                    failures.push(format!(
                        "{name} for {arch}: spills ({} bytes stored, {} loaded)",
                        a.spill_stores, a.spill_loads
                    ));
                }
            }
            Err(e) => {
                let _ = writeln!(table, "{name:<44} {:<6} FAILED", arch.name());
                failures.push(format!("{name} for {arch}: {e}"));
            }
        }
    }
    println!("ptxas {}:\n{table}", ptxas.display());
    assert!(
        failures.is_empty(),
        "{} of {} assemblies failed:\n{}\n\n{table}",
        failures.len(),
        jobs.len(),
        failures.join("\n\n")
    );
}

#[test]
fn demo_ptx_assembles_without_spills() {
    assemble_crate(&workspace_root().join("examples/demo"), 4);
}

#[test]
fn catalogue_ptx_assembles_without_spills() {
    assemble_crate(
        Path::new(env!("CARGO_MANIFEST_DIR")),
        ktune_e2e::CATALOGUE.len(),
    );
}
