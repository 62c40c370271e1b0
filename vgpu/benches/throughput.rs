//! Instructions per second of the virtual GPU on a generic-schedule row sum
//! (loads, adds and loop control) and on a shuffle reduction.
//!
//! `cargo bench -p ktune-vgpu`; `KTUNE_VGPU_BENCH_SECONDS` sets how long
//! each case runs (default 2; 0 runs each case once, for profilers).

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::Instant;

use ktune_core::SmVersion;
use ktune_core::lower::lower;
use ktune_core::ptx::Builder;
use ktune_core::ptx::inst::{ArithOp, Op, Operand, RegClass, ShflMode, Special};
use ktune_core::schedule::Schedule;

fn measure(name: &str, mut run: impl FnMut() -> ktune_vgpu::Stats) {
    let budget: f64 = std::env::var("KTUNE_VGPU_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let start = Instant::now();
    let mut instructions = 0;
    let mut runs = 0;
    while runs == 0 || start.elapsed().as_secs_f64() < budget {
        instructions += run().instructions;
        runs += 1;
    }
    let seconds = start.elapsed().as_secs_f64();
    println!(
        "{name:<28} {runs:>5} runs  {:>8.1} M instructions/s  ({instructions} instructions)",
        instructions as f64 / seconds / 1e6
    );
}

fn main() {
    let (rows, cols) = (512, 512);
    let kernel = common::row_sum(rows, cols);
    let lowered = lower(&kernel, &Schedule::Generic { block: 128 }, SmVersion::Sm80)
        .expect("the generic schedule lowers a row sum");
    let x = common::values((rows * cols) as usize, 1);
    measure("generic row sum 512x512", || {
        let (_, stats) = ktune_vgpu::run_f32(&lowered.ptx, &lowered.launch, &[&x], rows as usize)
            .expect("row sum runs");
        stats
    });

    let bias = common::add_bias(256, 256, ktune_core::DType::F32);
    let lowered_bias = lower(&bias, &Schedule::Generic { block: 128 }, SmVersion::Sm80)
        .expect("the generic schedule lowers a bias add");
    let b = common::values(256, 2);
    let xb = common::values(256 * 256, 3);
    measure("generic add bias 256x256", || {
        let (_, stats) = ktune_vgpu::run_f32(
            &lowered_bias.ptx,
            &lowered_bias.launch,
            &[&xb, &b],
            256 * 256,
        )
        .expect("bias add runs");
        stats
    });

    // 32 rounds of a five-step butterfly reduction per warp: shuffle-bound.
    let mut bld = Builder::new();
    let lane = bld.special(Special::LaneId);
    let acc = bld.u32_op(ArithOp::Add, lane, Operand::Int(0));
    for _ in 0..32 {
        for offset in [16, 8, 4, 2, 1] {
            let other = bld.reg(RegClass::B32);
            bld.push(Op::Shfl {
                mode: ShflMode::Bfly,
                dst: other,
                src: acc,
                lane: Operand::Int(offset),
                clamp: 31,
            });
            bld.push(Op::Arith {
                op: ArithOp::Xor,
                ty: ktune_core::ptx::inst::Ty::B32,
                dst: acc,
                a: acc.into(),
                b: other.into(),
            });
        }
    }
    let shuffles = bld.finish("shuffles".into(), 0, 1024, 0);
    let launch = ktune_core::lower::Launch {
        grid: [8, 1, 1],
        block: [1024, 1, 1],
        dynamic_shared_bytes: 0,
        workspace_bytes: 0,
        persistent: false,
        registers: 0,
    };
    measure("shuffle butterfly 8x1024", || {
        ktune_vgpu::run(&shuffles, &launch, &mut []).expect("shuffles run")
    });
}
