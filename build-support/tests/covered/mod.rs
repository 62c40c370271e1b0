//! A generated crate whose tuning database covers every kernel: 50 kernels
//! (elementwise, row reductions, matmuls; small distinct shapes) and a
//! `tuning/ktune.json` holding, for each, one record for `NVIDIA H200`
//! (compute capability 9.0) with a valid schedule that is not the
//! heuristic's. The records are a fixture (driver and CUDA `fixture`), not
//! measurements.
//!
//! Shared by `tests/covered.rs` and `benches/build_script.rs` (through
//! `#[path]`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use ktune_core::SmVersion;
use ktune_core::db::{ComputeCapability, Database, Gpu, MeasuredOn, Provenance, Record, Stats};
use ktune_core::ir::Kernel;
use ktune_core::schedule::Schedule;

/// The GPU every record is for.
pub const GPU: &str = "NVIDIA H200";
/// Its target.
pub const TARGET: SmVersion = SmVersion::Sm90;
pub const ELEMENTWISE: usize = 20;
pub const ROWS: usize = 15;
pub const MATMULS: usize = 15;
pub const KERNELS: usize = ELEMENTWISE + ROWS + MATMULS;

/// What [`write`] generated.
#[derive(Debug)]
pub struct Covered {
    /// Each kernel, as the front-end parsed it from the generated sources.
    pub kernels: Vec<Kernel>,
    /// The schedule recorded for each kernel, by name.
    pub tuned: BTreeMap<String, Schedule>,
}

/// Writes the crate (`Cargo.toml`, `src/lib.rs`, `tuning/ktune.json`) into
/// `dir`, which must exist.
pub fn write(dir: &Path) -> Covered {
    std::fs::write(
        dir.join("Cargo.toml"),
        "[package]\nname = \"ktune-covered\"\nversion = \"0.0.0\"\nedition = \"2024\"\n\n[package.metadata.ktune]\ntargets = [\"sm_90\"]\n",
    )
    .expect("write Cargo.toml");
    std::fs::create_dir_all(dir.join("src")).expect("create src/");
    std::fs::write(dir.join("src/lib.rs"), lib_rs()).expect("write src/lib.rs");

    let scan = ktune_build::scan::scan(dir, &[dir.join("src")]).expect("the kernels parse");
    let kernels: Vec<Kernel> = scan.kernels.into_iter().map(|f| f.kernel).collect();
    assert_eq!(kernels.len(), KERNELS);
    let mut tuned = BTreeMap::new();
    let mut database = Database::new();
    for (i, kernel) in kernels.iter().enumerate() {
        let schedule = non_default(kernel);
        database.insert([record(kernel, schedule.clone(), i)]);
        tuned.insert(kernel.name.clone(), schedule);
    }
    std::fs::create_dir_all(dir.join("tuning")).expect("create tuning/");
    std::fs::write(dir.join("tuning/ktune.json"), database.to_text()).expect("write the database");
    Covered { kernels, tuned }
}

fn lib_rs() -> String {
    let mut src = String::from("use ktune::prelude::*;\n");
    for i in 0..ELEMENTWISE {
        let n = 1000 + 37 * i;
        let _ = write!(
            src,
            "\n#[tuned_kernel(shape(N = {n}))]\npub fn scale_{i}(x: Tensor<f32, (N,)>, y: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {{\n    compute(|n| x[n] * {i}.5 + y[n])\n}}\n"
        );
    }
    for i in 0..ROWS {
        let (r, c) = (3 + i, 17 + 3 * i);
        let _ = write!(
            src,
            "\n#[tuned_kernel(shape(R = {r}, C = {c}))]\npub fn softmax_{i}(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {{\n    compute(|r, c| {{\n        let mx = max(C, |j| x[r][j]);\n        let s = sum(C, |j| exp(x[r][j] - mx));\n        exp(x[r][c] - mx) / s\n    }})\n}}\n"
        );
    }
    for i in 0..MATMULS {
        // At most 16 rows and columns keep each schedule space small.
        let (m, n, k) = (9 + i % 8, 16 - i % 8, 8 + 5 * i);
        let _ = write!(
            src,
            "\n#[tuned_kernel(shape(M = {m}, N = {n}, K = {k}))]\npub fn matmul_{i}(a: Tensor<f32, (M, K)>, b: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {{\n    compute(|m, n| sum(K, |k| a[m][k] * b[k][n]))\n}}\n"
        );
    }
    src
}

/// A point of the kernel's space other than the heuristic's.
fn non_default(kernel: &Kernel) -> Schedule {
    let default = ktune_core::lower::heuristic(kernel, TARGET);
    ktune_core::space::candidates(kernel, TARGET)
        .into_iter()
        .find(|s| *s != default)
        .unwrap_or_else(|| panic!("`{}` has only its default schedule", kernel.name))
}

fn record(kernel: &Kernel, schedule: Schedule, i: usize) -> Record {
    let median = 10.0 + i as f64;
    Record {
        kernel: kernel.name.clone(),
        checksum: ktune_core::canon::checksum(kernel),
        canonical: ktune_core::canon::canonical_form(kernel),
        shape: kernel.shape().collect(),
        dtype: kernel.output.dtype,
        gpu: Gpu {
            name: GPU.to_owned(),
            compute_capability: ComputeCapability::from(TARGET),
            sm_count: 132,
            driver: "fixture".to_owned(),
            cuda: "fixture".to_owned(),
            clocks_mhz: None,
        },
        schedule,
        stats: Stats {
            median_us: median,
            low_us: median * 0.98,
            high_us: median * 1.02,
            samples: 100,
            baseline_us: Some(median * 1.5),
            throughput: None,
        },
        provenance: Provenance {
            ktune_version: "0.1.0".to_owned(),
            generator_version: ktune_core::GENERATOR_VERSION,
            measured_on: MeasuredOn::Gpu,
            date: "2000-01-01T00:00:00Z".to_owned(),
        },
    }
}
