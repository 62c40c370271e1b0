//! Shared memory and barriers: a correct exchange, and the races,
//! uninitialised reads, overruns and divergent barriers that break one.

mod common;

use common::one_block;
use ktune_core::ptx::Builder;
use ktune_core::ptx::Kernel;
use ktune_core::ptx::inst::{Addr, ArithOp, Cmp, Op, Operand, Reg, Space, Special, Ty};
use ktune_vgpu::{Fault, FaultKind, SHARED_BASE};

const THREADS: u32 = 64;

fn shared_addr(b: &mut Builder, base: Reg, index: Reg) -> Addr {
    let a = b.u32_mad(index, Operand::Int(4), base);
    Addr { base: a, offset: 0 }
}

fn st_shared(b: &mut Builder, addr: Addr, value: Reg) {
    b.push(Op::St {
        space: Space::Shared,
        ty: Ty::B32,
        addr,
        srcs: vec![value.into()],
    });
}

fn ld_shared(b: &mut Builder, addr: Addr) -> Reg {
    let dst = b.reg(ktune_core::ptx::inst::RegClass::B32);
    b.push(Op::Ld {
        space: Space::Shared,
        ty: Ty::B32,
        dsts: vec![dst],
        addr,
    });
    dst
}

/// Every thread writes `smem[tid] = 2 * tid`, optionally waits at a
/// barrier, and stores `smem[(tid + 1) % THREADS]` to `out[tid]`.
fn exchange(barrier: bool) -> Kernel {
    let mut b = Builder::new();
    let tid = b.special(Special::TidX);
    let out = b.param_ptr(0);
    let smem = b.shared_base();
    let mine = shared_addr(&mut b, smem, tid);
    let twice = b.u32_op(ArithOp::Add, tid, tid);
    st_shared(&mut b, mine, twice);
    if barrier {
        b.push(Op::BarSync);
    }
    let next = b.u32_op(ArithOp::Add, tid, Operand::Int(1));
    let next = b.u32_op(ArithOp::Rem, next, Operand::Int(i64::from(THREADS)));
    let theirs = shared_addr(&mut b, smem, next);
    let v = ld_shared(&mut b, theirs);
    common::store_at_tid(&mut b, out, tid, v);
    b.finish("exchange".into(), 1, THREADS, THREADS * 4)
}

fn run(kernel: &Kernel) -> Result<(Vec<u32>, ktune_vgpu::Stats), Fault> {
    let mut params = vec![vec![0u8; THREADS as usize * 4]];
    let launch = ktune_core::lower::Launch {
        grid: [3, 1, 1],
        ..one_block(THREADS, kernel.dynamic_shared_bytes)
    };
    let stats = ktune_vgpu::run(kernel, &launch, &mut params)?;
    let words = params[0]
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Ok((words, stats))
}

#[test]
fn a_barrier_protected_exchange_passes() {
    let (got, stats) = run(&exchange(true)).unwrap();
    for t in 0..THREADS {
        assert_eq!(got[t as usize], 2 * ((t + 1) % THREADS));
    }
    assert_eq!(stats.barriers, 3);
    assert_eq!(stats.shared_bytes, THREADS * 4);
    assert_eq!(stats.shared_store_bytes, 3 * u64::from(THREADS) * 4);
    assert_eq!(stats.shared_load_bytes, 3 * u64::from(THREADS) * 4);
}

#[test]
fn the_same_exchange_without_the_barrier_races() {
    let fault = run(&exchange(false)).unwrap_err();
    let FaultKind::SharedRace {
        first_thread,
        first_was_write,
        second_is_write,
        ..
    } = fault.kind
    else {
        panic!("expected a race, got {fault}");
    };
    // Whichever order the interpreter ran them in, the pair is a writer of
    // slot k and the reader of slot k, thread k - 1.
    let (a, b) = (first_thread[0], fault.thread[0]);
    assert!(a == (b + 1) % THREADS || b == (a + 1) % THREADS, "{fault}");
    assert!(first_was_write && !second_is_write, "{fault}");
    assert_eq!(fault.block, [0, 0, 0]);
    assert!(fault.instruction.starts_with("ld.shared.b32"), "{fault}");
    assert!(fault.to_string().contains("race"), "{fault}");
}

#[test]
fn a_write_after_another_threads_read_races() {
    // Phase 1 fills the buffer; phase 2 reads the neighbour's slot and then
    // overwrites its own without the second barrier a tree step needs.
    let mut b = Builder::new();
    let tid = b.special(Special::TidX);
    let smem = b.shared_base();
    let mine = shared_addr(&mut b, smem, tid);
    st_shared(&mut b, mine, tid);
    b.push(Op::BarSync);
    let next = b.u32_op(ArithOp::Add, tid, Operand::Int(1));
    let next = b.u32_op(ArithOp::Rem, next, Operand::Int(i64::from(THREADS)));
    let theirs = shared_addr(&mut b, smem, next);
    let v = ld_shared(&mut b, theirs);
    let sum = b.u32_op(ArithOp::Add, v, tid);
    st_shared(&mut b, mine, sum);
    let kernel = b.finish("war".into(), 0, THREADS, THREADS * 4);
    let fault = ktune_vgpu::run(&kernel, &one_block(THREADS, THREADS * 4), &mut []).unwrap_err();
    assert!(
        matches!(
            fault.kind,
            FaultKind::SharedRace {
                first_was_write: false,
                second_is_write: true,
                ..
            }
        ),
        "{fault}"
    );
    assert!(fault.instruction.starts_with("st.shared.b32"), "{fault}");
}

#[test]
fn reading_uninitialised_shared_memory_faults() {
    let mut b = Builder::new();
    let tid = b.special(Special::TidX);
    let out = b.param_ptr(0);
    let smem = b.shared_base();
    let mine = shared_addr(&mut b, smem, tid);
    let v = ld_shared(&mut b, mine);
    common::store_at_tid(&mut b, out, tid, v);
    let kernel = b.finish("uninit".into(), 1, THREADS, THREADS * 4);
    let fault = run(&kernel).unwrap_err();
    assert_eq!(
        fault.kind,
        FaultKind::UninitializedShared {
            addr: u64::from(SHARED_BASE),
            offset: 0
        }
    );
    assert_eq!(fault.thread, [0, 0, 0]);
}

#[test]
fn shared_memory_is_fresh_in_every_block() {
    // Block 0 writes slot 0 and reads it back; every later block only
    // reads slot 0, which only an earlier block wrote.
    let mut b = Builder::new();
    let ctaid = b.special(Special::CtaidX);
    let smem = b.shared_base();
    let first = b.setp(Cmp::Eq, Ty::U32, ctaid, Operand::Int(0));
    let one = b.u32_imm(1);
    b.push_guarded(
        first,
        false,
        Op::St {
            space: Space::Shared,
            ty: Ty::B32,
            addr: Addr {
                base: smem,
                offset: 0,
            },
            srcs: vec![one.into()],
        },
    );
    let _ = ld_shared(
        &mut b,
        Addr {
            base: smem,
            offset: 0,
        },
    );
    let kernel = b.finish("fresh".into(), 0, 32, 4);
    let launch = ktune_core::lower::Launch {
        grid: [2, 1, 1],
        ..one_block(1, 4)
    };
    let fault = ktune_vgpu::run(&kernel, &launch, &mut []).unwrap_err();
    assert!(
        matches!(fault.kind, FaultKind::UninitializedShared { .. }),
        "{fault}"
    );
    assert_eq!(fault.block, [1, 0, 0]);
}

#[test]
fn shared_overruns_and_misalignment_fault() {
    for (offset, want_oob) in [(i64::from(THREADS) * 4, true), (-4, true), (2, false)] {
        let mut b = Builder::new();
        let smem = b.shared_base();
        let v = b.u32_imm(7);
        st_shared(&mut b, Addr { base: smem, offset }, v);
        let kernel = b.finish("overrun".into(), 0, 32, THREADS * 4);
        let fault = ktune_vgpu::run(&kernel, &one_block(1, THREADS * 4), &mut []).unwrap_err();
        match fault.kind {
            FaultKind::OutOfBounds {
                space: Space::Shared,
                offset: o,
                limit,
                ..
            } if want_oob => {
                assert_eq!((o, limit), (offset, u64::from(THREADS) * 4));
            }
            FaultKind::MisalignedAccess { size: 4, .. } if !want_oob => {}
            _ => panic!("offset {offset}: {fault}"),
        }
    }
}

#[test]
fn a_barrier_taken_by_only_some_threads_is_caught() {
    // if (tid < 16) bar.sync;  ...  bar.sync;
    let mut b = Builder::new();
    let tid = b.special(Special::TidX);
    let skip = b.label();
    let high = b.setp(Cmp::Ge, Ty::U32, tid, Operand::Int(16));
    b.bra_if(high, false, skip);
    b.push(Op::BarSync);
    b.place(skip);
    b.push(Op::BarSync);
    let kernel = b.finish("divergent".into(), 0, THREADS, 0);
    let fault = ktune_vgpu::run(&kernel, &one_block(THREADS, 0), &mut []).unwrap_err();
    assert_eq!(
        fault.kind,
        FaultKind::BarrierDivergence {
            other_thread: [16, 0, 0],
            other_pc: 5,
        },
        "{fault}"
    );
    assert_eq!((fault.thread, fault.pc), ([0, 0, 0], 3));
    assert_eq!(
        fault.to_string(),
        "kernel `divergent`, block (0, 0, 0), thread (0, 0, 0), pc 3 `bar.sync 0`: \
         barrier divergence: thread (16, 0, 0) waits at a different bar.sync (pc 5)"
    );
}

#[test]
fn a_barrier_after_some_threads_exited_completes() {
    let mut b = Builder::new();
    let tid = b.special(Special::TidX);
    let high = b.setp(Cmp::Ge, Ty::U32, tid, Operand::Int(40));
    b.push_guarded(high, false, Op::Ret);
    b.push(Op::BarSync);
    let kernel = b.finish("early_exit".into(), 0, THREADS, 0);
    let stats = ktune_vgpu::run(&kernel, &one_block(THREADS, 0), &mut []).unwrap();
    assert_eq!(stats.barriers, 1);
}
