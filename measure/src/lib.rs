//! ktune's measurement layer: one schedule point of one kernel, checked
//! against the CPU reference and timed, on a GPU or on ktune's virtual GPU,
//! in a child process with a timeout so that an illegal address, an endless
//! loop or a crash costs one candidate and not the build.
//!
//! A [`Worker`] owns one child process, the current executable re-invoked
//! with [`WORKER_ENV`] set, and talks to it in JSON lines over its stdin and
//! stdout. The child serves requests from [`worker_main_if_requested`],
//! which must therefore be the first thing the executable's `main` does —
//! for a build script, the first line of `main` (ktune's build helper calls
//! it first thing in `tune_crate`):
//!
//! ```no_run
//! // build.rs
//! fn main() {
//!     // Serves measurement requests and exits when this process is a
//!     // worker; returns at once otherwise.
//!     ktune_measure::worker_main_if_requested();
//!     build();
//! }
//!
//! fn build() {
//!     // The rest of the build script: it may start workers itself.
//! }
//! ```
//!
//! and a tuner measures points through the worker:
//!
//! ```no_run
//! use std::time::Duration;
//! use ktune_core::{SmVersion, lower};
//! use ktune_measure::{DeviceKind, Job, Worker, WorkerConfig};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let job = Job::new(
//!     "#[tuned_kernel(shape(N = 4096))]
//!      fn double(x: Tensor<f32, N>) -> Tensor<f32, N> { compute(|i| 2.0 * x[i]) }",
//!     SmVersion::Sm80,
//! );
//! let device = ktune_measure::detect().unwrap_or(DeviceKind::Vgpu);
//! let mut worker = Worker::spawn(WorkerConfig::new(device)?.timeout(Duration::from_secs(60)))?;
//! let kernel = job.parse()?;
//! match worker.measure(&job, &lower::heuristic(&kernel, job.target)) {
//!     Ok(m) => eprintln!("{:.2} µs on {}", m.median_us, m.device.name),
//!     Err(why) => eprintln!("rejected: {why}"),
//! }
//! # Ok(()) }
//! ```
//!
//! # What the worker does with a point
//!
//! It parses the kernel (a kernel IR is not serialised; the worker keeps
//! each kernel it has parsed, with its reference output, for later points),
//! lowers the schedule ([`Rejected::Invalid`] when it does not), and then:
//!
//! - on the **virtual GPU** ([`DeviceKind::Vgpu`]): runs the lowered kernel
//!   with [`ktune_vgpu::verify`] against the CPU reference on random inputs
//!   with a poisoned output ([`Rejected::WrongResult`] for a mismatch or an
//!   unwritten element, [`Rejected::Fault`] for an out-of-bounds access, a
//!   race or a barrier error). The time reported is **not a measurement**:
//!   it is an estimate from that run's instruction, memory-traffic,
//!   barrier and tensor-core counts over the target's published figures
//!   ([`ktune_vgpu::timing::estimate`]), deterministic, with one "sample"
//!   and p10 = p90 = median. Its [`DeviceInfo`] is marked virtual ([`DeviceInfo::is_virtual`])
//!   so records made from it are never taken for a real GPU's.
//! - on a **GPU** ([`DeviceKind::Gpu`]): loads the PTX into a context of
//!   its own (the driver's JIT compile, outside the timing lock), runs the
//!   kernel once on random inputs (never zeros) with a poisoned output and
//!   compares the output with a reference (see [`Settings::reference_flops`]),
//!   then, holding a machine-wide lock for the GPU, times it with CUDA
//!   events: a warm-up, input sets rotated so that together they exceed
//!   twice the L2 cache, and repeats until the 95% confidence interval of
//!   the median lies within [`Settings::confidence`] of it or
//!   [`Settings::time_cap_s`] has passed. Right after, it reads the SM
//!   clock, the temperature and the active slowdown reasons through the
//!   driver's NVML where it has one ([`Reading`]); a power or thermal
//!   slowdown, or runs that slowed down as they went, flag the time as
//!   [`Measured::throttled`]. See [`Measured`] for what is recorded.
//!
//! A fault on a GPU leaves its context unusable, so the worker answers and
//! then exits; the [`Worker`] starts a new one for the next request.
//!
//! # Compiling a batch in parallel
//!
//! Before measuring several points, a caller may announce them with
//! [`Worker::prepare`]: the worker lowers them on [`default_jobs`] threads
//! (the build's job limit, [`JOBS_ENV`], when set; else the machine's
//! parallelism; [`WorkerConfig::jobs`] to choose) and keeps what it
//! compiled for the measure requests that follow, which then answer
//! exactly as they would have. On the virtual GPU each thread runs the
//! whole check and estimate, both deterministic CPU work; on a GPU each
//! thread binds the context and loads the module (the driver's JIT),
//! while the check and the timing stay one candidate at a time, under the
//! GPU's lock. A candidate that does not lower, or fails to load, costs
//! that candidate only: its measure request rejects it as before. A new
//! prepare replaces what the last one left unmeasured, and at most a
//! bounded number of candidates is kept.
//!
//! # Choosing the device
//!
//! [`detect`] finds the first GPU (probing the driver library first, so
//! that a machine without one gets `None`, never a panic);
//! [`device_from_env_value`] reads a [`DEVICE_ENV`] value (`gpu`, `gpu:N`,
//! `vgpu`, `none`) for callers that let the user choose.
//!
//! # Searching
//!
//! [`search::KernelMeasurer`] is a `ktune_search` measurer over one
//! kernel's worker, given how the search's points map to schedules; it
//! keeps every [`Measured`] for the database records.

mod device;
mod gpu;
mod info;
mod inject;
mod job;
mod lock;
mod prepare;
mod protocol;
pub mod search;
mod sensors;
mod serve;
pub mod stats;
mod vgpu;
mod worker;

pub use device::{
    DEVICE_ENV, DeviceEnvError, DeviceInfo, DeviceKind, VGPU_NAME, detect, device_from_env_value,
};
pub use gpu::tensor_map;
pub use info::device_info;
pub use inject::Injection;
pub use job::{Job, Measured, Rejected, SAMPLED_POINTS, Settings};
pub use prepare::{JOBS_ENV, default_jobs};
pub use protocol::PROTOCOL_VERSION;
pub use sensors::Reading;
pub use serve::{WORKER_ENV, worker_main_if_requested};
pub use vgpu::{TooLarge, VGPU_MAX_FLOPS, vgpu_searchable};
pub use worker::{Worker, WorkerConfig, WorkerError};
