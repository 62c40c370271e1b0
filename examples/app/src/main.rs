//! An application that uses the kernels of `lib-kernels` and overrides one
//! of the library's tuning records.
//!
//! Its `.cargo/config.toml` declares `tuning/ktune.json` as the
//! application's database (`KTUNE_APP_DATABASE`), which the build script of
//! every crate in the build reads over the crate's own database. The file
//! holds a fixture record (driver `fixture`, not a measurement) for
//! `lib-kernels`' `softmax` on the `NVIDIA H200` with another schedule than
//! the library's, so the library is compiled with the application's choice.
//!
//! The program prints the variants the binary ships for each of the
//! library's kernels and the one an H200 would run, then runs `softmax` on
//! this machine (the GPU, or the CPU backend) and checks that every row
//! sums to 1.

use std::process::ExitCode;

use ktune::prelude::*;
use ktune::{KernelInfo, Variant, select_variant};
use lib_kernels::{axpy, softmax};

/// The GPU whose record the application overrides.
const H200: (&str, (u32, u32)) = ("NVIDIA H200", (9, 0));

fn main() -> ExitCode {
    print_variants(&softmax::KERNEL, softmax::variants());
    print_variants(&axpy::KERNEL, axpy::variants());
    match run_softmax() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("example-app: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One line per embedded variant (`<kernel> sm_90 NVIDIA H200 <schedule>`),
/// then the one an H200 runs.
fn print_variants(kernel: &'static KernelInfo, variants: &'static [Variant]) {
    for v in variants {
        println!(
            "{} sm_{}{} {} {}",
            kernel.name,
            v.sm.0,
            v.sm.1,
            v.gpu.unwrap_or("default"),
            v.schedule
        );
    }
    let (gpu, cc) = H200;
    match select_variant(kernel, variants, gpu, cc) {
        Ok(v) => println!("{} on {gpu}: {}", kernel.name, v.schedule),
        Err(e) => println!("{} on {gpu}: {e}", kernel.name),
    }
}

fn run_softmax() -> Result<bool, ktune::Error> {
    let device = Device::gpu_or_cpu();
    let rows = softmax::KERNEL.dim("R").unwrap_or(0) as usize;
    let cols = softmax::KERNEL.dim("C").unwrap_or(0) as usize;
    let x: Vec<f32> = (0..rows * cols).map(|i| (i % 17) as f32 * 0.25).collect();
    let x_dev = device.upload(&x)?;
    let mut p_dev = device.alloc::<f32>(rows * cols)?;
    let ran = softmax::run(&device, &x_dev, &mut p_dev)?;
    let p = device.download(&p_dev)?;
    let worst = p
        .chunks(cols)
        .map(|row| (row.iter().map(|v| f64::from(*v)).sum::<f64>() - 1.0).abs())
        .fold(0.0, f64::max);
    let ok = worst < 1e-4;
    println!(
        "softmax ran on {ran}: rows sum to 1 within {worst:.1e} ({})",
        if ok { "ok" } else { "FAILED" }
    );
    Ok(ok)
}
