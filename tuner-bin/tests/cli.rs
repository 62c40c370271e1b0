//! `cargo ktune` end to end, on the demo crate of this workspace.

use std::path::PathBuf;
use std::process::{Command, Output};

fn demo_manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/demo/Cargo.toml")
}

fn cargo_ktune(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cargo-ktune"))
        .arg("ktune")
        .args(args)
        .output()
        .expect("cargo-ktune runs")
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
    assert!(text.contains(r#"heuristic {"class":"matmul""#), "{text}");
    assert!(text.contains(r#"heuristic {"class":"rows""#), "{text}");
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
