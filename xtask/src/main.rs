//! Project tasks, run as `cargo xtask <task>`:
//!
//! - `test`: installs what the tests need (ptxas, from the
//!   `nvidia-cuda-nvcc-cu12` Python wheel, into `.venv/`), checks formatting
//!   and lints, runs every test of the workspace, and shows the virtual-GPU
//!   verification suite's summary.
//! - `setup`: only the installation step.
//! - `gpu-bundle`: builds (here, where Rust is) everything a GPU machine
//!   without a Rust toolchain needs to check ktune on its GPU: the demo, the
//!   GPU tests of the runtime, and `run.sh`, which runs them and writes what
//!   they print, with the GPU, driver and date, into `$OUT` (default
//!   `gpu-bundle/results`). Carry `gpu-bundle/` to the machine and run
//!   `bash gpu-bundle/run.sh` there.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

const NVCC_WHEEL: &str = "nvidia-cuda-nvcc-cu12";

fn main() -> Result<()> {
    let root = workspace_root();
    let task = std::env::args().nth(1);
    match task.as_deref() {
        Some("setup") => {
            let ptxas = ensure_ptxas(&root)?;
            eprintln!("xtask: ptxas at {}", ptxas.display());
            Ok(())
        }
        Some("test") => test(&root),
        Some("gpu-bundle") => gpu_bundle(&root),
        _ => bail!("usage: cargo xtask <test|setup|gpu-bundle>"),
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

fn test(root: &Path) -> Result<()> {
    let ptxas = ensure_ptxas(root)?;
    run(root, "cargo", &["fmt", "--all", "--check"], None)?;
    run(
        root,
        "cargo",
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
        None,
    )?;
    // GPU tests are `#[ignore]`d so that a machine without a GPU reports them
    // as ignored, never as passed; where a GPU is present they must run.
    let mut args = vec!["test", "--workspace", "--no-fail-fast"];
    if gpu_present() {
        eprintln!("xtask: NVIDIA GPU found: running the GPU tests too");
        args.extend(["--", "--include-ignored"]);
    } else {
        eprintln!("xtask: no NVIDIA GPU: GPU tests are reported as ignored");
    }
    run(root, "cargo", &args, Some(&ptxas))?;
    // Once more with its output shown: the suite's summary line belongs in
    // the log.
    run(
        root,
        "cargo",
        &[
            "test",
            "--quiet",
            "-p",
            "ktune-vgpu",
            "--test",
            "verification",
            "--",
            "--nocapture",
        ],
        None,
    )
}

/// Whether this machine has an NVIDIA GPU with its driver loaded.
fn gpu_present() -> bool {
    Path::new("/dev/nvidiactl").exists()
}

/// Runs a command in the workspace root, failing on a non-zero exit.
fn run(root: &Path, program: &str, args: &[&str], ptxas: Option<&Path>) -> Result<()> {
    eprintln!("xtask: {program} {}", args.join(" "));
    let mut cmd = Command::new(program);
    cmd.args(args).current_dir(root);
    if let Some(ptxas) = ptxas {
        cmd.env("KTUNE_PTXAS", ptxas);
    }
    let status = cmd
        .status()
        .with_context(|| format!("cannot run {program}"))?;
    if !status.success() {
        bail!("`{program} {}` failed ({status})", args.join(" "));
    }
    Ok(())
}

/// The script `gpu-bundle/run.sh` runs on the GPU machine.
const GPU_RUN_SCRIPT: &str = r#"#!/usr/bin/env bash
# Runs ktune's GPU checks; built by `cargo xtask gpu-bundle`.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here/results}
mkdir -p "$out"
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    nvidia-smi --query-gpu=name,driver_version,compute_cap,clocks.sm,temperature.gpu --format=csv
} > "$out/gpu.txt" 2>&1
cat "$out/gpu.txt"
status=0
"$here/demo" 2>&1 | tee "$out/demo.txt" || status=1
KTUNE_BACKEND=vgpu "$here/demo" 2>&1 | tee "$out/demo-vgpu.txt" || status=1
for test in "$here"/tests/*; do
    "$test" --include-ignored 2>&1 | tee -a "$out/tests.txt" || status=1
done
echo "gpu-bundle: exit $status" | tee -a "$out/tests.txt"
exit $status
"#;

/// Builds the demo and the runtime's GPU test binaries in release mode and
/// gathers them with `run.sh` into `gpu-bundle/`.
fn gpu_bundle(root: &Path) -> Result<()> {
    let bundle = root.join("gpu-bundle");
    let tests = bundle.join("tests");
    if bundle.exists() {
        std::fs::remove_dir_all(&bundle).context("cannot clear gpu-bundle/")?;
    }
    std::fs::create_dir_all(&tests).context("cannot create gpu-bundle/")?;
    run(root, "cargo", &["build", "--release", "-p", "demo"], None)?;
    std::fs::copy(root.join("target/release/demo"), bundle.join("demo"))
        .context("cannot copy the demo")?;
    eprintln!("xtask: cargo test --release -p ktune --no-run");
    let output = Command::new("cargo")
        .args([
            "test",
            "--release",
            "-p",
            "ktune",
            "--no-run",
            "--message-format=json",
        ])
        .current_dir(root)
        .output()
        .context("cannot run cargo")?;
    if !output.status.success() {
        bail!(
            "building the runtime's tests failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let mut copied = 0;
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let is_gpu_test = message["target"]["kind"][0] == "test"
            && message["target"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("gpu"));
        if let (true, Some(exe)) = (is_gpu_test, message["executable"].as_str()) {
            let name = message["target"]["name"].as_str().unwrap_or("gpu");
            std::fs::copy(exe, tests.join(name)).context("cannot copy a test binary")?;
            copied += 1;
        }
    }
    if copied == 0 {
        bail!("no GPU test binaries were built");
    }
    std::fs::write(bundle.join("run.sh"), GPU_RUN_SCRIPT).context("cannot write run.sh")?;
    eprintln!(
        "xtask: gpu-bundle/ holds the demo, {copied} GPU test binaries and run.sh; carry it and run `bash gpu-bundle/run.sh`"
    );
    Ok(())
}

/// Finds ptxas in `.venv`, installing the wheel that ships it when missing.
fn ensure_ptxas(root: &Path) -> Result<PathBuf> {
    let venv = root.join(".venv");
    if let Some(found) = find_ptxas(&venv) {
        return Ok(found);
    }
    if !venv.join("bin/python").exists() {
        run(root, "python3", &["-m", "venv", ".venv"], None)
            .context("cannot create the .venv for ptxas (is python3 with venv installed?)")?;
    }
    run(
        root,
        ".venv/bin/python",
        &["-m", "pip", "install", "--quiet", NVCC_WHEEL],
        None,
    )
    .with_context(|| format!("cannot install {NVCC_WHEEL}"))?;
    find_ptxas(&venv)
        .with_context(|| format!("{NVCC_WHEEL} installed, but its ptxas was not found"))
}

fn find_ptxas(venv: &Path) -> Option<PathBuf> {
    let lib = std::fs::read_dir(venv.join("lib")).ok()?;
    lib.flatten()
        .map(|python| {
            python
                .path()
                .join("site-packages/nvidia/cuda_nvcc/bin/ptxas")
        })
        .find(|p| p.is_file())
}
