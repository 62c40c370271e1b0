//! Thread-block clusters (sm_90): the window through which a block reads
//! the shared memory of the other blocks of its cluster, and through
//! which its threads arrive at their memory barriers.
//!
//! `mapa` turns an address in the block's own shared window into one in
//! the cluster's window: block rank `r`'s byte at window offset `o` is at
//! [`CLUSTER_BASE`]` + r · 2^24 + o`, a fake address like
//! [`SHARED_BASE`]'s, so that one used as the other is caught. An address
//! in the block's own window also reaches its own shared memory through
//! `ld.shared::cluster`, as it does on the GPU.

use crate::fault::{ClusterProblem, FaultKind};
use crate::shared::SHARED_BASE;

/// Where the cluster window starts: block rank 0's shared memory.
const CLUSTER_BASE: u64 = 0x4000_0000;
/// Bytes between two blocks' shared memory in the cluster window, more
/// than any block's window.
const BLOCK_STRIDE: u64 = 1 << 24;

/// `mapa`: the cluster-window address of shared address `src` in the
/// shared memory of block `rank` of a cluster of `blocks`, whose windows
/// are `window` bytes.
pub(crate) fn map(src: u64, rank: u64, blocks: u32, window: usize) -> Result<u64, FaultKind> {
    let offset = src.wrapping_sub(u64::from(SHARED_BASE));
    if src < u64::from(SHARED_BASE) || offset > window as u64 || rank >= u64::from(blocks) {
        // `mapa.u32`'s operands are 32-bit, and so is a shared window.
        return Err(FaultKind::Cluster {
            problem: ClusterProblem::Mapa {
                addr: src as u32,
                rank: rank as u32,
                blocks,
                window: window as u32,
            },
        });
    }
    Ok(CLUSTER_BASE + rank * BLOCK_STRIDE + offset)
}

/// Whose shared memory a cluster-window address reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// The reading block's own, at this shared address.
    Own(u64),
    /// Block `rank`'s, at this shared address.
    Block { rank: u32, addr: u64 },
}

/// The block and shared address `addr` reaches in a cluster of `blocks`;
/// `None` when it is in no block's window.
pub(crate) fn target(addr: u64, blocks: u32) -> Option<Target> {
    let shared = u64::from(SHARED_BASE);
    if (shared..shared + BLOCK_STRIDE).contains(&addr) {
        return Some(Target::Own(addr));
    }
    let rank = addr.checked_sub(CLUSTER_BASE)? / BLOCK_STRIDE;
    let rank = u32::try_from(rank).ok().filter(|r| *r < blocks)?;
    let offset = (addr - CLUSTER_BASE) % BLOCK_STRIDE;
    Some(Target::Block {
        rank,
        addr: shared + offset,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_and_back() {
        let src = u64::from(SHARED_BASE) + 40;
        let mapped = map(src, 3, 4, 64).expect("inside");
        assert_eq!(
            target(mapped, 4),
            Some(Target::Block { rank: 3, addr: src })
        );
        assert_eq!(target(src, 4), Some(Target::Own(src)));
        assert_eq!(target(mapped, 3), None);
        assert_eq!(target(12, 4), None);
        let outside = |src, rank| match map(src, rank, 4, 64) {
            Err(FaultKind::Cluster {
                problem: ClusterProblem::Mapa { .. },
            }) => {}
            other => panic!("{src:#x} rank {rank}: {other:?}"),
        };
        outside(src, 4);
        outside(u64::from(SHARED_BASE) + 65, 0);
        outside(40, 0);
    }
}
