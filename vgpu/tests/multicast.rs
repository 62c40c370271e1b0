//! Clusters whose blocks share tiles by multicast tensor copies
//! (`cluster_m = 2`), on the virtual GPU: the lowered kernel runs (its
//! results are checked in `producer.rs`), and each edit that breaks its
//! protocol between the two blocks is a fault that names it: a barrier
//! init not released to the cluster, no cluster barrier between the inits
//! and the other block's use, consumers that release only their own
//! block's slots (the other block's producer then copies over tiles its
//! `wgmma`s may still read), a multicast mask outside the cluster, a
//! slot neither block can release, and a block that exits before the
//! other's last arrivals at its barriers.

mod common;

use common::gemm;
use ktune_core::lower::{Lowered, lower};
use ktune_core::ptx::inst::{Op, Operand, Ty};
use ktune_core::schedule::{MmaTiles, Schedule};
use ktune_core::target::SmVersion;
use ktune_vgpu::verify::Reference;
use ktune_vgpu::{ClusterProblem, Fault, FaultKind, MbarrierProblem};

fn shared_tiles() -> MmaTiles {
    MmaTiles {
        block_m: 64,
        block_n: 64,
        block_k: 32,
        warp_m: 64,
        warp_n: 64,
        stages: 2,
        group_m: 1,
        split_k: 1,
        min_blocks: 1,
        swizzle: 1,
        prefetch: 0,
        wgmma: 1,
        tail_split: 1,
        persistent: 0,
        producer: 1,
        tma: 1,
        cluster_m: 2,
    }
}

fn reference() -> Reference {
    Reference::new(&gemm("bf16", false, false, (256, 128, 256)), 7)
}

fn lowered(reference: &Reference) -> Lowered {
    lower(
        reference.kernel(),
        &Schedule::Mma(shared_tiles()),
        SmVersion::Sm90,
    )
    .expect("lowers")
}

/// Runs `edit` of the lowered kernel; its fault.
fn fault_of(edit: impl FnOnce(&mut Lowered)) -> Fault {
    let reference = reference();
    let mut kernel = lowered(&reference);
    edit(&mut kernel);
    reference
        .run_virtual(&kernel)
        .expect_err("the edited kernel faults")
}

#[test]
fn the_lowered_cluster_runs_as_written() {
    let reference = reference();
    let kernel = lowered(&reference);
    let (bytes, stats) = reference.run_virtual(&kernel).expect("runs");
    reference.compare(&bytes).expect("matches the reference");
    // A's rows are read once for each of the 2 columns of tiles; B's,
    // once for each of the 2 clusters' worth of rows (4 tiles of 64
    // rows), where each block reading its own would read them 4 times.
    assert_eq!(
        stats.global_load_bytes,
        2 * (256 * 256 * 2) + 2 * (256 * 128 * 2)
    );
}

#[test]
fn barrier_inits_must_be_released_to_the_cluster() {
    let fault = fault_of(|k| {
        k.ptx.body.retain(|i| i.op != Op::FenceMbarrierInit);
    });
    assert!(
        matches!(
            fault.kind,
            FaultKind::Cluster {
                problem: ClusterProblem::UnreleasedInit { .. }
            }
        ),
        "{fault}"
    );
    assert!(fault.to_string().contains("fence.mbarrier_init"), "{fault}");
}

/// With the block's barrier in place of the cluster's, nothing orders one
/// block's inits before the other's copies and arrivals there.
#[test]
fn a_cluster_barrier_orders_the_inits_before_the_other_block_s_use() {
    let fault = fault_of(|k| {
        let body = &mut k.ptx.body;
        let at = body
            .iter()
            .position(|i| i.op == Op::ClusterArrive)
            .expect("a cluster barrier");
        body[at].op = Op::BarSync;
        body.remove(at + 1);
    });
    // Block 1's thread 0 wrote the barrier's bytes by its init.
    block_0_s_copy_races_block_1_s_thread_0(&fault, true);
}

/// Each consumer warp arrives at block 0's `empty` barrier twice instead
/// of once at each block's: block 0's phases complete with no word from
/// block 1, whose tiles block 0's producer then copies over while block
/// 1's `wgmma`s may still read them.
#[test]
fn consumers_must_release_the_slots_of_both_blocks() {
    let fault = fault_of(|k| {
        for i in &mut k.ptx.body {
            if let Op::Mapa { rank, .. } = &mut i.op
                && *rank == Operand::Int(1)
            {
                *rank = Operand::Int(0);
            }
        }
    });
    // Block 0's producer copies B's next tile into block 1's slot over
    // what block 1's first warpgroup's `wgmma`s read.
    block_0_s_copy_races_block_1_s_thread_0(&fault, false);
}

/// Checks that `fault` is a multicast copy's landing in block 1 racing
/// with what block 1's thread 0 (or its warpgroup) wrote or read before.
fn block_0_s_copy_races_block_1_s_thread_0(fault: &Fault, wrote: bool) {
    match fault.kind {
        FaultKind::Cluster {
            problem:
                ClusterProblem::RemoteRace {
                    rank: 1,
                    other_thread: [0, 0, 0],
                    other_wrote,
                    ..
                },
        } if other_wrote == wrote => {}
        _ => panic!("expected a race with block 1's thread 0 (wrote: {wrote}): {fault}"),
    }
    assert_eq!(fault.block, [0, 0, 0], "{fault}");
    assert!(
        fault.instruction.starts_with("cp.async.bulk.tensor")
            && fault.instruction.contains("multicast"),
        "{fault}"
    );
}

#[test]
fn a_multicast_mask_names_blocks_of_the_cluster() {
    let fault = fault_of(|k| {
        for i in &mut k.ptx.body {
            if let Op::Mov {
                ty: Ty::B16, src, ..
            } = &mut i.op
                && *src == Operand::Int(0b11)
            {
                *src = Operand::Int(0b101);
            }
        }
    });
    assert_eq!(
        fault.kind,
        FaultKind::Cluster {
            problem: ClusterProblem::Mask {
                mask: 0b101,
                blocks: 2
            }
        },
        "{fault}"
    );
}

/// With each slot's `empty` barrier expecting one arrival more than both
/// blocks' consumer warps give (8, of one warpgroup each), no slot is
/// released: each block's producer waits for the other block too, its
/// consumers for fills that never come, and the cluster, none of whose
/// blocks can go on, reports a wait that can never end, with what its
/// phase still misses (here block 0's first consumer's, at a `full`
/// barrier the producer never arrives at again).
#[test]
fn a_slot_neither_block_can_release_deadlocks_the_cluster() {
    let fault = fault_of(|k| {
        for i in &mut k.ptx.body {
            if let Op::MbarrierInit { count, .. } = &mut i.op
                && *count == Operand::Int(8)
            {
                *count = Operand::Int(9);
            }
        }
    });
    match fault.kind {
        FaultKind::Mbarrier {
            problem: MbarrierProblem::Deadlock { pending: 1, .. },
            ..
        } => {}
        _ => panic!("expected a deadlock at a memory barrier: {fault}"),
    }
    assert!(
        fault.instruction.starts_with("mbarrier.try_wait"),
        "{fault}"
    );
    assert!(fault.to_string().contains("deadlock"), "{fault}");
}

/// A producer whose last loop waits for one fill fewer than the ring's
/// two (the compare ending it takes 1 for 2) lets its block exit while
/// the other block's consumers may still release the last fill there: a
/// remote arrival that no wait of the exiting block was ordered after.
#[test]
fn a_block_exits_only_after_the_other_block_s_last_arrivals() {
    let fault = fault_of(|k| {
        let tail = k
            .ptx
            .body
            .iter()
            .rposition(|i| {
                matches!(
                    i.op,
                    Op::Setp {
                        b: Operand::Int(2),
                        ..
                    }
                )
            })
            .expect("the tail's compare");
        if let Op::Setp { b, .. } = &mut k.ptx.body[tail].op {
            *b = Operand::Int(1);
        }
    });
    assert!(
        matches!(
            fault.kind,
            FaultKind::Cluster {
                problem: ClusterProblem::ExitBeforeArrival { rank: 1, .. }
            }
        ),
        "{fault}"
    );
    assert_eq!(fault.block, [0, 0, 0], "{fault}");
}
