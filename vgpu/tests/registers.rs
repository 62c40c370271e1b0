//! `setmaxnreg`: a warp-specialized block's warpgroups give registers back
//! (`.dec`) or take more (`.inc`), each warpgroup as a whole, from the
//! block's pool where the launch says each thread's share.

mod common;

use common::{one_block, store_at_tid};
use ktune_core::lower::Launch;
use ktune_core::ptx::Builder;
use ktune_core::ptx::Kernel;
use ktune_core::ptx::inst::{ArithOp, Cmp, Op, Operand, Special, Ty};
use ktune_vgpu::{Fault, FaultKind};

/// A block of 384 threads, whose launch share is 168 registers a thread:
/// warpgroup 2 lowers its count to 40; warpgroups 0 and 1 run `counts` in
/// turn (each `.inc` when above the one before, else `.dec`), or, with
/// `warps` below 4, only the first `warps` warps of warpgroup 0 do. Every
/// thread then stores its `%tid.x`.
fn realloc(counts: &[u32], warps: u32) -> Kernel {
    let mut b = Builder::new();
    let tid = b.special(Special::TidX);
    let out = b.param_ptr(0);
    let done = b.label();
    let producer = b.label();
    let last = b.setp(Cmp::Ge, Ty::U32, tid, Operand::Int(256));
    b.bra_if(last, false, producer);
    let skip = b.setp(Cmp::Ge, Ty::U32, tid, Operand::Int(i64::from(32 * warps)));
    let first = b.setp(Cmp::Lt, Ty::U32, tid, Operand::Int(128));
    let skip = b.pred_op(ArithOp::And, skip, first);
    b.bra_if(skip, false, done);
    let mut current = 168;
    for &count in counts {
        b.push(Op::SetMaxNReg {
            count,
            raise: count > current,
        });
        current = count;
    }
    b.bra(done);
    b.place(producer);
    b.push(Op::SetMaxNReg {
        count: 40,
        raise: false,
    });
    b.place(done);
    store_at_tid(&mut b, out, tid, tid);
    b.finish("realloc".into(), 1, 384, 0)
}

/// Runs `kernel` on one block of 384 threads given 168 registers each at
/// launch.
fn run(kernel: &Kernel) -> Result<Vec<u32>, Fault> {
    run_given(kernel, 168)
}

/// Runs `kernel` on one block of 384 threads given `registers` each at
/// launch (0: unknown).
fn run_given(kernel: &Kernel, registers: u32) -> Result<Vec<u32>, Fault> {
    let mut params = vec![vec![0u8; 384 * 4]];
    let launch = Launch {
        registers,
        ..one_block(384, 0)
    };
    ktune_vgpu::run(kernel, &launch, &mut params)?;
    Ok(params[0]
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// The consumers reach their `.inc` first and wait for the producer's
/// `.dec`: (168 − 40) · 128 registers back in the pool, (232 − 168) · 128
/// taken by each.
#[test]
fn warpgroups_move_their_register_counts_apart() {
    for registers in [168, 0] {
        let got = run_given(&realloc(&[232], 4), registers).unwrap();
        assert_eq!(got, (0..384).collect::<Vec<u32>>());
    }
}

/// Two consumers at 240 would take (240 − 168) · 256 registers from a pool
/// the producer filled with (168 − 40) · 128: the first gets them, the
/// second waits for registers nobody gives back. Where the launch does not
/// say the share, the pool is not modelled.
#[test]
fn an_increase_the_pool_cannot_meet_is_a_deadlock() {
    let kernel = realloc(&[240], 4);
    let fault = run(&kernel).unwrap_err();
    assert!(
        matches!(
            fault.kind,
            FaultKind::RegisterPool {
                count: 240,
                current: 168,
                free: 7168
            }
        ),
        "{fault}"
    );
    assert!(fault.to_string().contains("deadlock"), "{fault}");
    assert_eq!(fault.thread[0] / 128, 1, "{fault}");
    run_given(&kernel, 0).unwrap();
}

/// Clusters of two blocks: every thread arrives at the cluster's barrier,
/// the consumers then raise to 232 and the producer waits at the barrier
/// before lowering to 40. While the producer waits for the other block,
/// the consumers' `.inc` is not a deadlock: the barrier lets the producer
/// go on and give its registers back.
#[test]
fn an_increase_waits_while_the_producer_waits_for_the_cluster() {
    let mut b = Builder::new();
    let tid = b.special(Special::TidX);
    let out = b.param_ptr(0);
    b.push(Op::ClusterArrive);
    let done = b.label();
    let producer = b.label();
    let last = b.setp(Cmp::Ge, Ty::U32, tid, Operand::Int(256));
    b.bra_if(last, false, producer);
    b.push(Op::SetMaxNReg {
        count: 232,
        raise: true,
    });
    b.push(Op::ClusterWait);
    b.bra(done);
    b.place(producer);
    b.push(Op::ClusterWait);
    b.push(Op::SetMaxNReg {
        count: 40,
        raise: false,
    });
    b.place(done);
    let ctaid = b.special(Special::CtaidX);
    let at = b.u32_mad(ctaid, Operand::Int(384), tid);
    store_at_tid(&mut b, out, at, tid);
    let mut kernel = b.finish("cluster_realloc".into(), 1, 384, 0);
    kernel.cluster_blocks = 2;
    let launch = Launch {
        grid: [2, 1, 1],
        registers: 168,
        ..one_block(384, 0)
    };
    let mut params = vec![vec![0u8; 2 * 384 * 4]];
    ktune_vgpu::run(&kernel, &launch, &mut params).unwrap_or_else(|f| panic!("{f}"));
    let got: Vec<u32> = params[0]
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let want: Vec<u32> = (0..2).flat_map(|_| 0..384).collect();
    assert_eq!(got, want);
}

#[test]
fn a_launch_share_past_the_register_file_is_refused() {
    let fault = run_given(&realloc(&[232], 4), 176).unwrap_err();
    let FaultKind::InvalidLaunch { reason } = &fault.kind else {
        panic!("{fault}");
    };
    assert!(
        reason.contains("176 registers for each of 384 threads"),
        "{reason}"
    );
}

#[test]
fn an_increase_to_fewer_registers_is_a_fault() {
    let mut kernel = realloc(&[232, 200], 4);
    for inst in &mut kernel.body {
        if let Op::SetMaxNReg { count: 200, raise } = &mut inst.op {
            *raise = true;
        }
    }
    let fault = run(&kernel).unwrap_err();
    assert!(
        matches!(
            fault.kind,
            FaultKind::RegisterCount {
                count: 200,
                current: 232,
                raise: true
            }
        ),
        "{fault}"
    );
}

#[test]
fn a_warpgroup_reallocating_with_some_warps_only_is_a_fault() {
    let fault = run(&realloc(&[232], 2)).unwrap_err();
    assert!(
        matches!(fault.kind, FaultKind::WarpgroupDivergence { .. }),
        "{fault}"
    );
}

#[test]
fn a_count_out_of_range_is_refused_before_running() {
    for count in [16, 236, 264] {
        let fault = run(&realloc(&[count], 4)).unwrap_err();
        let FaultKind::InvalidKernel { reason } = &fault.kind else {
            panic!("{fault}");
        };
        assert!(
            reason.contains(&format!("setmaxnreg to {count} registers")),
            "{reason}"
        );
    }
}
