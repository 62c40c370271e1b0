//! `cargo ktune inspect` on the demo crate: the default schedule's measures
//! as text and JSON, the database's winner with `--schedule best`, and the
//! errors for a missing record or a bad schedule.
//!
//! Needs ptxas and nvdisasm (`cargo xtask setup`); without them these tests
//! fail, never pass silently.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ktune_core::SmVersion;
use ktune_core::db::{Database, Gpu, MeasuredOn, Provenance, Record, Stats};
use ktune_core::ir::Kernel;
use ktune_core::schedule::Schedule;
use serde_json::Value;

fn demo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/demo")
}

/// Runs `cargo ktune inspect` on the demo with the user cache in `cache`.
fn inspect(args: &[&str], cache: &Path) -> Output {
    let manifest = demo_root().join("Cargo.toml");
    Command::new(env!("CARGO_BIN_EXE_cargo-ktune"))
        .arg("ktune")
        .arg("inspect")
        .args(args)
        .arg("--manifest-path")
        .arg(manifest)
        .env("XDG_CACHE_HOME", cache)
        .output()
        .expect("cargo-ktune runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn empty_cache() -> tempfile::TempDir {
    tempfile::tempdir().expect("a temp dir")
}

#[test]
fn prints_the_default_schedules_measures() {
    let cache = empty_cache();
    let out = inspect(&["ffn_down", "--target", "sm_90"], cache.path());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(
        shown.starts_with("ffn_down on sm_90: {\"class\":\"matmul\""),
        "{shown}"
    );
    assert!(shown.contains("(heuristic)"), "{shown}");
    for line in [
        "  registers ",
        "; spills 0 B stored, 0 B loaded",
        "  shared memory  ",
        "  occupancy ",
        "  tensor cores   none",
        "  main loop ",
        "    mix          FFMA ",
    ] {
        assert!(shown.contains(line), "no `{line}` in:\n{shown}");
    }
}

#[test]
fn json_holds_the_same_measures() {
    let cache = empty_cache();
    let out = inspect(&["softmax", "--json"], cache.path());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["kernel"], "softmax");
    assert_eq!(v["target"], "sm_80");
    assert_eq!(v["schedule"]["class"], "rows");
    assert_eq!(v["source"], "heuristic");
    let i = &v["inspection"];
    assert_eq!(i["entry"], "ktune_softmax");
    assert!(
        i["registers"].as_u64().is_some_and(|r| r > 0 && r <= 255),
        "{i}"
    );
    assert_eq!(i["spill_stores"], 0);
    let occupancy = &i["occupancy"];
    assert!(
        occupancy["blocks_per_sm"].as_u64().is_some_and(|b| b > 0),
        "{i}"
    );
    assert!(
        occupancy["limited_by"]
            .as_array()
            .is_some_and(|l| !l.is_empty()),
        "{i}"
    );
    // The default softmax reads each row of 384 once, four f32 at a time,
    // into registers: three loads per thread and no loop at all.
    assert_eq!(v["schedule"]["cache"], 1);
    assert_eq!(i["memory"]["global_loads"]["128"], 3, "{i}");
    assert!(i["main_loop"].is_null(), "{i}");

    // A kernel with a loop shows it.
    let out = inspect(&["ffn_down", "--json"], cache.path());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let i = &v["inspection"];
    let main = &i["main_loop"];
    assert!(main["instructions"].as_u64().is_some_and(|n| n > 0), "{i}");
    assert!(
        main["mix"].as_object().is_some_and(|m| !m.is_empty()),
        "{i}"
    );
}

fn softmax() -> Kernel {
    let root = demo_root();
    let scan = ktune_build::scan::scan(&root, &[root.join("src")]).expect("the demo scans");
    scan.kernels
        .into_iter()
        .map(|f| f.kernel)
        .find(|k| k.name == "softmax")
        .expect("the demo has softmax")
}

/// A softmax winner measured on an H100.
fn h100_record(kernel: &Kernel, schedule: Schedule) -> Record {
    Record {
        kernel: kernel.name.clone(),
        checksum: ktune_core::canon::checksum(kernel),
        canonical: ktune_core::canon::canonical_form(kernel),
        shape: kernel.shape().collect::<BTreeMap<_, _>>(),
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
            median_us: 10.0,
            low_us: 9.9,
            high_us: 10.1,
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

#[test]
fn best_is_the_databases_winner_for_the_target() {
    let cache = empty_cache();
    let winner = Schedule::Rows {
        threads_per_row: 64,
        rows_per_block: 2,
        vector: 2,
        cache: 0,
        tree: 0,
        online: 0,
        cluster: 1,
    };
    let dir = cache.path().join("ktune/demo");
    std::fs::create_dir_all(&dir).expect("the cache folder");
    let mut db = Database::new();
    db.insert(vec![h100_record(&softmax(), winner.clone())]);
    std::fs::write(dir.join("ktune.json"), db.to_text()).expect("the database");

    let out = inspect(
        &[
            "softmax",
            "--target",
            "sm_90",
            "--schedule",
            "best",
            "--json",
        ],
        cache.path(),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        Schedule::from_json(&v["schedule"].to_string()).expect("a schedule"),
        winner
    );
    assert_eq!(v["gpu"], "NVIDIA H100 80GB HBM3");
    assert!(
        v["source"]
            .as_str()
            .is_some_and(|s| s.starts_with("database")),
        "{v}"
    );
    assert_eq!(v["inspection"]["threads_per_block"], 128);

    // Nothing was measured for sm_80.
    let out = inspect(&["softmax", "--schedule", "best"], cache.path());
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("no database record for kernel `softmax` on sm_80"),
        "{err}"
    );

    // A virtual GPU's record for sm_80 is never chosen: the error says so.
    let mut estimated = h100_record(&softmax(), winner);
    estimated.gpu.name = "ktune-vgpu (sm_80)".to_owned();
    estimated.gpu.compute_capability = SmVersion::Sm80.into();
    estimated.provenance.measured_on = MeasuredOn::Vgpu;
    db.insert(vec![estimated]);
    std::fs::write(dir.join("ktune.json"), db.to_text()).expect("the database");
    let out = inspect(&["softmax", "--schedule", "best"], cache.path());
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("kernel `softmax` has no record for a GPU on sm_80"),
        "{err}"
    );
    assert!(err.contains("only 1 record on the virtual GPU"), "{err}");
}

#[test]
fn bad_requests_are_clear_errors() {
    let cache = empty_cache();
    let out = inspect(&["softmax", "--schedule", "fastest"], cache.path());
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("`fastest` is not a schedule: expected default, best"),
        "{err}"
    );

    let out = inspect(&["nope"], cache.path());
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("no kernel `nope` in crate `demo`"), "{err}");
}
