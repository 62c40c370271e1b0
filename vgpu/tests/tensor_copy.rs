//! Hopper's tensor copies (`cp.async.bulk.tensor`) through tensor maps,
//! on kernels built here: one thread copies a box of a tensor into shared
//! memory, its bytes completing at a memory barrier whose phase the
//! block waits for, and the block copies the window out. The output is
//! checked against the box laid out here, element by element, with every
//! swizzle, zeros where the box hangs over the tensor's edges, and maps of
//! two and three dimensions; then the misuses, each its own fault; and
//! `wgmma` reading copied tiles without a proxy fence.

mod common;

use common::{arith, one_block};
use half::bf16;
use ktune_core::DType;
use ktune_core::lower::Launch;
use ktune_core::ptx::inst::{
    Addr, ArithOp, Cmp, MmaKind, Op, Operand, Reg, RegClass, Space, Special, Ty,
};
use ktune_core::ptx::{Builder, Kernel, Swizzle, TensorMap};
use ktune_vgpu::{Access, Fault, FaultKind, MbarrierProblem, Stats, TensorCopyProblem};

const THREADS: u32 = 64;
/// What every byte of the window holds before the copy.
const FILL: u8 = 0xee;

/// Who waits for the copy's phase before the block reads the window.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Waits {
    /// Every thread.
    All,
    /// Thread 0, then a `bar.sync`.
    FirstThenBarSync,
    /// Nobody: a `bar.sync` only.
    Nobody,
}

/// How the copying thread gets its map operand.
#[derive(Debug, Clone, Copy, PartialEq)]
enum MapOperand {
    /// `mov.b64 map_0`, then `cvta.param`.
    Generic,
    /// `mov.b64 map_0`, not made generic.
    ParamSpace,
    /// The tensor's pointer.
    Pointer,
    /// `cvta.param` of the tensor's pointer.
    CvtaOfPointer,
}

/// One copy: thread 0 arrives expecting `box_bytes + extra` and copies
/// the box at `coords` of `map` to window offset `dst` (before its
/// arrival when `copy_first`).
#[derive(Debug, Clone)]
struct Setup {
    map: TensorMap,
    coords: Vec<i32>,
    dst: u32,
    copy_first: bool,
    extra: i64,
    waits: Waits,
    operand: MapOperand,
    /// Thread 0 loads the window's first bytes right after the copy
    /// (before its arrival when `copy_first`).
    read_before_waiting: bool,
    /// Thread 0 arrives again (plainly) after its copy.
    second_arrival: bool,
    /// The thread that arrives and copies.
    copier: u32,
    /// Thread 0 loads the destination's first bytes after the `bar.sync`
    /// before the copy, ordered before the copy by nothing.
    early_read: bool,
    /// The copy's barrier operand points this many bytes past the
    /// barrier.
    barrier_moved: i64,
    /// Thread 0 fences its init of the barrier for the async proxy.
    fence_init: bool,
}

impl Setup {
    fn new(map: TensorMap, coords: &[i32]) -> Setup {
        Setup {
            map,
            coords: coords.to_vec(),
            dst: 0,
            copy_first: false,
            extra: 0,
            waits: Waits::All,
            operand: MapOperand::Generic,
            read_before_waiting: false,
            second_arrival: false,
            copier: 0,
            early_read: false,
            barrier_moved: 0,
            fence_init: true,
        }
    }

    /// The window bytes the block copies out: the 128-byte lines the box
    /// lands in.
    fn region(&self) -> u32 {
        self.map.box_bytes().div_ceil(128) * 128
    }

    /// Where the barrier is: past the region, 8-byte aligned.
    fn barrier(&self) -> u32 {
        (self.dst + self.region()).max(128).next_multiple_of(8)
    }

    fn shared(&self) -> u32 {
        self.barrier() + 8
    }
}

fn map(dtype: DType, dims: &[u64], strides: &[u64], boxed: &[u32], swizzle: Swizzle) -> TensorMap {
    TensorMap {
        param: 0,
        dtype,
        dims: dims.to_vec(),
        strides: strides.to_vec(),
        boxed: boxed.to_vec(),
        swizzle,
    }
}

fn addr(base: Reg, offset: u32) -> Addr {
    Addr {
        base,
        offset: i64::from(offset),
    }
}

/// Runs `body` on thread 0 alone.
fn first_thread(b: &mut Builder, tid: Reg, body: impl FnOnce(&mut Builder)) {
    only(b, tid, 0, body);
}

/// Runs `body` on thread `thread` alone.
fn only(b: &mut Builder, tid: Reg, thread: u32, body: impl FnOnce(&mut Builder)) {
    let skip = b.label();
    let me = b.setp(Cmp::Eq, Ty::U32, tid, Operand::Int(i64::from(thread)));
    b.bra_if(me, true, skip);
    body(b);
    b.place(skip);
}

fn load_u32(b: &mut Builder, at: Addr) {
    let value = b.reg(RegClass::B32);
    b.push(Op::Ld {
        space: Space::Shared,
        ty: Ty::U32,
        dsts: vec![value],
        addr: at,
    });
}

/// For each of `chunks` 16-byte chunks, `body` on one thread (round-robin
/// over the block), given the chunk's index.
fn each_chunk(b: &mut Builder, tid: Reg, chunks: u32, mut body: impl FnMut(&mut Builder, Reg)) {
    for round in 0..chunks.div_ceil(THREADS) {
        let skip = b.label();
        let index = b.u32_op(ArithOp::Add, tid, Operand::Int(i64::from(round * THREADS)));
        let inside = b.setp(Cmp::Lt, Ty::U32, index, Operand::Int(i64::from(chunks)));
        b.bra_if(inside, true, skip);
        body(b, index);
        b.place(skip);
    }
}

fn words(b: &mut Builder) -> Vec<Reg> {
    (0..4).map(|_| b.reg(RegClass::B32)).collect()
}

/// The map operand `how` makes, from the tensor's pointer `pointer`.
fn map_operand(b: &mut Builder, how: MapOperand, pointer: Reg) -> Reg {
    let param = b.reg(RegClass::B64);
    b.push(Op::TensorMapParam {
        dst: param,
        index: 0,
    });
    let src = match how {
        MapOperand::ParamSpace => return param,
        MapOperand::Pointer => return pointer,
        MapOperand::Generic => param,
        MapOperand::CvtaOfPointer => pointer,
    };
    let generic = b.reg(RegClass::B64);
    b.push(Op::CvtaParam { dst: generic, src });
    generic
}

/// The kernel of `setup`: the window filled with [`FILL`], a barrier
/// expecting one arrival, the copy, the waits, and the region copied out
/// to the second parameter.
fn kernel(setup: &Setup) -> Kernel {
    let mut b = Builder::new();
    let tid = b.special(Special::TidX);
    let input = b.param_ptr(0);
    let out = b.param_ptr(1);
    let smem = b.shared_base();
    let barrier = addr(smem, setup.barrier());
    let region = setup.region();
    first_thread(&mut b, tid, |b| {
        b.push(Op::MbarrierInit {
            addr: barrier,
            count: Operand::Int(1),
        });
        if setup.fence_init {
            b.push(Op::FenceProxyAsync);
        }
    });
    let fill = i64::from(u32::from_le_bytes([FILL; 4]));
    each_chunk(&mut b, tid, region / 16, |b, index| {
        let at = b.u32_mad(index, Operand::Int(16), smem);
        b.push(Op::St {
            space: Space::Shared,
            ty: Ty::U32,
            addr: addr(at, setup.dst),
            srcs: vec![Operand::Int(fill); 4],
        });
    });
    b.push(Op::BarSync);
    if setup.early_read {
        first_thread(&mut b, tid, |b| load_u32(b, addr(smem, setup.dst)));
    }
    only(&mut b, tid, setup.copier, |b| {
        let map = map_operand(b, setup.operand, input);
        let coords: Vec<Reg> = setup.coords.iter().map(|c| b.u32_imm(*c as u32)).collect();
        let expect = |b: &mut Builder| {
            let state = b.reg(RegClass::B64);
            b.push(Op::MbarrierArriveExpectTx {
                state,
                addr: barrier,
                bytes: Operand::Int(i64::from(setup.map.box_bytes()) + setup.extra),
            });
        };
        if !setup.copy_first {
            expect(b);
        }
        b.push(Op::CpAsyncBulkTensor {
            dst: addr(smem, setup.dst),
            map,
            coords,
            barrier: Addr {
                offset: barrier.offset + setup.barrier_moved,
                ..barrier
            },
            multicast: None,
        });
        if setup.read_before_waiting {
            load_u32(b, addr(smem, setup.dst));
        }
        if setup.copy_first {
            expect(b);
        }
        if setup.second_arrival {
            b.mbarrier_arrive(barrier);
        }
    });
    match setup.waits {
        Waits::All => b.mbarrier_wait(barrier, Operand::Int(0)),
        Waits::FirstThenBarSync => {
            first_thread(&mut b, tid, |b| b.mbarrier_wait(barrier, Operand::Int(0)));
            b.push(Op::BarSync);
        }
        Waits::Nobody => b.push(Op::BarSync),
    }
    each_chunk(&mut b, tid, region / 16, |b, index| {
        let at = b.u32_mad(index, Operand::Int(16), smem);
        let values = words(b);
        b.push(Op::Ld {
            space: Space::Shared,
            ty: Ty::U32,
            dsts: values.clone(),
            addr: addr(at, setup.dst),
        });
        let to = b.global_addr(out, index, 16);
        b.push(Op::St {
            space: Space::Global,
            ty: Ty::U32,
            addr: addr(to, 0),
            srcs: values.into_iter().map(Operand::Reg).collect(),
        });
    });
    let shared = setup.shared();
    let mut kernel = b.finish("tensor_copy".into(), 2, THREADS, shared);
    kernel.tensor_maps = vec![setup.map.clone()];
    kernel
}

/// Deterministic bytes for a tensor of `len` bytes.
fn tensor(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// The bytes `map` spans: up to its farthest element.
fn tensor_bytes(map: &TensorMap) -> usize {
    let size = map.dtype.size() as u64;
    let farthest = (map.dims[0] - 1) * size
        + map.dims[1..]
            .iter()
            .zip(&map.strides)
            .map(|(d, s)| (d - 1) * s)
            .sum::<u64>();
    (farthest + size) as usize
}

/// Runs `setup` on a tensor of `len` bytes (its map's span when `None`);
/// the region copied out and the run's counts.
fn run_with(setup: &Setup, len: Option<usize>) -> Result<(Vec<u8>, Stats), Fault> {
    let kernel = kernel(setup);
    let input = tensor(len.unwrap_or_else(|| tensor_bytes(&setup.map)));
    let mut params = vec![input, vec![0; setup.region() as usize]];
    let stats = ktune_vgpu::run(&kernel, &one_block(THREADS, setup.shared()), &mut params)?;
    Ok((params.swap_remove(1), stats))
}

fn run(setup: &Setup) -> Result<(Vec<u8>, Stats), Fault> {
    run_with(setup, None)
}

/// The swizzle's chunk permutation, on a byte's window offset: the
/// 16-byte chunk's index within its span XORed with the 128-byte line's
/// index modulo the chunks of a span.
fn swizzled(swizzle: Swizzle, offset: u32) -> u32 {
    let span = match swizzle {
        Swizzle::None => return offset,
        Swizzle::B32 => 32,
        Swizzle::B64 => 64,
        Swizzle::B128 => 128,
    };
    let chunks = span / 16;
    let chunk = (offset / 16) % chunks;
    let moved = chunk ^ ((offset / 128) % chunks);
    offset - chunk * 16 + moved * 16
}

/// What the region holds after `setup`'s copy of `input`, laid out here:
/// the box's elements row-major (zero outside the tensor), each byte moved
/// by the swizzle, [`FILL`] where no byte lands; and the bytes read from
/// the tensor.
fn expected(setup: &Setup, input: &[u8]) -> (Vec<u8>, u64) {
    let map = &setup.map;
    let size = map.dtype.size() as usize;
    let elements: usize = map.boxed.iter().map(|b| *b as usize).product();
    let mut region = vec![FILL; setup.region() as usize];
    let mut read = 0;
    for e in 0..elements {
        // The element's index in the box, innermost first.
        let mut rest = e;
        let mut offset = Some(0u64);
        for (d, extent) in map.boxed.iter().enumerate() {
            let i = (rest % *extent as usize) as i64;
            rest /= *extent as usize;
            let at = i64::from(setup.coords[d]) + i;
            if at < 0 || at >= map.dims[d] as i64 {
                offset = None;
            }
            let stride = if d == 0 {
                size as u64
            } else {
                map.strides[d - 1]
            };
            offset = offset.map(|o| o + at as u64 * stride);
        }
        for byte in 0..size {
            let value = match offset {
                Some(o) => input[o as usize + byte],
                None => 0,
            };
            let linear = (e * size + byte) as u32;
            let placed = swizzled(map.swizzle, setup.dst + linear) - setup.dst;
            region[placed as usize] = value;
        }
        if offset.is_some() {
            read += size as u64;
        }
    }
    (region, read)
}

/// Runs `setup` and checks the region against [`expected`], and the
/// bytes counted.
fn check(setup: &Setup) {
    let (got, stats) = run(setup).unwrap_or_else(|f| panic!("{setup:?}: {f}"));
    let input = tensor(tensor_bytes(&setup.map));
    let (want, read) = expected(setup, &input);
    if let Some(at) = (0..want.len()).find(|&i| got[i] != want[i]) {
        panic!(
            "{setup:?}: byte {at} of the region is {:#x}, expected {:#x}",
            got[at], want[at]
        );
    }
    assert_eq!(stats.global_load_bytes, read, "{setup:?}");
    let region = u64::from(setup.region());
    let copied = u64::from(setup.map.box_bytes());
    assert_eq!(stats.shared_store_bytes, region + copied, "{setup:?}");
    assert_eq!(stats.shared_load_bytes, region, "{setup:?}");
}

/// A bf16 tensor of 40 rows of 96 elements, rows padded to 208 bytes.
fn bf16_rows(boxed: [u32; 2], swizzle: Swizzle) -> TensorMap {
    map(DType::Bf16, &[96, 40], &[208], &boxed, swizzle)
}

/// An f32 tensor of 20 rows of 24 elements.
fn f32_rows(boxed: [u32; 2], swizzle: Swizzle) -> TensorMap {
    map(DType::F32, &[24, 20], &[96], &boxed, swizzle)
}

/// Each swizzle, on rows as wide as its span, a box inside the tensor and
/// boxes hanging over its edges, a negative coordinate included.
#[test]
fn boxes_land_as_their_swizzle_lays_them_out() {
    let maps = [
        bf16_rows([64, 16], Swizzle::B128),
        bf16_rows([32, 8], Swizzle::B64),
        bf16_rows([16, 8], Swizzle::B32),
        f32_rows([8, 12], Swizzle::B32),
        f32_rows([16, 8], Swizzle::B64),
        f32_rows([4, 8], Swizzle::None),
        f32_rows([12, 5], Swizzle::None),
    ];
    for map in maps {
        let (dims, boxed) = (map.dims.clone(), map.boxed.clone());
        let inside = [1, 2];
        // Past the last column and row; before the first of both.
        let right = [
            (dims[0] - u64::from(boxed[0]) / 2) as i32,
            (dims[1] - u64::from(boxed[1]) / 2) as i32,
        ];
        let left = [-3, -(boxed[1] as i32) + 1];
        for coords in [inside, right, left] {
            check(&Setup::new(map.clone(), &coords));
        }
    }
}

/// A swizzled box lands at the start of its pattern's period (eight times
/// the span): a 128-byte swizzle's at 1024, not 384; a 32-byte one's at
/// 256.
#[test]
fn a_swizzled_box_starts_its_pattern_s_period() {
    check(&Setup {
        dst: 1024,
        ..Setup::new(bf16_rows([64, 16], Swizzle::B128), &[8, 3])
    });
    check(&Setup {
        dst: 256,
        ..Setup::new(f32_rows([8, 12], Swizzle::B32), &[1, 2])
    });
    let fault = run(&Setup {
        dst: 384,
        ..Setup::new(bf16_rows([64, 16], Swizzle::B128), &[8, 3])
    })
    .unwrap_err();
    copy_instruction(&fault);
    assert_eq!(
        tensor_problem(&fault),
        &TensorCopyProblem::Misaligned {
            addr: u64::from(ktune_vgpu::SHARED_BASE) + 384,
            align: 1024
        }
    );
}

/// A 3-D f32 tensor (8 × 6 × 5, rows padded to 48 bytes, planes to 336)
/// and a 4 × 3 × 2 box hanging below its first row and past its last
/// plane.
#[test]
fn a_three_dimensional_box_lands_too() {
    let map3 = map(
        DType::F32,
        &[8, 6, 5],
        &[48, 336],
        &[4, 3, 2],
        Swizzle::None,
    );
    for coords in [[3, -1, 4], [0, 0, 0], [4, 3, 2]] {
        check(&Setup::new(map3.clone(), &coords));
    }
    let swizzled = map(
        DType::Bf16,
        &[64, 6, 5],
        &[128, 1024],
        &[64, 4, 2],
        Swizzle::B128,
    );
    check(&Setup::new(swizzled, &[0, 3, -1]));
}

/// The copy completes its bytes before the arrival that expects them:
/// the transaction count goes negative, and the arrival brings it back to
/// zero and completes the phase.
#[test]
fn a_copy_before_its_expect_tx_still_completes_the_phase() {
    for map in [
        bf16_rows([64, 16], Swizzle::B128),
        f32_rows([12, 5], Swizzle::None),
    ] {
        let setup = Setup {
            copy_first: true,
            ..Setup::new(map, &[5, -2])
        };
        check(&setup);
    }
}

/// A thread that waited, then a `bar.sync`, orders the copy before every
/// thread's reads; a `bar.sync` with no wait before it does not.
#[test]
fn a_bar_sync_orders_the_copy_only_after_a_wait() {
    let map = f32_rows([8, 12], Swizzle::B32);
    check(&Setup {
        waits: Waits::FirstThenBarSync,
        ..Setup::new(map.clone(), &[1, 2])
    });
    let fault = run(&Setup {
        waits: Waits::Nobody,
        ..Setup::new(map, &[1, 2])
    })
    .unwrap_err();
    read_races_thread_0_s_write(&fault);
    assert!(fault.instruction.starts_with("ld.shared"), "{fault}");
}

/// Asserts that `fault` is a read racing with a write by thread 0 (the
/// copy's, landed as its).
fn read_races_thread_0_s_write(fault: &Fault) {
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
}

fn tensor_problem(fault: &Fault) -> &TensorCopyProblem {
    match &fault.kind {
        FaultKind::TensorCopy { problem } => problem,
        _ => panic!("{fault}: expected a tensor copy's fault"),
    }
}

fn copy_instruction(fault: &Fault) {
    assert!(
        fault.instruction.starts_with("cp.async.bulk.tensor.2d"),
        "{fault}"
    );
}

#[test]
fn a_map_operand_must_be_a_map_s_generic_address() {
    let setup = |operand| Setup {
        operand,
        ..Setup::new(f32_rows([8, 12], Swizzle::B32), &[0, 0])
    };
    for operand in [MapOperand::ParamSpace, MapOperand::Pointer] {
        let fault = run(&setup(operand)).unwrap_err();
        copy_instruction(&fault);
        match tensor_problem(&fault) {
            TensorCopyProblem::NotMap { reg, addr } => {
                assert!(fault.instruction.contains(&format!("[{reg}, ")), "{fault}");
                if operand == MapOperand::Pointer {
                    assert_eq!(*addr, ktune_vgpu::Memory::base_address(0), "{fault}");
                }
            }
            other => panic!("{other:?}: {fault}"),
        }
        assert!(fault.to_string().contains("cvta.param"), "{fault}");
    }
    let fault = run(&setup(MapOperand::CvtaOfPointer)).unwrap_err();
    assert!(fault.instruction.starts_with("cvta.param"), "{fault}");
    assert_eq!(
        tensor_problem(&fault),
        &TensorCopyProblem::NotParam {
            addr: ktune_vgpu::Memory::base_address(0)
        }
    );
}

/// The tensor memory accelerator completes bytes at a barrier through
/// the async proxy: the init must have been fenced for it.
#[test]
fn a_barrier_s_init_must_be_fenced_for_the_async_proxy() {
    let setup = Setup {
        fence_init: false,
        ..Setup::new(f32_rows([8, 12], Swizzle::B32), &[0, 0])
    };
    let fault = run(&setup).unwrap_err();
    copy_instruction(&fault);
    assert_eq!(
        tensor_problem(&fault),
        &TensorCopyProblem::UnfencedInit {
            offset: setup.barrier()
        }
    );
    assert!(fault.to_string().contains("fence.proxy.async"), "{fault}");
}

#[test]
fn a_destination_must_be_128_byte_aligned_and_in_the_window() {
    let map = f32_rows([8, 12], Swizzle::None);
    let mut misaligned = kernel(&Setup::new(map.clone(), &[0, 0]));
    let retarget = |kernel: &mut Kernel, offset: i64| {
        for inst in &mut kernel.body {
            if let Op::CpAsyncBulkTensor { dst, .. } = &mut inst.op {
                dst.offset = offset;
            }
        }
    };
    retarget(&mut misaligned, 64);
    let mut params = vec![tensor(tensor_bytes(&map)), vec![0; 384]];
    let launch = one_block(THREADS, misaligned.dynamic_shared_bytes);
    let fault = ktune_vgpu::run(&misaligned, &launch, &mut params).unwrap_err();
    copy_instruction(&fault);
    assert_eq!(
        tensor_problem(&fault),
        &TensorCopyProblem::Misaligned {
            addr: u64::from(ktune_vgpu::SHARED_BASE) + 64,
            align: 128
        }
    );
    // Past the end of the window, whose last line the box would need.
    let mut outside = misaligned.clone();
    retarget(&mut outside, 256);
    let fault = ktune_vgpu::run(&outside, &launch, &mut params).unwrap_err();
    copy_instruction(&fault);
    assert!(
        matches!(
            fault.kind,
            FaultKind::OutOfBounds {
                space: Space::Shared,
                access: Access::Store,
                size: 384,
                ..
            }
        ),
        "{fault}"
    );
}

/// Thread 0 reads the destination before any wait: while the copy is in
/// flight (issued before the arrival that lets its phase complete), and
/// once it has landed (the copy completing the phase) but with nothing
/// ordering it before the read.
#[test]
fn reading_the_destination_before_waiting_is_a_fault() {
    let in_flight = Setup {
        copy_first: true,
        read_before_waiting: true,
        ..Setup::new(bf16_rows([64, 16], Swizzle::B128), &[0, 0])
    };
    let fault = run(&in_flight).unwrap_err();
    assert!(fault.instruction.starts_with("ld.shared"), "{fault}");
    match fault.kind {
        FaultKind::AsyncCopyPending {
            access: Access::Load,
            offset: 0,
            copier: [0, 0, 0],
            copy_pc,
            tensor: true,
            ..
        } => {
            let kernel = kernel(&in_flight);
            assert!(
                matches!(kernel.body[copy_pc].op, Op::CpAsyncBulkTensor { .. }),
                "{fault}"
            );
        }
        _ => panic!("expected a read of a tensor copy in flight: {fault}"),
    }
    assert!(fault.to_string().contains("phase completes"), "{fault}");
    let landed = Setup {
        copy_first: false,
        ..in_flight
    };
    let fault = run(&landed).unwrap_err();
    assert!(fault.instruction.starts_with("ld.shared"), "{fault}");
    read_races_thread_0_s_write(&fault);
}

fn mbarrier_problem(fault: &Fault) -> &MbarrierProblem {
    match &fault.kind {
        FaultKind::Mbarrier { problem, .. } => problem,
        _ => panic!("{fault}: expected a memory barrier's fault"),
    }
}

/// The phase expects 16 bytes more than the copy completes: every thread
/// waits for it forever.
#[test]
fn expecting_more_bytes_than_copied_deadlocks() {
    let setup = Setup {
        extra: 16,
        ..Setup::new(f32_rows([8, 12], Swizzle::B32), &[0, 0])
    };
    let fault = run(&setup).unwrap_err();
    assert_eq!(
        mbarrier_problem(&fault),
        &MbarrierProblem::Deadlock {
            parity: 0,
            completed: 0,
            expected: 1,
            pending: 0,
            transactions: 16
        },
        "{fault}"
    );
    assert!(
        fault.instruction.starts_with("mbarrier.try_wait"),
        "{fault}"
    );
    let message = fault.to_string();
    assert!(
        message.contains("deadlock") && message.contains("16 transaction bytes"),
        "{message}"
    );
    // Fewer: the copy's bytes outnumber what was expected.
    let fewer = Setup {
        extra: -16,
        ..setup.clone()
    };
    let fault = run(&fewer).unwrap_err();
    assert!(
        matches!(
            mbarrier_problem(&fault),
            MbarrierProblem::Deadlock {
                transactions: -16,
                ..
            }
        ),
        "{fault}"
    );
    // An arrival at the phase that waits only for bytes.
    let twice = Setup {
        second_arrival: true,
        copy_first: true,
        extra: 16,
        ..setup
    };
    let fault = run(&twice).unwrap_err();
    assert_eq!(
        mbarrier_problem(&fault),
        &MbarrierProblem::ExtraArrival {
            expected: 1,
            transactions: 16
        },
        "{fault}"
    );
}

#[test]
fn transaction_counts_stay_in_range() {
    let setup = Setup {
        extra: (1 << 20) - 1 - 384,
        copy_first: true,
        ..Setup::new(f32_rows([8, 12], Swizzle::B32), &[0, 0])
    };
    // Copied first, 384 bytes below zero, then expecting 2^20 - 1: the
    // count reaches 2^20 - 385, in range; 385 bytes more are out.
    let fault = run(&setup).unwrap_err();
    assert!(
        matches!(mbarrier_problem(&fault), MbarrierProblem::Deadlock { .. }),
        "{fault}"
    );
    let mut over = kernel(&setup);
    for inst in &mut over.body {
        if let Op::MbarrierArriveExpectTx { bytes, .. } = &mut inst.op {
            *bytes = Operand::Int(1 << 20);
        }
    }
    let mut params = vec![tensor(tensor_bytes(&setup.map)), vec![0; 384]];
    let launch = one_block(THREADS, over.dynamic_shared_bytes);
    let fault = ktune_vgpu::run(&over, &launch, &mut params).unwrap_err();
    assert!(
        matches!(fault.kind, FaultKind::InvalidKernel { .. }),
        "{fault}"
    );
}

#[test]
fn a_copy_s_coordinates_must_match_its_map_s_rank() {
    let setup = Setup::new(f32_rows([8, 12], Swizzle::B32), &[0, 0]);
    let mut three = kernel(&setup);
    three.tensor_maps[0] = map(
        DType::F32,
        &[24, 20, 1],
        &[96, 1920],
        &[8, 12, 1],
        Swizzle::B32,
    );
    let mut params = vec![tensor(tensor_bytes(&three.tensor_maps[0])), vec![0; 384]];
    let launch = one_block(THREADS, three.dynamic_shared_bytes);
    let fault = ktune_vgpu::run(&three, &launch, &mut params).unwrap_err();
    copy_instruction(&fault);
    assert_eq!(
        tensor_problem(&fault),
        &TensorCopyProblem::Rank {
            map: 0,
            rank: 3,
            coords: 2
        }
    );
}

/// Maps the driver would not encode, or that reach past their buffer,
/// fail the launch before any block runs.
#[test]
fn a_map_the_driver_would_refuse_fails_the_launch() {
    let good = f32_rows([8, 12], Swizzle::B32);
    let refused = |map: TensorMap, len: Option<usize>, says: &str| {
        let setup = Setup::new(map, &[0, 0]);
        let fault = run_with(&setup, len).unwrap_err();
        match &fault.kind {
            FaultKind::InvalidLaunch { reason } => {
                assert!(reason.contains("map_0") && reason.contains(says), "{fault}")
            }
            _ => panic!("expected an invalid launch: {fault}"),
        }
        assert_eq!(fault.instruction, "", "{fault}");
    };
    // Rows of 24 bytes; rows of 64 and of 16 under a 32-byte swizzle; a
    // stride not a multiple of 16.
    refused(
        map(DType::F32, &[24, 20], &[96], &[6, 12], Swizzle::B32),
        None,
        "24 bytes",
    );
    refused(
        map(DType::F32, &[24, 20], &[96], &[16, 12], Swizzle::B32),
        None,
        "not the 32-byte swizzle's span",
    );
    refused(
        map(DType::F32, &[24, 20], &[96], &[4, 12], Swizzle::B32),
        None,
        "16 bytes, not the 32-byte swizzle's span",
    );
    refused(
        map(DType::F32, &[24, 20], &[100], &[8, 12], Swizzle::B32),
        None,
        "stride 100",
    );
    // One byte short of the last element.
    refused(
        good.clone(),
        Some(tensor_bytes(&good) - 1),
        &format!("reaches {} bytes into param_0", tensor_bytes(&good)),
    );
    // The output, not a tensor the kernel reads, is fine to describe; a
    // parameter the kernel does not have is not.
    refused(TensorMap { param: 2, ..good }, None, "param_2");
}

/// `mov.b64 map_i` of a map the kernel does not take is an invalid
/// kernel.
#[test]
fn a_map_the_kernel_does_not_take_is_an_invalid_kernel() {
    let mut kernel = kernel(&Setup::new(f32_rows([8, 12], Swizzle::B32), &[0, 0]));
    for inst in &mut kernel.body {
        if let Op::TensorMapParam { index, .. } = &mut inst.op {
            *index = 1;
        }
    }
    let launch = one_block(THREADS, kernel.dynamic_shared_bytes);
    let mut params = vec![tensor(24 * 20 * 4), vec![0; 384]];
    let fault = ktune_vgpu::run(&kernel, &launch, &mut params).unwrap_err();
    match &fault.kind {
        FaultKind::InvalidKernel { reason } => assert!(reason.contains("map_1"), "{fault}"),
        _ => panic!("expected an invalid kernel: {fault}"),
    }
}

/// Two blocks in the same shared memory: the second's copy is checked and
/// lands afresh (the first block's barrier and copies end with it).
#[test]
fn each_block_copies_its_own_box() {
    let setup = Setup::new(bf16_rows([64, 16], Swizzle::B128), &[2, 5]);
    let kernel = kernel(&setup);
    let input = tensor(tensor_bytes(&setup.map));
    let mut params = vec![input.clone(), vec![0; setup.region() as usize]];
    let launch = Launch {
        grid: [3, 1, 1],
        ..one_block(THREADS, setup.shared())
    };
    let stats = ktune_vgpu::run(&kernel, &launch, &mut params).unwrap_or_else(|f| panic!("{f}"));
    // Every block stores the same values, which is no race.
    assert_eq!(params[1], expected(&setup, &input).0);
    assert_eq!(stats.blocks, 3);
}

/// A read of the destination before the copy, by a thread the copy's
/// thread is not ordered after: the copy races with it when it issues.
#[test]
fn a_copy_over_an_unordered_read_races_with_it() {
    let setup = Setup {
        copier: 32,
        early_read: true,
        ..Setup::new(f32_rows([8, 12], Swizzle::B32), &[0, 0])
    };
    let fault = run(&setup).unwrap_err();
    copy_instruction(&fault);
    assert_eq!(fault.thread, [32, 0, 0], "{fault}");
    assert!(
        matches!(
            fault.kind,
            FaultKind::SharedRace {
                first_thread: [0, 0, 0],
                first_was_write: false,
                second_is_write: true,
                ..
            }
        ),
        "{fault}"
    );
}

#[test]
fn a_copy_completes_at_a_live_barrier_only() {
    let setup = Setup {
        barrier_moved: -8,
        ..Setup::new(f32_rows([8, 12], Swizzle::B32), &[0, 0])
    };
    let fault = run(&setup).unwrap_err();
    copy_instruction(&fault);
    assert_eq!(
        mbarrier_problem(&fault),
        &MbarrierProblem::Uninitialized,
        "{fault}"
    );
}

/// Two copies, each completing at a barrier of its own: a wait for one
/// barrier's phase orders its copy, not the other's.
#[test]
fn a_wait_orders_its_own_barrier_s_copies_only() {
    let map = f32_rows([8, 12], Swizzle::None);
    let bytes = map.box_bytes();
    let run_waiting = |waits: &[u32]| {
        let mut b = Builder::new();
        let tid = b.special(Special::TidX);
        let input = b.param_ptr(0);
        let smem = b.shared_base();
        let barriers = [addr(smem, 2 * bytes), addr(smem, 2 * bytes + 8)];
        first_thread(&mut b, tid, |b| {
            for barrier in barriers {
                b.push(Op::MbarrierInit {
                    addr: barrier,
                    count: Operand::Int(1),
                });
            }
            b.push(Op::FenceProxyAsync);
        });
        b.push(Op::BarSync);
        first_thread(&mut b, tid, |b| {
            let map = map_operand(b, MapOperand::Generic, input);
            let zero = b.u32_imm(0);
            for (k, barrier) in barriers.into_iter().enumerate() {
                let state = b.reg(RegClass::B64);
                b.push(Op::MbarrierArriveExpectTx {
                    state,
                    addr: barrier,
                    bytes: Operand::Int(i64::from(bytes)),
                });
                b.push(Op::CpAsyncBulkTensor {
                    dst: addr(smem, k as u32 * bytes),
                    map,
                    coords: vec![zero, zero],
                    barrier,
                    multicast: None,
                });
            }
        });
        for &k in waits {
            b.mbarrier_wait(barriers[k as usize], Operand::Int(0));
        }
        only(&mut b, tid, 5, |b| {
            load_u32(b, addr(smem, 0));
            load_u32(b, addr(smem, bytes));
        });
        let shared = 2 * bytes + 16;
        let mut kernel = b.finish("two_barriers".into(), 1, THREADS, shared);
        kernel.tensor_maps = vec![map.clone()];
        let mut params = vec![tensor(tensor_bytes(&map))];
        ktune_vgpu::run(&kernel, &one_block(THREADS, shared), &mut params)
    };
    run_waiting(&[0, 1]).unwrap_or_else(|f| panic!("{f}"));
    let fault = run_waiting(&[1]).unwrap_err();
    assert_eq!(fault.thread, [5, 0, 0], "{fault}");
    assert!(
        matches!(
            fault.kind,
            FaultKind::SharedRace {
                offset: 0,
                first_was_write: true,
                ..
            }
        ),
        "{fault}"
    );
}

// `wgmma` on copied tiles: a 64 × 64 bf16 A and B (K-major, rows of 128
// bytes under the 128-byte swizzle, as a tensor copy of a 64 × 64 box
// lays them out), D = A · B^T in four k-steps of 16.

const TILE: u32 = 64 * 64 * 2;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Feed {
    /// Tensor copies, every thread waiting for their phase.
    Copies,
    /// Tensor copies; a `bar.sync` and no wait.
    CopiesUnwaited,
    /// Plain stores of the swizzled images, a `bar.sync` after them.
    Stores { fenced: bool },
    /// Tensor copies, then a copy into A again, in the barrier's next
    /// phase, while the products read it.
    CopyOverInFlight,
}

/// The descriptor of a K-major tile under the 128-byte swizzle starting
/// `at` bytes into the window: 8-row groups 1024 bytes apart.
fn descriptor(b: &mut Builder, smem: Reg, at: u32) -> Reg {
    let start = arith(b, ArithOp::Add, Ty::U32, smem, at);
    let start = arith(b, ArithOp::And, Ty::B32, start, 0x3ffffu32);
    let start = arith(b, ArithOp::Shr, Ty::U32, start, 4u32);
    let wide = b.reg(RegClass::B64);
    b.push(Op::Cvt {
        to: Ty::U64,
        from: Ty::U32,
        dst: wide,
        src: start,
    });
    let high: u64 = 1 << 16 | (1024 >> 4) << 32 | 1 << 62;
    arith(b, ArithOp::Or, Ty::B64, wide, Operand::Int(high as i64))
}

fn tile_map(param: usize) -> TensorMap {
    TensorMap {
        param,
        ..map(DType::Bf16, &[64, 64], &[128], &[64, 64], Swizzle::B128)
    }
}

fn wgmma_kernel(feed: Feed) -> Kernel {
    let mut b = Builder::new();
    let tid = b.special(Special::TidX);
    let a_ptr = b.param_ptr(0);
    let b_ptr = b.param_ptr(1);
    let d_ptr = b.param_ptr(2);
    let smem = b.shared_base();
    let barrier = addr(smem, 2 * TILE);
    match feed {
        Feed::Copies | Feed::CopiesUnwaited | Feed::CopyOverInFlight => {
            first_thread(&mut b, tid, |b| {
                b.push(Op::MbarrierInit {
                    addr: barrier,
                    count: Operand::Int(1),
                });
                b.push(Op::FenceProxyAsync);
            });
            b.push(Op::BarSync);
            first_thread(&mut b, tid, |b| {
                let state = b.reg(RegClass::B64);
                b.push(Op::MbarrierArriveExpectTx {
                    state,
                    addr: barrier,
                    bytes: Operand::Int(i64::from(2 * TILE)),
                });
                let zero = b.u32_imm(0);
                for (index, at) in [(0, 0), (1, TILE)] {
                    let map = map_operand_of(b, index);
                    b.push(Op::CpAsyncBulkTensor {
                        dst: addr(smem, at),
                        map,
                        coords: vec![zero, zero],
                        barrier,
                        multicast: None,
                    });
                }
            });
            if feed == Feed::CopiesUnwaited {
                b.push(Op::BarSync);
            } else {
                b.mbarrier_wait(barrier, Operand::Int(0));
            }
        }
        Feed::Stores { fenced } => {
            // The images arrive already swizzled: each thread stores 16
            // bytes a round.
            for (src, at) in [(a_ptr, 0), (b_ptr, TILE)] {
                for round in 0..TILE / 16 / 128 {
                    let chunk = arith(&mut b, ArithOp::Add, Ty::U32, tid, round * 128);
                    let from = b.global_addr(src, chunk, 16);
                    let values = words(&mut b);
                    b.push(Op::Ld {
                        space: Space::GlobalReadOnly,
                        ty: Ty::U32,
                        dsts: values.clone(),
                        addr: addr(from, 0),
                    });
                    let to = b.u32_mad(chunk, Operand::Int(16), smem);
                    b.push(Op::St {
                        space: Space::Shared,
                        ty: Ty::U32,
                        addr: addr(to, at),
                        srcs: values.into_iter().map(Operand::Reg).collect(),
                    });
                }
            }
            if fenced {
                b.push(Op::FenceProxyAsync);
            }
            b.push(Op::BarSync);
        }
    }
    let d: Vec<Reg> = (0..32).map(|_| b.reg(RegClass::F32)).collect();
    b.push(Op::WgmmaFence);
    let first = b.setp(Cmp::Ne, Ty::U32, tid, tid);
    let rest = b.setp(Cmp::Eq, Ty::U32, tid, tid);
    for step in 0..4 {
        let a = descriptor(&mut b, smem, 32 * step);
        let bd = descriptor(&mut b, smem, TILE + 32 * step);
        b.push(Op::Wgmma {
            kind: MmaKind::Bf16,
            d: d.clone(),
            a,
            b: bd,
            scale_d: if step == 0 { first } else { rest },
            trans_a: false,
            trans_b: false,
        });
    }
    b.push(Op::WgmmaCommit);
    if feed == Feed::CopyOverInFlight {
        first_thread(&mut b, tid, |b| {
            let state = b.reg(RegClass::B64);
            b.push(Op::MbarrierArriveExpectTx {
                state,
                addr: barrier,
                bytes: Operand::Int(i64::from(TILE)),
            });
            let map = map_operand_of(b, 0);
            let zero = b.u32_imm(0);
            b.push(Op::CpAsyncBulkTensor {
                dst: addr(smem, 0),
                map,
                coords: vec![zero, zero],
                barrier,
                multicast: None,
            });
        });
    }
    b.push(Op::WgmmaWait { pending: 0 });
    // Thread t holds rows 16 (t / 32) + (t % 32) / 4 (+ 8) and columns
    // 2 (t % 4) (+ 1, + 8 j) of D.
    let warp = arith(&mut b, ArithOp::Shr, Ty::U32, tid, 5u32);
    let lane = arith(&mut b, ArithOp::And, Ty::B32, tid, 31u32);
    let group = arith(&mut b, ArithOp::Shr, Ty::U32, lane, 2u32);
    let row = b.u32_mad(warp, 16u32, group);
    let quad = arith(&mut b, ArithOp::And, Ty::B32, lane, 3u32);
    let col = arith(&mut b, ArithOp::Shl, Ty::B32, quad, 1u32);
    let at = b.u32_mad(row, 64u32, col);
    let base = b.global_addr(d_ptr, at, 4);
    for (i, r) in d.iter().enumerate() {
        let offset = 8 * 64 * ((i / 2) % 2) + 8 * (i / 4) + i % 2;
        b.push(Op::St {
            space: Space::Global,
            ty: Ty::F32,
            addr: Addr {
                base,
                offset: 4 * offset as i64,
            },
            srcs: vec![Operand::Reg(*r)],
        });
    }
    let mut kernel = b.finish("wgmma_tiles".into(), 3, 128, 2 * TILE + 8);
    if !matches!(feed, Feed::Stores { .. }) {
        kernel.tensor_maps = vec![tile_map(0), tile_map(1)];
    }
    kernel
}

fn map_operand_of(b: &mut Builder, index: usize) -> Reg {
    let param = b.reg(RegClass::B64);
    b.push(Op::TensorMapParam { dst: param, index });
    let generic = b.reg(RegClass::B64);
    b.push(Op::CvtaParam {
        dst: generic,
        src: param,
    });
    generic
}

/// Runs `feed`'s kernel on 64 × 64 bf16 operands; its D and the product
/// computed here.
fn run_wgmma(feed: Feed) -> (Result<Vec<f32>, Fault>, Vec<f32>) {
    let values = |seed: usize| -> Vec<bf16> {
        common::values(64 * 64, seed as u64)
            .into_iter()
            .map(bf16::from_f32)
            .collect()
    };
    let (a, b) = (values(1), values(2));
    let row_major = |v: &[bf16]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    // The stores' images: each byte where the copy would land it.
    let image = |bytes: Vec<u8>| -> Vec<u8> {
        let mut out = vec![0; bytes.len()];
        for (i, byte) in bytes.into_iter().enumerate() {
            out[swizzled(Swizzle::B128, i as u32) as usize] = byte;
        }
        out
    };
    let (a_bytes, b_bytes) = match feed {
        Feed::Stores { .. } => (image(row_major(&a)), image(row_major(&b))),
        _ => (row_major(&a), row_major(&b)),
    };
    let kernel = wgmma_kernel(feed);
    let mut params = vec![a_bytes, b_bytes, vec![0; 64 * 64 * 4]];
    let launch = one_block(128, kernel.dynamic_shared_bytes);
    let result = ktune_vgpu::run(&kernel, &launch, &mut params).map(|_| {
        params[2]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    });
    let want = (0..64 * 64)
        .map(|i| {
            let (m, n) = (i / 64, i % 64);
            (0..64)
                .map(|k| f64::from(a[m * 64 + k].to_f32()) * f64::from(b[n * 64 + k].to_f32()))
                .sum::<f64>() as f32
        })
        .collect();
    (result, want)
}

/// The async proxy's own writes: `wgmma` reads copied tiles with no
/// `fence.proxy.async`, once its warpgroup waited for their phase; the
/// same bytes stored by the threads need the fence.
#[test]
fn wgmma_reads_copied_tiles_without_a_proxy_fence() {
    for feed in [Feed::Copies, Feed::Stores { fenced: true }] {
        let (got, want) = run_wgmma(feed);
        let got = got.unwrap_or_else(|f| panic!("{feed:?}: {f}"));
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
                "{feed:?}: D[{}][{}] = {g}, want {w}",
                i / 64,
                i % 64
            );
        }
    }
    let (got, _) = run_wgmma(Feed::Stores { fenced: false });
    let fault = got.expect_err("stores read by wgmma without a proxy fence");
    assert!(
        matches!(fault.kind, FaultKind::AsyncProxyUnfenced { .. }),
        "{fault}"
    );
    // Copied, but not waited for: the read is unordered with the copy.
    let (got, _) = run_wgmma(Feed::CopiesUnwaited);
    let fault = got.expect_err("copies read by wgmma without a wait");
    assert!(
        matches!(
            fault.kind,
            FaultKind::SharedRace {
                first_was_write: true,
                ..
            }
        ),
        "{fault}"
    );
    assert!(fault.instruction.starts_with("wgmma.mma_async"), "{fault}");
    // A copy into a tile the products still read.
    let (got, _) = run_wgmma(Feed::CopyOverInFlight);
    let fault = got.expect_err("a copy over a tile in flight");
    assert!(
        matches!(fault.kind, FaultKind::WgmmaOverwrite { offset: 0, .. }),
        "{fault}"
    );
    assert!(
        fault.instruction.starts_with("cp.async.bulk.tensor"),
        "{fault}"
    );
}
