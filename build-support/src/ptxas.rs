//! Assembling generated PTX with NVIDIA's `ptxas`, where one is installed.
//!
//! ptxas checks what ktune's printer cannot: that every instruction exists
//! for the target with the operand types given, and how many registers and
//! how much local memory (spills) the kernel needs. ktune never requires it
//! (the driver compiles PTX at load time); tests and the tuner use it when
//! present. `cargo xtask test` installs it from the `nvidia-cuda-nvcc-cu12`
//! Python wheel into the workspace's `.venv`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use ktune_core::SmVersion;

/// Environment variable naming the ptxas executable to use.
pub const PTXAS_ENV: &str = "KTUNE_PTXAS";

/// Where the `nvidia-cuda-nvcc-cu12` wheel puts ptxas inside a virtual
/// environment's `site-packages`.
const WHEEL_BIN: &str = "nvidia/cuda_nvcc/bin";

/// Finds a ptxas executable: `$KTUNE_PTXAS` if set; else one installed in a
/// `.venv` (by `cargo xtask test`) in the current directory, the crate being
/// built (`$CARGO_MANIFEST_DIR`) or any directory above them; else `ptxas`
/// on `PATH`.
///
/// Build scripts calling this should print
/// `cargo:rerun-if-env-changed=KTUNE_PTXAS`.
pub fn find() -> Option<PathBuf> {
    find_tool(PTXAS_ENV, "ptxas", in_venv)
}

/// Finds the tool `name`: `$env` if set; else one that `in_venv` finds in a
/// `.venv` in the current directory, the crate being built
/// (`$CARGO_MANIFEST_DIR`) or any directory above them; else on `PATH`.
pub(crate) fn find_tool(
    env: &str,
    name: &str,
    in_venv: impl Fn(&Path) -> Option<PathBuf>,
) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(env).filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let starts = [
        std::env::current_dir().ok(),
        std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from),
    ];
    for start in starts.iter().flatten() {
        for dir in start.ancestors() {
            if let Some(found) = in_venv(&dir.join(".venv")) {
                return Some(found);
            }
        }
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(executable(name)))
        .find(|tool| tool.is_file())
}

/// `<venv>/lib/python3*/site-packages/nvidia/cuda_nvcc/bin/ptxas`, newest
/// Python first.
fn in_venv(venv: &Path) -> Option<PathBuf> {
    let mut pythons: Vec<PathBuf> = std::fs::read_dir(venv.join("lib"))
        .ok()?
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.file_name().to_string_lossy().starts_with("python3"))
        .map(|entry| entry.path())
        .collect();
    pythons.sort();
    pythons
        .into_iter()
        .rev()
        .map(|python| {
            python
                .join("site-packages")
                .join(WHEEL_BIN)
                .join(executable("ptxas"))
        })
        .find(|ptxas| ptxas.is_file())
}

/// `name` with the platform's executable suffix.
pub(crate) fn executable(name: &str) -> String {
    format!("{name}{}", std::env::consts::EXE_SUFFIX)
}

/// What ptxas reports about one assembled kernel (`ptxas -v`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The entry function the figures are for.
    pub entry: String,
    /// Registers per thread.
    pub registers: u32,
    /// Bytes of local memory written to by register spills, per thread.
    pub spill_stores: u32,
    /// Bytes of local memory read back from register spills, per thread.
    pub spill_loads: u32,
    /// Bytes of stack frame (local memory) per thread.
    pub stack_frame: u32,
    /// Bytes of statically declared shared memory (dynamic shared memory is
    /// sized at launch and not included).
    pub shared_bytes: u32,
    /// Bytes of the kernel's constant bank (parameters and immediates).
    pub constant_bytes: u32,
    /// Named barriers used.
    pub barriers: u32,
    /// The assembled module.
    pub cubin: Vec<u8>,
    /// ptxas's full `-v` output.
    pub log: String,
}

impl Report {
    /// Whether the kernel spills registers to local memory.
    pub fn spills(&self) -> bool {
        self.spill_stores > 0 || self.spill_loads > 0
    }
}

/// Why PTX could not be assembled.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot run ptxas at `{}`: {source}", path.display())]
    Spawn {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write a temporary file for ptxas: {0}")]
    Temp(#[source] std::io::Error),
    #[error("ptxas rejected the PTX for {target} ({status}):\n{}", Quoted(.output, .ptx))]
    Rejected {
        target: SmVersion,
        status: String,
        /// ptxas's output.
        output: String,
        /// The PTX it was given.
        ptx: String,
    },
    #[error("ptxas accepted the PTX for {target} but printed no register count:\n{output}")]
    Unparsed { target: SmVersion, output: String },
}

/// ptxas's messages, each followed by the PTX line it names.
struct Quoted<'a>(&'a str, &'a str);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines: Vec<&str> = self.1.lines().collect();
        for message in self.0.lines() {
            writeln!(f, "{message}")?;
            let quoted = line_number(message).and_then(|n| lines.get(n.checked_sub(1)?));
            if let Some(line) = quoted {
                writeln!(f, "    | {}", line.trim())?;
            }
        }
        Ok(())
    }
}

/// The PTX line number in a message such as
/// `ptxas /tmp/x.ptx, line 19; error   : Unknown symbol '%f9'`.
fn line_number(message: &str) -> Option<usize> {
    let rest = &message[message.find(", line ")? + ", line ".len()..];
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

/// The architecture ptxas assembles a module printed for `target` for: the
/// one its `.target` directive names, `sm_90a` for kernels with Hopper's
/// warpgroup instructions (which `sm_90` lacks).
fn arch(ptx: &str, target: SmVersion) -> String {
    let specific = format!("{}a", target.name());
    if ptx
        .lines()
        .any(|l| l.strip_prefix(".target ") == Some(&specific))
    {
        specific
    } else {
        target.name().to_owned()
    }
}

/// Assembles `ptx` (one module with one entry) for `target` with
/// `ptxas -arch=sm_XX -v` (`sm_XXa` where the module targets it) and
/// reports its resource usage.
pub fn assemble(ptxas: &Path, ptx: &str, target: SmVersion) -> Result<Report, Error> {
    let dir = tempfile::Builder::new()
        .prefix("ktune-ptxas-")
        .tempdir()
        .map_err(Error::Temp)?;
    let source = dir.path().join("kernel.ptx");
    let cubin = dir.path().join("kernel.cubin");
    std::fs::write(&source, ptx).map_err(Error::Temp)?;
    let output = Command::new(ptxas)
        .arg(format!("-arch={}", arch(ptx, target)))
        .arg("-v")
        .arg("-o")
        .arg(&cubin)
        .arg(&source)
        .output()
        .map_err(|source| Error::Spawn {
            path: ptxas.to_owned(),
            source,
        })?;
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if !output.status.success() {
        return Err(Error::Rejected {
            target,
            status: output.status.to_string(),
            output: log,
            ptx: ptx.to_owned(),
        });
    }
    let mut report = parse_verbose(&log).ok_or_else(|| Error::Unparsed {
        target,
        output: log.clone(),
    })?;
    report.cubin = std::fs::read(&cubin).map_err(Error::Temp)?;
    Ok(report)
}

/// The release line of `ptxas --version`, such as
/// `Cuda compilation tools, release 13.0, V13.0.88`.
pub fn version(ptxas: &Path) -> Result<String, Error> {
    let output = Command::new(ptxas)
        .arg("--version")
        .output()
        .map_err(|source| Error::Spawn {
            path: ptxas.to_owned(),
            source,
        })?;
    let text = String::from_utf8_lossy(&output.stdout);
    Ok(text
        .lines()
        .find(|line| line.contains("release"))
        .unwrap_or_else(|| text.trim())
        .trim()
        .to_owned())
}

/// Reads the figures of the first entry function out of `ptxas -v` output:
///
/// ```text
/// ptxas info    : Compiling entry function 'k' for 'sm_80'
/// ptxas info    : Function properties for k
///     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
/// ptxas info    : Used 8 registers, used 0 barriers, 64 bytes smem, 360 bytes cmem[0]
/// ```
fn parse_verbose(log: &str) -> Option<Report> {
    let mut report = Report {
        entry: String::new(),
        registers: 0,
        spill_stores: 0,
        spill_loads: 0,
        stack_frame: 0,
        shared_bytes: 0,
        constant_bytes: 0,
        barriers: 0,
        cubin: Vec::new(),
        log: log.to_owned(),
    };
    let mut registers = None;
    for line in log.lines() {
        let info = line
            .trim_start_matches("ptxas info")
            .trim_start()
            .trim_start_matches(':');
        let info = info.trim();
        if let Some(rest) = info.strip_prefix("Compiling entry function '") {
            if registers.is_some() {
                break;
            }
            report.entry = rest.split('\'').next().unwrap_or_default().to_owned();
        } else if info.contains("stack frame") || info.starts_with("Used ") {
            for figure in info.split(',') {
                let words: Vec<&str> = figure.split_whitespace().collect();
                let number = |i: usize| words.get(i).and_then(|w| w.parse::<u32>().ok());
                match words.as_slice() {
                    ["Used", _, "registers"] => registers = number(1),
                    ["used", _, "barriers"] => report.barriers = number(1).unwrap_or(0),
                    [_, "bytes", "stack", "frame"] => report.stack_frame = number(0).unwrap_or(0),
                    [_, "bytes", "spill", "stores"] => report.spill_stores = number(0).unwrap_or(0),
                    [_, "bytes", "spill", "loads"] => report.spill_loads = number(0).unwrap_or(0),
                    [_, "bytes", "smem"] => report.shared_bytes = number(0).unwrap_or(0),
                    [_, "bytes", bank] if bank.starts_with("cmem[0]") => {
                        report.constant_bytes = number(0).unwrap_or(0)
                    }
                    _ => {}
                }
            }
        }
    }
    report.registers = registers?;
    Some(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_verbose_output() {
        let log = "ptxas info    : 0 bytes gmem\n\
            ptxas info    : Compiling entry function 'k' for 'sm_80'\n\
            ptxas info    : Function properties for k\n    \
            8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n\
            ptxas info    : Used 38 registers, used 1 barriers, 64 bytes smem, 360 bytes cmem[0]\n\
            ptxas info    : Compile time = 1.724 ms\n";
        let r = parse_verbose(log).expect("parsed");
        assert_eq!(r.entry, "k");
        assert_eq!(
            (r.registers, r.stack_frame, r.spill_stores, r.spill_loads),
            (38, 8, 4, 12)
        );
        assert_eq!((r.barriers, r.shared_bytes, r.constant_bytes), (1, 64, 360));
        assert!(r.spills());
        assert!(parse_verbose("ptxas info    : 0 bytes gmem\n").is_none());
    }

    #[test]
    fn quotes_the_offending_line() {
        let ptx = "a\nb\nst.global.f32 [%rd2], %f9;\n";
        let output = "ptxas /tmp/x.ptx, line 3; error   : Unknown symbol '%f9'\n";
        let shown = Quoted(output, ptx).to_string();
        assert!(
            shown.contains("    | st.global.f32 [%rd2], %f9;"),
            "{shown}"
        );
    }
}
