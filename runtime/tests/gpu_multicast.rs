//! Warpgroup variants whose blocks pair up in clusters that share B's
//! tiles (`cluster_m = 2`) on a Hopper GPU: each block's producer thread
//! copies its own A tile and half of each of B's, multicast by the tensor
//! memory accelerator to both blocks of the cluster, and each block's
//! consumers release every ring slot in both. The product is
//! `gpu_tma.rs`'s, bf16 with edges along `M`, `N` and `K`; 1000 rows in
//! tiles of 128 and 64 make 4 and 8 clusters along `M`, the last block
//! of each pair short of rows or past them all; a block per tile, or
//! persistent clusters in ping-pong. Every result exact. In a
//! binary of its own, so that a GPU machine's run can tell a failure of
//! these from one of tensor-map copies in one block (`gpu-bundle`'s
//! `run.sh` then leaves cluster schedules out of the benchmark).
//! GPU-only and ignored without one, as explained in `gpu.rs`, except
//! the check of what the variants declare.

mod lowered;

use std::sync::LazyLock;

use ktune::__private::{KernelInfo, Variant};
use ktune::prelude::*;
use ktune_core::target::SmVersion;

const M: usize = 1000;
const N: usize = 1400;
const K: usize = 88;

static KERNEL: KernelInfo = lowered::matmul_info!("bf16", 2);

/// Tiles of 128 × 16 for two consumer warpgroups of 64 × 16 and a
/// producer, `K`'s 2 tiles of 64 (the last partial) through 4 slots;
/// a block per tile, two to a cluster.
const WIDE: &str = r#"{"class":"mma","block_m":128,"block_n":16,"block_k":64,"warp_m":64,"warp_n":16,"stages":4,"min_blocks":1,"swizzle":1,"wgmma":1,"producer":1,"tma":1,"cluster_m":2}"#;

/// Tiles of 64 × 64 for one consumer warpgroup, `K` in tiles of 32
/// through 2 slots: every slot refilled, in both blocks, after both
/// released it.
const DEEP: &str = r#"{"class":"mma","block_m":64,"block_n":64,"block_k":32,"warp_m":64,"warp_n":64,"stages":2,"min_blocks":1,"swizzle":1,"wgmma":1,"producer":1,"tma":1,"cluster_m":2}"#;

/// Tiles of 64 × 16 taken in turn by two warpgroups beside a producer,
/// over persistent clusters: the grid is as many clusters as the GPU
/// holds at once.
const PONG: &str = r#"{"class":"mma","block_m":64,"block_n":16,"block_k":64,"warp_m":64,"warp_n":16,"stages":4,"min_blocks":1,"swizzle":1,"wgmma":1,"persistent":1,"producer":2,"tma":1,"cluster_m":2}"#;

static VARIANTS: LazyLock<[Vec<Variant>; 3]> = LazyLock::new(|| {
    [WIDE, DEEP, PONG].map(|schedule| {
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
fn each_variant_declares_its_clusters_and_multicasts_b() {
    for variant in VARIANTS.iter().map(|v| &v[0]) {
        assert!(
            variant.ptx.contains("\n.reqnctapercluster 2, 1, 1\n"),
            "{variant}"
        );
        assert!(variant.ptx.contains(".multicast::cluster "), "{variant}");
        assert_eq!(variant.grid[0] % 2, 0, "{variant}");
        assert_eq!(variant.cluster, 2, "{variant}");
        assert!(variant.arch_specific, "{variant}");
    }
}

#[test]
#[ignore = "needs a GPU: cargo test -p ktune -- --include-ignored"]
fn clusters_share_b_s_tiles_by_multicast() {
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
