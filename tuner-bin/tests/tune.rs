//! `cargo ktune tune` and `cargo ktune report` end to end, on a small crate
//! tuned on the virtual GPU.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

const KERNELS: &str = r#"
#[tuned_kernel(shape(R = 6, C = 40))]
pub fn softmax(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
    compute(|r, c| {
        let mx = max(C, |j| x[r][j]);
        exp(x[r][c] - mx) / sum(C, |j| exp(x[r][j] - mx))
    })
}

#[tuned_kernel(shape(N = 3000))]
pub fn axpy(x: Tensor<f32, (N,)>, y: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {
    compute(|n| 2.0 * x[n] + y[n])
}
"#;

/// A crate with two kernels (it is only scanned, never built).
fn fixture() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(dir.path().join("src")).expect("src");
    std::fs::write(
        dir.path().join("Cargo.toml"),
        "[package]\nname = \"tune-fixture\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n\
         [package.metadata.ktune]\ntargets = [\"sm_90\"]\n\n[workspace]\n",
    )
    .expect("manifest");
    std::fs::write(dir.path().join("src/lib.rs"), KERNELS).expect("lib.rs");
    dir
}

/// A kernel `matmul` of `n` × `n` f32 matrices.
fn matmul(n: u32) -> String {
    format!(
        "\n#[tuned_kernel(shape(M = {n}, N = {n}, K = {n}))]\n\
         pub fn matmul(a: Tensor<f32, (M, K)>, b: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {{\n\
         \x20   compute(|m, n| sum(K, |k| a[m][k] * b[k][n]))\n}}\n"
    )
}

/// `cargo ktune ARGS` in `dir`, whose target folder (and so the journal
/// and history) is its own even when the caller's environment names one.
fn cargo_ktune(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cargo-ktune"))
        .arg("ktune")
        .args(args)
        .current_dir(dir)
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .expect("cargo-ktune runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Lines of progress that report a new measurement.
fn measurements(stderr: &str) -> usize {
    stderr
        .lines()
        .filter(|l| l.contains(" µs  {") || l.trim_start().starts_with("rejected"))
        .count()
}

#[test]
fn tune_spreads_its_trials_writes_marked_records_and_resumes_from_its_journal() {
    let dir = fixture();
    let args = [
        "tune", "--device", "vgpu", "--trials", "30", "--weight", "axpy=2", "--json",
    ];
    let out = cargo_ktune(dir.path(), &args);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let run: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let kernels = run["kernels"].as_array().expect("kernels");
    assert_eq!(kernels.len(), 2);
    let mut total = 0;
    for k in kernels {
        let steps = k["steps"].as_array().expect("steps");
        assert!(!steps.is_empty(), "{k}");
        total += steps.len();
        let best = k["best_us"].as_f64().expect("a best time");
        let default = k["default_us"].as_f64().expect("the default's time");
        assert!(best <= default, "{k}");
        let fastest = steps
            .iter()
            .filter_map(|s| s["result"]["Ok"]["median_us"].as_f64())
            .fold(f64::INFINITY, f64::min);
        assert_eq!(best, fastest, "the record holds the fastest candidate");
    }
    assert_eq!(total, 30, "the whole budget was spent");
    assert_eq!(measurements(&stderr), 30, "{stderr}");
    assert_eq!(run["measured_on"], "vgpu");

    let database: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("tuning/ktune.json")).expect("database"),
    )
    .expect("database JSON");
    let records = database["records"].as_array().expect("records");
    let names: Vec<&str> = records
        .iter()
        .filter_map(|r| r["kernel"].as_str())
        .collect();
    assert!(
        names.contains(&"softmax") && names.contains(&"axpy"),
        "{names:?}"
    );
    assert!(
        records
            .iter()
            .all(|r| r["provenance"]["measured_on"] == "vgpu"),
        "{database}"
    );

    // The same run again: the journal answers every point, nothing is
    // measured, the winners are the same.
    let again = cargo_ktune(dir.path(), &args);
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert_eq!(
        measurements(&text(&again.stderr)),
        0,
        "{}",
        text(&again.stderr)
    );
    for kernel in ["softmax", "axpy"] {
        assert!(
            text(&again.stderr).contains(&format!("{kernel}: resuming, ")),
            "the resumption is said: {}",
            text(&again.stderr)
        );
    }
    let rerun: Value = serde_json::from_slice(&again.stdout).expect("JSON");
    for (a, b) in kernels
        .iter()
        .zip(rerun["kernels"].as_array().expect("kernels"))
    {
        assert_eq!(a["best"], b["best"]);
        assert_eq!(a["steps"], b["steps"]);
    }

    // A larger budget measures only the new trials.
    let more = cargo_ktune(
        dir.path(),
        &[
            "tune", "--device", "vgpu", "--trials", "40", "--weight", "axpy=2",
        ],
    );
    let stderr = text(&more.stderr);
    assert!(more.status.success(), "{stderr}");
    let new = measurements(&stderr);
    assert!(new > 0 && new <= 10, "{new} new measurements:\n{stderr}");
    assert!(text(&more.stdout).contains("tuned 2 of 2 kernels"));
}

#[test]
fn tune_scans_a_folder_of_sources_where_there_is_no_cargo() {
    let dir = tempfile::tempdir().expect("temp dir");
    let sources = dir.path().join("kernels");
    std::fs::create_dir(&sources).expect("folder");
    std::fs::write(sources.join("kernels.rs"), KERNELS).expect("sources");
    let work = dir.path().join("work");
    let database = dir.path().join("results/ktune.json");
    let out = cargo_ktune(
        dir.path(),
        &[
            "tune",
            "--sources",
            sources.to_str().unwrap(),
            "--work-dir",
            work.to_str().unwrap(),
            "--database",
            database.to_str().unwrap(),
            "--device",
            "vgpu",
            "--trials",
            "12",
            "--jobs",
            "1",
            "axpy",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("tuned 1 of 1 kernel "),
        "{}",
        text(&out.stdout)
    );
    assert!(work.join("tune-history.json").is_file());
    assert!(work.join("journal").is_dir());
    let db = std::fs::read_to_string(&database).expect("the database");
    assert!(db.contains("\"axpy\""), "{db}");
    let report = cargo_ktune(
        dir.path(),
        &[
            "report",
            "--work-dir",
            work.to_str().unwrap(),
            "--out",
            dir.path().join("report.html").to_str().unwrap(),
        ],
    );
    assert!(report.status.success(), "{}", text(&report.stderr));
    assert!(dir.path().join("report.html").is_file());
}

#[test]
fn report_draws_the_last_run() {
    let dir = fixture();
    let missing = cargo_ktune(dir.path(), &["report"]);
    assert!(!missing.status.success());
    assert!(
        text(&missing.stderr).contains("no `cargo ktune tune` run recorded"),
        "{}",
        text(&missing.stderr)
    );

    let tuned = cargo_ktune(
        dir.path(),
        &["tune", "--device", "vgpu", "--trials", "40", "softmax"],
    );
    assert!(tuned.status.success(), "{}", text(&tuned.stderr));
    let out = cargo_ktune(dir.path(), &["report"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let page =
        std::fs::read_to_string(dir.path().join("target/ktune/report.html")).expect("the report");
    assert!(page.contains("<h2>softmax</h2>"), "{page}");
    assert!(!page.contains("<h2>axpy</h2>"), "only the kernel tuned");
    assert!(page.contains("virtual GPU"));
    // The speed-up bars, the curve, the learned model's and the heuristic
    // model's scatter plots.
    assert_eq!(page.matches("<svg").count(), 4, "{page}");
    assert!(page.contains("best so far"));

    let json = cargo_ktune(dir.path(), &["report", "--json"]);
    assert!(json.status.success(), "{}", text(&json.stderr));
    let figures: Value = serde_json::from_slice(&json.stdout).expect("JSON");
    assert_eq!(figures["krate"], "tune-fixture");
    assert_eq!(figures["measured_on"], "vgpu");
    let softmax = &figures["kernels"][0];
    assert_eq!(softmax["kernel"], "softmax");
    assert_eq!(softmax["trials"], 40);
    assert!(softmax["speedup"].as_f64().expect("speed-up") >= 1.0);
    let rho = softmax["heuristic_model_correlation"]
        .as_f64()
        .expect("a correlation");
    assert!((-1.0..=1.0).contains(&rho));

    // Another crate's run in the shared target directory is not this
    // crate's report.
    let history = dir.path().join("target/ktune/tune-history.json");
    let other = std::fs::read_to_string(&history)
        .expect("the history")
        .replace("\"krate\": \"tune-fixture\"", "\"krate\": \"other\"");
    std::fs::write(&history, other).expect("the history");
    let out = cargo_ktune(dir.path(), &["report"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("was of crate `other`, not `tune-fixture`"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn tune_names_what_is_wrong_with_its_arguments() {
    let dir = fixture();
    let unknown = cargo_ktune(dir.path(), &["tune", "--device", "vgpu", "gemm"]);
    assert!(!unknown.status.success());
    let stderr = text(&unknown.stderr);
    assert!(
        stderr.contains("no kernel `gemm`") && stderr.contains("softmax, axpy"),
        "{stderr}"
    );
    let weight = cargo_ktune(
        dir.path(),
        &["tune", "--device", "vgpu", "softmax", "--weight", "axpy=3"],
    );
    assert!(!weight.status.success());
    assert!(
        text(&weight.stderr).contains("--weight names `axpy`"),
        "{}",
        text(&weight.stderr)
    );
    let bad = cargo_ktune(dir.path(), &["tune", "--weight", "axpy=-1"]);
    assert!(!bad.status.success());
    assert!(
        text(&bad.stderr).contains("must be a positive number"),
        "{}",
        text(&bad.stderr)
    );
    if ktune_measure::detect().is_none() {
        let auto = cargo_ktune(dir.path(), &["tune"]);
        assert!(!auto.status.success());
        let stderr = text(&auto.stderr);
        assert!(
            stderr.contains("no GPU found") && stderr.contains("--device vgpu"),
            "{stderr}"
        );
        assert!(!dir.path().join("tuning").exists(), "nothing written");
    }
    let jobs = cargo_ktune(dir.path(), &["tune", "--device", "vgpu", "-j", "0"]);
    assert!(!jobs.status.success());
    assert!(
        text(&jobs.stderr).contains("invalid value '0' for '--jobs <JOBS>'"),
        "{}",
        text(&jobs.stderr)
    );
    for (flag, message) in [
        ("--trials", "0 would do nothing; give at least 1"),
        ("--seconds", "0 would do nothing; give at least 1"),
    ] {
        let zero = cargo_ktune(dir.path(), &["tune", "--device", "vgpu", flag, "0"]);
        assert!(!zero.status.success());
        assert!(
            text(&zero.stderr).contains(message),
            "{}",
            text(&zero.stderr)
        );
    }
    let strategy = cargo_ktune(dir.path(), &["tune", "--strategy", "annealing"]);
    assert!(!strategy.status.success());
    assert!(
        text(&strategy.stderr).contains("unknown strategy `annealing`"),
        "{}",
        text(&strategy.stderr)
    );
}

#[test]
fn the_virtual_gpu_leaves_out_kernels_too_large_for_it() {
    let dir = fixture();
    let large = matmul(1024);
    std::fs::write(dir.path().join("src/lib.rs"), format!("{KERNELS}{large}")).expect("lib.rs");

    // Named, it is an error that says why.
    let named = cargo_ktune(dir.path(), &["tune", "matmul", "--device", "vgpu"]);
    assert!(!named.status.success());
    let stderr = text(&named.stderr);
    assert!(
        stderr.contains("`matmul` is too large for the virtual GPU: 2.15 GFLOP"),
        "{stderr}"
    );

    // Among others, it is left out and the others are tuned.
    let all = cargo_ktune(
        dir.path(),
        &["tune", "--device", "vgpu", "--trials", "4", "--json"],
    );
    let stderr = text(&all.stderr);
    assert!(all.status.success(), "{stderr}");
    assert!(
        stderr.contains("left out: `matmul` is too large"),
        "{stderr}"
    );
    let run: Value = serde_json::from_slice(&all.stdout).expect("JSON");
    let names: Vec<&str> = run["kernels"]
        .as_array()
        .expect("kernels")
        .iter()
        .map(|k| k["kernel"].as_str().expect("a name"))
        .collect();
    assert_eq!(names, ["softmax", "axpy"]);
}

/// Ctrl-C at the terminal (SIGINT to the foreground process group) ends a
/// run as its time running out would: the measurement in progress
/// finishes, its worker unharmed, and what was found is recorded.
#[cfg(unix)]
#[test]
fn ctrl_c_ends_the_run_with_what_it_found() {
    use std::io::{BufRead, BufReader, Read};
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;

    let dir = fixture();
    std::fs::write(dir.path().join("src/lib.rs"), matmul(64)).expect("lib.rs");
    let mut run = Command::new(env!("CARGO_BIN_EXE_cargo-ktune"))
        .args(["ktune", "tune", "--device", "vgpu", "--trials", "5000"])
        .current_dir(dir.path())
        .env_remove("CARGO_TARGET_DIR")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("cargo-ktune runs");
    let mut stderr = BufReader::new(run.stderr.take().expect("piped"));
    let mut before = String::new();
    while measurements(&before) < 2 {
        assert_ne!(
            stderr.read_line(&mut before).expect("stderr"),
            0,
            "{before}"
        );
    }
    let group = -i32::try_from(run.id()).expect("a pid");
    // SAFETY: sends a signal; touches no memory.
    assert_eq!(unsafe { libc::kill(group, libc::SIGINT) }, 0);
    let mut after = String::new();
    stderr.read_to_string(&mut after).expect("stderr");
    let mut stdout = String::new();
    run.stdout
        .take()
        .expect("piped")
        .read_to_string(&mut stdout)
        .expect("stdout");
    let status = run.wait().expect("it ends");
    let stderr = format!("{before}{after}");
    assert!(status.success(), "{status}: {stderr}");
    assert!(
        stderr.contains("interrupted: finishing the measurement in progress"),
        "{stderr}"
    );
    assert!(stdout.contains("(interrupted)"), "{stdout}");
    assert!(
        !stderr.contains("rejected"),
        "the worker finished its measurement: {stderr}"
    );
    assert!(measurements(&stderr) < 5000, "{stderr}");
    let database = std::fs::read_to_string(dir.path().join("tuning/ktune.json")).expect("database");
    assert!(database.contains("\"kernel\": \"matmul\""), "{database}");
}
