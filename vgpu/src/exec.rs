//! The interpreter: runs one thread until it reaches a synchronisation
//! point, exits or faults.

use ktune_core::ptx::inst::{Cmp, Space, Special};
use ktune_core::ptx::tensor_map::MAX_RANK;

use crate::Stats;
use crate::async_copy::{AsyncCopies, AsyncCopy};
use crate::cluster::{self, Target};
use crate::decode::{Bin, CmpKind, Exec, Guard, Mad, Program, Slot, Src, Un};
use crate::fault::{ClusterProblem, FaultKind, TensorCopyProblem};
use crate::memory::Memory;
use crate::numeric;
use crate::shared::{MessageKind, Shared, Waited};
use crate::tensor_copy;

/// Where a thread is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    Ready,
    /// Waiting at the `bar.sync 0` at its pc.
    Barrier,
    /// Waiting at the named barrier `id` at its pc, for the phase it
    /// arrived in to complete (see [`crate::order`]).
    NamedWait {
        id: u32,
        phase: u32,
    },
    /// Waiting at the `shfl.sync` at its pc, with its operands read.
    Shuffle {
        a: u32,
        b: u32,
    },
    /// Waiting at the `ldmatrix`, `mma` or `wgmma` instruction at its pc;
    /// operands are read when the whole warp (or warpgroup) is there.
    Collective,
    /// Stopped at a load of a shared byte nobody had written yet: a race if
    /// another thread writes it before the next barrier, a read of
    /// uninitialised memory otherwise. Settled once every thread has run.
    Parked {
        offset: u32,
    },
    /// At the `ld.shared::cluster` at its pc, of `addr` in the cluster's
    /// window: the cluster completes it ([`crate::block`]), since it reads
    /// another block's shared memory.
    Remote {
        addr: u64,
    },
    /// Waiting at the `barrier.cluster.wait` at its pc.
    ClusterWait,
    /// At the `mbarrier.try_wait` at its pc, which gave up there before
    /// with as many phases completed (a first failure returns false): it
    /// tries again once the barrier at window `offset` has completed more
    /// than `completed` phases.
    MbarrierWait {
        offset: u32,
        completed: u32,
    },
    Exited,
}

/// A register: its value, and the block (numbered from 1) in which it was
/// last written, so that registers need no clearing between blocks.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Cell {
    pub value: u64,
    pub block: u32,
}

/// One thread's control state (its registers live in the block's file).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Thread {
    pub pc: u32,
    pub state: State,
    pub steps: u64,
    /// Linear index within the block.
    pub id: u32,
    pub tid: [u32; 3],
    /// The `mbarrier.try_wait` (its body index) that last gave up, and the
    /// phases its barrier had completed then (see [`State::MbarrierWait`]).
    pub gave_up: Option<(u32, u32)>,
}

/// What a thread sees that is the same for its whole block.
#[derive(Debug)]
pub(crate) struct BlockEnv<'a> {
    pub program: &'a Program,
    /// The number of this block for [`Cell::block`].
    pub serial: u32,
    pub step_limit: u64,
    pub ctaid: [u32; 3],
    pub nctaid: [u32; 3],
    pub ntid: [u32; 3],
    /// Blocks in the block's cluster (1 when the kernel declares none).
    pub cluster_blocks: u32,
}

/// The memory a thread can reach, and the counters it updates.
#[derive(Debug)]
pub(crate) struct Reach<'a> {
    pub global: &'a mut Memory,
    pub shared: &'a mut Shared,
    pub copies: &'a mut AsyncCopies,
    pub stats: &'a mut Stats,
}

/// A fault on its way out of the interpreter loop, boxed so that the
/// common result stays small.
type Trap = Box<FaultKind>;

#[cold]
fn uninit(program: &Program, slot: Slot) -> Trap {
    Box::new(FaultKind::UninitializedRegister {
        reg: program.reg_name(slot),
    })
}

/// Runs `t` from its pc until it waits at a `bar.sync` or `shfl.sync`,
/// exits, or faults (leaving its pc at the faulting instruction).
pub(crate) fn run_thread(
    env: &BlockEnv<'_>,
    reach: &mut Reach<'_>,
    t: &mut Thread,
    regs: &mut [Cell],
) -> Result<(), FaultKind> {
    let program = env.program;
    let insts = &program.insts[..];
    let mut pc = t.pc as usize;
    let mut steps = t.steps;
    let result = loop {
        steps += 1;
        match step(env, reach, t, regs, insts, pc, steps) {
            Ok(Flow::Next) => pc += 1,
            // Only a branch can make a thread run forever, so the limit is
            // checked there (a fault points at the loop's branch).
            Ok(Flow::Jump(_)) if steps > env.step_limit => {
                break Err(FaultKind::StepLimit {
                    limit: env.step_limit,
                });
            }
            Ok(Flow::Jump(target)) => pc = target as usize,
            Ok(Flow::Arrive) if !reach.shared.arrive(t.id) => {
                break Err(FaultKind::Cluster {
                    problem: ClusterProblem::ArriveTwice,
                });
            }
            Ok(Flow::Arrive) => pc += 1,
            Ok(Flow::Stop(State::ClusterWait)) if !waits_after_arriving(reach, t) => {
                break Err(FaultKind::Cluster {
                    problem: ClusterProblem::WaitWithoutArrive,
                });
            }
            Ok(Flow::Stop(state)) => {
                t.state = state;
                break Ok(());
            }
            Err(kind) => break Err(*kind),
        }
    };
    t.pc = pc as u32;
    reach.stats.instructions += steps - t.steps;
    t.steps = steps;
    result
}

/// Whether `t`, at a `barrier.cluster.wait`, has arrived at the barrier.
fn waits_after_arriving(reach: &Reach<'_>, t: &Thread) -> bool {
    let (arrived, waited) = reach.shared.cluster_counts(t.id);
    arrived > waited
}

enum Flow {
    Next,
    Jump(u32),
    /// A `barrier.cluster.arrive`.
    Arrive,
    Stop(State),
}

#[inline(always)]
fn step(
    env: &BlockEnv<'_>,
    reach: &mut Reach<'_>,
    t: &mut Thread,
    regs: &mut [Cell],
    insts: &[crate::decode::Inst],
    pc: usize,
    steps: u64,
) -> Result<Flow, Trap> {
    let program = env.program;
    let serial = env.serial;
    macro_rules! get {
        ($slot:expr) => {{
            let cell = regs[$slot as usize];
            if cell.block != serial {
                return Err(uninit(program, $slot));
            }
            cell.value
        }};
    }
    macro_rules! val {
        ($src:expr) => {
            match $src {
                Src::Reg(s) => get!(s),
                Src::Imm(v) => v,
            }
        };
    }
    macro_rules! set {
        ($slot:expr, $v:expr) => {{
            regs[$slot as usize] = Cell {
                value: $v,
                block: serial,
            };
        }};
    }
    let f = |v: u64| f32::from_bits(v as u32);
    let bits = |x: f32| u64::from(x.to_bits());

    let inst = &insts[pc];
    match inst.guard {
        Guard::Always => {}
        Guard::If(p) => {
            if get!(p) == 0 {
                return Ok(Flow::Next);
            }
        }
        Guard::IfNot(p) => {
            if get!(p) != 0 {
                return Ok(Flow::Next);
            }
        }
    }
    match inst.exec {
        Exec::Mov { dst, src } => set!(dst, val!(src)),
        Exec::Bin { op, dst, a, b } => {
            let (a, b) = (val!(a), val!(b));
            let (a32, b32) = (a as u32, b as u32);
            let v = match op {
                Bin::Add32 => u64::from(a32.wrapping_add(b32)),
                Bin::Sub32 => u64::from(a32.wrapping_sub(b32)),
                Bin::Mul32 => u64::from(a32.wrapping_mul(b32)),
                Bin::DivU32 => u64::from(a32.checked_div(b32).ok_or(FaultKind::DivisionByZero)?),
                Bin::RemU32 => u64::from(a32.checked_rem(b32).ok_or(FaultKind::DivisionByZero)?),
                Bin::DivS32 | Bin::RemS32 => {
                    if b32 == 0 {
                        return Err(Box::new(FaultKind::DivisionByZero));
                    }
                    let (x, y) = (a32 as i32, b32 as i32);
                    let r = if matches!(op, Bin::DivS32) {
                        x.wrapping_div(y)
                    } else {
                        x.wrapping_rem(y)
                    };
                    u64::from(r as u32)
                }
                Bin::MinU32 => u64::from(a32.min(b32)),
                Bin::MaxU32 => u64::from(a32.max(b32)),
                Bin::MinS32 => u64::from((a32 as i32).min(b32 as i32) as u32),
                Bin::MaxS32 => u64::from((a32 as i32).max(b32 as i32) as u32),
                // PTX clamps shift amounts to the operand width.
                Bin::Shl32 => u64::from(a32.checked_shl(b32).unwrap_or(0)),
                Bin::ShrU32 => u64::from(a32.checked_shr(b32).unwrap_or(0)),
                Bin::ShrS32 => u64::from(((a32 as i32) >> b32.min(31)) as u32),
                Bin::Add64 => a.wrapping_add(b),
                Bin::Sub64 => a.wrapping_sub(b),
                Bin::Mul64 => a.wrapping_mul(b),
                Bin::DivU64 => a.checked_div(b).ok_or(FaultKind::DivisionByZero)?,
                Bin::RemU64 => a.checked_rem(b).ok_or(FaultKind::DivisionByZero)?,
                Bin::MinU64 => a.min(b),
                Bin::MaxU64 => a.max(b),
                Bin::Shl64 => a.checked_shl(b32).unwrap_or(0),
                Bin::ShrU64 => a.checked_shr(b32).unwrap_or(0),
                Bin::And => a & b,
                Bin::Or => a | b,
                Bin::Xor => a ^ b,
                Bin::AddF => bits(f(a) + f(b)),
                Bin::SubF => bits(f(a) - f(b)),
                Bin::MulF => bits(f(a) * f(b)),
                Bin::DivF => bits(f(a) / f(b)),
                Bin::MinF => bits(numeric::min_f32(f(a), f(b))),
                Bin::MaxF => bits(numeric::max_f32(f(a), f(b))),
                Bin::MulWide => u64::from(a32) * u64::from(b32),
            };
            set!(dst, v);
        }
        Exec::Mad { kind, dst, a, b, c } => {
            let (a, b, c) = (val!(a), val!(b), val!(c));
            let v = match kind {
                Mad::Int32 => u64::from((a as u32).wrapping_mul(b as u32).wrapping_add(c as u32)),
                Mad::Int64 => a.wrapping_mul(b).wrapping_add(c),
                Mad::F32 => bits(f(a).mul_add(f(b), f(c))),
            };
            set!(dst, v);
        }
        Exec::Un { op, dst, a } => {
            let a = val!(a);
            let v = match op {
                Un::NegF => a ^ 0x8000_0000,
                Un::AbsF => a & 0x7fff_ffff,
                Un::SqrtF => bits(f(a).sqrt()),
                Un::RsqrtF => bits(numeric::rsqrt_approx(f(a))),
                Un::RcpF | Un::RcpApproxF => bits(1.0 / f(a)),
                Un::Ex2F => bits(numeric::ex2_approx(f(a))),
                Un::Lg2F => bits(numeric::lg2_approx(f(a))),
                Un::Neg32 => u64::from((a as u32).wrapping_neg()),
                Un::Abs32 => u64::from((a as i32).wrapping_abs() as u32),
                Un::NotPred => a ^ 1,
                Un::Not16 => !a & 0xffff,
                Un::Not32 => !a & 0xffff_ffff,
                Un::Not64 => !a,
            };
            set!(dst, v);
        }
        Exec::Cvt { from, to, dst, src } => set!(dst, numeric::convert(from, to, get!(src))),
        Exec::Setp {
            cmp,
            kind,
            dst,
            a,
            b,
        } => {
            let (a, b) = (val!(a), val!(b));
            let r = match kind {
                CmpKind::Unsigned => compare(cmp, a, b),
                CmpKind::S32 => compare(cmp, a as u32 as i32, b as u32 as i32),
                CmpKind::F32 => {
                    let (x, y) = (f(a), f(b));
                    match cmp {
                        // Ordered: false when either is NaN.
                        Cmp::Ne => x != y && !x.is_nan() && !y.is_nan(),
                        // Unordered not-equal: Rust's `!=`.
                        Cmp::Neu => x != y,
                        cmp => compare(cmp, x, y),
                    }
                }
            };
            set!(dst, u64::from(r));
        }
        Exec::Selp { dst, a, b, cond } => {
            let v = if get!(cond) != 0 { val!(a) } else { val!(b) };
            set!(dst, v);
        }
        Exec::Sreg { dst, sreg } => {
            let v = match sreg {
                Special::TidX => t.tid[0],
                Special::TidY => t.tid[1],
                Special::NtidX => env.ntid[0],
                Special::CtaidX => env.ctaid[0],
                Special::CtaidY => env.ctaid[1],
                Special::CtaidZ => env.ctaid[2],
                Special::NctaidX => env.nctaid[0],
                Special::NctaidY => env.nctaid[1],
                Special::LaneId => t.id % 32,
                // A virtual clock: a nanosecond an instruction the thread
                // has executed.
                Special::GlobalTimerLo => steps as u32,
            };
            set!(dst, u64::from(v));
        }
        Exec::Ld {
            space,
            elem,
            n,
            dsts,
            base,
            offset,
        } => {
            let addr = get!(base).wrapping_add(offset as u64);
            let (elem, n) = (usize::from(elem), usize::from(n));
            let size = (elem * n) as u32;
            let bytes = match space {
                Space::Global | Space::GlobalReadOnly => {
                    reach.stats.global_load_bytes += u64::from(size);
                    reach.global.load(addr, size)?
                }
                Space::Shared => {
                    reach.stats.shared_load_bytes += u64::from(size);
                    reach.shared.load(t.id, addr, size)?
                }
                Space::SharedCluster => return Ok(Flow::Stop(State::Remote { addr })),
            };
            for (i, dst) in dsts[..n].iter().enumerate() {
                set!(*dst, read_le(&bytes[i * elem..], elem));
            }
        }
        Exec::St {
            space,
            elem,
            n,
            srcs,
            base,
            offset,
        } => {
            let addr = get!(base).wrapping_add(offset as u64);
            let (elem, n) = (usize::from(elem), usize::from(n));
            let size = (elem * n) as u32;
            let mut values = [0u64; 4];
            for (v, src) in values.iter_mut().zip(&srcs[..n]) {
                *v = val!(*src);
            }
            let mut data = [0u8; 16];
            for (i, v) in values[..n].iter().enumerate() {
                write_le(&mut data[i * elem..], elem, *v);
            }
            let data = &data[..size as usize];
            match space {
                Space::Global | Space::GlobalReadOnly => {
                    reach.stats.global_store_bytes += u64::from(size);
                    reach.global.store(addr, data)?;
                }
                Space::Shared => {
                    reach.stats.shared_store_bytes += u64::from(size);
                    reach.shared.store(t.id, addr, size)?.copy_from_slice(data);
                }
                Space::SharedCluster => unreachable!("decode rejects stores to the cluster window"),
            }
        }
        Exec::Shfl { src, lane, .. } => {
            let a = get!(src) as u32;
            let b = val!(lane) as u32;
            return Ok(Flow::Stop(State::Shuffle { a, b }));
        }
        Exec::Pack { dst, lo, hi } => set!(dst, get!(lo) | get!(hi) << 16),
        Exec::Unpack { lo, hi, src } => {
            let v = get!(src);
            set!(lo, v & 0xffff);
            set!(hi, (v >> 16) & 0xffff);
        }
        Exec::CpAsync {
            dst,
            dst_offset,
            src,
            src_offset,
            bytes,
            src_bytes,
        } => {
            let dst = get!(dst).wrapping_add(dst_offset as u64);
            let src = get!(src).wrapping_add(src_offset as u64);
            let bytes = u32::from(bytes);
            let read = match src_bytes {
                Some(s) => get!(s) as u32,
                None => bytes,
            };
            if read > bytes {
                return Err(Box::new(FaultKind::AsyncCopySize {
                    bytes,
                    src_bytes: read,
                }));
            }
            let data = reach.global.load_zero_filled(src, bytes, read)?;
            let offset = reach
                .shared
                .start_async(t.id, program.origin[pc] as u32, dst, bytes)?;
            reach.stats.global_load_bytes += u64::from(read);
            reach.copies.start(
                t.id,
                AsyncCopy {
                    offset,
                    len: bytes as u8,
                    data,
                },
            );
        }
        Exec::CpCommit => reach.copies.commit(t.id),
        Exec::CpWait { pending } => {
            reach.stats.shared_store_bytes += reach.copies.wait(t.id, pending, reach.shared)?;
        }
        Exec::CpWaitAll => {
            reach.copies.commit(t.id);
            reach.stats.shared_store_bytes += reach.copies.wait(t.id, 0, reach.shared)?;
        }
        Exec::CpMbarrierArrive { base, offset } => {
            let addr = get!(base).wrapping_add(offset as u64);
            let copies = reach.copies.take(t.id);
            let (_, landed) = reach.shared.mbarrier_arrive(t.id, addr, copies)?;
            reach.stats.shared_store_bytes += landed;
        }
        Exec::MbarrierInit {
            base,
            offset,
            count,
        } => {
            let addr = get!(base).wrapping_add(offset as u64);
            reach.shared.mbarrier_init(t.id, addr, val!(count))?;
        }
        Exec::MbarrierArrive {
            state,
            base,
            offset,
        } => {
            let addr = get!(base).wrapping_add(offset as u64);
            let (phase, landed) = reach.shared.mbarrier_arrive(t.id, addr, Vec::new())?;
            reach.stats.shared_store_bytes += landed;
            set!(state, u64::from(phase));
        }
        Exec::MbarrierArriveExpectTx {
            state,
            base,
            offset,
            bytes,
        } => {
            let addr = get!(base).wrapping_add(offset as u64);
            let bytes = val!(bytes);
            let (phase, landed) = reach.shared.mbarrier_arrive_expect(t.id, addr, bytes)?;
            reach.stats.shared_store_bytes += landed;
            set!(state, u64::from(phase));
        }
        Exec::CvtaParam { dst, src } => {
            let addr = get!(src);
            let generic =
                tensor_copy::generic(addr, program.maps.len()).ok_or(FaultKind::TensorCopy {
                    problem: TensorCopyProblem::NotParam { addr },
                })?;
            set!(dst, generic);
        }
        Exec::MbarrierArriveCluster { base, offset } => {
            let addr = get!(base).wrapping_add(offset as u64);
            let own = env.ctaid[0] % env.cluster_blocks;
            // The block's own barrier, reached either way, is arrived at
            // in place.
            let target = cluster::target(addr, env.cluster_blocks).map(|t| match t {
                Target::Block { rank, addr } if rank == own => Target::Own(addr),
                other => other,
            });
            match target {
                Some(Target::Own(addr)) => {
                    let (_, landed) = reach.shared.mbarrier_arrive(t.id, addr, Vec::new())?;
                    reach.stats.shared_store_bytes += landed;
                }
                Some(Target::Block { rank, addr }) => {
                    let kind = MessageKind::Arrive {
                        addr,
                        join: Vec::new(),
                    };
                    reach
                        .shared
                        .send(t.id, program.origin[pc] as u32, rank, kind);
                }
                None => {
                    let problem = ClusterProblem::Address { addr };
                    return Err(Box::new(FaultKind::Cluster { problem }));
                }
            }
        }
        Exec::FenceMbarrierInit => reach.shared.fence_mbarrier_init(t.id),
        Exec::TensorCopy { index } => {
            let copy = &program.tensor_copies[index as usize];
            let dst = get!(copy.dst).wrapping_add(copy.dst_offset as u64);
            let barrier = get!(copy.barrier).wrapping_add(copy.barrier_offset as u64);
            let addr = get!(copy.map);
            let mut coords = [0i32; MAX_RANK];
            for (c, slot) in coords.iter_mut().zip(&copy.coords) {
                *c = get!(*slot) as u32 as i32;
            }
            let own = env.ctaid[0] % env.cluster_blocks;
            let mask = match copy.multicast {
                Some(slot) => {
                    let mask = get!(slot) as u16;
                    if mask == 0 || u32::from(mask) >> env.cluster_blocks != 0 {
                        let problem = ClusterProblem::Mask {
                            mask,
                            blocks: env.cluster_blocks,
                        };
                        return Err(Box::new(FaultKind::Cluster { problem }));
                    }
                    mask
                }
                None => 1 << own,
            };
            let Some(k) = tensor_copy::map_at(addr, program.maps.len()) else {
                let reg = program.reg_name(copy.map);
                let problem = TensorCopyProblem::NotMap { reg, addr };
                return Err(Box::new(FaultKind::TensorCopy { problem }));
            };
            let map = &program.maps[k];
            let rank = copy.coords.len();
            if map.dims.len() != rank {
                let problem = TensorCopyProblem::Rank {
                    map: k as u32,
                    rank: map.dims.len() as u32,
                    coords: rank as u32,
                };
                return Err(Box::new(FaultKind::TensorCopy { problem }));
            }
            let (data, read) = tensor_copy::read_box(reach.global, map, &coords[..rank])?;
            reach.stats.global_load_bytes += read;
            let pc = program.origin[pc] as u32;
            // The other blocks' landings go through the cluster, after the
            // issuing block's own.
            for to in (0..env.cluster_blocks).filter(|r| mask >> r & 1 == 1) {
                if to == own {
                    let landed =
                        reach
                            .shared
                            .tensor_copy(t.id, pc, dst, barrier, map.swizzle, &data)?;
                    reach.stats.shared_store_bytes += landed;
                } else {
                    let kind = MessageKind::Tensor {
                        dst,
                        barrier,
                        swizzle: map.swizzle,
                        data: data.clone(),
                    };
                    reach.shared.send(t.id, pc, to, kind);
                }
            }
        }
        Exec::MbarrierTryWait {
            done,
            base,
            offset,
            parity,
        } => {
            let addr = get!(base).wrapping_add(offset as u64);
            match reach.shared.mbarrier_try_wait(t.id, addr, val!(parity))? {
                Waited::Done => {
                    t.gave_up = None;
                    set!(done, 1);
                }
                // The same wait again, with no phase completed since: it
                // waits in place rather than spin.
                Waited::Parked { offset, completed }
                    if t.gave_up == Some((pc as u32, completed)) =>
                {
                    return Ok(Flow::Stop(State::MbarrierWait { offset, completed }));
                }
                // A `try_wait` may give up, and the first failure does.
                Waited::Parked { completed, .. } => {
                    t.gave_up = Some((pc as u32, completed));
                    set!(done, 0);
                }
            }
        }
        Exec::Ldmatrix { .. }
        | Exec::Mma { .. }
        | Exec::WgmmaFence
        | Exec::Wgmma { .. }
        | Exec::WgmmaCommit
        | Exec::WgmmaWait { .. }
        | Exec::SetMaxNReg { .. } => return Ok(Flow::Stop(State::Collective)),
        Exec::FenceProxy => reach.shared.fence_proxy(t.id),
        Exec::AtomAdd {
            float,
            dst,
            base,
            offset,
            value,
        } => {
            let addr = get!(base).wrapping_add(offset as u64);
            let value = val!(value);
            reach.stats.global_load_bytes += 4;
            reach.stats.global_store_bytes += 4;
            let word = reach.global.atomic(addr, 4)?;
            let old = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
            let new = if float {
                let sum = numeric::atomic_add_f32(f32::from_bits(old), f(value));
                sum.to_bits()
            } else {
                old.wrapping_add(value as u32)
            };
            word.copy_from_slice(&new.to_le_bytes());
            if let Some(dst) = dst {
                set!(dst, u64::from(old));
            }
        }
        Exec::Fence => reach.global.fence(),
        Exec::Bar => return Ok(Flow::Stop(State::Barrier)),
        Exec::NamedBar { id, threads, wait } => {
            let at = program.origin[pc] as u32;
            let id = val!(id) as u32;
            let order = &mut reach.shared.order;
            let phase = order.arrive(t.id, at, id, threads, wait)?;
            // This arrival completed the phase it arrived in.
            if order.completed(id) > phase {
                reach.stats.barriers += 1;
            }
            if wait {
                return Ok(Flow::Stop(State::NamedWait { id, phase }));
            }
        }
        Exec::Mapa { dst, src, rank } => {
            let mapped = cluster::map(
                get!(src),
                val!(rank),
                env.cluster_blocks,
                reach.shared.len(),
            )?;
            set!(dst, mapped);
        }
        Exec::ClusterArrive => return Ok(Flow::Arrive),
        Exec::ClusterWait => return Ok(Flow::Stop(State::ClusterWait)),
        Exec::Bra { target } => return Ok(Flow::Jump(target)),
        Exec::Ret => return Ok(Flow::Stop(State::Exited)),
        Exec::Trap => return Err(Box::new(FaultKind::Trap)),
    }
    Ok(Flow::Next)
}

/// The little-endian value of the first `elem` (2, 4 or 8) bytes.
#[inline(always)]
fn read_le(b: &[u8], elem: usize) -> u64 {
    match elem {
        2 => u64::from(u16::from_le_bytes([b[0], b[1]])),
        4 => u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        _ => u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
    }
}

/// Writes the low `elem` (2, 4 or 8) bytes of `v`, little-endian.
#[inline(always)]
fn write_le(b: &mut [u8], elem: usize, v: u64) {
    match elem {
        2 => b[..2].copy_from_slice(&(v as u16).to_le_bytes()),
        4 => b[..4].copy_from_slice(&(v as u32).to_le_bytes()),
        _ => b[..8].copy_from_slice(&v.to_le_bytes()),
    }
}

fn compare<T: PartialOrd>(cmp: Cmp, a: T, b: T) -> bool {
    match cmp {
        Cmp::Lt => a < b,
        Cmp::Le => a <= b,
        Cmp::Gt => a > b,
        Cmp::Ge => a >= b,
        Cmp::Eq => a == b,
        Cmp::Ne | Cmp::Neu => a != b,
    }
}
