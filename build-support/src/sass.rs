//! The machine code (SASS) ptxas makes of a kernel, and static measures of
//! its quality that need no GPU.
//!
//! [`inspect`] assembles PTX with `ptxas -v` (registers, spills, static
//! shared memory), disassembles the cubin with NVIDIA's `nvdisasm`, parses
//! the listing into [`Instruction`]s and measures: the instruction mix of
//! the [main loop](main_loop), the widths of global and shared memory
//! accesses, tensor-core instructions, and the occupancy those resources
//! allow ([`ktune_core::occupancy`]).
//!
//! Like ptxas, nvdisasm is never required to build: `cargo xtask setup`
//! installs it (from the `nvidia-cuda-nvdisasm` Python wheel) into the
//! workspace's `.venv`, where [`find_nvdisasm`] looks for it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use ktune_core::SmVersion;
use ktune_core::lower::Lowered;
use ktune_core::occupancy::{self, BlockUsage, Occupancy};
use serde::Serialize;

use crate::ptxas;

/// Environment variable naming the nvdisasm executable to use.
pub const NVDISASM_ENV: &str = "KTUNE_NVDISASM";

/// The tools [`inspect`] runs.
#[derive(Debug, Clone)]
pub struct Tools {
    pub ptxas: PathBuf,
    pub nvdisasm: PathBuf,
}

impl Tools {
    /// Finds both tools ([`ptxas::find`], [`find_nvdisasm`]).
    pub fn find() -> Result<Tools, Error> {
        Ok(Tools {
            ptxas: ptxas::find().ok_or(Error::Missing {
                tool: "ptxas",
                env: ptxas::PTXAS_ENV,
            })?,
            nvdisasm: find_nvdisasm().ok_or(Error::Missing {
                tool: "nvdisasm",
                env: NVDISASM_ENV,
            })?,
        })
    }
}

/// Finds an nvdisasm executable: `$KTUNE_NVDISASM` if set; else one
/// installed in a `.venv` (by `cargo xtask setup`) in the current directory,
/// the crate being built (`$CARGO_MANIFEST_DIR`) or any directory above
/// them; else `nvdisasm` on `PATH`.
pub fn find_nvdisasm() -> Option<PathBuf> {
    ptxas::find_tool(NVDISASM_ENV, "nvdisasm", in_venv)
}

/// `<venv>/lib/python3*/site-packages/nvidia/*/bin/nvdisasm`: the wheel's
/// folder under `nvidia/` is named after the CUDA release (`cu13`) or the
/// component (`cuda_nvdisasm`), depending on its version.
fn in_venv(venv: &Path) -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = subfolders(&venv.join("lib"))
        .filter(|python| {
            python
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("python3"))
        })
        .flat_map(|python| subfolders(&python.join("site-packages/nvidia")).collect::<Vec<_>>())
        .map(|package| package.join("bin").join(ptxas::executable("nvdisasm")))
        .filter(|nvdisasm| nvdisasm.is_file())
        .collect();
    candidates.sort();
    candidates.pop()
}

fn subfolders(dir: &Path) -> impl Iterator<Item = PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.path())
        .filter(|path| path.is_dir())
}

/// Why a kernel could not be inspected.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "{tool} not found: run `cargo xtask setup` in ktune's repository (it installs ptxas and \
         nvdisasm into its .venv/); elsewhere install the CUDA toolkit (its tools on PATH), or the \
         Python wheels into a .venv in the crate or a folder above it (`python3 -m venv .venv && \
         .venv/bin/pip install nvidia-cuda-nvcc-cu12 'nvidia-cuda-nvdisasm==13.*'`), \
         or set {env} to the executable"
    )]
    Missing {
        tool: &'static str,
        env: &'static str,
    },
    #[error(transparent)]
    Ptxas(#[from] ptxas::Error),
    #[error("cannot run nvdisasm at `{}`: {source}", path.display())]
    Spawn {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write a temporary file for nvdisasm: {0}")]
    Temp(#[source] std::io::Error),
    #[error("nvdisasm failed ({status}):\n{output}")]
    Disassembly { status: String, output: String },
    #[error("cannot read line {line} of nvdisasm's listing: `{text}`")]
    Listing { line: usize, text: String },
}

/// Disassembles a cubin with `nvdisasm -c` (code sections only).
pub fn disassemble(nvdisasm: &Path, cubin: &[u8]) -> Result<String, Error> {
    let dir = tempfile::Builder::new()
        .prefix("ktune-nvdisasm-")
        .tempdir()
        .map_err(Error::Temp)?;
    let path = dir.path().join("kernel.cubin");
    std::fs::write(&path, cubin).map_err(Error::Temp)?;
    let output = Command::new(nvdisasm)
        .arg("-c")
        .arg(&path)
        .output()
        .map_err(|source| Error::Spawn {
            path: nvdisasm.to_owned(),
            source,
        })?;
    if !output.status.success() {
        return Err(Error::Disassembly {
            status: output.status.to_string(),
            output: String::from_utf8_lossy(&output.stderr).into_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// An opcode with its modifiers: `LDG.E.128` is `LDG` with `E` and `128`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opcode {
    /// The family, e.g. `FFMA`, `LDG`, `HMMA`.
    pub name: String,
    pub modifiers: Vec<String>,
}

impl Opcode {
    pub fn parse(text: &str) -> Opcode {
        let mut parts = text.split('.');
        Opcode {
            name: parts.next().unwrap_or_default().to_owned(),
            modifiers: parts.map(str::to_owned).collect(),
        }
    }

    fn has(&self, modifier: &str) -> bool {
        self.modifiers.iter().any(|m| m == modifier)
    }

    /// The memory access it makes, if it is a load or store of global or
    /// shared memory. `LDGSTS` (`cp.async`) counts as a global load, the
    /// matrix load `LDSM` as a shared load of one to four registers.
    pub fn access(&self) -> Option<Access> {
        let (space, direction) = match self.name.as_str() {
            "LDG" | "LDGSTS" => (MemorySpace::Global, Direction::Load),
            "STG" => (MemorySpace::Global, Direction::Store),
            "LDS" | "LDSM" => (MemorySpace::Shared, Direction::Load),
            "STS" => (MemorySpace::Shared, Direction::Store),
            _ => return None,
        };
        let bits = if self.name == "LDSM" {
            let matrices = match self.modifiers.last().map(String::as_str) {
                Some("4") => 4,
                Some("2") => 2,
                _ => 1,
            };
            32 * matrices
        } else if self.has("128") {
            128
        } else if self.has("64") {
            64
        } else if self.has("U16") || self.has("S16") {
            16
        } else if self.has("U8") || self.has("S8") {
            8
        } else {
            32
        };
        Some(Access {
            space,
            direction,
            bits,
        })
    }

    /// Whether it runs on the tensor cores (`HMMA`, and `HGMMA` on sm_90).
    pub fn is_tensor_core(&self) -> bool {
        self.name == "HMMA" || self.name == "HGMMA"
    }

    fn is_branch(&self) -> bool {
        self.name == "BRA"
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemorySpace {
    Global,
    Shared,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Load,
    Store,
}

/// One memory access: where, which way, and how many bits per thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    pub space: MemorySpace,
    pub direction: Direction,
    pub bits: u32,
}

/// One SASS instruction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instruction {
    /// Byte offset in the function.
    pub offset: u32,
    /// The guard, e.g. `@!P0`.
    pub predicate: Option<String>,
    pub opcode: Opcode,
    /// The operands as nvdisasm prints them.
    pub operands: String,
    /// For a branch, the offset of the instruction it jumps to.
    pub branch_target: Option<u32>,
}

/// Parses `nvdisasm -c` output: instruction lines such as
///
/// ```text
///         /*0180*/              @!P1 LDG.E.128 R4, [R20.64+0x10] ;
/// ```
///
/// and the labels (`.L_x_1:`) that branches name as `` `(.L_x_1) ``.
/// Directives, comments and section headers are skipped.
pub fn parse(listing: &str) -> Result<Vec<Instruction>, Error> {
    let mut instructions = Vec::new();
    let mut labels = BTreeMap::new();
    let mut branch_labels = Vec::new();
    for (number, line) in listing.lines().enumerate() {
        let text = line.trim();
        let unreadable = || Error::Listing {
            line: number + 1,
            text: text.to_owned(),
        };
        if let Some(label) = text.strip_suffix(':').filter(|l| l.starts_with(".L")) {
            labels.insert(label.to_owned(), instructions.len());
            continue;
        }
        let Some(rest) = text.strip_prefix("/*") else {
            continue;
        };
        let (offset, body) = rest.split_once("*/").ok_or_else(unreadable)?;
        let offset = u32::from_str_radix(offset, 16).map_err(|_| unreadable())?;
        let body = body.trim().trim_end_matches(';').trim();
        let mut words = body.splitn(2, char::is_whitespace);
        let mut first = words
            .next()
            .filter(|w| !w.is_empty())
            .ok_or_else(unreadable)?;
        let mut rest = words.next().unwrap_or_default().trim();
        let predicate = if first.starts_with('@') {
            let guard = first.to_owned();
            let mut words = rest.splitn(2, char::is_whitespace);
            first = words
                .next()
                .filter(|w| !w.is_empty())
                .ok_or_else(unreadable)?;
            rest = words.next().unwrap_or_default().trim();
            Some(guard)
        } else {
            None
        };
        let opcode = Opcode::parse(first);
        if opcode.is_branch()
            && let Some(label) = branch_label(rest)
        {
            branch_labels.push((instructions.len(), label.to_owned()));
        }
        instructions.push(Instruction {
            offset,
            predicate,
            opcode,
            operands: rest.to_owned(),
            branch_target: None,
        });
    }
    for (index, label) in branch_labels {
        let target = labels
            .get(&label)
            .and_then(|&i| instructions.get(i))
            .map(|t| t.offset);
        instructions[index].branch_target = target;
    }
    Ok(instructions)
}

/// The label in a branch operand such as `` `(.L_x_1) ``.
fn branch_label(operands: &str) -> Option<&str> {
    let start = operands.find("`(")? + 2;
    let end = start + operands[start..].find(')')?;
    Some(&operands[start..end])
}

/// The main loop of a kernel: the index range of its instructions.
///
/// A *loop* is the region from a backward branch's target (its head) to the
/// last branch back to that head, inclusive. A loop is *innermost* when no
/// other loop's head lies inside it. The main loop is the innermost loop with
/// the most FFMA and tensor-core instructions; among equals (kernels without
/// such arithmetic), the one with the most instructions; among those, the
/// first. A branch to itself is no loop: ptxas ends every function with
/// one, never reached, after its `EXIT`. Nor are the branches of what
/// ptxas moves past the function's last `EXIT`: the slow paths it takes
/// out of line, such as a memory barrier's retried waits, which branch
/// back into the loop they came from. A kernel without a backward branch
/// has none.
pub fn main_loop(instructions: &[Instruction]) -> Option<std::ops::Range<usize>> {
    let index_of = |offset: u32| instructions.iter().position(|i| i.offset == offset);
    let body = instructions
        .iter()
        .rposition(|i| i.opcode.name == "EXIT")
        .map_or(instructions.len(), |last| last + 1);
    let mut loops: BTreeMap<usize, usize> = BTreeMap::new();
    for (end, inst) in instructions[..body].iter().enumerate() {
        if let Some(head) = inst.branch_target.and_then(index_of).filter(|&h| h < end) {
            let last = loops.entry(head).or_insert(end);
            *last = (*last).max(end);
        }
    }
    let innermost = loops
        .iter()
        .filter(|&(&head, &end)| !loops.keys().any(|&other| other > head && other <= end))
        .map(|(&head, &end)| head..end + 1);
    let weight = |range: &std::ops::Range<usize>| {
        let math = instructions[range.clone()]
            .iter()
            .filter(|i| i.opcode.name == "FFMA" || i.opcode.is_tensor_core())
            .count();
        (math, range.len())
    };
    innermost.fold(
        None,
        |best: Option<std::ops::Range<usize>>, range| match best {
            Some(b) if weight(&b) >= weight(&range) => Some(b),
            _ => Some(range),
        },
    )
}

/// How many accesses of each width (in bits per thread).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Widths(pub BTreeMap<u32, u32>);

impl Widths {
    /// Accesses of exactly `bits`.
    pub fn count(&self, bits: u32) -> u32 {
        self.0.get(&bits).copied().unwrap_or(0)
    }

    pub fn total(&self) -> u32 {
        self.0.values().sum()
    }

    /// `bits×count` pairs, narrowest first, e.g. `128×16 32×2`.
    pub fn describe(&self) -> String {
        if self.0.is_empty() {
            return "none".to_owned();
        }
        self.0
            .iter()
            .map(|(bits, n)| format!("{bits}b×{n}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Global and shared memory accesses by width.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Accesses {
    pub global_loads: Widths,
    pub global_stores: Widths,
    pub shared_loads: Widths,
    pub shared_stores: Widths,
}

impl Accesses {
    fn of(instructions: &[Instruction]) -> Accesses {
        let mut out = Accesses::default();
        for access in instructions.iter().filter_map(|i| i.opcode.access()) {
            let widths = match (access.space, access.direction) {
                (MemorySpace::Global, Direction::Load) => &mut out.global_loads,
                (MemorySpace::Global, Direction::Store) => &mut out.global_stores,
                (MemorySpace::Shared, Direction::Load) => &mut out.shared_loads,
                (MemorySpace::Shared, Direction::Store) => &mut out.shared_stores,
            };
            *widths.0.entry(access.bits).or_insert(0) += 1;
        }
        out
    }
}

/// The measures of a kernel's main loop.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Loop {
    /// Byte offsets of its first and last instruction.
    pub first_offset: u32,
    pub last_offset: u32,
    pub instructions: u32,
    /// Instructions per opcode family (the opcode without modifiers).
    pub mix: BTreeMap<String, u32>,
    /// FFMA instructions over all the loop's instructions.
    pub ffma_fraction: f64,
    pub memory: Accesses,
}

impl Loop {
    fn of(instructions: &[Instruction]) -> Loop {
        let mut mix = BTreeMap::new();
        for inst in instructions {
            *mix.entry(inst.opcode.name.clone()).or_insert(0) += 1;
        }
        let ffma: u32 = mix.get("FFMA").copied().unwrap_or(0);
        let count = u32::try_from(instructions.len()).unwrap_or(u32::MAX);
        Loop {
            first_offset: instructions.first().map_or(0, |i| i.offset),
            last_offset: instructions.last().map_or(0, |i| i.offset),
            instructions: count,
            mix,
            ffma_fraction: f64::from(ffma) / f64::from(count.max(1)),
            memory: Accesses::of(instructions),
        }
    }
}

/// Shared memory per block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SharedMemory {
    /// Declared in the PTX (ptxas's figure).
    pub static_bytes: u32,
    /// Sized at launch.
    pub dynamic_bytes: u32,
}

impl SharedMemory {
    pub fn total(self) -> u32 {
        self.static_bytes + self.dynamic_bytes
    }
}

/// What to inspect: PTX text and how it is launched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub ptx: String,
    pub target: SmVersion,
    pub threads_per_block: u32,
    pub dynamic_shared_bytes: u32,
}

impl Request {
    /// A lowered kernel, printed for `target`.
    pub fn lowered(lowered: &Lowered, target: SmVersion) -> Request {
        Request {
            ptx: ktune_core::ptx::print(&lowered.ptx, target),
            target,
            threads_per_block: lowered.launch.block.iter().product(),
            dynamic_shared_bytes: lowered.launch.dynamic_shared_bytes,
        }
    }
}

/// Static measures of one kernel's machine code.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Inspection {
    pub entry: String,
    pub target: SmVersion,
    /// Registers per thread.
    pub registers: u32,
    /// Bytes per thread.
    pub spill_stores: u32,
    pub spill_loads: u32,
    pub stack_frame: u32,
    pub shared: SharedMemory,
    pub threads_per_block: u32,
    pub occupancy: Occupancy,
    /// Instructions in the whole kernel.
    pub instructions: u32,
    /// `HMMA` and `HGMMA` instructions in the whole kernel.
    pub tensor_core_instructions: u32,
    /// Accesses in the whole kernel.
    pub memory: Accesses,
    /// See [`main_loop`].
    pub main_loop: Option<Loop>,
    /// Where warpgroups move registers between them (`setmaxnreg`).
    pub reallocation: Option<Reallocation>,
}

/// The register counts a kernel's warpgroups move to from the launch's
/// (`USETMAXREG` in the machine code: `DEALLOC` gives registers back to the
/// block's pool, `TRY_ALLOC` takes them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Reallocation {
    /// The lowest count a `DEALLOC` sets (a producer's), if any.
    pub lowered_to: Option<u32>,
    /// The highest count a `TRY_ALLOC` sets (the consumers'), if any.
    pub raised_to: Option<u32>,
}

impl Reallocation {
    /// The counts the `USETMAXREG` instructions among `instructions` set;
    /// `None` where there is none.
    pub fn of(instructions: &[Instruction]) -> Option<Reallocation> {
        let counts = |modifier: &'static str| {
            instructions
                .iter()
                .filter(move |i| i.opcode.name == "USETMAXREG" && i.opcode.has(modifier))
                .filter_map(|i| {
                    let count = i.operands.rsplit(',').next()?.trim();
                    u32::from_str_radix(count.strip_prefix("0x")?, 16).ok()
                })
        };
        let lowered_to = counts("DEALLOC").min();
        let raised_to = counts("TRY_ALLOC").max();
        (lowered_to.is_some() || raised_to.is_some()).then_some(Reallocation {
            lowered_to,
            raised_to,
        })
    }
}

impl Inspection {
    pub fn spills(&self) -> bool {
        self.spill_stores > 0 || self.spill_loads > 0
    }

    /// Whether any instruction runs on the tensor cores.
    pub fn uses_tensor_cores(&self) -> bool {
        self.tensor_core_instructions > 0
    }

    /// Measures a kernel from ptxas's report and its parsed listing.
    pub fn measure(
        report: &ptxas::Report,
        instructions: &[Instruction],
        request: &Request,
    ) -> Inspection {
        let shared = SharedMemory {
            static_bytes: report.shared_bytes,
            dynamic_bytes: request.dynamic_shared_bytes,
        };
        let usage = BlockUsage {
            threads: request.threads_per_block,
            registers: report.registers,
            shared_bytes: shared.total(),
        };
        let tensor = instructions
            .iter()
            .filter(|i| i.opcode.is_tensor_core())
            .count();
        Inspection {
            entry: report.entry.clone(),
            target: request.target,
            registers: report.registers,
            spill_stores: report.spill_stores,
            spill_loads: report.spill_loads,
            stack_frame: report.stack_frame,
            shared,
            threads_per_block: request.threads_per_block,
            occupancy: occupancy::occupancy(usage, request.target),
            instructions: u32::try_from(instructions.len()).unwrap_or(u32::MAX),
            tensor_core_instructions: u32::try_from(tensor).unwrap_or(u32::MAX),
            memory: Accesses::of(instructions),
            main_loop: main_loop(instructions).map(|range| Loop::of(&instructions[range])),
            reallocation: Reallocation::of(instructions),
        }
    }
}

/// Assembles, disassembles and measures one kernel.
pub fn inspect(tools: &Tools, request: &Request) -> Result<Inspection, Error> {
    let report = ptxas::assemble(&tools.ptxas, &request.ptx, request.target)?;
    let listing = disassemble(&tools.nvdisasm, &report.cubin)?;
    let instructions = parse(&listing)?;
    Ok(Inspection::measure(&report, &instructions, request))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listing in nvdisasm's format: a prologue, an outer loop around an
    /// inner FFMA loop, a second short loop, the epilogue.
    const LISTING: &str = "\
\t.headerflags\t@\"EF_CUDA_SM80\"
//--------------------- .text.k                   --------------------------
\t.section\t.text.k,\"ax\",@progbits
k:
.text.k:
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   LDG.E.128 R4, [R2.64] ;
.L_x_0:
        /*0020*/                   LDS.128 R8, [R0] ;
.L_x_1:
        /*0030*/                   LDS.U16 R12, [R0+0x10] ;
        /*0040*/                   FFMA R4, R5, R4, R2 ;
        /*0050*/                   FFMA R6, R7, R6, R4 ;
        /*0060*/              @!P1 BRA `(.L_x_1) ;
        /*0070*/                   STS.64 [R0], R4 ;
        /*0080*/                   LDSM.16.M88.4 R16, [R3] ;
        /*0090*/               @P0 BRA `(.L_x_0) ;
.L_x_2:
        /*00a0*/                   IADD3 R0, R0, 0x1, RZ ;
        /*00b0*/                   HMMA.16816.F32.BF16 R20, R16, R18, R20 ;
        /*00c0*/                   FFMA R9, R9, R9, R9 ;
        /*00d0*/                   FFMA R9, R9, R9, R9 ;
        /*00e0*/                   ISETP.NE.AND P2, PT, R0, 0x4, PT ;
        /*00f0*/               @P2 BRA `(.L_x_2) ;
        /*0100*/                   STG.E.U16 [R2.64], R4 ;
        /*0110*/                   EXIT ;
.L_x_3:
        /*0120*/                   BRA `(.L_x_3);
";

    #[test]
    fn parses_instructions_predicates_and_branches() {
        let insts = parse(LISTING).expect("parses");
        assert_eq!(insts.len(), 19);
        assert_eq!(insts[1].opcode.name, "LDG");
        assert_eq!(insts[1].opcode.modifiers, ["E", "128"]);
        assert_eq!(insts[1].operands, "R4, [R2.64]");
        assert_eq!(insts[6].predicate.as_deref(), Some("@!P1"));
        assert_eq!(insts[6].branch_target, Some(0x30));
        assert_eq!(insts[9].branch_target, Some(0x20));
        let hmma = &insts[11].opcode;
        assert_eq!((hmma.name.as_str(), hmma.modifiers.len()), ("HMMA", 3));
        assert!(hmma.is_tensor_core());
        assert_eq!(insts[18].branch_target, Some(0x120));
        let bad = "        /*zz*/ FFMA R0, R0, R0, R0 ;\n";
        assert!(matches!(parse(bad), Err(Error::Listing { line: 1, .. })));
    }

    #[test]
    fn reads_the_register_counts_warpgroups_move_to() {
        let listing = "\
        /*0250*/                   USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xe8 ;
        /*0260*/               @!UP0 BRA `(.L_x_9) ;
.L_x_9:
        /*c970*/                   USETMAXREG.DEALLOC.CTAPOOL 0x28 ;
";
        let insts = parse(listing).expect("parses");
        assert_eq!(
            Reallocation::of(&insts),
            Some(Reallocation {
                lowered_to: Some(40),
                raised_to: Some(232)
            })
        );
        assert_eq!(Reallocation::of(&parse(LISTING).expect("parses")), None);
    }

    #[test]
    fn classifies_accesses_by_space_and_width() {
        let access = |text: &str| {
            Opcode::parse(text)
                .access()
                .map(|a| (a.space, a.direction, a.bits))
        };
        use Direction::*;
        use MemorySpace::*;
        assert_eq!(access("LDG.E.128.CONSTANT"), Some((Global, Load, 128)));
        assert_eq!(access("LDG.E"), Some((Global, Load, 32)));
        assert_eq!(access("LDG.E.U16"), Some((Global, Load, 16)));
        assert_eq!(access("STG.E.64"), Some((Global, Store, 64)));
        assert_eq!(access("LDS.U.128"), Some((Shared, Load, 128)));
        assert_eq!(access("STS.U8"), Some((Shared, Store, 8)));
        assert_eq!(access("LDSM.16.MT88.2"), Some((Shared, Load, 64)));
        assert_eq!(access("LDGSTS.E.BYPASS.128"), Some((Global, Load, 128)));
        assert_eq!(access("LDL.64"), None);
        assert_eq!(access("FFMA"), None);
    }

    #[test]
    fn the_main_loop_is_the_innermost_with_the_most_arithmetic() {
        let insts = parse(LISTING).expect("parses");
        // Innermost loops: 0x30..=0x60 (2 FFMA) and 0xa0..=0xf0 (2 FFMA and
        // an HMMA); the outer loop 0x20..=0x90 holds the first's head.
        let range = main_loop(&insts).expect("a main loop");
        let main = Loop::of(&insts[range]);
        assert_eq!((main.first_offset, main.last_offset), (0xa0, 0xf0));
        assert_eq!(main.instructions, 6);
        assert_eq!(main.mix.get("FFMA"), Some(&2));
        assert_eq!(main.mix.get("HMMA"), Some(&1));
        assert!((main.ffma_fraction - 2.0 / 6.0).abs() < 1e-12);

        assert_eq!(main_loop(&insts[..2]), None);
        assert_eq!(main_loop(&insts[16..]), None, "the closing self-branch");
        // Without arithmetic, the longest innermost loop wins.
        let plain =
            parse(&LISTING.replace("FFMA", "FMUL").replace("HMMA", "FADD")).expect("parses");
        let range = main_loop(&plain).expect("a main loop");
        assert_eq!(plain[range.start].offset, 0xa0);
    }

    #[test]
    fn finds_nvdisasm_in_a_venv_whatever_the_wheels_folder() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let venv = dir.path().join(".venv");
        assert_eq!(in_venv(&venv), None);
        let bin = venv.join("lib/python3.12/site-packages/nvidia/cu13/bin");
        std::fs::create_dir_all(&bin).expect("folders");
        std::fs::create_dir_all(venv.join("lib/python3.12/site-packages/nvidia/cuda_nvcc/bin"))
            .expect("folders");
        assert_eq!(in_venv(&venv), None);
        std::fs::write(bin.join(ptxas::executable("nvdisasm")), b"").expect("a file");
        assert_eq!(
            in_venv(&venv),
            Some(bin.join(ptxas::executable("nvdisasm")))
        );
    }

    #[test]
    fn a_missing_tool_says_how_to_install_it() {
        let e = Error::Missing {
            tool: "nvdisasm",
            env: NVDISASM_ENV,
        };
        let shown = e.to_string();
        assert!(
            shown.starts_with("nvdisasm not found: run `cargo xtask setup`"),
            "{shown}"
        );
        assert!(
            shown.ends_with("or set KTUNE_NVDISASM to the executable"),
            "{shown}"
        );
    }

    #[test]
    fn measures_widths_over_the_kernel() {
        let insts = parse(LISTING).expect("parses");
        let memory = Accesses::of(&insts);
        assert_eq!(memory.global_loads.count(128), 1);
        assert_eq!(memory.global_stores.count(16), 1);
        assert_eq!(memory.shared_loads.describe(), "16b×1 128b×2");
        assert_eq!(memory.shared_stores.total(), 1);
        let json = serde_json::to_string(&memory).expect("serializes");
        assert!(
            json.contains(r#""shared_loads":{"16":1,"128":2}"#),
            "{json}"
        );
    }
}
