//! Lowering: a kernel and a schedule become a PTX instruction list plus the
//! launch configuration it was written for.

pub mod classify;
mod elementwise;
pub mod expr;
mod generic;
pub mod matmul;
mod rows;

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
}

/// A lowered kernel: its instruction list and how to launch it.
#[derive(Debug, Clone, PartialEq)]
pub struct Lowered {
    pub ptx: ptx::Kernel,
    pub launch: Launch,
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
    #[error("schedule {schedule} is invalid for kernel `{kernel}` on {target}: {reason}")]
    Invalid {
        kernel: String,
        schedule: String,
        target: SmVersion,
        reason: String,
    },
    #[error(
        "tensor `{tensor}` of kernel `{kernel}` has {len} elements; ktune supports at most 2^31 - 1"
    )]
    TooLarge {
        kernel: String,
        tensor: String,
        len: u64,
    },
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
    for t in kernel.inputs.iter().chain(std::iter::once(&kernel.output)) {
        let len = kernel.len_of(t);
        if len > i32::MAX as u64 {
            return Err(LowerError::TooLarge {
                kernel: kernel.name.clone(),
                tensor: t.name.clone(),
                len,
            });
        }
    }
    let invalid = |reason: String| LowerError::Invalid {
        kernel: kernel.name.clone(),
        schedule: schedule.to_json(),
        target,
        reason,
    };
    let wrong_class = |class: OpClass| LowerError::WrongClass {
        kernel: kernel.name.clone(),
        schedule: schedule.class(),
        reason: format!("the kernel is {}", class.describe()),
    };
    match schedule {
        Schedule::Generic { block } => generic::lower(kernel, *block, target).map_err(invalid),
        Schedule::Elementwise {
            block,
            per_thread,
            vector,
        } => match classify::classify(kernel) {
            OpClass::Elementwise => {
                elementwise::lower(kernel, *block, *per_thread, *vector, target).map_err(invalid)
            }
            other => Err(wrong_class(other)),
        },
        Schedule::Rows {
            threads_per_row,
            rows_per_block,
            vector,
        } => match classify::classify(kernel) {
            OpClass::Rows(plan) => rows::lower(
                kernel,
                &plan,
                *threads_per_row,
                *rows_per_block,
                *vector,
                target,
            )
            .map_err(invalid),
            other => Err(wrong_class(other)),
        },
        &Schedule::Matmul {
            block_m,
            block_n,
            block_k,
            thread_m,
            thread_n,
            vector_a,
            vector_b,
        } => match matmul::detect(kernel) {
            Some(plan) => {
                let tiles = matmul::Tiles {
                    block_m,
                    block_n,
                    block_k,
                    thread_m,
                    thread_n,
                    vector_a,
                    vector_b,
                };
                matmul::lower(kernel, &plan, tiles, target).map_err(invalid)
            }
            None => Err(wrong_class(classify::classify(kernel))),
        },
    }
}

/// The schedule ktune uses for `kernel` on `target` when nothing has been
/// measured: ranked by a model of the hardware, never by running anything.
/// See [`crate::heuristic`].
pub fn heuristic(kernel: &Kernel, target: SmVersion) -> Schedule {
    crate::heuristic::heuristic(kernel, target)
}

/// Checks that a block size is a positive multiple of the warp size within
/// the target's limit.
pub(crate) fn check_block(threads: u32, target: SmVersion) -> Result<(), String> {
    let limits = target.limits();
    if threads == 0
        || !threads.is_multiple_of(limits.warp_size)
        || threads > limits.max_threads_per_block
    {
        return Err(format!(
            "{threads} threads per block; expected a multiple of {} up to {}",
            limits.warp_size, limits.max_threads_per_block
        ));
    }
    Ok(())
}
