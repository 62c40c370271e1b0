//! Global memory: parameter pointers, bounds, and poisoned outputs.

mod common;

use ktune_core::DType;
use ktune_core::lower::Launch;
use ktune_core::ptx::Builder;
use ktune_core::ptx::inst::{Addr, ArithOp, Cmp, Op, Operand, RegClass, Space, Special, Ty};
use ktune_vgpu::{Access, FaultKind, Memory};

/// `out[i] = x[i] + 1` for `i <= n` (the bound is off by one) or `i < n`.
fn add_one(n: u32, off_by_one: bool) -> ktune_core::ptx::Kernel {
    let mut b = Builder::new();
    let done = b.label();
    let ctaid = b.special(Special::CtaidX);
    let tid = b.special(Special::TidX);
    let ntid = b.special(Special::NtidX);
    let i = b.u32_mad(ctaid, ntid, tid);
    let cmp = if off_by_one { Cmp::Gt } else { Cmp::Ge };
    let outside = b.setp(cmp, Ty::U32, i, Operand::Int(i64::from(n)));
    b.bra_if(outside, false, done);
    let x = b.param_ptr(0);
    let out = b.param_ptr(1);
    let src = b.global_addr(x, i, 4);
    let v = b.load(
        Space::Global,
        DType::F32,
        Addr {
            base: src,
            offset: 0,
        },
    );
    let w = b.f32_op(ArithOp::Add, v, Operand::F32(1.0));
    let dst = b.global_addr(out, i, 4);
    b.store(
        Space::Global,
        DType::F32,
        Addr {
            base: dst,
            offset: 0,
        },
        w,
    );
    b.place(done);
    b.finish("add_one".into(), 2, 32, 0)
}

fn launch(blocks: u32) -> Launch {
    Launch {
        grid: [blocks, 1, 1],
        block: [32, 1, 1],
        dynamic_shared_bytes: 0,
        workspace_bytes: 0,
        persistent: false,
        registers: 0,
    }
}

#[test]
fn an_off_by_one_bound_is_caught_naming_block_and_thread() {
    let n = 40;
    // The input has a spare element, so the load succeeds and the store
    // is the access that overruns.
    let x = common::values(n as usize + 1, 7);
    let (out, _) = ktune_vgpu::run_f32(&add_one(n, false), &launch(2), &[&x], n as usize).unwrap();
    assert!(out.iter().zip(&x).all(|(o, x)| *o == x + 1.0));

    let fault = ktune_vgpu::run_f32(&add_one(n, true), &launch(2), &[&x], n as usize).unwrap_err();
    assert_eq!(fault.block, [1, 0, 0]);
    assert_eq!(fault.thread, [8, 0, 0]);
    assert_eq!(
        fault.kind,
        FaultKind::OutOfBounds {
            space: Space::Global,
            access: Access::Store,
            addr: Memory::base_address(1) + 160,
            size: 4,
            param: Some(1),
            offset: 160,
            limit: 160,
        }
    );
    let text = fault.to_string();
    assert!(
        text.starts_with("kernel `add_one`, block (1, 0, 0), thread (8, 0, 0), pc "),
        "{text}"
    );
    assert!(text.contains("`st.global.f32 [%rd"), "{text}");
    assert!(
        text.contains("(param_1 +160); param_1 holds 160 bytes"),
        "{text}"
    );
}

#[test]
fn loads_below_a_buffer_name_that_buffer() {
    let mut b = Builder::new();
    let x = b.param_ptr(1);
    let _ = b.load(
        Space::Global,
        DType::F32,
        Addr {
            base: x,
            offset: -8,
        },
    );
    let kernel = b.finish("below".into(), 2, 32, 0);
    let fault = ktune_vgpu::run(&kernel, &launch(1), &mut [vec![0; 64], vec![0; 64]]).unwrap_err();
    assert!(
        matches!(
            fault.kind,
            FaultKind::OutOfBounds {
                access: Access::Load,
                param: Some(1),
                offset: -8,
                ..
            }
        ),
        "{fault}"
    );
}

#[test]
fn an_address_in_no_buffer_is_caught() {
    let mut b = Builder::new();
    let p = b.reg(RegClass::B64);
    b.push(Op::Mov {
        ty: Ty::U64,
        dst: p,
        src: Operand::Int(0x1234),
    });
    let v = b.f32_imm(1.0);
    b.store(Space::Global, DType::F32, Addr { base: p, offset: 0 }, v);
    let kernel = b.finish("wild".into(), 0, 32, 0);
    let fault = ktune_vgpu::run(&kernel, &launch(1), &mut []).unwrap_err();
    assert!(
        matches!(fault.kind, FaultKind::OutOfBounds { param: None, .. }),
        "{fault}"
    );
    assert!(
        fault.to_string().contains("points into no parameter"),
        "{fault}"
    );
}

#[test]
fn parameters_are_distinct_fake_pointers() {
    assert_eq!(Memory::base_address(0), 1 << 40);
    assert_eq!(Memory::base_address(2), 3 << 40);
    let memory = Memory::new(vec![vec![0; 16]; 3]);
    assert_eq!(memory.locate(Memory::base_address(2) + 12), Some((2, 12)));
    assert_eq!(memory.locate(Memory::base_address(2) - 4), Some((2, -4)));
    assert_eq!(memory.locate(12), None);
    assert_eq!(memory.locate(Memory::base_address(3)), None);
}

#[test]
fn unwritten_outputs_stay_poisoned() {
    // Only even threads write.
    let mut b = Builder::new();
    let tid = b.special(Special::TidX);
    let out = b.param_ptr(0);
    let bit = b.u32_op(ArithOp::And, tid, Operand::Int(1));
    let odd = b.setp(Cmp::Ne, Ty::U32, bit, Operand::Int(0));
    b.push_guarded(odd, false, Op::Ret);
    let v = b.f32_imm(3.0);
    common::store_at_tid(&mut b, out, tid, v);
    let kernel = b.finish("half_written".into(), 1, 32, 0);
    let output = ktune_vgpu::poisoned(DType::F32, 32);
    let (out, _) = ktune_vgpu::run_bytes(&kernel, &launch(1), &[], output).unwrap();
    assert_eq!(ktune_vgpu::first_poisoned(DType::F32, &out), Some(1));
    for dtype in DType::ALL {
        let fresh = ktune_vgpu::poisoned(dtype, 8);
        assert_eq!(fresh.len(), 8 * dtype.size() as usize);
        assert_eq!(ktune_vgpu::first_poisoned(dtype, &fresh), Some(0));
    }
    assert!(f32::from_bits(ktune_vgpu::POISON_F32).is_nan());
    assert!(half::f16::from_bits(ktune_vgpu::POISON_16).is_nan());
    assert!(half::bf16::from_bits(ktune_vgpu::POISON_16).is_nan());
}

/// Thread 0 of each block takes a ticket with `atom.global.add.u32` on
/// `counter[0]`, stores it at `tickets[ctaid]`, fences, and reads back
/// with `ld.global.cg` what the block before it (in ticket order) stored.
fn tickets() -> ktune_core::ptx::Kernel {
    let mut b = Builder::new();
    let ctaid = b.special(Special::CtaidX);
    let (counter, tickets) = (b.param_ptr(0), b.param_ptr(1));
    let at = |base| Addr { base, offset: 0 };
    let ticket = b.atom_add_u32(at(counter), Operand::Int(1));
    let mine = b.global_addr(tickets, ctaid, 4);
    b.push(Op::St {
        space: Space::Global,
        ty: Ty::U32,
        addr: at(mine),
        srcs: vec![ticket.into()],
    });
    b.push(Op::Fence);
    let seen = b.load_global_cg_f32(at(tickets), 4);
    let copy = b.global_addr(tickets, ctaid, 4);
    b.push(Op::St {
        space: Space::Global,
        ty: Ty::F32,
        addr: Addr {
            base: copy,
            offset: 16,
        },
        srcs: vec![seen[0].into()],
    });
    b.finish("tickets".into(), 2, 1, 0)
}

#[test]
fn a_u32_atomic_hands_out_tickets_across_blocks_in_run_order() {
    let one_thread = |order| {
        let launch = Launch {
            block: [1, 1, 1],
            ..launch(4)
        };
        let mut memory = Memory::new(vec![vec![0; 4], vec![0; 32]]);
        let config = ktune_vgpu::Config::default().block_order(order);
        let stats = ktune_vgpu::run_with(&tickets(), &launch, &mut memory, &config).unwrap();
        assert_eq!(stats.blocks, 4);
        let words: Vec<u32> = memory
            .buffer(1)
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let counter = u32::from_le_bytes(memory.buffer(0)[..4].try_into().unwrap());
        (counter, words)
    };
    let (counter, words) = one_thread(ktune_vgpu::BlockOrder::Index);
    assert_eq!(counter, 4);
    assert_eq!(words[..4], [0, 1, 2, 3]);
    // Each block read ticket[0] after the fence: block 0's, stored first.
    assert_eq!(words[4..], [0; 4]);

    let (counter, words) = one_thread(ktune_vgpu::BlockOrder::Shuffled(3));
    assert_eq!(counter, 4);
    let mut tickets = words[..4].to_vec();
    tickets.sort_unstable();
    assert_eq!(tickets, [0, 1, 2, 3]);
    assert_ne!(
        words[..4],
        [0, 1, 2, 3],
        "the seed runs blocks out of order"
    );
    // A block that ran before block 0 stored its ticket read a zero.
    for (block, seen) in words[4..].iter().enumerate() {
        let want = if words[block] >= words[0] {
            words[0]
        } else {
            0
        };
        assert_eq!(*seen, want, "block {block}: {words:?}");
    }
}

#[test]
fn two_blocks_storing_different_values_to_one_byte_race() {
    // Every block stores its index at out[0]: the value depends on which
    // runs last. Storing the same value from every block is no race.
    let store = |value_of_block: bool| {
        let mut b = Builder::new();
        let ctaid = b.special(Special::CtaidX);
        let out = b.param_ptr(0);
        let value = if value_of_block { ctaid } else { b.u32_imm(7) };
        b.push(Op::St {
            space: Space::Global,
            ty: Ty::U32,
            addr: Addr {
                base: out,
                offset: 0,
            },
            srcs: vec![value.into()],
        });
        b.finish("last_wins".into(), 1, 32, 0)
    };
    let launch = Launch {
        block: [1, 1, 1],
        ..launch(3)
    };
    ktune_vgpu::run(&store(false), &launch, &mut [vec![0; 4]]).expect("no race");
    let fault = ktune_vgpu::run(&store(true), &launch, &mut [vec![0; 4]]).unwrap_err();
    assert_eq!(fault.block, [1, 0, 0]);
    assert_eq!(
        fault.kind,
        FaultKind::GlobalRace {
            param: 0,
            offset: 0,
            other: [0, 0, 0],
        }
    );
    assert!(
        fault.to_string().contains("blocks race on global memory"),
        "{fault}"
    );
}
