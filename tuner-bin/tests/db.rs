//! `cargo ktune db show` and `db verify`, on the demo crate's kernels.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ktune_core::SmVersion;
use ktune_core::db::{Gpu, MeasuredOn, Provenance, Record, Stats};
use ktune_core::ir::Kernel;
use ktune_core::schedule::Schedule;

fn demo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/demo")
}

fn cargo_ktune(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cargo-ktune"))
        .arg("ktune")
        .args(args)
        .output()
        .expect("cargo-ktune runs")
}

fn softmax() -> Kernel {
    let root = demo_root();
    let scan = ktune_build::scan::scan(&root, &[root.join("src")]).unwrap();
    scan.kernels
        .into_iter()
        .map(|f| f.kernel)
        .find(|k| k.name == "softmax")
        .unwrap()
}

fn record(kernel: &Kernel, schedule: Schedule, median: f64) -> Record {
    Record {
        kernel: kernel.name.clone(),
        checksum: ktune_core::canon::checksum(kernel),
        canonical: ktune_core::canon::canonical_form(kernel),
        shape: kernel
            .dims
            .iter()
            .map(|d| (d.name.clone(), d.size))
            .collect::<BTreeMap<_, _>>(),
        dtype: kernel.output.dtype,
        gpu: Gpu {
            name: "NVIDIA H100 80GB HBM3".to_owned(),
            compute_capability: SmVersion::Sm90.into(),
            sm_count: 132,
            driver: "570.86.15".to_owned(),
            cuda: "12.8".to_owned(),
            clocks_mhz: None,
        },
        schedule,
        stats: Stats {
            median_us: median,
            low_us: median * 0.99,
            high_us: median * 1.01,
            samples: 100,
            baseline_us: Some(12.0),
            throughput: None,
        },
        provenance: Provenance {
            ktune_version: env!("CARGO_PKG_VERSION").to_owned(),
            generator_version: ktune_core::GENERATOR_VERSION,
            measured_on: MeasuredOn::Gpu,
            date: "2026-11-29T10:00:00Z".to_owned(),
        },
    }
}

fn run(args: &[&str], file: &Path) -> (bool, String) {
    let manifest = demo_root().join("Cargo.toml");
    let mut all = args.to_vec();
    all.extend(["--file", file.to_str().unwrap()]);
    all.extend(["--manifest-path", manifest.to_str().unwrap()]);
    let out = cargo_ktune(&all);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn show_and_verify_a_valid_database() {
    let kernel = softmax();
    let schedule = ktune_core::lower::heuristic(&kernel, SmVersion::Sm90);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ktune.json");
    ktune_build::db::insert(&file, [record(&kernel, schedule.clone(), 8.0)]).unwrap();

    let (ok, text) = run(&["db", "show"], &file);
    assert!(ok, "{text}");
    assert!(text.contains("1 records"), "{text}");
    let line = text.lines().find(|l| l.starts_with("* ")).expect(&text);
    assert!(line.contains("softmax"), "{text}");
    assert!(line.contains("NVIDIA H100 80GB HBM3 (9.0)"), "{text}");
    assert!(line.contains(&schedule.to_json()), "{text}");
    assert!(line.contains("8.00 µs"), "{text}");
    assert!(line.contains("1.50x"), "{text}");

    let (ok, text) = run(&["db", "verify"], &file);
    assert!(ok, "{text}");
    assert!(text.contains("1 records, all valid"), "{text}");
}

#[test]
fn verify_reports_stale_and_invalid_records_and_fails() {
    let kernel = softmax();
    let schedule = ktune_core::lower::heuristic(&kernel, SmVersion::Sm90);
    let mut stale = record(&kernel, schedule, 8.0);
    stale.checksum = "0".repeat(32);
    stale.canonical = stale.canonical.replace("exp", "tanh");
    let elementwise = Schedule::Elementwise {
        block: 128,
        per_thread: 1,
        vector: 1,
    };
    let invalid = record(&kernel, elementwise, 9.0);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ktune.json");
    ktune_build::db::insert(&file, [stale, invalid]).unwrap();

    let (ok, text) = run(&["db", "verify"], &file);
    assert!(!ok, "{text}");
    assert!(
        text.contains("stale: the kernel changed since this was tuned"),
        "{text}"
    );
    assert!(
        text.contains("does not apply to kernel `softmax`"),
        "{text}"
    );
    assert!(text.contains("2 problems in 2 records"), "{text}");
}

#[test]
fn a_corrupt_database_is_an_error_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ktune.json");
    std::fs::write(&file, "{\n  \"version\": 1,\n  \"records\": [\n    {\n").unwrap();
    let (ok, text) = run(&["db", "show"], &file);
    assert!(!ok, "{text}");
    assert!(text.contains(&format!("{}:5:", file.display())), "{text}");
    assert!(text.contains("git checkout"), "{text}");
}
