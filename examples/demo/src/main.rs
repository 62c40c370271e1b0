//! ktune's demo: one transformer-style block (layernorm → matmul + bias +
//! gelu → matmul + bias + residual → softmax) run through ktune kernels on
//! the GPU when there is one, else on the CPU backend (or, with
//! `KTUNE_BACKEND=vgpu`, the embedded PTX on ktune's virtual GPU), each
//! result checked against an independent f64 implementation.

mod check;
mod kernels;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use check::Matrix;
use ktune::prelude::*;
use ktune::{KernelInfo, Ran};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// One row of the report.
struct Row {
    kernel: &'static KernelInfo,
    ran: Ran,
    time: Duration,
    error: f64,
    tolerance: f64,
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("demo: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn random(rng: &mut StdRng, len: usize, scale: f32) -> Vec<f32> {
    (0..len).map(|_| rng.random_range(-scale..scale)).collect()
}

fn to_f64<T: Element>(v: &[T]) -> Vec<f64> {
    v.iter().map(|x| f64::from(x.to_f32())).collect()
}

fn to_bf16(v: &[f32]) -> Vec<bf16> {
    v.iter().map(|x| bf16::from_f32(*x)).collect()
}

/// Runs `launch` once to warm up, then `repeats` times; the median time.
fn time(
    device: &Device,
    repeats: usize,
    mut launch: impl FnMut() -> Result<Ran, ktune::Error>,
) -> Result<(Ran, Duration), ktune::Error> {
    let ran = launch()?;
    device.synchronize()?;
    let mut times = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        let start = Instant::now();
        launch()?;
        device.synchronize()?;
        times.push(start.elapsed());
    }
    times.sort();
    Ok((ran, times[times.len() / 2]))
}

fn tolerance(kernel: &KernelInfo) -> f64 {
    if kernel.output.dtype == "f32" {
        1e-5
    } else {
        1e-2
    }
}

fn run() -> Result<bool, ktune::Error> {
    let device = Device::gpu_or_cpu();
    match device.backend() {
        Backend::Cuda => println!("demo: running on the GPU: {}", device.name()),
        Backend::Vgpu => println!(
            "demo: running the embedded PTX on ktune's virtual GPU (CPU; slow: each kernel runs twice)"
        ),
        Backend::Cpu => {
            let why = device.fallback_reason().map_or_else(
                || "KTUNE_BACKEND=cpu".to_owned(),
                ktune::Error::without_advice,
            );
            println!("demo: no GPU in use ({why})");
            println!(
                "demo: running every kernel on the CPU backend (ktune's reference implementation)"
            );
        }
    }
    let repeats = match device.backend() {
        Backend::Cuda => 50,
        Backend::Cpu => 3,
        Backend::Vgpu => 1,
    };

    let t = kernels::layernorm::KERNEL.dim("T").unwrap_or(0) as usize;
    let d = kernels::layernorm::KERNEL.dim("D").unwrap_or(0) as usize;
    let f = kernels::ffn_up::KERNEL.dim("F").unwrap_or(0) as usize;
    let mut rng = StdRng::seed_from_u64(2026);
    let x = random(&mut rng, t * d, 1.0);
    let gamma: Vec<f32> = random(&mut rng, d, 0.2).iter().map(|g| 1.0 + g).collect();
    let beta = random(&mut rng, d, 0.1);
    let w1 = to_bf16(&random(&mut rng, d * f, 1.0 / (d as f32).sqrt()));
    let b1 = random(&mut rng, f, 0.1);
    let w2 = random(&mut rng, f * d, 1.0 / (f as f32).sqrt());
    let b2 = random(&mut rng, d, 0.1);

    let x_dev = device.upload(&x)?;
    let gamma_dev = device.upload(&gamma)?;
    let beta_dev = device.upload(&beta)?;
    let w1_dev = device.upload(&w1)?;
    let b1_dev = device.upload(&b1)?;
    let w2_dev = device.upload(&w2)?;
    let b2_dev = device.upload(&b2)?;
    let mut h_dev = device.alloc::<bf16>(t * d)?;
    let mut g_dev = device.alloc::<f32>(t * f)?;
    let mut y_dev = device.alloc::<f32>(t * d)?;
    let mut p_dev = device.alloc::<f32>(t * d)?;
    let mut rows = Vec::new();

    let (ran, elapsed) = time(&device, repeats, || {
        kernels::layernorm::run(&device, &x_dev, &gamma_dev, &beta_dev, &mut h_dev)
    })?;
    let h = device.download(&h_dev)?;
    let want = check::layernorm(
        &Matrix::new(t, d, to_f64(&x)),
        &to_f64(&gamma),
        &to_f64(&beta),
    );
    rows.push(row(
        &kernels::layernorm::KERNEL,
        ran,
        elapsed,
        &to_f64(&h),
        &want,
    ));

    let (ran, elapsed) = time(&device, repeats, || {
        kernels::ffn_up::run(&device, &h_dev, &w1_dev, &b1_dev, &mut g_dev)
    })?;
    let g = device.download(&g_dev)?;
    let mut want = check::matmul_bias(
        &Matrix::new(t, d, to_f64(&h)),
        &Matrix::new(d, f, to_f64(&w1)),
        &to_f64(&b1),
    );
    want.data.iter_mut().for_each(|v| *v = check::gelu(*v));
    rows.push(row(
        &kernels::ffn_up::KERNEL,
        ran,
        elapsed,
        &to_f64(&g),
        &want,
    ));

    let (ran, elapsed) = time(&device, repeats, || {
        kernels::ffn_down::run(&device, &g_dev, &w2_dev, &b2_dev, &x_dev, &mut y_dev)
    })?;
    let y = device.download(&y_dev)?;
    let mut want = check::matmul_bias(
        &Matrix::new(t, f, to_f64(&g)),
        &Matrix::new(f, d, to_f64(&w2)),
        &to_f64(&b2),
    );
    want.data
        .iter_mut()
        .zip(&x)
        .for_each(|(v, r)| *v += f64::from(*r));
    rows.push(row(
        &kernels::ffn_down::KERNEL,
        ran,
        elapsed,
        &to_f64(&y),
        &want,
    ));

    let (ran, elapsed) = time(&device, repeats, || {
        kernels::softmax::run(&device, &y_dev, &mut p_dev)
    })?;
    let p = device.download(&p_dev)?;
    let want = check::softmax(&Matrix::new(t, d, to_f64(&y)));
    rows.push(row(
        &kernels::softmax::KERNEL,
        ran,
        elapsed,
        &to_f64(&p),
        &want,
    ));

    Ok(report(&rows))
}

fn row(kernel: &'static KernelInfo, ran: Ran, time: Duration, got: &[f64], want: &Matrix) -> Row {
    Row {
        kernel,
        ran,
        time,
        error: check::relative_error(got, &want.data),
        tolerance: tolerance(kernel),
    }
}

/// Prints the table; whether every kernel was within its tolerance.
fn report(rows: &[Row]) -> bool {
    println!(
        "\n{:<10} {:<28} {:>10} {:>14} {:>13}  check",
        "kernel", "backend / variant", "time", "throughput", "max rel err"
    );
    let mut verified = 0;
    for r in rows {
        let seconds = r.time.as_secs_f64().max(1e-12);
        let intensity = r.kernel.flops as f64 / r.kernel.bytes.max(1) as f64;
        let throughput = if intensity > 8.0 {
            format!("{:.1} GFLOP/s", r.kernel.flops as f64 / seconds / 1e9)
        } else {
            format!("{:.1} GB/s", r.kernel.bytes as f64 / seconds / 1e9)
        };
        let ok = r.error <= r.tolerance;
        verified += usize::from(ok);
        println!(
            "{:<10} {:<28} {:>8.3}ms {:>14} {:>13.2e}  {} (≤ {:.0e})",
            r.kernel.name,
            r.ran.to_string(),
            seconds * 1e3,
            throughput,
            r.error,
            if ok { "ok" } else { "MISMATCH" },
            r.tolerance
        );
    }
    println!();
    if verified == rows.len() {
        println!("demo: {verified} kernels verified");
        true
    } else {
        println!(
            "demo: {} of {} kernels did not match the f64 implementation",
            rows.len() - verified,
            rows.len()
        );
        false
    }
}
