//! GPU kernels tuned at build time for the GPUs your program runs on.
//!
//! This is the crate applications depend on. You describe each kernel once
//! with [`#[tuned_kernel]`](tuned_kernel); at `cargo build`, ktune's build
//! helper (`ktune-build`, called from `build.rs`) generates PTX for it —
//! tuned per GPU model from a tuning database committed with your crate, plus
//! a heuristic default that runs on every sm_80 (Ampere) or newer GPU — and
//! embeds it in the binary. At run time this crate picks the variant for the
//! GPU at hand, loads it once per CUDA context, checks buffer lengths and
//! launches it. Every kernel also gets a CPU reference of the same
//! computation, which tests use and which is an opt-in backend where there is
//! no GPU.
//!
//! # Example
//!
//! The kernels, in `src/kernels.rs` of an application crate:
//!
//! ```ignore
//! use ktune::prelude::*;
//!
//! /// Softmax over each row.
//! #[tuned_kernel(shape(R = 8192, C = 1000))]
//! pub fn softmax(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> {
//!     compute(|r, c| {
//!         let mx = max(C, |j| x[r][j]);
//!         let s = sum(C, |j| exp(x[r][j] - mx));
//!         exp(x[r][c] - mx) / s
//!     })
//! }
//! ```
//!
//! `build.rs`, and the dependencies in `Cargo.toml`:
//!
//! ```ignore
//! fn main() {
//!     ktune_build::tune_crate();
//! }
//! ```
//!
//! ```toml
//! [dependencies]
//! ktune = "0.1"
//!
//! [build-dependencies]
//! ktune-build = "0.1"
//!
//! [features]
//! # on a miss, the full search (XGBoost-guided, minutes a kernel) instead of the bounded one
//! max-autotune = ["ktune-build/max-autotune"]
//! ```
//!
//! `src/main.rs`:
//!
//! ```ignore
//! mod kernels;
//!
//! use ktune::prelude::*;
//!
//! fn main() -> Result<(), ktune::Error> {
//!     // The first GPU; KTUNE_BACKEND=cpu selects the CPU reference instead.
//!     let device = Device::from_env()?;
//!
//!     let rows = kernels::softmax::KERNEL.output.len;
//!     let x: Vec<f32> = (0..rows).map(|i| (i % 7) as f32).collect();
//!     let x = device.upload(&x)?;
//!     let mut y = device.alloc::<f32>(rows)?;
//!
//!     let ran = kernels::softmax::run(&device, &x, &mut y)?;
//!     let y = device.download(&y)?;
//!     println!("softmax ran on {} as {ran}: y[0] = {}", device.name(), y[0]);
//!     // softmax ran on NVIDIA H200 as cuda sm_90 NVIDIA H200: y[0] = ...
//!     Ok(())
//! }
//! ```
//!
//! (These examples are not compiled by rustdoc: they need the build
//! helper's outputs. The ones below are.)
//!
//! # What a kernel expands to
//!
//! `#[tuned_kernel]` turns `fn softmax` into `pub mod softmax` with:
//!
//! - `KERNEL: KernelInfo` — name, shape, tensors, flop and byte counts;
//! - `variants() -> &'static [Variant]` — the compiled variants in the binary;
//! - `run(&Device, &Buffer<f32>, &mut Buffer<f32>) -> Result<Ran, Error>` —
//!   on a GPU device launches the selected variant on the device's stream,
//!   on the CPU device runs the reference; [`Ran`] says which;
//! - `launch(&Arc<CudaStream>, &CudaSlice<f32>, &mut CudaSlice<f32>) ->
//!   Result<&'static Variant, Error>` — the same launch on cudarc types, for
//!   applications that manage memory and streams with cudarc themselves;
//! - `reference(&[f32], &mut [f32]) -> Result<(), Error>` — the CPU
//!   reference on plain slices.
//!
//! All of them check every buffer's length against the kernel's fixed shape
//! and return [`Error::LengthMismatch`] rather than touching memory out of
//! bounds. Inputs come first, in signature order; the result is the last
//! argument.
//!
//! # Devices, backends and the environment
//!
//! | constructor | gives |
//! |---|---|
//! | [`Device::cuda(n)`](Device::cuda) | GPU `n`, or an error (never a panic) without one |
//! | [`Device::cpu()`](Device::cpu) | the CPU reference backend |
//! | `Device::vgpu()` | the virtual GPU: the embedded sm_80 PTX, run on the CPU with race and bounds checks (feature `vgpu`) |
//! | [`Device::from_env()`](Device::from_env) | `KTUNE_BACKEND`: `cpu`, `vgpu`, or `cuda`/unset for GPU 0 (an error without a GPU) |
//! | [`Device::gpu_or_cpu()`](Device::gpu_or_cpu) | like `from_env`, falling back to the CPU instead of an error |
//!
//! ```
//! # fn main() -> Result<(), ktune::Error> {
//! use ktune::prelude::*;
//!
//! let device = match Device::cuda(0) {
//!     Ok(gpu) => gpu,
//!     Err(Error::NoDriver | Error::NoDevice { .. }) => Device::cpu(),
//!     Err(e) => return Err(e),
//! };
//! let x = device.upload(&[bf16::from_f32(0.5), bf16::from_f32(2.0)])?;
//! assert_eq!(device.download(&x)?[1].to_f32(), 2.0);
//! # Ok(()) }
//! ```
//!
//! # Features
//!
//! - `vgpu` (off by default; brings in ktune's compiler and virtual GPU):
//!   `Device::vgpu()` and `KTUNE_BACKEND=vgpu`, which run each kernel's
//!   embedded PTX text — the variant an sm_80 GPU would get — on the CPU,
//!   thread by thread, and report out-of-bounds accesses, shared-memory
//!   races, divergent barriers and unwritten outputs as [`Error::Vgpu`].
//!   Without the feature, `KTUNE_BACKEND=vgpu` is [`Error::VgpuDisabled`].
//!
//! # Which variant runs
//!
//! A binary carries, per kernel, one variant per GPU model in its tuning
//! database plus heuristic defaults. On a GPU the runtime takes the variant
//! tuned on that exact model, else one for its exact compute capability,
//! else the newest one older than the GPU (PTX runs on newer GPUs, never on
//! older ones); see [`select_variant`] for the precise rules. A
//! GPU older than sm_80 gets [`Error::NoVariant`].
//!
//! # Testing without a GPU
//!
//! Nothing in this crate panics for lack of a GPU: the driver library is
//! probed before any CUDA call. This crate's own GPU tests are marked
//! `#[ignore = "needs a GPU ..."]`, so on a machine without one they are
//! reported as ignored rather than counted as passed; on a GPU machine run
//! them with `cargo test -p ktune -- --include-ignored`, where they fail if
//! no GPU can be opened.

mod backend;
mod buffer;
mod device;
mod element;
mod error;
mod kernel;
mod launch;
mod probe;
mod resident;
mod select;
mod tensor_map;
mod vgpu;
mod workspace;

#[doc(hidden)]
#[path = "private/mod.rs"]
pub mod __private;

pub use half::{bf16, f16};
pub use ktune_macros::tuned_kernel;

pub use crate::backend::Backend;
pub use crate::buffer::Buffer;
pub use crate::device::Device;
pub use crate::element::Element;
pub use crate::error::Error;
pub use crate::kernel::{KernelInfo, Ran, TensorInfo, Variant, variant_label};
pub use crate::select::select_variant;

/// The names kernels and the code calling them need:
/// `use ktune::prelude::*;`.
pub mod prelude {
    pub use crate::{Backend, Buffer, Device, Element, Error, bf16, f16, tuned_kernel};
}
