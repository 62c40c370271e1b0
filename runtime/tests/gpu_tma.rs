//! Warpgroup variants whose producer copies by tensor maps (`tma = 1`) on
//! a Hopper GPU: one thread of the producer warpgroup copies each ring
//! slot's tiles with the tensor memory accelerator, through a map of each
//! operand that the launcher has the driver encode for the inputs of each
//! launch. The product is `gpu_persistent.rs`'s, bf16 with edges along
//! `M`, `N` and `K` (which the copies zero-fill), on persistent blocks
//! with a producer (`producer = 1`) and in ping-pong (`producer = 2`);
//! every result exact. In a binary of its own, so that a GPU machine's
//! run can tell a failure of these from one of the producer's `cp.async`
//! form (`gpu-bundle`'s `run.sh` then leaves tensor-map schedules out of
//! the benchmark). GPU-only and ignored without one, as explained in
//! `gpu.rs`, except the check that the variants take the maps.

mod lowered;

use std::sync::LazyLock;

use ktune::__private::{KernelInfo, Variant};
use ktune::prelude::*;
use ktune_core::target::SmVersion;

const M: usize = 1000;
const N: usize = 1400;
const K: usize = 88;

static KERNEL: KernelInfo = lowered::matmul_info!("bf16", 2);

/// 8 × 88 tiles of 128 × 16 for two consumer warpgroups of 64 × 16 and a
/// producer; `K`'s 2 tiles of 64 (the last partial) through 4 slots.
const PRODUCER: &str = r#"{"class":"mma","block_m":128,"block_n":16,"block_k":64,"warp_m":64,"warp_n":16,"stages":4,"min_blocks":1,"swizzle":1,"wgmma":1,"persistent":1,"producer":1,"tma":1}"#;

/// 16 × 88 tiles of 64 × 16 taken in turn by two warpgroups beside a
/// producer, over the same ring.
const PONG: &str = r#"{"class":"mma","block_m":64,"block_n":16,"block_k":64,"warp_m":64,"warp_n":16,"stages":4,"min_blocks":1,"swizzle":1,"wgmma":1,"persistent":1,"producer":2,"tma":1}"#;

static VARIANTS: LazyLock<[Vec<Variant>; 2]> = LazyLock::new(|| {
    [PRODUCER, PONG].map(|schedule| {
        vec![lowered::matmul(
            "bf16",
            [M, N, K],
            schedule,
            SmVersion::Sm90,
            |_| {},
        )]
    })
});

#[test]
fn each_variant_takes_a_tensor_map_of_either_operand() {
    for variant in VARIANTS.iter().map(|v| &v[0]) {
        let params: Vec<usize> = variant.tensor_maps.iter().map(|m| m.param).collect();
        assert_eq!(params, [0, 1], "{variant}");
        assert!(
            variant.ptx.contains("\tcp.async.bulk.tensor.2d."),
            "{variant}"
        );
        assert!(variant.persistent && variant.arch_specific, "{variant}");
        assert_eq!(variant.block, [384, 1, 1], "{variant}");
    }
}

#[test]
#[ignore = "needs a GPU: cargo test -p ktune -- --include-ignored"]
fn tensor_map_copies_feed_every_tile() {
    let device = Device::cuda(0).unwrap_or_else(|e| panic!("this test needs a GPU: {e}"));
    let cc = device.compute_capability().unwrap();
    assert_eq!(cc, (9, 0), "this test needs a Hopper GPU (sm_90): {device}");
    let stream = device.stream().unwrap();
    for variants in VARIANTS.iter() {
        for seed in 0..3 {
            lowered::launch_exact(stream, (&KERNEL, variants), [M, N, K], seed);
        }
    }
}
