//! A persistent warpgroup variant (`persistent = 1`) on a Hopper GPU: the
//! launcher sizes its grid to the blocks the GPU holds at once, fewer than
//! the variant's tiles (each block's 40 KiB of shared memory lets an SM
//! hold 5 at most, 660 on 132 SMs, against 1,408 tiles), and every tile is
//! still computed. The kernel is a bf16 product with edges along `M`, `N`
//! and `K`, lowered here by ktune-core for `sm_90a`. The same product on
//! persistent blocks with a producer warpgroup (`producer = 1`: two
//! warpgroups multiply 128 × 16 tiles, a third copies, memory barriers
//! hand the ring's slots over, `setmaxnreg` moves registers), and in
//! ping-pong (`producer = 2`: two warpgroups take 64 × 16 tiles in turn
//! beside the producer) is checked the same way. GPU-only and ignored without one, as explained in `gpu.rs`,
//! except the check that the variants are what the GPU test needs.

mod lowered;

use std::sync::LazyLock;

use ktune::__private::{KernelInfo, Variant};
use ktune::prelude::*;
use ktune_core::target::SmVersion;

const M: usize = 1000;
const N: usize = 1400;
const K: usize = 88;

/// 16 × 88 warpgroup tiles of 64 × 16, the last row and column partial;
/// `K`'s 2 tiles of 64 (the last partial) through a ring of 4 slots, one
/// held.
const SCHEDULE: &str = r#"{"class":"mma","block_m":64,"block_n":16,"block_k":64,"warp_m":64,"warp_n":16,"stages":4,"swizzle":1,"wgmma":1,"persistent":1}"#;

static KERNEL: KernelInfo = lowered::matmul_info!("bf16", 2);

/// 8 × 88 tiles of 128 × 16 for two consumer warpgroups of 64 × 16 and
/// a producer, over the same ring.
const PRODUCER: &str = r#"{"class":"mma","block_m":128,"block_n":16,"block_k":64,"warp_m":64,"warp_n":16,"stages":4,"min_blocks":1,"swizzle":1,"wgmma":1,"persistent":1,"producer":1}"#;

fn variants(schedule: &'static str) -> Vec<Variant> {
    vec![lowered::matmul(
        "bf16",
        [M, N, K],
        schedule,
        SmVersion::Sm90,
        |_| {},
    )]
}

static VARIANTS: LazyLock<Vec<Variant>> = LazyLock::new(|| variants(SCHEDULE));

static PRODUCER_VARIANTS: LazyLock<Vec<Variant>> = LazyLock::new(|| variants(PRODUCER));

/// The tiles of [`SCHEDULE`] taken in turn by two warpgroups beside a
/// producer, over the same ring.
const PONG: &str = r#"{"class":"mma","block_m":64,"block_n":16,"block_k":64,"warp_m":64,"warp_n":16,"stages":4,"min_blocks":1,"swizzle":1,"wgmma":1,"persistent":1,"producer":2}"#;

static PONG_VARIANTS: LazyLock<Vec<Variant>> = LazyLock::new(|| variants(PONG));

#[test]
fn the_variant_has_more_tiles_than_an_h100_or_h200_holds_blocks() {
    let variant = &VARIANTS[0];
    assert!(variant.persistent, "{variant}");
    assert_eq!(variant.grid, [16 * 88, 1, 1], "{variant}");
    let limits = SmVersion::Sm90.limits();
    let per_sm =
        limits.shared_per_sm / (variant.dynamic_shared_bytes + limits.reserved_shared_per_block);
    assert_eq!(per_sm, 5, "{variant}");
    assert!(variant.grid[0] > 2 * per_sm * limits.sm_count, "{variant}");
    let fed = &PRODUCER_VARIANTS[0];
    assert!(fed.persistent, "{fed}");
    assert_eq!(fed.grid, [8 * 88, 1, 1], "{fed}");
    assert_eq!(fed.block, [384, 1, 1], "{fed}");
    assert!(fed.grid[0] > 2 * limits.sm_count, "{fed}");
    let pong = &PONG_VARIANTS[0];
    assert!(pong.persistent, "{pong}");
    assert_eq!(pong.grid, [16 * 88, 1, 1], "{pong}");
    assert_eq!(pong.block, [384, 1, 1], "{pong}");
}

#[test]
#[ignore = "needs a GPU: cargo test -p ktune -- --include-ignored"]
fn a_persistent_variant_computes_every_tile() {
    let device = Device::cuda(0).unwrap_or_else(|e| panic!("this test needs a GPU: {e}"));
    let cc = device.compute_capability().unwrap();
    assert_eq!(cc, (9, 0), "this test needs a Hopper GPU (sm_90): {device}");
    let stream = device.stream().unwrap();
    for variants in [&*VARIANTS, &*PRODUCER_VARIANTS, &*PONG_VARIANTS] {
        for seed in 0..3 {
            let variant = lowered::launch_exact(stream, (&KERNEL, variants), [M, N, K], seed);
            assert!(variant.persistent);
        }
    }
}
