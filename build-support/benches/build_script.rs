//! Build-script time of a crate whose tuning database covers its kernels,
//! against an empty build script.
//!
//! `cargo bench -p ktune-build --bench build_script` generates (in a temp
//! dir) the crate of `tests/covered/`: 50 kernels, each with a database
//! record for the H200 (a fixture, not a measurement), so every kernel is
//! a hit. It then times, interleaved over rounds (`KTUNE_BUILD_BENCH_ROUNDS`,
//! default 15), median and interquartile range:
//!
//! - the empty build script Cargo would run instead: spawning a compiled
//!   `fn main() {}` and waiting for it;
//! - ktune's build script as a process: this binary re-executed in a child
//!   mode that runs [`ktune_build::Config::build`], into an out dir holding
//!   the outputs already (Cargo reran the script, nothing changed) and into
//!   an empty one (the first build);
//! - the same work in-process, and an in-process no-op.
//!
//! The ratio column divides by the empty build script. A hit performs no
//! search and no measurement: the build has no such code path yet, so the
//! timed work is exactly scan, database lookup, lowering and
//! write-if-changed.

#[path = "../tests/covered/mod.rs"]
mod covered;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ktune_build::{Config, Source};

/// Set (to `<crate dir>` and `<out dir>`, separated by a newline) in the
/// child that plays the build script.
const CHILD: &str = "KTUNE_BUILD_BENCH_CHILD";

fn config(dir: &Path, out: &Path) -> Config {
    Config::new()
        .manifest_dir(dir)
        .out_dir(out)
        .cargo_instructions(false)
        .search(false)
        .user_cache(false)
}

fn main() {
    if let Ok(dirs) = std::env::var(CHILD) {
        let (dir, out) = dirs.split_once('\n').expect("two paths");
        // A real build script prints Cargo's instructions; the parent
        // discards them.
        if let Err(e) = config(Path::new(dir), Path::new(out))
            .cargo_instructions(true)
            .build()
        {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
        return;
    }

    let rounds: usize = std::env::var("KTUNE_BUILD_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(15)
        .max(1);
    let temp = tempfile::tempdir().expect("a temp dir");
    let dir = temp.path().join("crate");
    let warm = temp.path().join("out-warm");
    let cold = temp.path().join("out-cold");
    for d in [&dir, &warm, &cold] {
        std::fs::create_dir_all(d).expect("create a temp folder");
    }
    let generated = covered::write(&dir);
    let empty = empty_build_script(temp.path());
    let this = std::env::current_exe().expect("this binary's path");

    let report = config(&dir, &warm).build().expect("the build");
    check_hits(&report, &generated);
    let variants: usize = report.kernels.iter().map(|(_, v)| v.len()).sum();
    let (files, bytes, ptx_bytes) = sizes(&warm.join("ktune"));

    let child = |out: &Path| {
        let status = Command::new(&this)
            .env(CHILD, format!("{}\n{}", dir.display(), out.display()))
            .stdout(Stdio::null())
            .status()
            .expect("spawn the build script");
        assert!(status.success(), "the build script failed");
    };
    let clear = || {
        let _ = std::fs::remove_dir_all(cold.join("ktune"));
    };
    let mut scenarios: Vec<Scenario<'_>> = vec![
        Scenario::new(
            "empty build script (spawn `fn main() {}`)",
            || {},
            || {
                let status = Command::new(&empty)
                    .status()
                    .expect("spawn the empty binary");
                assert!(status.success());
            },
        ),
        Scenario::new(
            "ktune build script, outputs unchanged",
            || {},
            || child(&warm),
        ),
        Scenario::new("ktune build script, first build", clear, || child(&cold)),
        Scenario::new(
            "in-process build, outputs unchanged",
            || {},
            || {
                config(&dir, &warm).build().expect("the build");
            },
        ),
        Scenario::new("in-process build, first build", clear, || {
            config(&dir, &cold).build().expect("the build");
        }),
        Scenario::new(
            "in-process no-op",
            || {},
            || {
                std::hint::black_box(());
            },
        ),
    ];
    for round in 0..rounds {
        let n = scenarios.len();
        for i in 0..n {
            scenarios[(round + i) % n].run_once();
        }
    }

    println!(
        "{} kernels ({} elementwise, {} rows, {} matmul), all database hits for {}: \
         {variants} variants, {files} files, {bytes} bytes written ({ptx_bytes} bytes of PTX)",
        generated.kernels.len(),
        covered::ELEMENTWISE,
        covered::ROWS,
        covered::MATMULS,
        covered::GPU,
    );
    println!("no search and no measurement ran: ktune-build has no such code path yet");
    println!("{rounds} rounds, interleaved\n");
    let base = scenarios[0].median();
    println!(
        "{:<44} {:>11} {:>21} {:>10}",
        "scenario", "median ms", "p25–p75 ms", "ratio"
    );
    for s in &scenarios {
        let (p25, p75) = s.quartiles();
        println!(
            "{:<44} {:>11.4} {:>10.4}–{:<10.4} {:>10.2}",
            s.name,
            ms(s.median()),
            ms(p25),
            ms(p75),
            s.median().as_secs_f64() / base.as_secs_f64()
        );
    }
    let noop = scenarios[5].median().as_secs_f64().max(1e-9);
    println!(
        "\nin-process, against a no-op: {:.0}× (outputs unchanged), {:.0}× (first build)",
        scenarios[3].median().as_secs_f64() / noop,
        scenarios[4].median().as_secs_f64() / noop,
    );
}

struct Scenario<'a> {
    name: &'static str,
    prepare: Box<dyn Fn() + 'a>,
    work: Box<dyn Fn() + 'a>,
    times: Vec<Duration>,
}

impl<'a> Scenario<'a> {
    fn new(name: &'static str, prepare: impl Fn() + 'a, work: impl Fn() + 'a) -> Scenario<'a> {
        Scenario {
            name,
            prepare: Box::new(prepare),
            work: Box::new(work),
            times: Vec::new(),
        }
    }

    fn run_once(&mut self) {
        (self.prepare)();
        let start = Instant::now();
        (self.work)();
        self.times.push(start.elapsed());
    }

    fn sorted(&self) -> Vec<Duration> {
        let mut t = self.times.clone();
        t.sort();
        t
    }

    fn median(&self) -> Duration {
        let t = self.sorted();
        t[t.len() / 2]
    }

    fn quartiles(&self) -> (Duration, Duration) {
        let t = self.sorted();
        (t[t.len() / 4], t[(3 * t.len()) / 4])
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Compiles `fn main() {}` into `dir`, as Cargo would an empty build.rs.
fn empty_build_script(dir: &Path) -> PathBuf {
    let source = dir.join("empty.rs");
    std::fs::write(&source, "fn main() {}\n").expect("write empty.rs");
    let binary = dir.join(format!("empty{}", std::env::consts::EXE_SUFFIX));
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let status = Command::new(rustc)
        .args(["--edition", "2024", "-o"])
        .arg(&binary)
        .arg(&source)
        .status()
        .expect("run rustc");
    assert!(status.success(), "rustc failed on an empty main");
    binary
}

/// Every kernel has its recorded schedule as the H200's variant, from the
/// crate's database.
fn check_hits(report: &ktune_build::Report, generated: &covered::Covered) {
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    assert_eq!(report.kernels.len(), generated.kernels.len());
    for (name, variants) in &report.kernels {
        let hit = variants.iter().any(|v| {
            v.gpu.as_deref() == Some(covered::GPU)
                && matches!(v.source, Source::Database { .. })
                && v.schedule == generated.tuned[name]
        });
        assert!(hit, "`{name}` is not a database hit");
    }
}

/// Files, bytes and PTX bytes in the output folder.
fn sizes(dir: &Path) -> (usize, u64, u64) {
    let (mut files, mut bytes, mut ptx) = (0, 0, 0);
    for entry in std::fs::read_dir(dir).expect("the output folder") {
        let path = entry.expect("an output").path();
        let len = std::fs::metadata(&path).expect("an output's size").len();
        files += 1;
        bytes += len;
        if path.extension().is_some_and(|e| e == "ptx") {
            ptx += len;
        }
    }
    (files, bytes, ptx)
}
