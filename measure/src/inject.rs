//! Deliberately broken candidates, to test that the measurement layer
//! rejects each kind of failure with its reason and goes on.

use ktune_core::ptx::Kernel;
use ktune_core::ptx::inst::{Instr, Label, Op, Operand, Space, Ty};
use serde::{Deserialize, Serialize};

/// A fault the worker injects into a candidate after lowering it (see
/// [`crate::Worker::measure_injected`]). For tests of the isolation; the
/// build never asks for one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Injection {
    /// Every global store writes the constant 1 instead of its value: a
    /// wrong result.
    WrongStore,
    /// Every global store lands 1 TiB past its address: out of bounds (of
    /// any allocation, on a GPU).
    OutOfBounds,
    /// The kernel starts with a loop that never exits, a barrier in it so
    /// that every thread of a block spins (the virtual GPU's per-thread
    /// step limit is then reached only after hours).
    EndlessLoop,
    /// The worker exits with this code after reading the request, without
    /// answering: a crash mid-request.
    Exit { code: i32 },
}

impl Injection {
    /// Applies the injection to a lowered kernel's instructions; a no-op
    /// for [`Injection::Exit`], which the worker handles itself.
    pub(crate) fn apply(self, kernel: &mut Kernel) {
        match self {
            Injection::WrongStore => {
                for instr in &mut kernel.body {
                    if let Op::St {
                        space: Space::Global,
                        ty,
                        srcs,
                        ..
                    } = &mut instr.op
                    {
                        let one = match ty {
                            Ty::F32 => Operand::F32(1.0),
                            _ => Operand::Int(0x3c00),
                        };
                        srcs.iter_mut().for_each(|s| *s = one);
                    }
                }
            }
            Injection::OutOfBounds => {
                for instr in &mut kernel.body {
                    if let Op::St {
                        space: Space::Global,
                        addr,
                        ..
                    } = &mut instr.op
                    {
                        addr.offset += 1 << 40;
                    }
                }
            }
            Injection::EndlessLoop => {
                let top = kernel
                    .body
                    .iter()
                    .filter_map(|i| match i.op {
                        Op::Label(Label(n)) => Some(n + 1),
                        _ => None,
                    })
                    .max()
                    .unwrap_or(0);
                let unguarded = |op| Instr { guard: None, op };
                let spin = [
                    unguarded(Op::Label(Label(top))),
                    unguarded(Op::BarSync),
                    unguarded(Op::Bra { target: Label(top) }),
                ];
                kernel.body.splice(0..0, spin);
            }
            Injection::Exit { .. } => {}
        }
    }
}
