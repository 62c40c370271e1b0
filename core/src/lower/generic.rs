//! The generic schedule: one thread per output element, every reduction a
//! sequential loop. Slow but valid for any kernel the front-end accepts.

use super::expr::{self, Env};
use super::{Launch, Lowered, Violation, check_block, entry_name};
use crate::ir::Kernel;
use crate::ptx::Builder;
use crate::ptx::inst::{Addr, ArithOp, Cmp, Operand, Space, Special, Ty};
use crate::target::SmVersion;

pub(super) fn lower(kernel: &Kernel, block: u32, target: SmVersion) -> Result<Lowered, Violation> {
    check_block(block, target)?;
    let total = kernel.len_of(&kernel.output) as u32;
    let mut b = Builder::new();
    let done = b.label();

    let ctaid = b.special(Special::CtaidX);
    let tid = b.special(Special::TidX);
    let flat = b.u32_mad(ctaid, Operand::Int(i64::from(block)), tid);
    let outside = b.setp(Cmp::Ge, Ty::U32, flat, Operand::Int(i64::from(total)));
    b.bra_if(outside, false, done);

    let mut env = Env {
        inputs: (0..kernel.inputs.len()).map(|i| b.param_ptr(i)).collect(),
        ..Env::default()
    };
    let out = b.param_ptr(kernel.inputs.len());
    let mut rest = flat;
    for v in kernel.output_vars().into_iter().rev() {
        let extent = Operand::Int(i64::from(kernel.extent(v)));
        env.index.insert(v, b.u32_op(ArithOp::Rem, rest, extent));
        rest = b.u32_op(ArithOp::Div, rest, extent);
    }
    let value = expr::emit(&mut b, kernel, &mut env, kernel.root).reg();
    let addr = b.global_addr(out, flat, kernel.output.dtype.size());
    b.store(
        Space::Global,
        kernel.output.dtype,
        Addr {
            base: addr,
            offset: 0,
        },
        value,
    );
    b.place(done);

    Ok(Lowered {
        ptx: b.finish(entry_name(kernel), kernel.inputs.len() + 1, block, 0),
        launch: Launch {
            grid: [total.div_ceil(block), 1, 1],
            block: [block, 1, 1],
            dynamic_shared_bytes: 0,
            workspace_bytes: 0,
            persistent: false,
            registers: 0,
        },
    })
}
