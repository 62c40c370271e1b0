//! The memory probe: how fast the GPU streams reads from L2 and from DRAM,
//! measured by one kernel on two buffer sizes, so that the heuristic
//! model's assumption about the two (`L2_OVER_DRAM` in ktune-core's model)
//! can be checked against the device.
//!
//! The kernel ([`read_kernel`]) sums a buffer of f32 in 16-byte loads that
//! bypass L1 (`ld.global.cg`), grid-stride, `passes` times over, and stores
//! each thread's sum (so that nothing is optimised away). A buffer a
//! quarter of L2's size, read many times, stays in L2; one several times
//! larger than L2, read once, comes from DRAM.

use ktune_core::lower::Launch;
use ktune_core::ptx::inst::{Addr, ArithOp, Cmp, Op, Operand, Reg, Space, Special, Ty};
use ktune_core::ptx::{Builder, Kernel, print};
use ktune_core::{DType, SmVersion};
use serde::Serialize;

/// Threads per block of the probe.
pub const THREADS: u32 = 256;

/// The probe kernel for one buffer: its PTX, entry and launch.
#[derive(Debug, Clone)]
pub struct Probe {
    pub ptx: String,
    pub kernel: Kernel,
    pub launch: Launch,
    /// Bytes the kernel reads: the buffer, `passes` times.
    pub bytes_read: u64,
}

/// What the probe measured.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryProbe {
    /// Reads served by L2: a buffer of `l2_buffer_bytes`, read repeatedly.
    pub l2_read_bytes_per_s: f64,
    pub l2_buffer_bytes: u64,
    /// Reads served by DRAM: a buffer of `dram_buffer_bytes`, read once.
    pub dram_read_bytes_per_s: f64,
    pub dram_buffer_bytes: u64,
}

impl MemoryProbe {
    /// L2's read bandwidth over DRAM's.
    pub fn l2_over_dram(&self) -> f64 {
        self.l2_read_bytes_per_s / self.dram_read_bytes_per_s
    }
}

/// The buffer sizes for a GPU with `l2_bytes` of L2: (L2-resident,
/// DRAM-bound), whole 16-byte chunks.
pub fn buffer_sizes(l2_bytes: u64) -> (u64, u64) {
    let l2 = (l2_bytes / 4) & !15;
    (l2.max(16), (l2_bytes * 4).max(16) & !15)
}

/// A kernel summing `bytes` of f32 (a multiple of 16) `passes` times, with
/// `blocks` blocks of [`THREADS`] threads. Parameters: the buffer, then
/// one f32 per thread for the sums.
pub fn read_kernel(bytes: u64, passes: u32, blocks: u32, target: SmVersion) -> Probe {
    assert!(
        bytes.is_multiple_of(16) && bytes > 0,
        "whole 16-byte chunks"
    );
    let chunks = u32::try_from(bytes / 16).expect("a buffer of under 2^32 chunks");
    let threads = blocks * THREADS;
    let mut b = Builder::new();
    let src = b.param_ptr(0);
    let out = b.param_ptr(1);
    let tid = b.special(Special::TidX);
    let ctaid = b.special(Special::CtaidX);
    let thread = b.u32_mad(ctaid, imm(THREADS), tid);
    let sums: Vec<_> = (0..4).map(|_| b.f32_imm(0.0)).collect();
    let pass = b.u32_imm(0);

    let next_pass = b.label();
    let next_chunk = b.label();
    let pass_done = b.label();
    b.place(next_pass);
    let chunk = b.u32_op(ArithOp::Add, thread, imm(0));
    let inside = b.setp(Cmp::Lt, Ty::U32, chunk, imm(chunks));
    b.bra_if(inside, true, pass_done);
    b.place(next_chunk);
    let at = b.global_addr(src, chunk, 16);
    let values = b.load_global_cg_f32(
        Addr {
            base: at,
            offset: 0,
        },
        4,
    );
    for (sum, value) in sums.iter().zip(values) {
        b.push(Op::Arith {
            op: ArithOp::Add,
            ty: Ty::F32,
            dst: *sum,
            a: (*sum).into(),
            b: value.into(),
        });
    }
    add_in_place(&mut b, chunk, threads);
    let more = b.setp(Cmp::Lt, Ty::U32, chunk, imm(chunks));
    b.bra_if(more, false, next_chunk);
    b.place(pass_done);
    add_in_place(&mut b, pass, 1);
    let again = b.setp(Cmp::Lt, Ty::U32, pass, imm(passes));
    b.bra_if(again, false, next_pass);

    let pair = b.f32_op(ArithOp::Add, sums[0], sums[1]);
    let other = b.f32_op(ArithOp::Add, sums[2], sums[3]);
    let total = b.f32_op(ArithOp::Add, pair, other);
    let at = b.global_addr(out, thread, 4);
    b.store(
        Space::Global,
        DType::F32,
        Addr {
            base: at,
            offset: 0,
        },
        total,
    );
    // Not `ktune_…`: the profiler picks the benchmark's kernels by that prefix.
    let kernel = b.finish("memory_probe".to_owned(), 2, THREADS, 0);
    Probe {
        ptx: print(&kernel, target),
        kernel,
        launch: Launch {
            grid: [blocks, 1, 1],
            block: [THREADS, 1, 1],
            dynamic_shared_bytes: 0,
            workspace_bytes: 0,
            persistent: false,
            registers: 0,
        },
        bytes_read: bytes * u64::from(passes),
    }
}

/// `reg += value` on u32.
fn add_in_place(b: &mut Builder, reg: Reg, value: u32) {
    b.push(Op::Arith {
        op: ArithOp::Add,
        ty: Ty::U32,
        dst: reg,
        a: reg.into(),
        b: imm(value),
    });
}

fn imm(value: u32) -> Operand {
    Operand::Int(i64::from(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_thread_sums_its_chunks_of_every_pass() {
        // 1000 chunks over 2 blocks of 256 threads: some threads read two
        // chunks, some one; three passes.
        let chunks = 1000usize;
        let values: Vec<f32> = (0..chunks * 4).map(|i| (i % 7) as f32).collect();
        let probe = read_kernel(chunks as u64 * 16, 3, 2, SmVersion::Sm80);
        let mut buffers = vec![
            ktune_vgpu::f32_bytes(&values),
            vec![0xa5; 2 * THREADS as usize * 4],
        ];
        ktune_vgpu::run(&probe.kernel, &probe.launch, &mut buffers).expect("runs cleanly");
        let sums: Vec<f32> = buffers[1]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let threads = 2 * THREADS as usize;
        for (t, sum) in sums.iter().enumerate() {
            let expected: f32 = (t..chunks)
                .step_by(threads)
                .flat_map(|c| &values[4 * c..4 * c + 4])
                .sum::<f32>()
                * 3.0;
            assert_eq!(*sum, expected, "thread {t}");
        }
        assert_eq!(probe.bytes_read, 3 * 16_000);
    }

    #[test]
    fn the_probe_assembles() {
        let ptxas = ktune_build::ptxas::find().expect(
            "ptxas not found: run `cargo xtask test` (it installs ptxas into .venv/), \
             or set KTUNE_PTXAS to a ptxas executable",
        );
        let probe = read_kernel(1 << 20, 4, 264, SmVersion::Sm90);
        ktune_build::ptxas::assemble(&ptxas, &probe.ptx, SmVersion::Sm90)
            .unwrap_or_else(|e| panic!("{e}\n{}", probe.ptx));
    }

    #[test]
    fn buffers_fit_l2_and_exceed_it() {
        let (l2, dram) = buffer_sizes(60 << 20);
        assert_eq!(l2, 15 << 20);
        assert_eq!(dram, 240 << 20);
        assert_eq!(buffer_sizes(0), (16, 16));
    }
}
