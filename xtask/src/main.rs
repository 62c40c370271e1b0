//! Project tasks, run as `cargo xtask <task>`:
//!
//! - `test`: installs what the tests need (ptxas, from the
//!   `nvidia-cuda-nvcc-cu12` Python wheel, into `.venv/`), checks formatting
//!   and lints, runs every test of the workspace, and shows the virtual-GPU
//!   verification suite's summary.
//! - `setup`: only the installation step.

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
        _ => bail!("usage: cargo xtask <test|setup>"),
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
