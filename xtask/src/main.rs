//! Project tasks, run as `cargo xtask <task>`:
//!
//! - `test`: installs what the tests need (ptxas, from the
//!   `nvidia-cuda-nvcc-cu12` Python wheel, and nvdisasm, from
//!   `nvidia-cuda-nvdisasm`, into `.venv/`; cmake and libclang-dev for
//!   XGBoost), checks formatting and lints, runs the strategy benchmark's
//!   table tests (Python), every test of the workspace, those of the
//!   search layer's XGBoost cost model, and shows
//!   the virtual-GPU verification suite's summary.
//! - `setup`: only the installation step.
//! - `gpu-bundle`: builds (here, where Rust is) everything a GPU machine
//!   without a Rust toolchain needs to check ktune on its GPU: the demo, the
//!   GPU tests of the runtime, the benchmark (`bench/gpu/`), `cargo-ktune`
//!   with the demo's kernel sources (to tune them there), and `run.sh`,
//!   which runs them and writes what they print, with the GPU, driver and
//!   date, into `$OUT` (default `gpu-bundle/results`). Carry `gpu-bundle/` to the machine and run
//!   `bash gpu-bundle/run.sh` there.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use clap::Parser;

const NVCC_WHEEL: &str = "nvidia-cuda-nvcc-cu12";
/// No `-cu12` build of nvdisasm is published; release 13's disassembles
/// ptxas 12's sm_80 to sm_90 cubins.
const NVDISASM_WHEEL: &str = "nvidia-cuda-nvdisasm==13.*";

/// ktune's project tasks.
#[derive(Parser)]
#[command(name = "cargo xtask", bin_name = "cargo xtask")]
enum Task {
    /// Install what the tests need (ptxas and nvdisasm into .venv/, cmake
    /// and libclang-dev for XGBoost), then check formatting and lints and
    /// run every test.
    Test,
    /// Only install what the tests need.
    Setup,
    /// Build gpu-bundle/: what a GPU machine without Rust runs to check
    /// ktune on its GPU (`bash gpu-bundle/run.sh` there).
    GpuBundle,
}

fn main() -> Result<()> {
    let root = workspace_root();
    match Task::parse() {
        Task::Setup => {
            let ptxas = ensure_ptxas(&root)?;
            eprintln!("xtask: ptxas at {}", ptxas.display());
            let nvdisasm = ensure_nvdisasm(&root)?;
            eprintln!("xtask: nvdisasm at {}", nvdisasm.display());
            ensure_xgboost_build_tools()
        }
        Task::Test => test(&root),
        Task::GpuBundle => gpu_bundle(&root),
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
    ensure_nvdisasm(root)?;
    ensure_xgboost_build_tools()?;
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
    // The API docs build without broken or private links.
    run(
        root,
        "cargo",
        &[
            "doc",
            "--workspace",
            "--no-deps",
            "--config",
            "build.rustdocflags=[\"-D\", \"warnings\"]",
        ],
        None,
    )?;
    // The strategy benchmark's table (Python, standard library only).
    run(
        root,
        "python3",
        &["-m", "unittest", "discover", "-s", "bench/strategies"],
        None,
    )?;
    // GPU tests are `#[ignore]`d so that a machine without a GPU reports them
    // as ignored, never as passed; where a GPU is present they must run.
    // The verification suite runs last, alone, with its output shown.
    let mut args = vec![
        "test",
        "--workspace",
        "--no-fail-fast",
        "--",
        "--exact",
        "--skip",
        SUITE,
    ];
    if gpu_present() {
        eprintln!("xtask: NVIDIA GPU found: running the GPU tests too");
        args.push("--include-ignored");
    } else {
        eprintln!("xtask: no NVIDIA GPU: GPU tests are reported as ignored");
    }
    run(root, "cargo", &args, Some(&ptxas))?;
    // The search layer's XGBoost cost model (XGBoost built from source).
    run(
        root,
        "cargo",
        &["test", "-p", "ktune-search", "--features", "xgboost"],
        None,
    )?;
    // The suite with its output shown: its summary line belongs in the log.
    run(
        root,
        "cargo",
        &[
            "test",
            "--quiet",
            "-p",
            "ktune-vgpu",
            "--test",
            "suite",
            "--",
            "--nocapture",
            "--exact",
            SUITE,
        ],
        None,
    )
}

/// The verification suite's test (`vgpu/tests/suite.rs`).
const SUITE: &str = "every_kernel_class_and_dtype_over_many_points_and_shapes";

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

/// Copies the C++ and OpenMP run-time libraries `program` links (XGBoost
/// needs them) into `lib`, as `ldd` resolves them here, for a GPU machine
/// whose system lacks them.
fn copy_cxx_runtime(program: &Path, lib: &Path) -> Result<()> {
    let output = Command::new("ldd")
        .arg(program)
        .output()
        .context("cannot run ldd")?;
    std::fs::create_dir_all(lib).context("cannot create gpu-bundle/lib")?;
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        // "libgomp.so.1 => /lib/x86_64-linux-gnu/libgomp.so.1 (0x…)", indented
        let Some((name, rest)) = line.trim().split_once(" => ") else {
            continue;
        };
        if !(name.starts_with("libstdc++") || name.starts_with("libgomp")) {
            continue;
        }
        let path = rest.split(" (").next().unwrap_or(rest);
        std::fs::copy(path, lib.join(name)).with_context(|| format!("cannot copy {path}"))?;
    }
    Ok(())
}

/// The script `gpu-bundle/run.sh` runs on the GPU machine.
const GPU_RUN_SCRIPT: &str = r#"#!/usr/bin/env bash
# Runs ktune's GPU checks; built by `cargo xtask gpu-bundle`.
#   PARTS="checks bench profile tune" (default: all; about 5, 5, 3 and 3
#   minutes at most; a device call returns at most 8 files, so run
#   "checks bench" and "profile tune" as two calls there, 8 files each).
#   Time budgets in seconds: CHECK_SECONDS (120, each demo run and test
#   binary), AGREE_SECONDS (150), AGREE_RANDOM_SECONDS (60), BENCH_SECONDS
#   (150), TORCH_SECONDS (80), PROFILE_SECONDS (60 a case), TUNE_SECONDS
#   (150), each part killed a minute or so past its budget.
#   checks  the demo on the GPU and on the virtual GPU, the runtime's GPU
#           tests, the verification suite on both devices (agree.json;
#           AGREE_KERNELS=mma_: only the kernels whose names start so;
#           without producer points where gpu_persistent failed,
#           without tensor-map points where gpu_tma did, and without
#           clustered ones where gpu_multicast did),
#           then over the random kernels of seeds RANDOM_SEEDS (0..200;
#           agree-random.json; AGREE_RANDOM_SECONDS=0 leaves them out)
#   bench   ktune-bench against cuBLAS, then torch where present, on the
#           cases or groups BENCH_CASES names (comma-separated; all);
#           SAMPLE (32) schedules sampled and SEARCH (0) evaluations of
#           max-autotune's search per case, screened in that order;
#           without schedules with a producer warpgroup where the
#           runtime's gpu_persistent test failed in checks, or where
#           WITHOUT_PRODUCER=1; without those copying by tensor maps
#           where its gpu_tma test did, or where WITHOUT_TMA=1; without
#           those sharing B's tiles in clusters where its gpu_multicast
#           test did, or where WITHOUT_CLUSTER=1
#   profile Nsight Compute on the default schedules of PROFILE_CASES
#           (PROFILE_SECONDS each), into profile.txt
#   tune    `cargo ktune tune` of the demo's kernels on the GPU (TUNE_TRIALS,
#           TUNE_SECONDS; TUNE_DEVICE=vgpu tries the part without one), its
#           history and an HTML report with tuning curves
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here/results}
parts=" ${PARTS:-checks bench profile tune} "
has_part() { [[ "$parts" == *" $1 "* ]]; }
mkdir -p "$out"
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    nvidia-smi --query-gpu=name,driver_version,compute_cap,clocks.sm,temperature.gpu --format=csv
} > "$out/gpu.txt" 2>&1
cat "$out/gpu.txt"
status=0
without_producer=
if [ "${WITHOUT_PRODUCER:-}" = 1 ]; then without_producer=1; fi
without_tma=
if [ "${WITHOUT_TMA:-}" = 1 ]; then without_tma=1; fi
without_cluster=
if [ "${WITHOUT_CLUSTER:-}" = 1 ]; then without_cluster=1; fi
if has_part checks; then
    # Each killed after CHECK_SECONDS (120): a hang costs that run only.
    check_s=${CHECK_SECONDS:-120}
    timeout "$check_s" "$here/demo" 2>&1 | tee "$out/demo.txt" || status=1
    # The same demo on the virtual GPU, in the same file (a device call
    # returns at most 8 files).
    echo "== KTUNE_BACKEND=vgpu" | tee -a "$out/demo.txt"
    KTUNE_BACKEND=vgpu timeout "$check_s" "$here/demo" 2>&1 | tee -a "$out/demo.txt" || status=1
    for test in "$here"/tests/*; do
        if ! timeout "$check_s" "$test" --include-ignored 2>&1 | tee -a "$out/tests.txt"; then
            status=1
            # Its producer (tensor-map) variants failed or hung here: the
            # verification suite's comparison and the benchmark leave such
            # schedules out, lest one's trap end their CUDA context for
            # every run after.
            case "$(basename "$test")" in
                gpu_persistent) without_producer=1 ;;
                gpu_tma) without_tma=1 ;;
                gpu_multicast) without_cluster=1 ;;
            esac
        fi
    done
    # Every run of the virtual GPU's verification suite on this GPU too:
    # both against the CPU reference, and the two devices against each
    # other (bit for bit where the PTX is exact).
    agree_s=${AGREE_SECONDS:-150}
    # ptxas assembles each run's PTX in parallel, where the driver would
    # compile one module at a time: the CUDA toolkit's, if it is not on PATH.
    if [ -z "${KTUNE_PTXAS:-}" ] && ! command -v ptxas > /dev/null && [ -x /usr/local/cuda/bin/ptxas ]; then
        export KTUNE_PTXAS=/usr/local/cuda/bin/ptxas
    fi
    timeout $(( agree_s + 60 )) "$here/ktune-bench" --agree ${AGREE_KERNELS:+--only "$AGREE_KERNELS"} \
        ${without_producer:+--without-producer} ${without_tma:+--without-tma} ${without_cluster:+--without-cluster} \
        --budget-s "$agree_s" --out "$out/agree.json" 2>&1 | tee -a "$out/tests.txt" || status=1
    random_s=${AGREE_RANDOM_SECONDS:-60}
    if [ "$random_s" -gt 0 ]; then
        timeout $(( random_s + 60 )) "$here/ktune-bench" --agree --random "${RANDOM_SEEDS:-0..200}" \
            ${without_producer:+--without-producer} ${without_tma:+--without-tma} ${without_cluster:+--without-cluster} \
            --budget-s "$random_s" --out "$out/agree-random.json" 2>&1 | tee -a "$out/tests.txt" || status=1
    fi
fi
# cudarc loads cuBLAS as libcublas.so: link it from the Python
# environment's nvidia-* wheels, whose folders also go on LD_LIBRARY_PATH.
libs=$(mktemp -d)
for site in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
    for lib in $(find "$site/nvidia" -name 'libcublas.so*' 2>/dev/null | sort -V); do
        ln -sf "$lib" "$libs/libcublas.so"
        LD_LIBRARY_PATH="$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    done
done
export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if has_part bench; then
    # The benchmark (bench/gpu/README.md), then torch, each killed a minute
    # (half a minute) past its budget.
    bench_s=${BENCH_SECONDS:-150}
    torch_s=${TORCH_SECONDS:-80}
    cases=${BENCH_CASES:-all}
    timeout $(( bench_s + 60 )) "$here/ktune-bench" --cases "$cases" --budget-s "$bench_s" \
        --sample "${SAMPLE:-32}" --search "${SEARCH:-0}" ${without_producer:+--without-producer} ${without_tma:+--without-tma} ${without_cluster:+--without-cluster} \
        --out "$out/bench.json" 2>&1 \
        | tee "$out/bench.txt" || status=1
    "$here/ktune-bench" --cases "$cases" --list > "$libs/cases.json"
    timeout $(( torch_s + 30 )) python3 "$here/torch_baseline.py" --cases-json "$libs/cases.json" \
        --bench "$out/bench.json" --budget-s "$torch_s" --out "$out/torch.json" 2>&1 \
        | tee -a "$out/bench.txt" || status=1
fi
if has_part profile; then
    # Nsight Compute's view of the default schedule of each PROFILE_CASES
    # case (its first launch, the checked one): throughput against the
    # chip's peaks, memory traffic, occupancy and where warps stall, for
    # the cases far from their targets. Clocks are left as they are.
    ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)
    [ -n "$ncu" ] || { echo "profile: Nsight Compute (ncu) is not installed here" | tee -a "$out/profile.txt"; status=1; }
    for case in ${ncu:+${PROFILE_CASES:-bf16_gemm_4096 softmax_4096x50257 decode_m1}}; do
        timeout "${PROFILE_SECONDS:-60}" "$ncu" --clock-control none -k regex:^ktune_ --launch-count 1 \
            --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
            --section Occupancy --section LaunchStats --section WarpStateStats \
            "$here/ktune-bench" --quick --sample 0 --cases "$case" --out "$libs/$case.json" \
            2>&1 | tee -a "$out/profile.txt" || status=1
    done
fi
if has_part tune; then
    # The demo's four kernels tuned on the GPU under one budget (the
    # evolutionary search with XGBoost, measurements in a worker process).
    # Back in $OUT: tune.txt (progress and summary), tune-history.json
    # (every evaluation in order), tune-ktune.json (the winners),
    # tune-report.html and tune-report.json; the journal stays here.
    ktune=("$here/cargo-ktune" ktune)
    work="$here/tune-work"
    # It needs libstdc++ and libgomp; where the system lacks them, the
    # build machine's copies in lib/ stand in.
    if ! "${ktune[@]}" --version > /dev/null 2>&1; then
        export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
    if ! "${ktune[@]}" --version > /dev/null 2> "$out/tune.txt"; then
        echo "cargo-ktune does not start here, even with the bundle's lib/:" | tee -a "$out/tune.txt"
        status=1
    else
        timeout $(( ${TUNE_SECONDS:-150} + 60 )) "${ktune[@]}" tune --sources "$here/demo-src" \
            --work-dir "$work" --database "$out/tune-ktune.json" --device "${TUNE_DEVICE:-gpu}" \
            --trials "${TUNE_TRIALS:-256}" --seconds "${TUNE_SECONDS:-150}" 2>&1 | tee -a "$out/tune.txt" || status=1
        rm -f "$out/tune-ktune.json.lock"
        cp "$work/tune-history.json" "$out/" || status=1
        # The cuBLAS ratios come from this run's bench.json, or from one
        # an earlier call wrote, copied beside this script.
        bench_json=()
        for bench in "$out/bench.json" "$here/bench.json"; do
            [ -f "$bench" ] && bench_json=(--bench "$bench") && break
        done
        "${ktune[@]}" report --work-dir "$work" --out "$out/tune-report.html" "${bench_json[@]}" \
            2>&1 | tee -a "$out/tune.txt" || status=1
        "${ktune[@]}" report --work-dir "$work" --json "${bench_json[@]}" > "$out/tune-report.json" || status=1
    fi
fi
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
    run(
        root,
        "cargo",
        &[
            "build",
            "--release",
            "-p",
            "ktune-bench",
            "--features",
            "max-autotune",
        ],
        None,
    )?;
    run(
        root,
        "cargo",
        &[
            "build",
            "--release",
            "-p",
            "cargo-ktune",
            "--features",
            "xgboost",
        ],
        None,
    )?;
    std::fs::create_dir_all(bundle.join("demo-src"))
        .context("cannot create gpu-bundle/demo-src")?;
    for (from, to) in [
        ("target/release/ktune-bench", "ktune-bench"),
        ("bench/gpu/torch_baseline.py", "torch_baseline.py"),
        ("target/release/cargo-ktune", "cargo-ktune"),
        ("examples/demo/src/kernels.rs", "demo-src/kernels.rs"),
    ] {
        std::fs::copy(root.join(from), bundle.join(to))
            .with_context(|| format!("cannot copy {from}"))?;
    }
    copy_cxx_runtime(&bundle.join("cargo-ktune"), &bundle.join("lib"))?;
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
        "xtask: gpu-bundle/ holds the demo, {copied} GPU test binaries, the benchmark, cargo-ktune with the demo's kernels and run.sh; carry it and run `bash gpu-bundle/run.sh`"
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

/// Installs nvdisasm into `.venv/` unless it is there, and returns its path.
fn ensure_nvdisasm(root: &Path) -> Result<PathBuf> {
    let venv = root.join(".venv");
    if let Some(found) = find_nvdisasm(&venv) {
        return Ok(found);
    }
    run(
        root,
        ".venv/bin/python",
        &["-m", "pip", "install", "--quiet", NVDISASM_WHEEL],
        None,
    )
    .with_context(|| format!("cannot install {NVDISASM_WHEEL}"))?;
    find_nvdisasm(&venv)
        .with_context(|| format!("{NVDISASM_WHEEL} installed, but its nvdisasm was not found"))
}

/// `<venv>/lib/python3*/site-packages/nvidia/*/bin/nvdisasm`: the folder
/// under `nvidia/` depends on the wheel's release.
fn find_nvdisasm(venv: &Path) -> Option<PathBuf> {
    let lib = std::fs::read_dir(venv.join("lib")).ok()?;
    lib.flatten()
        .filter_map(|python| std::fs::read_dir(python.path().join("site-packages/nvidia")).ok())
        .flat_map(|dirs| dirs.flatten())
        .map(|component| component.path().join("bin/nvdisasm"))
        .find(|p| p.is_file())
}

/// Makes sure cmake and libclang-dev (XGBoost's build needs them) are
/// installed: with apt-get when missing and running as root, else an error
/// that says what to install.
fn ensure_xgboost_build_tools() -> Result<()> {
    let installed = |package: &str| {
        Command::new("dpkg-query")
            .args(["-W", "-f", "${Status}", package])
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
    };
    let cmake = Command::new("cmake")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if cmake && installed("libclang-dev") {
        return Ok(());
    }
    let root_user = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if !root_user {
        bail!(
            "building XGBoost needs cmake and libclang-dev: install them (apt-get install -y cmake libclang-dev)"
        );
    }
    eprintln!("xtask: installing cmake and libclang-dev for XGBoost");
    for args in [
        &["update"][..],
        &["install", "-y", "cmake", "libclang-dev"][..],
    ] {
        let status = Command::new("apt-get")
            .args(args)
            .status()
            .context("cannot run apt-get")?;
        if !status.success() {
            bail!("apt-get {} failed ({status})", args.join(" "));
        }
    }
    Ok(())
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
