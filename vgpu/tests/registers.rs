//! `setmaxnreg`: a warp-specialized block's warpgroups give registers back
//! (`.dec`) or take more (`.inc`), each warpgroup as a whole.

mod common;

use common::{one_block, store_at_tid};
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

fn run(kernel: &Kernel) -> Result<Vec<u32>, Fault> {
    let mut params = vec![vec![0u8; 384 * 4]];
    ktune_vgpu::run(kernel, &one_block(384, 0), &mut params)?;
    Ok(params[0]
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

#[test]
fn warpgroups_move_their_register_counts_apart() {
    let got = run(&realloc(&[232], 4)).unwrap();
    assert_eq!(got, (0..384).collect::<Vec<u32>>());
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
