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

    let (ok, text) = run(&["db", "show", "--json"], &file);
    assert!(ok, "{text}");
    let shown: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let record = &shown["records"][0];
    assert_eq!(record["chosen"], true);
    assert_eq!(record["speedup"], 1.5);
    assert_eq!(record["record"]["kernel"], "softmax");

    let (ok, text) = run(&["db", "verify"], &file);
    assert!(ok, "{text}");
    assert!(text.contains("1 record, all valid"), "{text}");
    // The subprocess looks for ptxas from the same folder as this test.
    if ktune_build::ptxas::find().is_some() {
        assert!(
            text.contains("ptxas: 1 records assembled for their GPUs, 0 failed or spilled"),
            "{text}"
        );
    } else {
        assert!(
            text.contains("ptxas not found: assembly not checked"),
            "{text}"
        );
    }
}

/// A plain build's search writes to the per-user cache: `db show` of the
/// crate points there when it holds records.
#[test]
fn show_points_at_the_user_caches_records() {
    let kernel = softmax();
    let cache = tempfile::tempdir().unwrap();
    let show = || {
        Command::new(env!("CARGO_BIN_EXE_cargo-ktune"))
            .args(["ktune", "db", "show", "--manifest-path"])
            .arg(demo_root().join("Cargo.toml"))
            .env("XDG_CACHE_HOME", cache.path())
            .output()
            .expect("cargo-ktune runs")
    };
    let quiet = show();
    assert!(quiet.status.success());
    assert!(!String::from_utf8_lossy(&quiet.stderr).contains("per-user cache"));

    let mut db = ktune_core::db::Database::new();
    let mut estimated = record(&kernel, Schedule::Generic { block: 128 }, 9.0);
    estimated.provenance.measured_on = MeasuredOn::Vgpu;
    db.insert(vec![estimated]);
    let path = cache.path().join("ktune/demo/ktune.json");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, db.to_text()).unwrap();
    let pointed = show();
    assert!(pointed.status.success());
    let stderr = String::from_utf8_lossy(&pointed.stderr);
    assert!(
        stderr.contains(&format!(
            "the per-user cache holds 1 record too: cargo ktune db show --file {}",
            path.display()
        )),
        "{stderr}"
    );
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

/// Runs `cargo ktune` with `args` only: success and stdout with stderr.
fn plain(args: &[&str]) -> (bool, String) {
    let out = cargo_ktune(args);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// A record of softmax on `gpu` with a generic schedule (not validated by
/// diff or merge), measured on `date`.
fn measured(gpu: (&str, SmVersion), block: u32, median: f64, date: &str) -> Record {
    let mut r = record(&softmax(), Schedule::Generic { block }, median);
    r.gpu.name = gpu.0.to_owned();
    r.gpu.compute_capability = gpu.1.into();
    r.provenance.date = date.to_owned();
    r
}

const H100: (&str, SmVersion) = ("NVIDIA H100 80GB HBM3", SmVersion::Sm90);
const A100: (&str, SmVersion) = ("NVIDIA A100-SXM4-80GB", SmVersion::Sm80);
const L40: (&str, SmVersion) = ("NVIDIA L40S", SmVersion::Sm89);
const DAY1: &str = "2026-11-01T00:00:00Z";
const DAY2: &str = "2026-11-02T00:00:00Z";

fn write_db(path: &Path, records: Vec<Record>) {
    let mut db = ktune_core::db::Database::new();
    db.insert(records);
    std::fs::write(path, db.to_text()).unwrap();
}

fn line_with<'a>(text: &'a str, needle: &str) -> &'a str {
    text.lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with `{needle}` in:\n{text}"))
}

#[test]
fn diff_shows_added_removed_and_changed_winners() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (dir.path().join("old.json"), dir.path().join("new.json"));
    write_db(
        &old,
        vec![
            measured(H100, 128, 8.0, DAY1),
            measured(A100, 128, 10.0, DAY1),
        ],
    );
    write_db(
        &new,
        vec![
            measured(H100, 128, 8.0, DAY1),
            measured(H100, 256, 6.0, DAY2),
            measured(L40, 512, 9.0, DAY2),
        ],
    );
    let (ok, text) = plain(&["db", "diff", old.to_str().unwrap(), new.to_str().unwrap()]);
    assert!(ok, "{text}");
    assert!(
        text.contains("1 added, 1 removed, 1 winner changed"),
        "{text}"
    );
    let changed = line_with(&text, "winner changed ");
    assert!(changed.contains("H100"), "{text}");
    assert!(
        changed.contains(r#"{"class":"generic","block":128}"#),
        "{text}"
    );
    assert!(
        changed.contains(r#"{"class":"generic","block":256}"#),
        "{text}"
    );
    assert!(changed.contains("1.33x"), "{text}");
    assert!(changed.contains("1.50x → 2.00x"), "{text}");
    assert!(line_with(&text, "removed ").contains("A100"), "{text}");
    assert!(line_with(&text, "added ").contains("L40S"), "{text}");

    let (ok, json) = plain(&[
        "db",
        "diff",
        old.to_str().unwrap(),
        new.to_str().unwrap(),
        "--json",
    ]);
    assert!(ok, "{json}");
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    let changes = value["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 3, "{json}");
    let winner = changes.iter().find(|c| c["change"] == "winner").unwrap();
    assert_eq!(winner["new"]["schedule"]["block"], 256, "{json}");
    assert_eq!(winner["old"]["median_us"], 8.0, "{json}");
}

#[test]
fn diff_of_reordered_records_is_empty() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (dir.path().join("old.json"), dir.path().join("new.json"));
    let records = vec![
        measured(H100, 128, 8.0, DAY1),
        measured(A100, 128, 10.0, DAY1),
        measured(L40, 512, 9.0, DAY2),
    ];
    write_db(&old, records.clone());
    let mut reversed = ktune_core::db::Database::new();
    reversed.records = records.into_iter().rev().collect();
    std::fs::write(&new, serde_json::to_string_pretty(&reversed).unwrap()).unwrap();
    let (ok, text) = plain(&["db", "diff", old.to_str().unwrap(), new.to_str().unwrap()]);
    assert!(ok, "{text}");
    assert!(text.contains("no changes"), "{text}");
    assert_eq!(text.lines().count(), 1, "{text}");
}

/// INTO and FROM disagree on two keys: on the H100 FROM's record is
/// faster beyond noise, on the A100 within noise (INTO's is older).
fn conflicting(dir: &Path) -> (PathBuf, PathBuf) {
    let (into, from) = (dir.join("ours.json"), dir.join("theirs.json"));
    write_db(
        &into,
        vec![
            measured(H100, 128, 8.0, DAY1),
            measured(A100, 128, 10.0, DAY1),
        ],
    );
    write_db(
        &from,
        vec![
            measured(H100, 256, 6.0, DAY2),
            measured(A100, 256, 10.05, DAY2),
            measured(L40, 512, 9.0, DAY2),
        ],
    );
    (into, from)
}

#[test]
fn merge_reports_conflicts_and_writes_cores_merge() {
    let dir = tempfile::tempdir().unwrap();
    let (into, from) = conflicting(dir.path());
    let mut expected =
        ktune_core::db::Database::parse(&std::fs::read_to_string(&into).unwrap()).unwrap();
    expected
        .merge(ktune_core::db::Database::parse(&std::fs::read_to_string(&from).unwrap()).unwrap());

    let (ok, text) = plain(&[
        "db",
        "merge",
        into.to_str().unwrap(),
        from.to_str().unwrap(),
    ]);
    assert!(ok, "{text}");
    assert!(text.contains("2 conflicts"), "{text}");
    assert!(
        line_with(&text, "lost: beaten beyond noise").contains("8.00 µs"),
        "{text}"
    );
    assert!(
        line_with(&text, "lost: incumbent within noise").contains("10.05 µs"),
        "{text}"
    );
    assert!(
        text.contains("1 added, 1 winner changed, 1 winner kept"),
        "{text}"
    );
    assert_eq!(std::fs::read_to_string(&into).unwrap(), expected.to_text());
}

#[test]
fn merge_dry_run_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (into, from) = conflicting(dir.path());
    let before = std::fs::read(&into).unwrap();
    let (ok, text) = plain(&[
        "db",
        "merge",
        into.to_str().unwrap(),
        from.to_str().unwrap(),
        "--dry-run",
    ]);
    assert!(ok, "{text}");
    assert!(text.contains("2 conflicts; would change"), "{text}");
    assert!(text.contains("dry run: nothing written"), "{text}");
    assert_eq!(std::fs::read(&into).unwrap(), before);
}

#[test]
fn merge_refuses_corrupt_files_and_leaves_them_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let (into, from) = conflicting(dir.path());
    let corrupt = "{\n  \"version\": 1,\n  \"records\": [\n    {\n";
    let good = std::fs::read(&into).unwrap();

    std::fs::write(&from, corrupt).unwrap();
    let (ok, text) = plain(&[
        "db",
        "merge",
        into.to_str().unwrap(),
        from.to_str().unwrap(),
    ]);
    assert!(!ok, "{text}");
    assert!(text.contains(&format!("{}:5:", from.display())), "{text}");
    assert_eq!(std::fs::read(&into).unwrap(), good);
    assert_eq!(std::fs::read_to_string(&from).unwrap(), corrupt);

    std::fs::write(&into, corrupt).unwrap();
    std::fs::write(&from, &good).unwrap();
    let (ok, text) = plain(&[
        "db",
        "merge",
        into.to_str().unwrap(),
        from.to_str().unwrap(),
    ]);
    assert!(!ok, "{text}");
    assert!(text.contains(&format!("{}:5:", into.display())), "{text}");
    assert_eq!(std::fs::read_to_string(&into).unwrap(), corrupt);
}

/// A current record, a stale one (the kernel changed since) and a current
/// one within noise of the first but newer (superseded).
fn prunable(file: &Path) -> (Record, Record, Record) {
    let kernel = softmax();
    let schedule = ktune_core::lower::heuristic(&kernel, SmVersion::Sm90);
    let mut current = record(&kernel, schedule.clone(), 8.0);
    current.provenance.date = DAY1.to_owned();
    let mut superseded = record(&kernel, schedule.clone(), 8.01);
    superseded.provenance.date = DAY2.to_owned();
    let mut stale = record(&kernel, schedule, 7.0);
    stale.checksum = "0".repeat(32);
    ktune_build::db::insert(file, [current.clone(), stale.clone(), superseded.clone()]).unwrap();
    (current, stale, superseded)
}

#[test]
fn prune_stale_drops_records_of_changed_kernels() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ktune.json");
    let (current, _, superseded) = prunable(&file);

    let before = std::fs::read(&file).unwrap();
    let (ok, text) = run(&["db", "prune", "--stale", "--dry-run"], &file);
    assert!(ok, "{text}");
    assert!(text.contains("would drop 1 of 3 records"), "{text}");
    assert!(
        line_with(&text, "stale: the kernel changed").contains("7.00 µs"),
        "{text}"
    );
    assert_eq!(std::fs::read(&file).unwrap(), before);

    let (ok, text) = run(&["db", "prune", "--stale"], &file);
    assert!(ok, "{text}");
    assert!(text.contains("dropped 1 of 3 records"), "{text}");
    let db = ktune_build::db::open(&file).unwrap();
    assert_eq!(db.records, vec![current, superseded]);
}

#[test]
fn prune_by_default_also_keeps_only_each_keys_choice() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ktune.json");
    let (current, _, _) = prunable(&file);
    let (ok, text) = run(&["db", "prune"], &file);
    assert!(ok, "{text}");
    assert!(text.contains("dropped 2 of 3 records"), "{text}");
    assert!(line_with(&text, "superseded").contains("8.01 µs"), "{text}");
    let db = ktune_build::db::open(&file).unwrap();
    assert_eq!(db.records, vec![current]);
}

#[test]
fn prune_refuses_a_corrupt_file_and_leaves_it_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ktune.json");
    let corrupt = "{\n  \"version\": 1,\n  \"records\": [\n    {\n";
    std::fs::write(&file, corrupt).unwrap();
    let (ok, text) = run(&["db", "prune"], &file);
    assert!(!ok, "{text}");
    assert!(text.contains(&format!("{}:5:", file.display())), "{text}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), corrupt);
}
