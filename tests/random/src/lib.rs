//! Kernels nobody chose, built as a crate builds its kernels: the build
//! script writes the kernels `ktune_vgpu::random` generates (seeds 0 to
//! 199, the virtual GPU's random-kernel test's), each at the first of its
//! shapes, and has ktune's build helper prepare them; `#[tuned_kernel]`
//! expands each into its CPU reference and launchers. `tests/random.rs`
//! runs every one through its generated `run` on the CPU backend (the
//! macro's reference) and on the virtual GPU backend (the PTX the build
//! embedded, loaded by the runtime) against the CPU interpreter.

use ktune::prelude::*;
use ktune::{KernelInfo, Ran};

/// Runs a kernel on a device's backend on inputs given as `f32` (exact in
/// each input's dtype); what ran, and the output as `f32`.
pub type Runner = fn(&Device, &[Vec<f32>]) -> Result<(Ran, Vec<f32>), Error>;

/// A generated kernel: its seed, metadata and runner.
#[derive(Debug)]
pub struct Generated {
    pub seed: u64,
    pub info: &'static KernelInfo,
    pub run: Runner,
}

fn upload<T: Element>(device: &Device, values: &[f32]) -> Result<Buffer<T>, Error> {
    let values: Vec<T> = values.iter().map(|v| T::from_f32(*v)).collect();
    device.upload(&values)
}

fn download<T: Element>(device: &Device, buffer: &Buffer<T>) -> Result<Vec<f32>, Error> {
    Ok(device
        .download(buffer)?
        .iter()
        .map(|v| v.to_f32())
        .collect())
}

include!(concat!(env!("OUT_DIR"), "/random/kernels.rs"));
