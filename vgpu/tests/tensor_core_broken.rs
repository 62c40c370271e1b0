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
