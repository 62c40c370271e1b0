//! How `cargo build` of a crate with ktune kernels behaves across edits:
//! nothing reruns for nothing, an edit regenerates exactly what it changes,
//! a database that appears is read, and a kernel-language error is a
//! located message, not a panic; and the
//! README's quick start, as written there, builds without a warning and runs.
//!
//! Each test writes a small scratch crate under this workspace's target
//! dir (its own `[workspace]`, depending on this workspace's `ktune` and
//! `ktune-build` by path, with this workspace's `Cargo.lock` so that
//! `--offline` resolves the same versions) and runs `cargo` on it. The
//! scratch crates share one target dir, kept between runs, so dependencies
//! compile once per checkout; `cargo clean` removes it with the rest.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

// ---------------------------------------------------------------------------
// Scratch crates
// ---------------------------------------------------------------------------

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace root exists")
}

/// The scratch crates' folder, in the target dir's folder for tests' files:
/// removed with the checkout's build outputs, never left behind in the
/// system temp dir (their target dir is over a gigabyte).
fn scratch_root() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("rebuild")
}

/// Writes `bytes` unless the file already holds them.
fn write(path: &Path, bytes: &str) {
    if std::fs::read(path).is_ok_and(|old| old == bytes.as_bytes()) {
        return;
    }
    std::fs::create_dir_all(path.parent().expect("a parent")).expect("create dir");
    std::fs::write(path, bytes).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

struct Scratch {
    name: &'static str,
    dir: PathBuf,
    target: PathBuf,
}

/// What one `cargo build` printed.
struct Build {
    success: bool,
    stderr: String,
}

impl Scratch {
    /// A scratch crate `name` with `lib_rs` as its `src/lib.rs`.
    fn new(name: &'static str, lib_rs: &str) -> Scratch {
        let root = scratch_root();
        let workspace = workspace_root();
        let dir = root.join(name);
        let manifest = format!(
            r#"[package]
name = "{name}"
version = "0.0.0"
edition = "2024"
publish = false

[dependencies]
ktune = {{ path = '{}' }}

[build-dependencies]
ktune-build = {{ path = '{}' }}

[package.metadata.ktune]
targets = ["sm_90"]

[workspace]
"#,
            workspace.join("runtime").display(),
            workspace.join("build-support").display(),
        );
        write(&dir.join("Cargo.toml"), &manifest);
        write(
            &dir.join("build.rs"),
            "fn main() {\n    ktune_build::tune_crate();\n}\n",
        );
        let lock = std::fs::read_to_string(workspace.join("Cargo.lock"))
            .expect("the workspace has a Cargo.lock");
        write(&dir.join("Cargo.lock"), &lock);
        let scratch = Scratch {
            name,
            dir,
            target: root.join("target"),
        };
        scratch.write_lib(lib_rs);
        scratch
    }

    fn write_lib(&self, source: &str) {
        write(&self.dir.join("src/lib.rs"), source);
    }

    /// `cargo build -v --offline`; the lockfile pins every version to one
    /// this workspace already uses, so nothing is downloaded. No search on
    /// a miss: `KTUNE_DEVICE=none`.
    fn build(&self) -> Build {
        self.build_with(&[("KTUNE_DEVICE", "none")])
    }

    /// [`Scratch::build`] with `KTUNE_*` settings.
    fn build_with(&self, settings: &[(&str, &str)]) -> Build {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut command = Command::new(cargo);
        command
            .args(["build", "-v", "--offline", "--color", "never"])
            .current_dir(&self.dir)
            .env("CARGO_TARGET_DIR", &self.target)
            .env_remove("CARGO_BUILD_TARGET_DIR")
            .env_remove("RUSTC_WORKSPACE_WRAPPER");
        for var in ktune_build::tune::ENV {
            command.env_remove(var);
        }
        command.envs(settings.iter().copied());
        let Output { status, stderr, .. } = command.output().expect("cargo runs");
        Build {
            success: status.success(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        }
    }

    #[track_caller]
    fn build_ok(&self) -> Build {
        let build = self.build();
        assert!(
            build.success,
            "`cargo build` of {} failed:\n{}",
            self.dir.display(),
            build.stderr
        );
        build
    }

    /// `target/debug/build/<name>-*/out/ktune` of the latest build-script run.
    fn out_dir(&self) -> PathBuf {
        let builds = self.target.join("debug/build");
        let prefix = format!("{}-", self.name);
        std::fs::read_dir(&builds)
            .unwrap_or_else(|e| panic!("{}: {e}", builds.display()))
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .filter_map(|e| {
                let ran = std::fs::metadata(e.path().join("output"))
                    .ok()?
                    .modified()
                    .ok()?;
                Some((ran, e.path().join("out/ktune")))
            })
            .max()
            .map(|(_, dir)| dir)
            .unwrap_or_else(|| {
                panic!(
                    "no build-script output for {} in {}",
                    self.name,
                    builds.display()
                )
            })
    }

    /// Every output file's bytes and modification time.
    fn outputs(&self) -> BTreeMap<String, (Vec<u8>, SystemTime)> {
        let dir = self.out_dir();
        std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .flatten()
            .map(|e| {
                let path = e.path();
                let bytes = std::fs::read(&path).expect("read output");
                let mtime = std::fs::metadata(&path)
                    .and_then(|m| m.modified())
                    .expect("mtime");
                (e.file_name().to_string_lossy().into_owned(), (bytes, mtime))
            })
            .collect()
    }

    /// Moves every output's modification time an hour back, so that a
    /// rewrite shows whatever the file system's timestamp resolution.
    fn age_outputs(&self) {
        let old = SystemTime::now() - Duration::from_secs(3600);
        for entry in std::fs::read_dir(self.out_dir())
            .expect("out dir")
            .flatten()
        {
            std::fs::File::options()
                .write(true)
                .open(entry.path())
                .and_then(|f| f.set_modified(old))
                .unwrap_or_else(|e| panic!("{}: {e}", entry.path().display()));
        }
    }
}

/// The compiler's warnings in `build`, less the crate's build-script
/// warnings (`<name>@<version>: ...`).
fn compiler_warnings<'b>(scratch: &Scratch, build: &'b Build) -> Vec<&'b str> {
    let own = format!("{}@", scratch.name);
    build
        .stderr
        .lines()
        .filter(|l| l.starts_with("warning") && !l.contains(&own))
        .collect()
}

fn ran_build_script(build: &Build) -> bool {
    build
        .stderr
        .lines()
        .any(|l| l.trim_start().starts_with("Running `") && l.contains("build-script-build"))
}

const TWO_KERNELS: &str = r#"use ktune::prelude::*;

/// Doubles.
#[tuned_kernel(shape(N = 33))]
pub fn double(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {
    compute(|n| x[n] * 2.0)
}

/// Adds a bias to every row.
#[tuned_kernel(shape(R = 5, C = 7))]
pub fn shifted(x: Tensor<f32, (R, C)>, b: Tensor<f32, (C,)>) -> Tensor<f32, (R, C)> {
    compute(|r, c| x[r][c] + b[c])
}
"#;

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[test]
fn second_build_is_fresh() {
    let scratch = Scratch::new("ktune-scratch-fresh", TWO_KERNELS);
    scratch.build_ok();
    let again = scratch.build_ok();
    assert!(
        !ran_build_script(&again),
        "the build script reran:\n{}",
        again.stderr
    );
    let compiling: Vec<&str> = again
        .stderr
        .lines()
        .filter(|l| l.trim_start().starts_with("Compiling"))
        .collect();
    assert!(compiling.is_empty(), "recompiled: {compiling:#?}");
    assert!(
        again
            .stderr
            .lines()
            .any(|l| l.trim_start().starts_with("Fresh ktune-scratch-fresh")),
        "{}",
        again.stderr
    );
}

#[test]
fn editing_one_kernel_regenerates_only_its_outputs() {
    let scratch = Scratch::new("ktune-scratch-edit", TWO_KERNELS);
    scratch.build_ok();
    scratch.age_outputs();
    let before = scratch.outputs();
    let names: Vec<&str> = before.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "double.rs",
            "double.sm_80.default.ptx",
            "double.sm_90.default.ptx",
            "shifted.rs",
            "shifted.sm_80.default.ptx",
            "shifted.sm_90.default.ptx",
        ]
    );

    scratch.write_lib(&TWO_KERNELS.replace("x[n] * 2.0", "x[n] * 3.0"));
    let build = scratch.build_ok();
    assert!(ran_build_script(&build), "{}", build.stderr);
    let after = scratch.outputs();
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>()
    );
    for (name, (bytes, mtime)) in &after {
        let (old_bytes, old_mtime) = &before[name];
        if name.starts_with("shifted.") {
            assert!(
                bytes == old_bytes,
                "{name}: the unchanged kernel's output changed"
            );
            assert_eq!(mtime, old_mtime, "{name}: rewritten with the same bytes");
        } else {
            assert!(
                bytes != old_bytes,
                "{name}: the edited kernel's output did not change"
            );
        }
    }
}

#[test]
fn comments_and_whitespace_change_no_output() {
    let scratch = Scratch::new("ktune-scratch-comment", TWO_KERNELS);
    scratch.build_ok();
    scratch.age_outputs();
    let before = scratch.outputs();

    let reformatted = TWO_KERNELS
        .replace("/// Doubles.", "/// Doubles its input.\n///\n/// Twice.")
        .replace(
            "compute(|n| x[n] * 2.0)",
            "// One multiply per element.\n    compute(|n| {\n        x[n]   *   2.0 /* doubled */\n    })",
        )
        .replace("x[r][c] + b[c]", "x[r][c]\n        + b[c]");
    assert_ne!(reformatted, TWO_KERNELS);
    scratch.write_lib(&reformatted);
    let build = scratch.build_ok();
    assert!(
        ran_build_script(&build),
        "the source changed, so the build script must rerun:\n{}",
        build.stderr
    );
    let after = scratch.outputs();
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>()
    );
    for (name, (bytes, mtime)) in &after {
        let (old_bytes, old_mtime) = &before[name];
        assert!(bytes == old_bytes, "{name}: changed by a comment");
        assert_eq!(mtime, old_mtime, "{name}: rewritten with the same bytes");
    }
}

/// The first ```` ```lang ```` block after `heading` in the README.
fn readme_block(readme: &str, heading: &str, lang: &str) -> String {
    let at = readme
        .find(heading)
        .unwrap_or_else(|| panic!("no {heading} in the README"));
    let fence = format!("```{lang}\n");
    let start = at + readme[at..].find(&fence).expect("a code block") + fence.len();
    let end = start + readme[start..].find("```").expect("the block's end");
    readme[start..end].to_owned()
}

#[test]
fn the_readme_quick_start_builds_without_warnings_and_runs() {
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).expect("README.md");
    let scratch = Scratch::new("ktune-scratch-quick-start", "");
    let build_rs = std::fs::read_to_string(scratch.dir.join("build.rs")).expect("build.rs");
    assert_eq!(readme_block(&readme, "`build.rs`:", "rust"), build_rs);
    let manifest = readme_block(&readme, "## Quick start", "toml");
    assert!(
        manifest.contains("ktune-build = ") && manifest.contains("targets = [\"sm_90\"]"),
        "the quick start's Cargo.toml changed; update this test's scratch manifest:\n{manifest}"
    );
    for file in ["kernels.rs", "main.rs"] {
        let source = readme_block(&readme, &format!("`src/{file}`:"), "rust");
        write(&scratch.dir.join("src").join(file), &source);
    }

    let build = scratch.build_ok();
    assert!(
        compiler_warnings(&scratch, &build).is_empty(),
        "{}",
        build.stderr
    );

    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let run = Command::new(cargo)
        .args(["run", "--offline", "--quiet", "--color", "never"])
        .current_dir(&scratch.dir)
        .env("CARGO_TARGET_DIR", &scratch.target)
        .env("KTUNE_DEVICE", "none")
        .env_remove("KTUNE_BACKEND")
        .output()
        .expect("cargo runs");
    // On the GPU where there is one, else on the CPU: either way it runs.
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success() && stdout.starts_with("ran as "),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
}

#[test]
fn a_kernel_not_yet_called_compiles_without_warnings() {
    // A private module, so that an unused item is dead code to rustc.
    let scratch = Scratch::new(
        "ktune-scratch-unused",
        r#"mod kernels {
    use ktune::prelude::*;

    #[tuned_kernel(shape(N = 33))]
    pub fn double(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {
        compute(|n| x[n] * 2.0)
    }
}
"#,
    );
    let build = scratch.build_ok();
    assert!(
        compiler_warnings(&scratch, &build).is_empty(),
        "warnings for a kernel nobody calls yet:\n{}",
        build.stderr
    );
}

/// A mistake in a kernel is a compile error at its token, reported once,
/// by the macro: the build script passes the kernel over rather than fail
/// with it buried under Cargo's "failed to run custom build command".
#[test]
fn kernel_language_error_is_located_not_a_panic() {
    let source = TWO_KERNELS.replace("compute(|n| x[n] * 2.0)", "compute(|n| exq(x[n]) * 2.0)");
    let scratch = Scratch::new("ktune-scratch-error", &source);
    let build = scratch.build();
    assert!(!build.success, "the build succeeded:\n{}", build.stderr);

    let (line, text) = source
        .lines()
        .enumerate()
        .find(|(_, l)| l.contains("exq"))
        .expect("the bad line");
    let location = format!(
        "src/lib.rs:{}:{}",
        line + 1,
        text.find("exq").expect("exq") + 1
    );
    assert!(
        build.stderr.contains(&location),
        "no `{location}` in:\n{}",
        build.stderr
    );
    assert!(
        build.stderr.contains("unknown function `exq`") && build.stderr.contains("`exp`"),
        "no message naming the function and a suggestion in:\n{}",
        build.stderr
    );
    assert_eq!(
        build.stderr.matches("unknown function `exq`").count(),
        1,
        "{}",
        build.stderr
    );
    assert!(
        build.stderr.contains(&format!(" --> {location}")),
        "not rustc's error at `{location}`:\n{}",
        build.stderr
    );
    for bad in [
        "panicked",
        "RUST_BACKTRACE",
        "failed to run custom build command",
    ] {
        assert!(!build.stderr.contains(bad), "`{bad}` in:\n{}", build.stderr);
    }
}

#[test]
fn a_database_that_appears_after_a_build_is_read_by_the_next() {
    let scratch = Scratch::new("ktune-scratch-db-appears", TWO_KERNELS);
    let database = scratch.dir.join("tuning/ktune.json");
    let _ = std::fs::remove_file(&database);
    scratch.build_ok();
    let again = scratch.build_ok();
    assert!(
        !ran_build_script(&again),
        "the build script reran for nothing:\n{}",
        again.stderr
    );

    // As a `git pull` that brings a colleague's first tuning results would.
    write(&database, "{\n  \"version\": 1,\n  \"records\": []\n}\n");
    let after = scratch.build_ok();
    assert!(
        ran_build_script(&after),
        "the new database was not read:\n{}",
        after.stderr
    );
}

#[test]
fn a_build_on_the_virtual_gpu_says_which_kernels_are_too_large_for_it() {
    let scratch = Scratch::new(
        "ktune-scratch-vgpu-too-large",
        r#"use ktune::prelude::*;

#[tuned_kernel(shape(M = 4096, N = 4096, K = 4096))]
pub fn matmul(a: Tensor<bf16, (M, K)>, b: Tensor<bf16, (K, N)>) -> Tensor<bf16, (M, N)> {
    compute(|m, n| sum(K, |k| a[m][k] * b[k][n]))
}
"#,
    );
    let build = scratch.build_with(&[("KTUNE_DEVICE", "vgpu"), ("KTUNE_WRITE", "crate")]);
    assert!(build.success, "{}", build.stderr);
    assert!(
        build.stderr.contains(
            "ktune: `matmul` is too large for the virtual GPU: 137.44 GFLOP at its shape"
        ) && build.stderr.contains("it keeps its heuristic schedule"),
        "{}",
        build.stderr
    );
    assert!(!scratch.dir.join("tuning/ktune.json").exists());
}

#[test]
fn a_build_on_the_virtual_gpu_searches_misses_and_then_hits_its_database() {
    let scratch = Scratch::new("ktune-scratch-vgpu-search", TWO_KERNELS);
    let database = scratch.dir.join("tuning/ktune.json");
    let _ = std::fs::remove_file(&database);
    let log = scratch.target.join("debug/ktune/tune.log");
    let searches = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("search of"))
            .count()
    };
    let before = searches();
    let settings = [
        ("KTUNE_DEVICE", "vgpu"),
        ("KTUNE_BUDGET", "2"),
        ("KTUNE_WRITE", "crate"),
    ];

    let first = scratch.build_with(&settings);
    assert!(first.success, "{}", first.stderr);
    assert_eq!(searches(), before + 1, "one search for the two misses");
    let text = std::fs::read_to_string(&database).expect("the search wrote the database");
    let db = ktune_core::db::Database::parse(&text).expect("a valid database");
    let mut kernels: Vec<&str> = db.records.iter().map(|r| r.kernel.as_str()).collect();
    kernels.sort_unstable();
    assert_eq!(kernels, ["double", "shifted"]);
    for r in &db.records {
        assert_eq!(r.provenance.measured_on, ktune_core::db::MeasuredOn::Vgpu);
        assert_eq!(r.gpu.name, "ktune-vgpu (sm_90)");
        assert!(r.stats.baseline_us.is_some_and(|b| b >= r.stats.median_us));
    }
    // Virtual-GPU records are never embedded as a GPU's variant.
    for name in scratch.outputs().keys() {
        assert!(!name.contains("vgpu"), "embedded {name}");
    }

    // The database the search wrote is no change for Cargo: the next
    // build is fresh, nothing searched, nothing rebuilt.
    let second = scratch.build_with(&settings);
    assert!(second.success, "{}", second.stderr);
    assert!(!ran_build_script(&second), "{}", second.stderr);
    assert_eq!(searches(), before + 1, "searched again:\n{}", second.stderr);
    assert_eq!(std::fs::read_to_string(&database).expect("database"), text);
}
