//! The binary's command line: the dry run, the case list, and the
//! distinct exit status without a GPU.

use ktune_bench::plan::Plan;
use ktune_core::SmVersion;
use std::process::Command;

fn bench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ktune-bench"))
}

#[test]
fn without_a_gpu_it_says_so_and_exits_with_3() {
    // An empty CUDA_VISIBLE_DEVICES hides every GPU, so this holds on GPU
    // machines too: the driver, if present, reports no device.
    let output = bench()
        .env("CUDA_VISIBLE_DEVICES", "")
        .args(["--cases", "decode_m1", "--quick", "--search", "8"])
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("no GPU"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn the_agreement_check_needs_a_gpu_too_and_takes_no_cases() {
    let output = bench()
        .env("CUDA_VISIBLE_DEVICES", "")
        .args(["--agree", "--budget-s", "10"])
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("no GPU"), "{stderr}");

    let output = bench()
        .args(["--agree", "--cases", "decode_m1"])
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--cases"), "{stderr}");
}

#[test]
fn dry_run_lists_the_default_its_alternatives_the_bounded_candidates_and_the_sample() {
    let names = ["decode_m1", "softmax_8192x4096"];
    let output = bench()
        .args(["--dry-run", "--cases", &names.join(","), "--sample", "2"])
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(names.iter().all(|n| stdout.contains(n)), "{stdout}");
    let plans: Vec<Plan> = names
        .iter()
        .map(|name| {
            let case = ktune_bench::cases::CASES
                .iter()
                .find(|c| c.name == *name)
                .expect("a case");
            Plan::new(case, SmVersion::Sm90, 2, 1).expect("parses")
        })
        .collect();
    let bounded: usize = plans.iter().map(|p| p.bounded.len()).sum();
    // decode_m1's tensor-core default has alternatives; softmax's has none.
    let alternatives: usize = plans.iter().map(|p| p.alternatives.len()).sum();
    assert!(bounded > 0);
    assert!(alternatives > 0);
    assert_eq!(stdout.matches("  default ").count(), 2, "{stdout}");
    assert_eq!(
        stdout.matches("  altern. ").count(),
        alternatives,
        "{stdout}"
    );
    assert_eq!(stdout.matches("  bounded ").count(), bounded, "{stdout}");
    assert_eq!(stdout.matches("  sample ").count(), 4, "{stdout}");
    let lowered = format!("dry run: {} schedules lowered", 6 + alternatives + bounded);
    assert!(stdout.contains(&lowered), "{stdout}");
}

#[test]
fn list_prints_every_case_as_json() {
    let output = bench().arg("--list").output().expect("runs");
    assert!(output.status.success());
    let list: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let cases = list.as_array().expect("an array");
    assert_eq!(cases.len(), ktune_bench::cases::CASES.len());
    let sgemm = &cases[0];
    assert_eq!(sgemm["name"], "sgemm_4096");
    assert_eq!(sgemm["kind"], "matmul");
    assert_eq!(sgemm["dtype"], "f32");
    assert_eq!(sgemm["shape"]["K"], 4096);
}

#[test]
fn unknown_cases_are_an_error_naming_the_known_ones() {
    let output = bench()
        .args(["--dry-run", "--cases", "nope"])
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("sgemm_4096"), "{stderr}");
}

#[test]
fn the_fit_reads_a_results_file_without_a_gpu() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../results/gpu/2026-11-30-h200/bench.json"
    );
    let output = bench()
        .env("CUDA_VISIBLE_DEVICES", "")
        .args(["--fit", path])
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("| sgemm_4096 | 33 |"), "{stdout}");
    assert!(
        stdout.contains("median Spearman ρ over 16 cases"),
        "{stdout}"
    );

    let output = bench()
        .env("CUDA_VISIBLE_DEVICES", "")
        .args(["--fit", path, "--json"])
        .output()
        .expect("runs");
    assert!(output.status.success());
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let cases = json["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), 16);
    let sgemm = &cases[0];
    assert_eq!(sgemm["case"], "sgemm_4096");
    let points = sgemm["points"].as_array().expect("points");
    assert_eq!(points.len(), 33);
    let measured: Vec<f64> = points
        .iter()
        .map(|p| p["measured_ms"].as_f64().expect("a time"))
        .collect();
    assert!(measured.windows(2).all(|w| w[0] <= w[1]), "{measured:?}");
    assert_eq!(points[0]["schedule"], sgemm["best"]);
    assert!(
        points[0]["estimate"]["seconds"]
            .as_f64()
            .expect("an estimate")
            > 0.0
    );
    assert!(points[0]["estimate"]["bound"].is_string());
    assert!(json["median_spearman"].as_f64().expect("a median") > 0.0);

    let output = bench()
        .args(["--fit", "no-such.json"])
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("reading no-such.json"), "{stderr}");
}
