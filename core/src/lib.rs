//! ktune's compiler.
//!
//! The kernel language front-end ([`syntax`]), the kernel IR ([`ir`]),
//! schedules, the lowering to a typed PTX instruction list ([`ptx`]) and its
//! printer. Pure: this crate reads no file, environment variable, process or
//! GPU (it only asks how many threads the machine runs, to survey large
//! spaces on all of them); the macro, the build helper and the CLI all call
//! into it.

pub mod canon;
pub mod db;
pub mod dtype;
pub mod heuristic;
pub mod interp;
pub mod ir;
pub mod occupancy;
pub mod target;

/// The version of the code generator. Bump it whenever the PTX emitted for
/// some schedule changes in a way that can change its speed: tuning records
/// measured with another version are stale.
pub const GENERATOR_VERSION: u32 = 7;

pub use dtype::DType;
pub use target::SmVersion;
pub mod lower;
pub mod model;
pub mod parallel;
pub mod ptx;
pub mod schedule;
pub mod space;
pub mod syntax;
#[cfg(test)]
mod test_kernels;
