//! `cargo ktune replay` on a recorded space from ../shared/data/tuning-spaces.

use std::path::PathBuf;
use std::process::{Command, Output};

fn recorded(space: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/data/tuning-spaces")
        .join(space)
        .to_string_lossy()
        .into_owned()
}

fn pnpoly() -> String {
    recorded("pnpoly/RTX_3090.json.gz")
}

fn replay(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cargo-ktune"))
        .args(["ktune", "replay"])
        .args(args)
        .output()
        .expect("cargo-ktune runs")
}

#[test]
fn json_has_the_shared_shape() {
    let space = pnpoly();
    let out = replay(&[
        "--space",
        &space,
        "--strategy",
        "random",
        "--seeds",
        "6",
        "--budget",
        "4092",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    assert_eq!(text.lines().count(), 1);
    let keys = [
        "tool",
        "space",
        "strategy",
        "runs_as",
        "seeds",
        "budget",
        "evals",
        "median",
        "median_interval",
        "q1",
        "q3",
        "success_fraction",
        "auc",
    ];
    let positions: Vec<usize> = keys
        .iter()
        .map(|k| {
            text.find(&format!("\"{k}\":"))
                .unwrap_or_else(|| panic!("no {k} in {text}"))
        })
        .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(v["tool"], "ktune");
    assert_eq!(v["space"], space.as_str());
    assert_eq!(v["strategy"], "random");
    assert_eq!(v["runs_as"], "random");
    assert_eq!(v["seeds"], 6);
    assert_eq!(v["budget"], 4092);
    let evals = v["evals"].as_array().expect("evals");
    assert_eq!(evals.len(), 6);
    // The whole space as budget: every seed gets there.
    assert!(
        evals
            .iter()
            .all(|e| e.as_u64().is_some_and(|n| (1..=4092).contains(&n)))
    );
    assert_eq!(v["success_fraction"], 1.0);
    let median = v["median"].as_f64().expect("median");
    assert!(v["q1"].as_f64().is_some_and(|q1| q1 <= median));
    let interval = v["median_interval"].as_array().expect("an interval");
    let low = interval[0].as_f64().expect("reached");
    let high = interval[1].as_f64().expect("reached");
    assert!(
        low <= median && median <= high,
        "{interval:?} around {median}"
    );
    assert!(v["q3"].as_f64().is_some_and(|q3| q3 >= median));
    assert!(v["auc"].as_f64().is_some_and(|a| a > 0.0 && a <= 1.0));
}

#[test]
fn unreached_seeds_are_null() {
    let out = replay(&[
        "--space",
        &pnpoly(),
        "--strategy",
        "random",
        "--seeds",
        "2",
        "--budget",
        "1",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    // 33 of 4092 configurations are within 5%: one random draw misses with
    // these seeds.
    assert_eq!(v["evals"], serde_json::json!([null, null]));
    assert_eq!(v["median"], serde_json::Value::Null);
    assert_eq!(v["median_interval"], serde_json::Value::Null, "two seeds");
    assert_eq!(v["success_fraction"], 0.0);
}

#[test]
fn human_output_says_what_it_counts_and_names_are_checked() {
    let out = replay(&[
        "--space",
        &pnpoly(),
        "--strategy",
        "evolutionary",
        "--seeds",
        "2",
        "--budget",
        "300",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    for line in [
        ", 2 seeds of at most 300 evaluations (failed configurations count; a seed that does not get there counts as >300):",
        "  evaluations to within 5% of the optimum: median ",
        "(no 95% interval with fewer than 6 seeds)",
        "  reached by ",
        "  area under the best-so-far curve (",
    ] {
        assert!(text.contains(line), "{line:?} not in {text}");
    }
    // The line names the model `evolutionary` ran with, and a build
    // without XGBoost says that it is not max-autotune's.
    let stderr = String::from_utf8_lossy(&out.stderr);
    if cfg!(feature = "xgboost") {
        assert!(
            text.starts_with("evolutionary (evolutionary-xgb-reg) on "),
            "{text}"
        );
        assert!(stderr.is_empty(), "{stderr}");
    } else {
        assert!(
            text.starts_with("evolutionary (evolutionary-knn) on "),
            "{text}"
        );
        assert!(stderr.contains("without the `xgboost` feature"), "{stderr}");
    }
    let out = replay(&["--space", &pnpoly(), "--strategy", "annealing"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown strategy `annealing`"));
}

#[test]
fn bad_arguments_and_files_are_named_once() {
    let stderr = |args: &[&str]| {
        let out = replay(args);
        assert!(!out.status.success(), "{args:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    for flag in ["--seeds", "--budget"] {
        let why = stderr(&["--space", &pnpoly(), flag, "0"]);
        assert!(why.contains("0 would do nothing; give at least 1"), "{why}");
    }
    // The strategy is checked before the space is read.
    let why = stderr(&["--space", "no/such/file.json", "--strategy", "annealing"]);
    assert!(why.contains("unknown strategy `annealing`"), "{why}");
    if !cfg!(feature = "xgboost") {
        let why = stderr(&["--space", &pnpoly(), "--strategy", "evolutionary-xgb-rank"]);
        assert!(
            why.contains("needs a cargo-ktune built with `--features xgboost`"),
            "{why}"
        );
    }
    let why = stderr(&["--space", &pnpoly(), "--strategy", "bounded"]);
    assert!(
        why.contains("heuristic model, which a recorded space has not"),
        "{why}"
    );
    // A file's error, its cause once.
    let why = stderr(&["--space", "no/such/file.json"]);
    assert_eq!(why.matches("No such file or directory").count(), 1, "{why}");
    assert!(
        why.starts_with("error: cannot read no/such/file.json: "),
        "{why}"
    );
    let space = recorded("convolution/A4000.json.gz");
    let why = stderr(&["--space", &space, "--known", "no/such/file.json"]);
    assert!(
        why.starts_with("error: --known: cannot read no/such/file.json: "),
        "{why}"
    );
    let a100 = recorded("convolution/A100.json.gz");
    let why = stderr(&["--space", &space, "--known", &a100, "--known", &a100]);
    assert!(why.contains("given twice"), "{why}");
}

#[test]
fn known_winners_are_measured_first() {
    // The A6000's winner runs within 2% of the A4000's optimum, so a search
    // that starts from it gets within 5% at its first evaluation, whatever
    // the seed.
    let space = recorded("convolution/A4000.json.gz");
    let known = recorded("convolution/A6000.json.gz");
    let out = replay(&[
        "--space", &space, "--known", &known, "--seeds", "2", "--budget", "12", "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["evals"], serde_json::json!([1, 1]));
    assert_eq!(v["known"], serde_json::json!([known]));
    // Without it, the first evaluation is a point of the design: 11 of the
    // 4362 points are within 5%.
    let out = replay(&[
        "--space", &space, "--seeds", "2", "--budget", "12", "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let evals = v["evals"].as_array().expect("evals");
    assert!(evals.iter().all(|e| e != 1), "{evals:?}");
    assert_eq!(v["known"], serde_json::json!([]));
}

#[test]
fn known_recordings_must_be_of_the_same_kernel_and_another_gpu() {
    let space = recorded("convolution/A4000.json.gz");
    let stderr = |args: &[&str]| {
        let out = replay(args);
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let gemm = recorded("gemm/RTX_3090.json.gz");
    let why = stderr(&["--space", &space, "--known", &gemm]);
    assert!(
        why.contains("its winner is not a point of")
            && why.contains("`MWG` is a knob of the other space only"),
        "{why}"
    );
    let why = stderr(&["--space", &space, "--known", &space]);
    assert!(why.contains("that is the replayed space itself"), "{why}");
    let a100 = recorded("convolution/A100.json.gz");
    let why = stderr(&["--space", &space, "--known", &a100, "--strategy", "random"]);
    assert!(
        why.contains("only the evolutionary strategies start from known points"),
        "{why}"
    );
}
