//! A producer warpgroup's waits end in a `trap` past their deadline
//! (`ktune_core::ptx::builder::MBARRIER_DEADLINE_NS`, 4 s) rather than hanging the
//! GPU: a bf16 product beside a producer (`producer = 1`),
//! lowered here by ktune-core for `sm_90a`, with every release of a ring
//! slot by its consumers removed. The producer fills the ring once, then
//! waits for a slot nobody releases; the launch must fail. GPU-only and
//! ignored without one, as explained in `gpu.rs`, except the check of the
//! edit. A trap leaves the CUDA context unusable, so this test runs in a
//! process of its own.

mod lowered;

use std::sync::LazyLock;
use std::time::Instant;

use ktune::__private::{KernelInfo, Variant, launch};
use ktune::prelude::*;
use ktune_core::ptx::builder::MBARRIER_DEADLINE_NS;
use ktune_core::ptx::inst::{Instr, Op};
use ktune_core::target::SmVersion;

const M: usize = 256;
const N: usize = 64;
const K: usize = 1024;

/// Two consumer warpgroups of 64 × 16 and a producer; `K`'s 16 tiles of
/// 64 through a ring of 4 slots, so the producer waits for a release
/// after its fourth fill.
const PRODUCER: &str = r#"{"class":"mma","block_m":128,"block_n":16,"block_k":64,"warp_m":64,"warp_n":16,"stages":4,"min_blocks":1,"swizzle":1,"wgmma":1,"producer":1}"#;

static KERNEL: KernelInfo = lowered::matmul_info!("bf16", 2);

/// The consumers' releases: their arrivals at `empty` (the only
/// `mbarrier.arrive`s; the producer's copies arrive at `full` by
/// `cp.async.mbarrier.arrive`).
fn is_release(instr: &Instr) -> bool {
    matches!(instr.op, Op::MbarrierArrive { .. })
}

static NEVER_RELEASED: LazyLock<Vec<Variant>> = LazyLock::new(|| {
    vec![lowered::matmul(
        "bf16",
        [M, N, K],
        PRODUCER,
        SmVersion::Sm90,
        |body| body.retain(|i| !is_release(i)),
    )]
});

#[test]
fn the_edit_removes_every_release_and_keeps_the_bounded_waits() {
    let variant = &NEVER_RELEASED[0];
    assert!(!variant.ptx.contains("mbarrier.arrive.shared"), "{variant}");
    assert!(
        variant.ptx.contains("cp.async.mbarrier.arrive.noinc"),
        "{variant}"
    );
    assert!(variant.ptx.contains("%globaltimer_lo"), "{variant}");
    assert!(variant.ptx.contains("\ttrap;"), "{variant}");
}

#[test]
#[ignore = "needs a GPU: cargo test -p ktune -- --include-ignored"]
fn a_ring_slot_never_released_traps_instead_of_hanging() {
    let device = Device::cuda(0).unwrap_or_else(|e| panic!("this test needs a GPU: {e}"));
    let cc = device.compute_capability().unwrap();
    assert_eq!(cc, (9, 0), "this test needs a Hopper GPU (sm_90): {device}");
    let stream = device.stream().unwrap();
    let a = vec![bf16::from_f32(1.0); M * K];
    let b = vec![bf16::from_f32(1.0); K * N];
    let a_gpu = stream.clone_htod(&a).unwrap();
    let b_gpu = stream.clone_htod(&b).unwrap();
    let mut out = stream.alloc_zeros::<f32>(M * N).unwrap();
    let started = Instant::now();
    let failed = launch(
        stream,
        &KERNEL,
        &NEVER_RELEASED,
        &[&a_gpu, &b_gpu],
        &mut out,
    )
    .map_err(|e| e.to_string())
    .and_then(|_| stream.clone_dtoh(&out).map_err(|e| e.to_string()))
    .expect_err("a kernel whose producer waits forever must fail");
    let waited = started.elapsed();
    eprintln!("the launch failed after {waited:.1?}: {failed}");
    // Failed by the producer's trap, past its deadline, not before running
    // (a variant refused at launch, PTX the driver rejects).
    assert!(
        waited.as_secs_f64() >= 0.9 * MBARRIER_DEADLINE_NS as f64 / 1e9,
        "failed after {waited:.1?}, before the deadline: {failed}"
    );
}
