//! What a build makes of a crate's kernels beside choosing their schedules:
//! a kernel with a mistake is passed over, for the macro to report as a
//! compile error at its token, and an input a kernel never reads is a
//! warning.

use ktune_build::Config;

const LIB_RS: &str = r#"
use ktune::prelude::*;

#[tuned_kernel(shape(N = 4096))]
pub fn scale(x: Tensor<f32, (N,)>, unused: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {
    compute(|n| x[n] * 2.0)
}

#[tuned_kernel(shape(N = 4096))]
pub fn typo(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {
    compute(|n| exq(x[n]))
}
"#;

#[test]
fn mistakes_are_left_to_the_compiler_and_unread_inputs_are_warnings() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("src")).unwrap();
    std::fs::write(dir.path().join("src/lib.rs"), LIB_RS).unwrap();
    std::fs::write(
        dir.path().join("Cargo.toml"),
        "[package]\nname = \"scale\"\nversion = \"0.0.0\"\n",
    )
    .unwrap();
    let report = Config::new()
        .manifest_dir(dir.path())
        .out_dir(dir.path().join("out"))
        .user_cache(false)
        .cargo_instructions(false)
        .search(false)
        .build()
        .expect("a kernel's mistake is not the build script's failure");
    let names: Vec<&str> = report.kernels.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["scale"]);
    assert!(dir.path().join("out/ktune/scale.rs").exists());
    assert!(!dir.path().join("out/ktune/typo.rs").exists());
    assert_eq!(
        report.warnings,
        ["ktune: kernel `scale` (src/lib.rs:5:8): input `unused` is never read"]
    );
    assert!(report.inputs.contains(&dir.path().join("src/lib.rs")));
}
