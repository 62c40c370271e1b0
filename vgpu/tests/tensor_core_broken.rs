//! Hand-written kernels with one deliberate bug in their use of `cp.async`,
//! `ldmatrix` or `mma` (`snippets`): the virtual GPU must stop each with a
//! fault naming the kernel, block, thread and instruction, and saying what
//! went wrong.

mod snippets;

use ktune_core::lower::Launch;
use ktune_core::ptx::inst::{CpAsyncCache, Op, Space};
use ktune_core::ptx::parse;
use ktune_vgpu::{Access, Fault, FaultKind, LaneState};

/// Runs a broken snippet on zeroed buffers of the given sizes and returns
/// the fault it must raise.
fn fault_of(text: &str, sizes: &[usize]) -> Fault {
    let (kernel, _) = parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let launch = Launch {
        grid: [1, 1, 1],
        block: [kernel.block_threads, 1, 1],
        dynamic_shared_bytes: kernel.dynamic_shared_bytes,
        workspace_bytes: 0,
        persistent: false,
        registers: 0,
    };
    let mut buffers: Vec<Vec<u8>> = sizes.iter().map(|n| vec![0; *n]).collect();
    let fault = ktune_vgpu::run(&kernel, &launch, &mut buffers)
        .expect_err("the broken kernel ran to the end");
    let message = fault.to_string();
    println!("{message}");
    assert!(
        message.contains(&format!("kernel `{}`", kernel.entry)),
        "{message}"
    );
    assert!(message.contains("block (0, 0, 0)"), "{message}");
    assert!(
        message.contains(&format!("thread ({}, 0, 0)", fault.thread[0])),
        "{message}"
    );
    assert!(!fault.instruction.is_empty(), "{message}");
    assert!(message.contains(&fault.instruction), "{message}");
    fault
}

#[test]
fn reading_a_cp_async_destination_before_its_wait_faults() {
    let text = snippets::cp_async_read_before_wait();
    let fault = fault_of(&text, &[512, 128, 1024]);
    // Thread 0 reads thread 1's slot, whose copy is still in flight.
    assert_eq!(fault.thread, [0, 0, 0]);
    assert!(fault.instruction.starts_with("ld.shared.v4.b32"), "{fault}");
    match fault.kind {
        FaultKind::AsyncCopyPending {
            access: Access::Load,
            offset,
            copier,
            copy_pc,
            ..
        } => {
            assert_eq!(offset, 16, "{fault}");
            assert_eq!(copier, [1, 0, 0], "{fault}");
            let (kernel, _) = parse(&text).unwrap();
            assert!(
                matches!(
                    kernel.body[copy_pc].op,
                    Op::CpAsync {
                        cache: CpAsyncCache::Cg,
                        ..
                    }
                ),
                "{fault}"
            );
        }
        _ => panic!("expected a read of a pending cp.async destination: {fault}"),
    }
    assert!(
        fault
            .to_string()
            .contains("read of shared memory with an outstanding cp.async"),
        "{fault}"
    );
}

#[test]
fn reading_a_landed_copy_without_a_barrier_is_a_race() {
    let fault = fault_of(
        &snippets::cp_async_read_without_barrier(),
        &[512, 128, 1024],
    );
    // Thread 31 reads thread 0's slot, which thread 0's wait landed in the
    // same barrier interval.
    assert_eq!(fault.thread, [31, 0, 0]);
    assert!(fault.instruction.starts_with("ld.shared.v4.b32"), "{fault}");
    match fault.kind {
        FaultKind::SharedRace {
            offset,
            first_thread,
            first_was_write,
            second_is_write,
            ..
        } => {
            assert_eq!(offset, 0, "{fault}");
            assert_eq!(first_thread, [0, 0, 0], "{fault}");
            assert!(first_was_write && !second_is_write, "{fault}");
        }
        _ => panic!("expected a shared-memory race: {fault}"),
    }
}

#[test]
fn a_misaligned_ldmatrix_row_address_faults() {
    let fault = fault_of(&snippets::ldmatrix(4, false, Some(5)), &[512, 512]);
    assert_eq!(fault.thread, [5, 0, 0]);
    assert!(
        fault
            .instruction
            .starts_with("ldmatrix.sync.aligned.m8n8.x4"),
        "{fault}"
    );
    match fault.kind {
        FaultKind::MisalignedAccess {
            space: Space::Shared,
            access: Access::Load,
            addr,
            size: 16,
        } => assert_eq!(addr % 16, 8, "{fault}"),
        _ => panic!("expected a misaligned shared load: {fault}"),
    }
}

#[test]
fn an_ldmatrix_executed_by_half_the_warp_is_divergent() {
    let fault = fault_of(&snippets::ldmatrix_divergent(), &[512, 512]);
    assert_eq!(fault.thread, [0, 0, 0]);
    assert!(fault.instruction.starts_with("@%p0 ldmatrix"), "{fault}");
    match fault.kind {
        FaultKind::CollectiveDivergence {
            lane: 16,
            other_thread: [16, 0, 0],
            other: LaneState::Exited,
        } => {}
        _ => panic!("expected lane 16 to be missing from the ldmatrix: {fault}"),
    }
    assert!(
        fault.to_string().contains("warp-collective divergence"),
        "{fault}"
    );
}

#[test]
fn an_mma_skipped_by_odd_lanes_is_divergent() {
    let fault = fault_of(&snippets::mma_divergent(), &[512, 256, 512, 512]);
    assert_eq!(fault.thread, [0, 0, 0]);
    assert!(
        fault.instruction.starts_with("mma.sync.aligned.m16n8k16"),
        "{fault}"
    );
    match fault.kind {
        FaultKind::CollectiveDivergence {
            lane: 1,
            other_thread: [1, 0, 0],
            other: LaneState::Exited,
        } => {}
        _ => panic!("expected lane 1 to be missing from the mma: {fault}"),
    }
}

#[test]
fn a_store_into_an_in_flight_copy_faults() {
    let fault = fault_of(&snippets::cp_async_store_in_flight(), &[512, 128, 1024]);
    assert_eq!(fault.thread, [0, 0, 0]);
    assert!(fault.instruction.starts_with("st.shared.b32"), "{fault}");
    match fault.kind {
        FaultKind::AsyncCopyPending {
            access: Access::Store,
            offset: 896,
            copier: [0, 0, 0],
            ..
        } => {}
        _ => panic!("expected a write to a pending cp.async destination: {fault}"),
    }
    assert!(
        fault
            .to_string()
            .contains("write of shared memory with an outstanding cp.async"),
        "{fault}"
    );
}

/// Runs the `cp_async` snippet on an input of `input_len` bytes with the
/// given source sizes.
fn run_cp_async(input_len: usize, sizes: &[u32; 32]) -> Result<Vec<u8>, Fault> {
    let (kernel, _) = parse(&snippets::cp_async()).unwrap_or_else(|e| panic!("{e}"));
    let launch = Launch {
        grid: [1, 1, 1],
        block: [32, 1, 1],
        dynamic_shared_bytes: kernel.dynamic_shared_bytes,
        workspace_bytes: 0,
        persistent: false,
        registers: 0,
    };
    let input: Vec<u8> = (0..input_len).map(|i| i as u8 | 1).collect();
    let sizes: Vec<u8> = sizes.iter().flat_map(|s| s.to_le_bytes()).collect();
    let mut buffers = vec![input, sizes, vec![0xa5; 1024]];
    ktune_vgpu::run(&kernel, &launch, &mut buffers)?;
    Ok(buffers.pop().unwrap())
}

#[test]
fn a_zero_filled_copy_reads_only_its_source_size() {
    // The last 16-byte slot's source ends 4 bytes into it: reading 4 bytes is
    // in bounds (and the rest zero-filled), reading 5 is not.
    let mut sizes = [16; 32];
    sizes[31] = 4;
    let out = run_cp_async(500, &sizes).unwrap_or_else(|f| panic!("{f}"));
    // Thread 30 copied its neighbour's (31's) slot.
    let slot: Vec<u8> = (496..500).map(|i| i as u8 | 1).chain([0; 12]).collect();
    assert_eq!(out[16 * 30..16 * 31], slot[..]);

    sizes[31] = 5;
    let fault = run_cp_async(500, &sizes).expect_err("a 5-byte read past the end");
    assert_eq!(fault.thread, [31, 0, 0], "{fault}");
    assert!(fault.instruction.starts_with("cp.async.cg"), "{fault}");
    match fault.kind {
        FaultKind::OutOfBounds {
            space: Space::Global,
            access: Access::Load,
            param: Some(0),
            size: 5,
            offset: 496,
            limit: 500,
            ..
        } => {}
        _ => panic!("expected an out-of-bounds source read: {fault}"),
    }
}

#[test]
fn a_source_size_above_the_copy_size_faults() {
    let mut sizes = [16; 32];
    sizes[3] = 17;
    let fault = run_cp_async(512, &sizes).expect_err("17 source bytes for 16");
    assert_eq!(fault.thread, [3, 0, 0], "{fault}");
    assert_eq!(
        fault.kind,
        FaultKind::AsyncCopySize {
            bytes: 16,
            src_bytes: 17
        },
        "{fault}"
    );
}

#[test]
fn malformed_tensor_core_instructions_are_rejected_before_running() {
    use ktune_core::ptx::Builder;
    use ktune_core::ptx::inst::{Addr, MmaKind, RegClass};

    let reject = |build: &dyn Fn(&mut Builder)| {
        let mut b = Builder::new();
        build(&mut b);
        let kernel = b.finish("malformed".into(), 1, 32, 64);
        let launch = Launch {
            grid: [1, 1, 1],
            block: [32, 1, 1],
            dynamic_shared_bytes: 64,
            workspace_bytes: 0,
            persistent: false,
            registers: 0,
        };
        let fault = ktune_vgpu::run(&kernel, &launch, &mut [vec![0; 64]])
            .expect_err("a malformed instruction ran");
        match fault.kind {
            FaultKind::InvalidKernel { reason } => reason,
            _ => panic!("expected an invalid kernel: {fault}"),
        }
    };
    let reason = reject(&|b| {
        let (smem, global) = (b.shared_base(), b.param_ptr(0));
        let at = |base| Addr { base, offset: 0 };
        b.cp_async(CpAsyncCache::Cg, at(smem), at(global), 8, None);
    });
    assert!(
        reason.contains("cp.async.cg copies [16] bytes, not 8"),
        "{reason}"
    );
    let reason = reject(&|b| {
        let f = b.f32_imm(0.0);
        let r = b.u32_imm(0);
        let acc = [f; 4];
        b.mma_acc(MmaKind::F16, acc, [r, r, r, f], [r, r]);
    });
    assert!(
        reason.contains("mma A and B fragments are .b32 registers"),
        "{reason}"
    );
    let reason = reject(&|b| {
        let smem = b.shared_base();
        let d = b.reg(RegClass::B32);
        b.push(Op::Ldmatrix {
            trans: false,
            dsts: vec![d; 3],
            addr: Addr {
                base: smem,
                offset: 0,
            },
        });
    });
    assert!(
        reason.contains("ldmatrix loads 1, 2 or 4 matrices, not 3"),
        "{reason}"
    );
}

#[test]
fn a_cp_async_over_a_word_another_thread_reads_is_a_race() {
    let fault = fault_of(&snippets::cp_async_overwrite_while_read(), &[128, 128]);
    // Thread 0 read word 1 in this barrier interval; thread 1's copy starts
    // over it: checked as a write when it starts, not only when it lands.
    assert_eq!(fault.thread, [1, 0, 0]);
    assert!(fault.instruction.starts_with("cp.async.ca"), "{fault}");
    match fault.kind {
        FaultKind::SharedRace {
            offset: 4,
            first_thread: [0, 0, 0],
            first_was_write: false,
            second_is_write: true,
            ..
        } => {}
        _ => panic!("expected a write-after-read race: {fault}"),
    }
}
