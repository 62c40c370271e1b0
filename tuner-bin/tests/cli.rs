//! `cargo ktune` end to end, on the demo crate of this workspace.

use std::path::PathBuf;
use std::process::{Command, Output};

fn demo_manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/demo/Cargo.toml")
}

/// `cargo ktune ARGS`, with a per-user cache of its own (none): what the
/// user running the tests has cached does not count.
fn cargo_ktune(args: &[&str]) -> Output {
    cargo_ktune_binary()
        .arg("ktune")
        .args(args)
        .output()
        .expect("cargo-ktune runs")
}

/// The binary, with a per-user cache of its own (none).
fn cargo_ktune_binary() -> Command {
    let cache = std::env::temp_dir().join(format!("ktune-cli-test-cache-{}", std::process::id()));
    let mut command = Command::new(env!("CARGO_BIN_EXE_cargo-ktune"));
    command.env("XDG_CACHE_HOME", cache);
    command
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn status_lists_every_kernel_with_shape_and_schedules() {
    let manifest = demo_manifest();
    let out = cargo_ktune(&["status", "--manifest-path", manifest.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("4 kernels, targets sm_80, sm_90"), "{text}");
    for kernel in ["layernorm", "ffn_up", "ffn_down", "softmax"] {
        assert!(
            text.contains(&format!("\n{kernel}  (src/kernels.rs:")),
            "{text}"
        );
    }
    assert!(text.contains("shape: T=197, D=384, F=1536"), "{text}");
    // The demo's committed database holds a virtual GPU's record of each.
    assert_eq!(
        text.matches(
            "  measured on the virtual GPU: 1 record (estimates, never chosen for a GPU)\n"
        )
        .count(),
        4,
        "{text}"
    );
    for class in [r#"{"class":"matmul""#, r#"{"class":"rows""#] {
        assert!(
            text.lines()
                .any(|l| l.contains(" heuristic ") && l.contains(class)),
            "{text}"
        );
    }
}

/// Run directly, without Cargo's `ktune` argument, it means the same.
#[test]
fn run_directly_it_takes_the_same_commands() {
    let manifest = demo_manifest();
    let out = cargo_ktune_binary()
        .args(["status", "--manifest-path", manifest.to_str().unwrap()])
        .output()
        .expect("cargo-ktune runs");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("4 kernels, targets sm_80, sm_90"));
}

/// A reader that stops early (`| head`) ends a printing command quietly,
/// by `SIGPIPE`, as it does other tools, rather than by a panic.
#[cfg(unix)]
#[test]
fn a_closed_stdout_ends_a_printing_command_quietly() {
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;

    let manifest = demo_manifest();
    let mut child = cargo_ktune_binary()
        .args([
            "ktune",
            "status",
            "--manifest-path",
            manifest.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cargo-ktune runs");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("cargo-ktune ends");
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{}", stderr(&out));
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
}

#[test]
fn status_as_json_names_every_variant_and_its_source() {
    let manifest = demo_manifest();
    let out = cargo_ktune(&[
        "status",
        "--json",
        "--manifest-path",
        manifest.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let demo = &status["crates"][0];
    assert_eq!(demo["name"], "demo");
    assert_eq!(demo["targets"], serde_json::json!(["sm_80", "sm_90"]));
    let kernels = demo["kernels"].as_array().expect("kernels");
    assert_eq!(kernels.len(), 4);
    for k in kernels {
        let variants = k["variants"].as_array().expect("variants");
        assert!(
            variants
                .iter()
                .any(|v| v["source"] == "heuristic" && v["gpu"].is_null()),
            "{k}"
        );
        assert!(variants.iter().all(|v| v["schedule"]["class"].is_string()));
    }
}

#[test]
fn ptx_prints_the_kernel_for_the_target() {
    let manifest = demo_manifest();
    let out = cargo_ktune(&[
        "ptx",
        "softmax",
        "--target",
        "sm_90",
        "--manifest-path",
        manifest.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains(".target sm_90"), "{text}");
    assert!(text.contains(".visible .entry ktune_softmax("), "{text}");
    assert!(text.contains("shfl.sync.bfly.b32"), "{text}");
}

#[test]
fn ptx_takes_an_explicit_schedule() {
    let manifest = demo_manifest();
    let out = cargo_ktune(&[
        "ptx",
        "softmax",
        "--schedule",
        r#"{"class":"generic","block":64}"#,
        "--manifest-path",
        manifest.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains(".maxntid 64, 1, 1"));
}

#[test]
fn errors_name_what_is_wrong() {
    let manifest = demo_manifest();
    let manifest = manifest.to_str().unwrap();
    let unknown = cargo_ktune(&["ptx", "nope", "--manifest-path", manifest]);
    assert!(!unknown.status.success());
    assert!(
        stderr(&unknown).contains(
            "no kernel `nope` in crate `demo`; its kernels: layernorm, ffn_up, ffn_down, softmax"
        ),
        "{}",
        stderr(&unknown)
    );
    let invalid = cargo_ktune(&[
        "ptx",
        "softmax",
        "--schedule",
        r#"{"class":"generic","block":100}"#,
        "--manifest-path",
        manifest,
    ]);
    assert!(!invalid.status.success());
    assert!(
        stderr(&invalid).contains("100 threads per block; expected a multiple of 32 up to 1024"),
        "{}",
        stderr(&invalid)
    );
    let target = cargo_ktune(&[
        "ptx",
        "softmax",
        "--target",
        "sm_75",
        "--manifest-path",
        manifest,
    ]);
    assert!(!target.status.success());
    assert!(
        stderr(&target).contains("unknown GPU target `sm_75`"),
        "{}",
        stderr(&target)
    );
}

fn e2e_manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/e2e/Cargo.toml")
}

#[test]
fn verify_runs_every_shipped_variant_and_samples_on_the_virtual_gpu() {
    let manifest = e2e_manifest();
    let out = cargo_ktune(&[
        "verify",
        "--sample",
        "2",
        "--manifest-path",
        manifest.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    // 43 kernels, each with sm_80 and sm_90 shipped plus 2 sampled points
    // (fewer where the space is smaller).
    let summary = text.lines().last().unwrap_or_default();
    assert!(
        summary.starts_with("verified 43 kernels, ")
            && summary.ends_with(" 43 shapes: 0 mismatches"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("softmax ") && l.contains("(2 shipped)")),
        "{text}"
    );
}

#[test]
fn verify_prints_json() {
    let manifest = e2e_manifest();
    let out = cargo_ktune(&[
        "verify",
        "--json",
        "--seed",
        "7",
        "--manifest-path",
        manifest.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(value["crate"], "ktune-e2e");
    assert_eq!(value["device"], "vgpu");
    assert_eq!(value["seed"], 7);
    assert_eq!(value["summary"]["kernels"], 43);
    assert_eq!(value["summary"]["shapes"], 43);
    assert_eq!(value["summary"]["mismatches"], 0);
    assert_eq!(value["summary"]["schedule_points"], 86);
    let softmax = value["kernels"]
        .as_array()
        .expect("kernels")
        .iter()
        .find(|k| k["name"] == "softmax")
        .expect("softmax");
    assert_eq!(softmax["points"], 2);
    assert_eq!(softmax["mismatches"], 0);
    let point = &softmax["schedule_points"][1];
    assert_eq!(point["target"], "sm_90");
    assert_eq!(point["shipped"], true);
    assert_eq!(point["ok"], true);
    assert_eq!(point["schedule"]["class"], "rows");
}

#[test]
fn verify_lists_kernels_too_large_for_the_virtual_gpu_as_not_verified() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(dir.path().join("src")).expect("src");
    std::fs::write(
        dir.path().join("Cargo.toml"),
        "[package]\nname = \"verify-fixture\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n[workspace]\n",
    )
    .expect("manifest");
    std::fs::write(
        dir.path().join("src/lib.rs"),
        "#[tuned_kernel(shape(N = 100))]\n\
         pub fn double(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {\n    compute(|n| 2.0 * x[n])\n}\n\n\
         #[tuned_kernel(shape(M = 1024, N = 1024, K = 1024))]\n\
         pub fn matmul(a: Tensor<f32, (M, K)>, b: Tensor<f32, (K, N)>) -> Tensor<f32, (M, N)> {\n    \
         compute(|m, n| sum(K, |k| a[m][k] * b[k][n]))\n}\n",
    )
    .expect("lib.rs");
    let manifest = dir.path().join("Cargo.toml");
    let manifest = manifest.to_str().unwrap();

    let out = cargo_ktune(&["verify", "--manifest-path", manifest]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}{}", stderr(&out));
    assert!(
        text.contains("verified 1 kernels, 1 schedule points, 1 shapes: 0 mismatches"),
        "{text}"
    );
    assert!(
        text.contains("not verified, larger than 1 GFLOP for the virtual GPU: matmul (2.15 GFLOP)"),
        "{text}"
    );

    let json = cargo_ktune(&["verify", "--json", "--manifest-path", manifest]);
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    assert_eq!(value["summary"]["kernels"], 1);
    assert_eq!(value["not_verified"][0]["kernel"], "matmul");

    // The limit is an option.
    let lower = cargo_ktune(&["verify", "--max-gflop", "0", "--manifest-path", manifest]);
    assert!(lower.status.success());
    assert!(
        stdout(&lower).contains(
            "not verified, larger than 0 GFLOP for the virtual GPU: \
             double (0.00 GFLOP), matmul (2.15 GFLOP)"
        ),
        "{}",
        stdout(&lower)
    );
}

#[test]
fn verify_on_a_gpu_checks_every_shipped_variant_or_says_there_is_none() {
    let manifest = e2e_manifest();
    let out = cargo_ktune(&[
        "verify",
        "--device",
        "gpu",
        "--json",
        "--manifest-path",
        manifest.to_str().unwrap(),
    ]);
    let err = stderr(&out);
    if ktune_measure::detect().is_none() {
        assert!(!out.status.success());
        assert!(
            err.contains("no GPU found") && err.contains("--device vgpu"),
            "{err}"
        );
        return;
    }
    assert!(out.status.success(), "{err}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["device"], "gpu");
    assert_eq!(report["summary"]["mismatches"], 0);
    let kernels = report["kernels"].as_array().expect("kernels");
    assert!(!kernels.is_empty());
    assert!(
        kernels.iter().all(|k| k["points"].as_u64() >= Some(1)),
        "{report}"
    );
}

#[test]
fn space_reports_knobs_validity_and_the_models_ranking() {
    let manifest = demo_manifest();
    let manifest = manifest.to_str().unwrap();
    let out = cargo_ktune(&[
        "space",
        "ffn_up",
        "--target",
        "sm_90",
        "--manifest-path",
        manifest,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for expected in [
        "kernel `ffn_up` on sm_90",
        "matmul schedules (",
        "block_m",
        "vector_b",
        "split_k",
        "min_blocks",
        "swizzle",
        "valid (",
        "rejected by:",
        "threads",
        "default (heuristic):",
        "model's best:",
        "bounded search (",
    ] {
        assert!(
            text.contains(expected),
            "`{expected}` missing from:\n{text}"
        );
    }

    let out = cargo_ktune(&[
        "space",
        "softmax",
        "--top",
        "3",
        "--json",
        "--manifest-path",
        manifest,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    assert_eq!(report["families"][0]["class"], "rows");
    let knobs: Vec<&str> = report["families"][0]["knobs"]
        .as_array()
        .expect("knobs")
        .iter()
        .map(|k| k["name"].as_str().expect("a name"))
        .collect();
    assert_eq!(
        knobs,
        [
            "threads_per_row",
            "rows_per_block",
            "vector",
            "cache",
            "tree",
            "online",
            "cluster"
        ]
    );
    // The default reads each row of 384 once: 32 threads, 4 at a time,
    // keep 12 values each.
    assert_eq!(report["default"]["schedule"]["cache"], 1);
    assert_eq!(report["default"]["estimate"]["cached_per_thread"], 12);
    let size = report["size"].as_u64().expect("size");
    let valid = report["valid"].as_u64().expect("valid");
    let rejected: u64 = report["rejected"]
        .as_array()
        .expect("rejections")
        .iter()
        .map(|r| r["points"].as_u64().expect("count"))
        .sum();
    assert_eq!(valid + rejected, size);
    let best = report["best"].as_array().expect("best");
    assert_eq!(best.len(), 3);
    let seconds: Vec<f64> = best
        .iter()
        .map(|p| p["estimate"]["seconds"].as_f64().expect("seconds"))
        .collect();
    assert!(seconds.windows(2).all(|w| w[0] <= w[1]), "{seconds:?}");
    // What a build on a miss measures after the default: 8 distinct points
    // (7 when the default is one of them).
    let bounded: Vec<&serde_json::Value> = report["bounded"]
        .as_array()
        .expect("bounded")
        .iter()
        .map(|p| &p["schedule"])
        .collect();
    assert!((7..=8).contains(&bounded.len()), "{bounded:?}");
    assert!(!bounded.contains(&&report["default"]["schedule"]));
    for (i, p) in bounded.iter().enumerate() {
        assert!(!bounded[..i].contains(p), "{p} twice");
    }

    // 197 × 384 in 256 × 256 tiles leaves SMs idle, over a `K` of 1536:
    // the SIMT family splits `K`.
    let out = cargo_ktune(&["space", "ffn_down", "--json", "--manifest-path", manifest]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    let family = &report["families"][0];
    assert_eq!(family["class"], "matmul");
    let split = family["knobs"]
        .as_array()
        .expect("knobs")
        .iter()
        .find(|k| k["name"] == "split_k")
        .expect("a split_k knob");
    assert_eq!(split["values"], serde_json::json!([1, 2, 4, 8, 16]));

    let unknown = cargo_ktune(&["space", "nope", "--manifest-path", manifest]);
    assert!(!unknown.status.success());
    assert!(stderr(&unknown).contains("no kernel `nope`"));
}

#[test]
fn help_describes_every_command_under_its_own_name() {
    let out = cargo_ktune(&["--help"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let commands: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .collect();
    for name in [
        "status", "ptx", "verify", "space", "inspect", "replay", "tune", "report", "db",
    ] {
        let line = commands
            .iter()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no `{name}` in\n{text}"));
        let description = line.trim_start().trim_start_matches(name).trim();
        assert!(
            !description.is_empty(),
            "`{name}` has no description:\n{text}"
        );
    }
    // Every option of every command says what it is: in the short help,
    // the flag, two spaces or more, then its description.
    for command in [
        "status", "ptx", "verify", "space", "inspect", "replay", "tune", "report",
    ] {
        let out = cargo_ktune(&[command, "-h"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let help = stdout(&out);
        for line in help.lines().filter(|l| l.trim_start().starts_with('-')) {
            let description = line
                .trim_start()
                .split_once("  ")
                .map_or("", |(_, rest)| rest.trim());
            assert!(
                !description.is_empty() && !description.starts_with("[default"),
                "`{command}`: an option without a description: {line}\n{help}"
            );
        }
    }
    let space = commands
        .iter()
        .find(|l| l.trim_start().starts_with("space"));
    assert!(
        space.is_some_and(|l| l.contains("schedule space") && !l.contains("database")),
        "{text}"
    );
}
