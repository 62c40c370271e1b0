//! Lowering: a kernel and a schedule become a PTX instruction list plus the
//! launch configuration it was written for.

pub mod classify;
pub(crate) mod elementwise;
pub mod expr;
mod generic;
pub mod matmul;
pub(crate) mod rows;

use crate::ir::Kernel;
use crate::ptx;
use crate::schedule::Schedule;
use crate::target::SmVersion;
use classify::OpClass;

/// The grid and block a lowered kernel must be launched with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launch {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub dynamic_shared_bytes: u32,
    /// Bytes of global scratch memory the kernel needs (split-K's partial
    /// sums and arrival counters, see [`matmul`]); 0 for most kernels.
    /// When above 0 the kernel takes one more pointer parameter, after the
    /// output: a buffer of at least this many bytes, **all zero** before
    /// the first launch that uses it. The kernel leaves it zero where it
    /// must be (its counters), so one buffer serves any number of launches
    /// run one after another, but not two running at once.
    pub workspace_bytes: u64,
    /// Whether the kernel's blocks loop over the grid's `grid[0]` tiles
    /// (`ctaid.x`, then `nctaid.x` on, …): any grid of 1 to `grid[0]`
    /// blocks computes the whole output, and it is launched with as many
    /// as the GPU holds at once ([`Launch::grid_for`]).
    pub persistent: bool,
    /// Registers each thread must be given at launch (0: any number). A
    /// kernel whose warpgroups hand registers to each other with
    /// `setmaxnreg` counts on the block's pool holding this many per
    /// thread: a `setmaxnreg.inc` the pool cannot meet waits forever. The
    /// PTX makes ptxas give exactly this many (`.maxntid` with
    /// `.minnctapersm 1`); a launch that gets fewer must be refused.
    pub registers: u32,
}

impl Launch {
    /// The grid to launch where `resident` blocks of this kernel run at
    /// once (the SMs times the blocks each holds): `grid`, or for a
    /// persistent kernel at most `resident` blocks (at least one).
    pub fn grid_for(&self, resident: u32) -> [u32; 3] {
        if self.persistent {
            [self.grid[0].min(resident.max(1)), 1, 1]
        } else {
            self.grid
        }
    }
}

/// A lowered kernel: its instruction list and how to launch it.
#[derive(Debug, Clone, PartialEq)]
pub struct Lowered {
    pub ptx: ptx::Kernel,
    pub launch: Launch,
}

#[cfg(test)]
impl Lowered {
    /// The kernel's global accesses, in order: loads (`true`) and stores,
    /// with how many values each moves.
    pub(crate) fn global_accesses(&self) -> Vec<(bool, usize)> {
        use ptx::inst::{Op, Space};
        self.ptx
            .body
            .iter()
            .filter_map(|i| match &i.op {
                Op::Ld {
                    space: Space::Global | Space::GlobalReadOnly,
                    dsts,
                    ..
                } => Some((true, dsts.len())),
                Op::St {
                    space: Space::Global,
                    srcs,
                    ..
                } => Some((false, srcs.len())),
                _ => None,
            })
            .collect()
    }
}

/// Why a schedule cannot be lowered for a kernel on a target.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LowerError {
    #[error("schedule class `{schedule}` does not apply to kernel `{kernel}` ({reason})")]
    WrongClass {
        kernel: String,
        schedule: &'static str,
        reason: String,
    },
    #[error(
        "schedule {} is invalid for kernel `{kernel}` on {target}: {reason}",
        .schedule.to_json()
    )]
    Invalid {
        kernel: String,
        schedule: Box<Schedule>,
        target: SmVersion,
        constraint: Constraint,
        reason: String,
    },
}

/// The rule a schedule point breaks. Every invalid point is rejected by
/// exactly one of these, checked before any code is emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Constraint {
    /// A knob outside the values the lowering implements.
    Range,
    /// Threads per block: a positive multiple of the warp size within the
    /// target's limit.
    Threads,
    /// Shared memory per block within the target's opt-in maximum.
    SharedMemory,
    /// Estimated registers per thread within what the block size leaves.
    Registers,
    /// Vector accesses need aligned runs: the width divides the contiguous
    /// extent, the tile and every stride.
    Alignment,
    /// A thread's (or warp's) tile must fit its block's tile.
    Tiling,
    /// The operands must suit the instructions: tensor-core products need
    /// plain loads (a cast to f32 allowed) of f16 or bf16 tensors of one
    /// dtype, or of f32 tensors in a kernel with `allow_tf32`; SIMT tiles
    /// staged by `cp.async` (`stages` above 1) need plain loads of f32
    /// tensors.
    Operands,
    /// Split-K's slices: none lies wholly past `K`, and the workspace of
    /// partial tiles stays within 32-bit offsets.
    Split,
}

impl Constraint {
    pub const ALL: [Constraint; 8] = [
        Constraint::Range,
        Constraint::Threads,
        Constraint::SharedMemory,
        Constraint::Registers,
        Constraint::Alignment,
        Constraint::Tiling,
        Constraint::Operands,
        Constraint::Split,
    ];

    /// The name shown in reports.
    pub fn name(self) -> &'static str {
        match self {
            Constraint::Range => "range",
            Constraint::Threads => "threads",
            Constraint::SharedMemory => "shared_memory",
            Constraint::Registers => "registers",
            Constraint::Alignment => "alignment",
            Constraint::Tiling => "tiling",
            Constraint::Operands => "operands",
            Constraint::Split => "split",
        }
    }
}

/// A broken [`Constraint`] and what exactly breaks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Violation {
    pub constraint: Constraint,
    pub reason: String,
}

impl Violation {
    pub fn new(constraint: Constraint, reason: impl Into<String>) -> Violation {
        Violation {
            constraint,
            reason: reason.into(),
        }
    }

    /// The violation, with why it was not worked around.
    pub fn because(self, why: &str) -> Violation {
        Violation {
            reason: format!("{}; {why}", self.reason),
            ..self
        }
    }
}

/// The PTX entry name of a kernel.
pub fn entry_name(kernel: &Kernel) -> String {
    format!("ktune_{}", kernel.name)
}

/// Lowers `kernel` with `schedule` for `target`.
pub fn lower(
    kernel: &Kernel,
    schedule: &Schedule,
    target: SmVersion,
) -> Result<Lowered, LowerError> {
    Lowering::new(kernel, target).lower(schedule)
}

/// Checks `schedule` against every [`Constraint`] for `kernel` on `target`
/// without emitting code: `Ok` exactly when [`lower`] succeeds.
pub fn validate(kernel: &Kernel, schedule: &Schedule, target: SmVersion) -> Result<(), LowerError> {
    Lowering::new(kernel, target).check(schedule)
}

/// A kernel to lower on a target, what every schedule's lowering needs
/// from it found once: its op class and whether its tensors are within
/// reach of 32-bit offsets. Surveying a space checks thousands of points
/// of one kernel.
#[derive(Debug, Clone)]
pub struct Lowering<'k> {
    kernel: &'k Kernel,
    target: SmVersion,
    class: OpClass,
}

impl<'k> Lowering<'k> {
    pub fn new(kernel: &'k Kernel, target: SmVersion) -> Lowering<'k> {
        Lowering {
            kernel,
            target,
            class: classify::classify(kernel),
        }
    }

    pub fn kernel(&self) -> &'k Kernel {
        self.kernel
    }

    pub fn target(&self) -> SmVersion {
        self.target
    }

    /// The kernel's op class.
    pub fn class(&self) -> &OpClass {
        &self.class
    }

    /// [`lower`] for this kernel and target.
    pub fn lower(&self, schedule: &Schedule) -> Result<Lowered, LowerError> {
        self.dispatch(schedule, Step::Emit)
            .map(|l| l.expect("emitted"))
            .map_err(|fault| self.error(schedule, fault))
    }

    /// [`validate`] for this kernel and target.
    pub fn check(&self, schedule: &Schedule) -> Result<(), LowerError> {
        self.dispatch(schedule, Step::Check)
            .map(|_| ())
            .map_err(|fault| self.error(schedule, fault))
    }

    /// [`Lowering::check`] for checking many points: the constraint
    /// `schedule` breaks and why, without the error's copies of the
    /// kernel's name and the schedule. A schedule of a class the kernel
    /// does not have breaks [`Constraint::Range`].
    pub fn violation(&self, schedule: &Schedule) -> Option<(Constraint, String)> {
        match self.dispatch(schedule, Step::Check) {
            Ok(_) => None,
            Err(Fault::Invalid(v)) => Some((v.constraint, v.reason)),
            Err(Fault::WrongClass) => Some((
                Constraint::Range,
                self.error(schedule, Fault::WrongClass).to_string(),
            )),
        }
    }

    fn error(&self, schedule: &Schedule, fault: Fault) -> LowerError {
        let kernel = self.kernel.name.clone();
        match fault {
            Fault::Invalid(v) => LowerError::Invalid {
                kernel,
                schedule: Box::new(schedule.clone()),
                target: self.target,
                constraint: v.constraint,
                reason: v.reason,
            },
            Fault::WrongClass => LowerError::WrongClass {
                kernel,
                schedule: schedule.class(),
                reason: format!("the kernel is {}", self.class.describe()),
            },
        }
    }

    fn dispatch(&self, schedule: &Schedule, step: Step) -> Result<Option<Lowered>, Fault> {
        let (kernel, target) = (self.kernel, self.target);
        let invalid = Fault::Invalid;
        let emit = step == Step::Emit;
        match (schedule, &self.class) {
            (&Schedule::Generic { block }, _) => if emit {
                generic::lower(kernel, block, target).map(Some)
            } else {
                check_block(block, target).map(|()| None)
            }
            .map_err(invalid),
            (
                &Schedule::Elementwise {
                    block,
                    per_thread,
                    vector,
                },
                OpClass::Elementwise,
            ) => if emit {
                elementwise::lower(kernel, block, per_thread, vector, target).map(Some)
            } else {
                elementwise::check(kernel, block, per_thread, vector, target).map(|()| None)
            }
            .map_err(invalid),
            (
                &Schedule::Rows {
                    threads_per_row,
                    rows_per_block,
                    vector,
                    cache,
                    tree,
                    online,
                    cluster,
                },
                OpClass::Rows(plan),
            ) => {
                let knobs = rows::Knobs {
                    threads_per_row,
                    rows_per_block,
                    vector,
                    cache,
                    tree,
                    online,
                    cluster,
                };
                if emit {
                    rows::lower(kernel, plan, knobs, target).map(Some)
                } else {
                    rows::check(kernel, plan, knobs, target).map(|_| None)
                }
                .map_err(invalid)
            }
            (Schedule::Matmul(tiles), OpClass::Matmul(plan)) => if emit {
                matmul::lower(kernel, plan, *tiles, target).map(Some)
            } else {
                matmul::Layout::new(kernel, plan, *tiles, target).map(|_| None)
            }
            .map_err(invalid),
            (Schedule::Mma(tiles), OpClass::Matmul(plan)) => if emit {
                matmul::mma::lower(kernel, plan, *tiles, target).map(Some)
            } else {
                matmul::mma::MmaLayout::new(kernel, plan, *tiles, target).map(|_| None)
            }
            .map_err(invalid),
            _ => Err(Fault::WrongClass),
        }
    }
}

/// Why [`Lowering::dispatch`] failed, before it is made a [`LowerError`].
enum Fault {
    Invalid(Violation),
    WrongClass,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Step {
    Check,
    Emit,
}

/// The schedule ktune uses for `kernel` on `target` when nothing has been
/// measured: ranked by a model of the hardware, never by running anything.
/// See [`crate::heuristic`].
pub fn heuristic(kernel: &Kernel, target: SmVersion) -> Schedule {
    crate::heuristic::heuristic(kernel, target)
}

/// The default schedule for `kernel` that runs on `target` and every newer
/// GPU ([`crate::heuristic::portable`]): [`heuristic`] less what only
/// `target`'s architecture has.
pub fn portable_heuristic(kernel: &Kernel, target: SmVersion) -> Schedule {
    crate::heuristic::portable(kernel, target)
}

/// Checks that a block size is a positive multiple of the warp size within
/// the target's limit.
pub(crate) fn check_block(threads: u32, target: SmVersion) -> Result<(), Violation> {
    let limits = target.limits();
    if threads == 0
        || !threads.is_multiple_of(limits.warp_size)
        || threads > limits.max_threads_per_block
    {
        return Err(Violation::new(
            Constraint::Threads,
            format!(
                "{threads} threads per block; expected a multiple of {} up to {}",
                limits.warp_size, limits.max_threads_per_block
            ),
        ));
    }
    Ok(())
}
