//! Thread-block clusters: blocks reading each other's shared memory
//! between cluster barriers, and the missing barriers, early exits and
//! bad addresses that break it.

mod common;

use common::store_at_tid;
use ktune_core::lower::Launch;
use ktune_core::ptx::inst::{Addr, ArithOp, Op, Operand, Reg, RegClass, Space, Special, Ty};
use ktune_core::ptx::{Builder, Kernel};
use ktune_vgpu::{BlockOrder, ClusterProblem, Config, Fault, FaultKind, Memory};

const THREADS: u32 = 64;
const CLUSTER: u32 = 4;
const CLUSTERS: u32 = 3;

/// How the exchange is broken, if at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exchange {
    Correct,
    /// No cluster barrier between the writes and the other blocks' reads.
    NoBarrierBeforeReads,
    /// No cluster barrier between the reads and the exit.
    NoBarrierBeforeExit,
    /// Each block writes its slot again after the others read it.
    WriteAfterRead,
    /// Each thread waits at the cluster barrier without arriving.
    WaitWithoutArrive,
    /// Thread 0 of every block exits before the first cluster barrier.
    EarlyExit,
    /// The read maps a rank outside the cluster.
    RankOutside,
    /// Each block writes its slot after arriving at the barrier the reads
    /// wait at: the barrier does not publish it.
    WriteAfterArrive,
    /// Each thread reads after arriving at the last barrier: nothing
    /// orders the read before the other block's exit.
    ReadAfterLastArrive,
    /// The first warp waits at the cluster barrier before a `bar.sync`,
    /// the second after it, having arrived before: no deadlock.
    WaitsAroundBarSync,
}

/// Every thread writes `smem[tid] = 1000 · ctaid + tid`; after a cluster
/// barrier it reads `smem[tid]` of the block one rank up in its cluster
/// (wrapping) and stores it to `out[ctaid · THREADS + tid]`; a second
/// barrier, split into its arrive and its wait around the store, keeps the
/// block's shared memory alive until every block has read it.
fn exchange(how: Exchange) -> Kernel {
    let mut b = Builder::new();
    let out = b.param_ptr(0);
    let tid = b.special(Special::TidX);
    let ctaid = b.special(Special::CtaidX);
    let smem = b.shared_base();
    let mine = b.u32_mad(tid, Operand::Int(4), smem);
    let value = b.u32_mad(ctaid, Operand::Int(1000), tid);
    let store = |b: &mut Builder, v: Reg| {
        b.push(Op::St {
            space: Space::Shared,
            ty: Ty::B32,
            addr: Addr {
                base: mine,
                offset: 0,
            },
            srcs: vec![v.into()],
        })
    };
    if how != Exchange::WriteAfterArrive {
        store(&mut b, value);
    }
    let done = b.label();
    if how == Exchange::EarlyExit {
        let first = b.setp(
            ktune_core::ptx::inst::Cmp::Eq,
            Ty::U32,
            tid,
            Operand::Int(0),
        );
        b.bra_if(first, false, done);
    }
    match how {
        Exchange::NoBarrierBeforeReads => {}
        Exchange::WaitWithoutArrive => b.push(Op::ClusterWait),
        Exchange::WriteAfterArrive => {
            b.push(Op::ClusterArrive);
            store(&mut b, value);
            b.push(Op::ClusterWait);
        }
        Exchange::WaitsAroundBarSync => {
            b.push(Op::ClusterArrive);
            let warp = b.u32_op(ArithOp::Shr, tid, Operand::Int(5));
            let first = b.setp(
                ktune_core::ptx::inst::Cmp::Eq,
                Ty::U32,
                warp,
                Operand::Int(0),
            );
            b.push_guarded(first, false, Op::ClusterWait);
            b.push(Op::BarSync);
            b.push_guarded(first, true, Op::ClusterWait);
        }
        _ => {
            b.push(Op::ClusterArrive);
            b.push(Op::ClusterWait);
        }
    }
    let rank = b.u32_op(ArithOp::Rem, ctaid, Operand::Int(i64::from(CLUSTER)));
    let next = b.u32_op(ArithOp::Add, rank, Operand::Int(1));
    let next = match how {
        Exchange::RankOutside => next,
        _ => b.u32_op(ArithOp::Rem, next, Operand::Int(i64::from(CLUSTER))),
    };
    let theirs = b.reg(RegClass::B32);
    b.push(Op::Mapa {
        dst: theirs,
        src: mine,
        rank: next.into(),
    });
    if how == Exchange::ReadAfterLastArrive {
        b.push(Op::ClusterArrive);
    }
    let read = b.reg(RegClass::B32);
    b.push(Op::Ld {
        space: Space::SharedCluster,
        ty: Ty::B32,
        dsts: vec![read],
        addr: Addr {
            base: theirs,
            offset: 0,
        },
    });
    if how == Exchange::WriteAfterRead {
        store(&mut b, read);
    }
    if !matches!(
        how,
        Exchange::NoBarrierBeforeExit | Exchange::ReadAfterLastArrive
    ) {
        b.push(Op::ClusterArrive);
    }
    let index = b.u32_mad(ctaid, Operand::Int(i64::from(THREADS)), tid);
    store_at_tid(&mut b, out, index, read);
    if how != Exchange::NoBarrierBeforeExit {
        b.push(Op::ClusterWait);
    }
    b.place(done);
    let mut kernel = b.finish("exchange".into(), 1, THREADS, THREADS * 4);
    kernel.cluster_blocks = CLUSTER;
    kernel
}

fn launch(blocks: u32) -> Launch {
    Launch {
        grid: [blocks, 1, 1],
        block: [THREADS, 1, 1],
        dynamic_shared_bytes: THREADS * 4,
        workspace_bytes: 0,
        persistent: false,
        registers: 0,
    }
}

fn run(kernel: &Kernel, order: BlockOrder) -> Result<(Vec<u32>, ktune_vgpu::Stats), Fault> {
    let blocks = CLUSTER * CLUSTERS;
    let mut memory = Memory::new(vec![vec![0u8; (blocks * THREADS * 4) as usize]]);
    let config = Config::default().block_order(order);
    let stats = ktune_vgpu::run_with(kernel, &launch(blocks), &mut memory, &config)?;
    let out = memory.into_buffers().remove(0);
    let words = out
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Ok((words, stats))
}

fn problem(how: Exchange) -> ClusterProblem {
    match run(&exchange(how), BlockOrder::Index) {
        Err(Fault {
            kind: FaultKind::Cluster { problem },
            ..
        }) => problem,
        other => panic!("{how:?} should break the cluster's rules, got {other:?}"),
    }
}

#[test]
fn blocks_of_a_cluster_read_each_others_shared_memory() {
    for order in [BlockOrder::Index, BlockOrder::Shuffled(7)] {
        let (got, stats) = run(&exchange(Exchange::Correct), order).expect("a correct exchange");
        for block in 0..CLUSTER * CLUSTERS {
            let partner = block - block % CLUSTER + (block % CLUSTER + 1) % CLUSTER;
            for t in 0..THREADS {
                assert_eq!(
                    got[(block * THREADS + t) as usize],
                    1000 * partner + t,
                    "block {block} thread {t} ({order:?})"
                );
            }
        }
        assert_eq!(stats.blocks, u64::from(CLUSTER * CLUSTERS));
        // Two cluster barriers, counted once per block.
        assert_eq!(stats.barriers, 2 * u64::from(CLUSTER * CLUSTERS));
    }
}

#[test]
fn a_read_before_the_cluster_barrier_is_unordered() {
    for how in [Exchange::NoBarrierBeforeReads, Exchange::WriteAfterArrive] {
        match problem(how) {
            ClusterProblem::Unordered { rank, offset, .. } => {
                assert_eq!((rank, offset), (1, 0), "{how:?}");
            }
            other => panic!("{how:?}: {other:?}"),
        }
    }
}

#[test]
fn a_wait_may_come_after_a_bar_sync_once_arrived() {
    let (got, _) = run(&exchange(Exchange::WaitsAroundBarSync), BlockOrder::Index)
        .expect("no deadlock: every thread arrived before the bar.sync");
    // Block 0's thread 33 reads block 1's value for it.
    assert_eq!(got[33], 1033);
}

#[test]
fn a_block_must_not_exit_while_others_may_read_it() {
    for how in [Exchange::NoBarrierBeforeExit, Exchange::ReadAfterLastArrive] {
        let p = problem(how);
        assert!(
            matches!(
                p,
                ClusterProblem::ExitWhileRead { .. } | ClusterProblem::ReadAfterExit { .. }
            ),
            "{how:?}: {p:?}"
        );
    }
}

#[test]
fn a_write_after_another_blocks_read_races() {
    assert!(matches!(
        problem(Exchange::WriteAfterRead),
        ClusterProblem::Overwrite { offset: 0, .. }
    ));
}

#[test]
fn the_barrier_protocol_is_checked() {
    assert_eq!(
        problem(Exchange::WaitWithoutArrive),
        ClusterProblem::WaitWithoutArrive
    );
    match problem(Exchange::EarlyExit) {
        ClusterProblem::Deadlock {
            other_thread,
            other_pc: None,
            ..
        } => assert_eq!(other_thread, [0, 0, 0]),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        problem(Exchange::RankOutside),
        ClusterProblem::Mapa {
            rank: 4,
            blocks: 4,
            ..
        }
    ));
}

#[test]
fn the_grid_must_be_whole_clusters() {
    let kernel = exchange(Exchange::Correct);
    let mut params = vec![vec![0u8; (7 * THREADS * 4) as usize]];
    match ktune_vgpu::run(&kernel, &launch(7), &mut params) {
        Err(Fault {
            kind: FaultKind::InvalidLaunch { reason },
            ..
        }) => assert!(reason.contains("clusters are 4 blocks"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_exchange_prints_and_parses_back() {
    let kernel = exchange(Exchange::Correct);
    let text = ktune_core::ptx::print(&kernel, ktune_core::SmVersion::Sm90);
    assert!(text.contains(".reqnctapercluster 4, 1, 1"), "{text}");
    assert!(text.contains("mapa.shared::cluster.u32"), "{text}");
    assert!(text.contains("ld.shared::cluster.b32"), "{text}");
    assert!(text.contains("barrier.cluster.arrive;"), "{text}");
    let (parsed, target) = ktune_core::ptx::parse(&text).expect("parses");
    assert_eq!(target, ktune_core::SmVersion::Sm90);
    assert_eq!(parsed, kernel);
}
