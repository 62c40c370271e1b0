//! Memory barriers (`mbarrier`): a producer warp copying rounds of data
//! into a ring of shared-memory slots by `cp.async`, each round signalled
//! as it lands (`cp.async.mbarrier.arrive.noinc`), and a consumer warp
//! waiting for each slot's phase and handing it back through a second
//! barrier; and the races, misuses and deadlocks that break such a ring.

mod common;

use common::one_block;
use ktune_core::ptx::Builder;
use ktune_core::ptx::Kernel;
use ktune_core::ptx::inst::{
    Addr, ArithOp, Cmp, CpAsyncCache, Op, Operand, Reg, RegClass, Space, Special, Ty,
};
use ktune_vgpu::{Access, Fault, FaultKind, MbarrierProblem};

const SLOTS: u32 = 2;
const ROUNDS: u32 = 6;
/// The ring's bytes; the barriers follow it, `full[s]` then `empty[s]`.
const RING: u32 = SLOTS * 32 * 4;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Ring {
    Correct,
    /// The producer stores each round and arrives with `mbarrier.arrive`.
    Stores,
    /// The consumer reads a slot without waiting for its phase.
    ConsumerDoesNotWait,
    /// The consumer waits for the other parity.
    WrongParity,
    /// The producer refills a slot without waiting for it to be empty.
    ProducerDoesNotWait,
    /// No thread initialises the barriers.
    Uninitialized,
    /// Thread 0 initialises them, with no barrier before the others use
    /// them.
    InitUnordered,
    /// The consumer reads a barrier's bytes with `ld.shared`.
    PlainLoad,
    /// The full barriers expect 33 arrivals.
    Overcounted,
}

fn full(smem: Reg, slot: u32) -> Addr {
    Addr {
        base: smem,
        offset: i64::from(RING + 8 * slot),
    }
}

fn empty(smem: Reg, slot: u32) -> Addr {
    full(smem, SLOTS + slot)
}

fn slot_addr(b: &mut Builder, smem: Reg, slot: u32, lane: Reg) -> Addr {
    let index = b.u32_op(ArithOp::Add, lane, Operand::Int(i64::from(slot * 32)));
    let base = b.u32_mad(index, Operand::Int(4), smem);
    Addr { base, offset: 0 }
}

/// The parity of round `i`'s phase of its slot's barriers.
fn parity(i: u32) -> Operand {
    Operand::Int(i64::from(i / SLOTS % 2))
}

/// Lane `l` of warp 0 copies `input[32 i + l]` into slot `i % SLOTS` in
/// round `i`; warp 1 adds up what it finds there and stores its sum at
/// `out[lane]`.
fn ring(kind: Ring) -> Kernel {
    let mut b = Builder::new();
    let tid = b.special(Special::TidX);
    let input = b.param_ptr(0);
    let out = b.param_ptr(1);
    let smem = b.shared_base();
    if kind != Ring::Uninitialized {
        let init = b.label();
        let first = b.setp(Cmp::Eq, Ty::U32, tid, Operand::Int(0));
        b.bra_if(first, true, init);
        for slot in 0..SLOTS {
            let count = if kind == Ring::Overcounted { 33 } else { 32 };
            let addr = full(smem, slot);
            b.push(Op::MbarrierInit {
                addr,
                count: Operand::Int(count),
            });
            let addr = empty(smem, slot);
            b.push(Op::MbarrierInit {
                addr,
                count: Operand::Int(32),
            });
        }
        b.place(init);
        if kind != Ring::InitUnordered {
            b.push(Op::BarSync);
        }
    }
    let consumer = b.label();
    let producer = b.setp(Cmp::Lt, Ty::U32, tid, Operand::Int(32));
    b.bra_if(producer, true, consumer);

    for i in 0..ROUNDS {
        let slot = i % SLOTS;
        if kind != Ring::ProducerDoesNotWait {
            // The first round of each slot waits for the phase before
            // phase 0, which counts as completed.
            let addr = empty(smem, slot);
            b.mbarrier_wait(addr, parity(i + SLOTS));
        }
        let dst = slot_addr(&mut b, smem, slot, tid);
        let index = b.u32_op(ArithOp::Add, tid, Operand::Int(i64::from(32 * i)));
        let src = b.global_addr(input, index, 4);
        let src = Addr {
            base: src,
            offset: 0,
        };
        let addr = full(smem, slot);
        if kind == Ring::Stores {
            let value = b.reg(RegClass::B32);
            b.push(Op::Ld {
                space: Space::GlobalReadOnly,
                ty: Ty::U32,
                dsts: vec![value],
                addr: src,
            });
            b.push(Op::St {
                space: Space::Shared,
                ty: Ty::U32,
                addr: dst,
                srcs: vec![value.into()],
            });
            b.mbarrier_arrive(addr);
        } else {
            b.cp_async(CpAsyncCache::Ca, dst, src, 4, None);
            b.cp_async_commit();
            b.push(Op::CpAsyncMbarrierArrive { addr });
        }
    }
    b.push(Op::Ret);

    b.place(consumer);
    let lane = b.u32_op(ArithOp::Sub, tid, Operand::Int(32));
    if kind == Ring::PlainLoad {
        let value = b.reg(RegClass::B32);
        b.push(Op::Ld {
            space: Space::Shared,
            ty: Ty::U32,
            dsts: vec![value],
            addr: full(smem, 0),
        });
    }
    let mut sum = b.u32_imm(0);
    for i in 0..ROUNDS {
        let slot = i % SLOTS;
        let addr = full(smem, slot);
        match kind {
            Ring::ConsumerDoesNotWait => {}
            Ring::WrongParity => b.mbarrier_wait(addr, parity(i + SLOTS)),
            _ => b.mbarrier_wait(addr, parity(i)),
        }
        let addr = slot_addr(&mut b, smem, slot, lane);
        let value = b.reg(RegClass::B32);
        b.push(Op::Ld {
            space: Space::Shared,
            ty: Ty::U32,
            dsts: vec![value],
            addr,
        });
        sum = b.u32_op(ArithOp::Add, sum, value);
        let addr = empty(smem, slot);
        b.mbarrier_arrive(addr);
    }
    common::store_at_tid(&mut b, out, lane, sum);
    b.finish("ring".into(), 2, 64, RING + 2 * SLOTS * 8)
}

fn input() -> Vec<u32> {
    (0..ROUNDS * 32).map(|i| i * 7 + 3).collect()
}

/// Runs the ring on two blocks, one after the other in the same shared
/// memory.
fn run(kernel: &Kernel) -> Result<Vec<u32>, Fault> {
    let bytes = input().iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut params = vec![bytes, vec![0u8; 32 * 4]];
    let launch = ktune_core::lower::Launch {
        grid: [2, 1, 1],
        ..one_block(64, kernel.dynamic_shared_bytes)
    };
    ktune_vgpu::run(kernel, &launch, &mut params)?;
    Ok(params[1]
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

fn problem(fault: &Fault) -> &MbarrierProblem {
    match &fault.kind {
        FaultKind::Mbarrier { problem, .. } => problem,
        _ => panic!("{fault}: expected a memory barrier's fault"),
    }
}

#[test]
fn a_ring_ordered_by_memory_barriers_passes() {
    let input = input();
    let expected: Vec<u32> = (0..32)
        .map(|lane| (0..ROUNDS).map(|i| input[(32 * i + lane) as usize]).sum())
        .collect();
    assert_eq!(run(&ring(Ring::Correct)).unwrap(), expected);
    assert_eq!(run(&ring(Ring::Stores)).unwrap(), expected);
}

#[test]
fn a_read_of_a_slot_not_waited_for_races_with_its_copy() {
    let fault = run(&ring(Ring::ConsumerDoesNotWait)).unwrap_err();
    assert!(
        matches!(
            fault.kind,
            FaultKind::SharedRace {
                first_was_write: true,
                second_is_write: false,
                ..
            }
        ),
        "{fault}"
    );
    assert!(fault.thread[0] >= 32, "{fault}");
    assert!(fault.instruction.starts_with("ld.shared"), "{fault}");
}

#[test]
fn a_wait_for_the_wrong_parity_or_a_phase_nobody_completes_deadlocks() {
    for kind in [Ring::WrongParity, Ring::Overcounted] {
        let fault = run(&ring(kind)).unwrap_err();
        assert!(
            matches!(problem(&fault), MbarrierProblem::Deadlock { .. }),
            "{kind:?}: {fault}"
        );
        assert!(fault.to_string().contains("deadlock"), "{fault}");
    }
    // The consumer waits for parity 1 at its first full barrier, which the
    // producer's first round completed in phase 0; the producer, the first
    // thread named, for the consumer's first release of slot 0.
    let fault = run(&ring(Ring::WrongParity)).unwrap_err();
    assert_eq!(
        fault.kind,
        FaultKind::Mbarrier {
            offset: RING + 8 * SLOTS,
            problem: MbarrierProblem::Deadlock {
                parity: 0,
                completed: 0,
                expected: 32,
                pending: 32,
                transactions: 0
            }
        },
        "{fault}"
    );
    assert!(
        fault.instruction.starts_with("mbarrier.try_wait"),
        "{fault}"
    );
}

/// Without waiting for the consumer, the producer copies into a slot
/// again while its copy there is still in flight: it lands only when the
/// slot's phase completes, at the arrivals of the other lanes.
#[test]
fn a_refill_of_a_slot_not_waited_for_is_a_fault() {
    let fault = run(&ring(Ring::ProducerDoesNotWait)).unwrap_err();
    assert!(
        matches!(
            fault.kind,
            FaultKind::AsyncCopyPending {
                access: Access::Store,
                ..
            }
        ),
        "{fault}"
    );
    assert!(fault.instruction.starts_with("cp.async"), "{fault}");
}

#[test]
fn barriers_must_be_initialised_before_any_thread_uses_them() {
    let fault = run(&ring(Ring::Uninitialized)).unwrap_err();
    assert_eq!(problem(&fault), &MbarrierProblem::Uninitialized, "{fault}");
    let fault = run(&ring(Ring::InitUnordered)).unwrap_err();
    assert!(
        matches!(
            fault.kind,
            FaultKind::SharedRace {
                first_thread: [0, 0, 0],
                first_was_write: true,
                second_is_write: false,
                ..
            }
        ),
        "{fault}"
    );
    assert!(fault.instruction.starts_with("mbarrier"), "{fault}");
}

#[test]
fn a_plain_access_to_a_barrier_is_a_fault() {
    let fault = run(&ring(Ring::PlainLoad)).unwrap_err();
    assert_eq!(
        problem(&fault),
        &MbarrierProblem::PlainAccess {
            access: Access::Load
        },
        "{fault}"
    );
}

/// A block of `threads` threads running `build` (given the barrier's
/// address, `%tid.x` and the address of the thread's `u32` of an input)
/// after thread 0 initialised a barrier at window offset 0 expecting
/// `count` arrivals, and a `bar.sync`. Each thread's 4 bytes of data lie
/// at window offset `16 + 4 tid` ([`data`]).
fn block_of(
    threads: u32,
    count: i64,
    build: impl FnOnce(&mut Builder, Addr, Reg, Addr),
) -> Result<(), Fault> {
    let mut b = Builder::new();
    let tid = b.special(Special::TidX);
    let smem = b.shared_base();
    let input = b.param_ptr(0);
    let addr = Addr {
        base: smem,
        offset: 0,
    };
    let skip = b.label();
    let first = b.setp(Cmp::Eq, Ty::U32, tid, Operand::Int(0));
    b.bra_if(first, true, skip);
    b.push(Op::MbarrierInit {
        addr,
        count: Operand::Int(count),
    });
    b.place(skip);
    b.push(Op::BarSync);
    let own = Addr {
        base: b.global_addr(input, tid, 4),
        offset: 0,
    };
    build(&mut b, addr, tid, own);
    let shared = 16 + 4 * threads;
    let kernel = b.finish("block_of".into(), 1, threads, shared);
    let mut params = vec![(0..threads).flat_map(|t| (7 * t).to_le_bytes()).collect()];
    ktune_vgpu::run(&kernel, &one_block(threads, shared), &mut params).map(|_| ())
}

/// A one-warp [`block_of`].
fn one_warp(count: i64, build: impl FnOnce(&mut Builder, Addr)) -> Result<(), Fault> {
    block_of(32, count, |b, addr, _, _| build(b, addr))
}

/// Thread `thread`'s 4 bytes of data in the window of [`block_of`], whose
/// barrier is at `barrier`.
fn data(b: &mut Builder, barrier: Addr, thread: impl Into<Operand>) -> Addr {
    Addr {
        base: b.u32_mad(thread, Operand::Int(4), barrier.base),
        offset: 16,
    }
}

fn load(b: &mut Builder, addr: Addr) {
    let value = b.reg(RegClass::B32);
    b.push(Op::Ld {
        space: Space::Shared,
        ty: Ty::U32,
        dsts: vec![value],
        addr,
    });
}

/// Runs `body` on thread `thread` alone (the others branch over it).
fn only(b: &mut Builder, tid: Reg, thread: i64, body: impl FnOnce(&mut Builder)) {
    let skip = b.label();
    let me = b.setp(Cmp::Eq, Ty::U32, tid, Operand::Int(thread));
    b.bra_if(me, true, skip);
    body(b);
    b.place(skip);
}

fn race_with_a_write(fault: &Fault) -> bool {
    matches!(
        fault.kind,
        FaultKind::SharedRace {
            first_was_write: true,
            ..
        }
    )
}

/// Thread 0 copies its value into the window and arrives at a barrier
/// expecting only it: the phase completes and the copy lands at once. It
/// is ordered before a wait that sees the phase complete, and what comes
/// after such a wait; not before its own thread's read without a wait,
/// nor across a `bar.sync`, which does not wait for copies.
#[test]
fn a_copy_landed_by_a_phase_comes_only_before_its_waits() {
    let copy = |b: &mut Builder, barrier: Addr, own: Addr| {
        let dst = data(b, barrier, Operand::Int(0));
        b.cp_async(CpAsyncCache::Ca, dst, own, 4, None);
        b.push(Op::CpAsyncMbarrierArrive { addr: barrier });
    };
    let waited = block_of(32, 1, |b, barrier, tid, own| {
        only(b, tid, 0, |b| copy(b, barrier, own));
        b.mbarrier_wait(barrier, Operand::Int(0));
        let addr = data(b, barrier, Operand::Int(0));
        load(b, addr);
    });
    waited.unwrap();
    let own_read = block_of(32, 1, |b, barrier, tid, own| {
        only(b, tid, 0, |b| {
            copy(b, barrier, own);
            let addr = data(b, barrier, Operand::Int(0));
            load(b, addr);
        });
    });
    let fault = own_read.unwrap_err();
    assert!(race_with_a_write(&fault), "{fault}");
    let across_bar_sync = block_of(32, 1, |b, barrier, tid, own| {
        only(b, tid, 0, |b| copy(b, barrier, own));
        b.push(Op::BarSync);
        only(b, tid, 1, |b| {
            let addr = data(b, barrier, Operand::Int(0));
            load(b, addr);
        });
    });
    let fault = across_bar_sync.unwrap_err();
    assert!(race_with_a_write(&fault), "{fault}");
    assert_eq!(fault.thread, [1, 0, 0], "{fault}");
}

/// An arrival releases what its thread did before it, not a store after.
#[test]
fn a_store_after_an_arrival_is_not_released_by_it() {
    let fault = block_of(32, 1, |b, barrier, tid, _| {
        only(b, tid, 0, |b| {
            b.mbarrier_arrive(barrier);
            let addr = data(b, barrier, Operand::Int(0));
            b.push(Op::St {
                space: Space::Shared,
                ty: Ty::U32,
                addr,
                srcs: vec![Operand::Int(5)],
            });
        });
        only(b, tid, 1, |b| {
            b.mbarrier_wait(barrier, Operand::Int(0));
            let addr = data(b, barrier, Operand::Int(0));
            load(b, addr);
        });
    })
    .unwrap_err();
    assert!(race_with_a_write(&fault), "{fault}");
}

/// A `try_wait` may give up: code that reads on without looking at its
/// result reads data still in flight.
#[test]
fn a_try_wait_may_give_up() {
    let ring = |retry: bool| {
        block_of(64, 32, |b, barrier, tid, own| {
            let consumer = b.label();
            let done = b.label();
            let copies = b.setp(Cmp::Ge, Ty::U32, tid, Operand::Int(32));
            b.bra_if(copies, true, consumer);
            let dst = data(b, barrier, tid);
            b.cp_async(CpAsyncCache::Ca, dst, own, 4, None);
            b.push(Op::CpAsyncMbarrierArrive { addr: barrier });
            b.bra(done);
            b.place(consumer);
            if retry {
                b.mbarrier_wait(barrier, Operand::Int(0));
            } else {
                let ignored = b.reg(RegClass::Pred);
                b.push(Op::MbarrierTryWait {
                    done: ignored,
                    addr: barrier,
                    parity: Operand::Int(0),
                });
            }
            let producer = b.u32_op(ArithOp::Add, tid, Operand::Int(32));
            let addr = data(b, barrier, producer);
            load(b, addr);
            b.place(done);
        })
    };
    ring(true).unwrap();
    let fault = ring(false).unwrap_err();
    assert!(fault.instruction.starts_with("ld.shared"), "{fault}");
}

/// Lane 0 of warp 0 waits for a phase warp 1 completes once it has met at
/// a shuffle, while warp 0's other lanes wait at theirs: the lanes of a
/// warp may wait at a memory barrier apart, and meet after it.
#[test]
fn a_lane_waiting_apart_from_its_warp_is_no_deadlock() {
    let shuffle = |b: &mut Builder| {
        let value = b.u32_imm(1);
        let lane = b.special(Special::LaneId);
        b.push(Op::Shfl {
            mode: ktune_core::ptx::inst::ShflMode::Bfly,
            dst: value,
            src: value,
            lane: lane.into(),
            clamp: 31,
        });
    };
    block_of(64, 32, |b, barrier, tid, _| {
        let second = b.label();
        let done = b.label();
        let first = b.setp(Cmp::Lt, Ty::U32, tid, Operand::Int(32));
        b.bra_if(first, true, second);
        only(b, tid, 0, |b| b.mbarrier_wait(barrier, Operand::Int(0)));
        shuffle(b);
        b.bra(done);
        b.place(second);
        shuffle(b);
        b.mbarrier_arrive(barrier);
        b.place(done);
    })
    .unwrap();
}

#[test]
fn inits_are_checked() {
    let fault = one_warp(0, |_, _| {}).unwrap_err();
    assert_eq!(
        problem(&fault),
        &MbarrierProblem::Count { count: 0 },
        "{fault}"
    );
    let fault = one_warp(1 << 20, |_, _| {}).unwrap_err();
    assert_eq!(
        problem(&fault),
        &MbarrierProblem::Count { count: 1 << 20 },
        "{fault}"
    );
    let fault = one_warp(32, |b, addr| {
        b.push(Op::MbarrierInit {
            addr,
            count: Operand::Int(32),
        })
    })
    .unwrap_err();
    assert_eq!(problem(&fault), &MbarrierProblem::Reinit, "{fault}");
    let fault = one_warp(32, |b, addr| {
        let misaligned = Addr { offset: 4, ..addr };
        b.mbarrier_arrive(misaligned);
    })
    .unwrap_err();
    assert!(
        matches!(fault.kind, FaultKind::MisalignedAccess { size: 8, .. }),
        "{fault}"
    );
}

/// Every lane arrives, then waits for the phase its arrivals complete: the
/// lanes that arrived first wait for the last, and all go on together.
#[test]
fn a_warp_arriving_and_waiting_at_one_barrier_goes_on_together() {
    one_warp(32, |b, addr| {
        b.mbarrier_arrive(addr);
        b.mbarrier_wait(addr, Operand::Int(0));
        let lane = b.special(Special::LaneId);
        let value = b.u32_imm(1);
        b.push(Op::Shfl {
            mode: ktune_core::ptx::inst::ShflMode::Bfly,
            dst: value,
            src: value,
            lane: lane.into(),
            clamp: 31,
        });
    })
    .unwrap();
    // With 64 expected, the phase never completes.
    let fault = one_warp(64, |b, addr| {
        b.mbarrier_arrive(addr);
        b.mbarrier_wait(addr, Operand::Int(0));
    })
    .unwrap_err();
    assert_eq!(
        problem(&fault),
        &MbarrierProblem::Deadlock {
            parity: 0,
            completed: 0,
            expected: 64,
            pending: 32,
            transactions: 0
        },
        "{fault}"
    );
}
