//! Blocks and their synchronisation: runs every thread of a block to its
//! next `bar.sync` or `shfl.sync`, then completes the barriers and
//! shuffles that can complete, until every thread has exited.

use ktune_core::lower::Launch;
use ktune_core::ptx::Kernel;
use ktune_core::ptx::inst::{Instr, Op};

use crate::decode::{Exec, Program};
use crate::exec::{self, BlockEnv, Cell, Reach, State, Thread};
use crate::fault::{Fault, FaultKind, LaneState};
use crate::memory::Memory;
use crate::numeric::shfl_source;
use crate::shared::Shared;
use crate::{Config, Stats};

const WARP: usize = 32;

/// `%tid` of the thread with linear index `linear` in a block of `ntid`.
pub(crate) fn thread_coords(linear: u32, ntid: [u32; 3]) -> [u32; 3] {
    [
        linear % ntid[0],
        (linear / ntid[0]) % ntid[1],
        linear / (ntid[0] * ntid[1]),
    ]
}

/// Runs a whole grid, one block after another.
pub(crate) fn run_grid(
    kernel: &Kernel,
    launch: &Launch,
    memory: &mut Memory,
    config: &Config,
) -> Result<Stats, Fault> {
    check_launch(kernel, launch, memory).map_err(|reason| Fault {
        kernel: kernel.entry.clone(),
        block: [0; 3],
        thread: [0; 3],
        pc: 0,
        instruction: String::new(),
        kind: FaultKind::InvalidLaunch { reason },
    })?;
    let program = Program::decode(kernel).map_err(|(pc, reason)| Fault {
        kernel: kernel.entry.clone(),
        block: [0; 3],
        thread: [0; 3],
        pc,
        instruction: print_instr(&kernel.body[pc]),
        kind: FaultKind::InvalidKernel { reason },
    })?;

    let ntid = launch.block;
    let threads = (ntid[0] * ntid[1] * ntid[2]) as usize;
    let mut stats = Stats {
        shared_bytes: kernel.dynamic_shared_bytes,
        ..Stats::default()
    };
    let mut block = Block {
        kernel,
        program: &program,
        threads: (0..threads as u32)
            .map(|id| Thread {
                pc: 0,
                state: State::Ready,
                steps: 0,
                id,
                tid: thread_coords(id, ntid),
            })
            .collect(),
        regs: vec![Cell::default(); threads * program.slots as usize],
        shared: Shared::new(kernel.dynamic_shared_bytes, ntid),
    };
    let grid = launch.grid;
    let mut serial = 0u32;
    for z in 0..grid[2] {
        for y in 0..grid[1] {
            for x in 0..grid[0] {
                serial = match serial.checked_add(1) {
                    Some(s) => s,
                    None => {
                        block.regs.fill(Cell::default());
                        1
                    }
                };
                let env = BlockEnv {
                    program: &program,
                    serial,
                    step_limit: config.step_limit,
                    ctaid: [x, y, z],
                    nctaid: grid,
                    ntid,
                };
                block.run(&env, memory, &mut stats)?;
                stats.blocks += 1;
                stats.threads += threads as u64;
            }
        }
    }
    Ok(stats)
}

fn check_launch(kernel: &Kernel, launch: &Launch, memory: &Memory) -> Result<(), String> {
    if memory.buffers().len() != kernel.param_count {
        return Err(format!(
            "{} buffers given for {} parameters",
            memory.buffers().len(),
            kernel.param_count
        ));
    }
    if launch.grid.contains(&0) || launch.block.contains(&0) {
        return Err(format!(
            "empty grid {:?} or block {:?}",
            launch.grid, launch.block
        ));
    }
    let threads = launch.block.iter().map(|&d| u64::from(d)).product::<u64>();
    if threads > u64::from(kernel.block_threads) || threads > 1024 {
        return Err(format!(
            "{threads} threads per block, but the kernel allows at most {} (.maxntid) and the hardware 1024",
            kernel.block_threads
        ));
    }
    if launch.dynamic_shared_bytes < kernel.dynamic_shared_bytes {
        return Err(format!(
            "{} bytes of dynamic shared memory, but the kernel uses {}",
            launch.dynamic_shared_bytes, kernel.dynamic_shared_bytes
        ));
    }
    Ok(())
}

/// The printed form of one instruction, without the `;`.
pub(crate) fn print_instr(instr: &Instr) -> String {
    if let Op::Label(l) = instr.op {
        return format!("{}:", ktune_core::ptx::print::label_name(l));
    }
    // The printer works on whole modules: print a one-instruction kernel and
    // take the instruction's line back out of it.
    let single = Kernel {
        entry: "single".into(),
        param_count: 0,
        dynamic_shared_bytes: 0,
        block_threads: 1,
        reg_counts: Vec::new(),
        body: vec![instr.clone()],
    };
    let text = ktune_core::ptx::print(&single, ktune_core::SmVersion::BASELINE);
    text.lines()
        .skip_while(|l| *l != "{")
        .skip(1)
        .find(|l| !l.trim().is_empty())
        .map(|l| l.trim().trim_end_matches(';').to_owned())
        .unwrap_or_default()
}

/// A block's threads, register files and shared memory; reused from one
/// block to the next.
struct Block<'a> {
    kernel: &'a Kernel,
    program: &'a Program,
    threads: Vec<Thread>,
    regs: Vec<Cell>,
    shared: Shared,
}

impl Block<'_> {
    fn run(
        &mut self,
        env: &BlockEnv<'_>,
        memory: &mut Memory,
        stats: &mut Stats,
    ) -> Result<(), Fault> {
        for t in &mut self.threads {
            t.pc = 0;
            t.state = State::Ready;
            t.steps = 0;
        }
        self.shared.begin_block();
        let slots = self.program.slots as usize;
        loop {
            for i in 0..self.threads.len() {
                if self.threads[i].state != State::Ready {
                    continue;
                }
                let mut reach = Reach {
                    global: memory,
                    shared: &mut self.shared,
                    stats,
                };
                let range = i * slots..(i + 1) * slots;
                let t = &mut self.threads[i];
                match exec::run_thread(env, &mut reach, t, &mut self.regs[range]) {
                    Ok(()) => {}
                    Err(FaultKind::UninitializedShared { offset, .. }) => {
                        t.state = State::Parked { offset };
                    }
                    Err(kind) => return Err(self.fault(env, i, kind)),
                }
            }
            let parked = self.threads.iter().find_map(|t| match t.state {
                State::Parked { offset } => Some((t.id, offset)),
                _ => None,
            });
            if let Some((id, offset)) = parked {
                let kind = self.shared.settle(id, offset);
                return Err(self.fault(env, id as usize, kind));
            }
            if self.shuffle(env, stats)? {
                continue;
            }
            if !self.barrier(env, stats)? {
                return Ok(());
            }
        }
    }

    /// Completes every `shfl.sync` a whole warp waits at; whether any did.
    fn shuffle(&mut self, env: &BlockEnv<'_>, stats: &mut Stats) -> Result<bool, Fault> {
        let slots = self.program.slots as usize;
        let mut any = false;
        for warp in 0..self.threads.len().div_ceil(WARP) {
            let lanes = warp * WARP..(warp * WARP + WARP).min(self.threads.len());
            let Some(first) = lanes
                .clone()
                .find(|&i| matches!(self.threads[i].state, State::Shuffle { .. }))
            else {
                continue;
            };
            let pc = self.threads[first].pc;
            if lanes.len() < WARP {
                let kind = FaultKind::ShuffleDivergence {
                    lane: lanes.len() as u32,
                    other_thread: [0; 3],
                    other: LaneState::Missing,
                };
                return Err(self.fault(env, first, kind));
            }
            let mut a = [0u32; WARP];
            let mut b = [0u32; WARP];
            for (lane, i) in lanes.clone().enumerate() {
                let t = self.threads[i];
                let other = match t.state {
                    State::Shuffle { a: va, b: vb } if t.pc == pc => {
                        a[lane] = va;
                        b[lane] = vb;
                        continue;
                    }
                    State::Shuffle { .. } => LaneState::AtShuffle {
                        pc: self.program.origin[t.pc as usize],
                    },
                    // No thread is ready or parked after the run phase.
                    State::Exited | State::Ready | State::Parked { .. } => LaneState::Exited,
                    State::Barrier => {
                        let kind = FaultKind::BarrierDeadlock {
                            other_thread: t.tid,
                            other_pc: self.program.origin[t.pc as usize],
                        };
                        return Err(self.fault(env, first, kind));
                    }
                };
                let kind = FaultKind::ShuffleDivergence {
                    lane: lane as u32,
                    other_thread: t.tid,
                    other,
                };
                return Err(self.fault(env, first, kind));
            }
            let Exec::Shfl {
                mode, dst, clamp, ..
            } = self.program.insts[pc as usize].exec
            else {
                return Err(self.fault(env, first, internal("a shuffle stopped elsewhere")));
            };
            for (lane, i) in lanes.enumerate() {
                let j = shfl_source(mode, lane as u32, b[lane], clamp) as usize;
                self.regs[i * slots + dst as usize] = Cell {
                    value: u64::from(a[j]),
                    block: env.serial,
                };
                let t = &mut self.threads[i];
                t.pc += 1;
                t.state = State::Ready;
            }
            stats.shuffles += 1;
            any = true;
        }
        Ok(any)
    }

    /// Completes the `bar.sync` every live thread waits at; false when
    /// every thread has exited.
    fn barrier(&mut self, env: &BlockEnv<'_>, stats: &mut Stats) -> Result<bool, Fault> {
        let Some(first) = self.threads.iter().position(|t| t.state == State::Barrier) else {
            return Ok(false);
        };
        let pc = self.threads[first].pc;
        if let Some(other) = self
            .threads
            .iter()
            .find(|t| t.state == State::Barrier && t.pc != pc)
        {
            let kind = FaultKind::BarrierDivergence {
                other_thread: other.tid,
                other_pc: self.program.origin[other.pc as usize],
            };
            return Err(self.fault(env, first, kind));
        }
        for t in &mut self.threads {
            if t.state == State::Barrier {
                t.pc += 1;
                t.state = State::Ready;
            }
        }
        self.shared.barrier();
        stats.barriers += 1;
        Ok(true)
    }

    fn fault(&self, env: &BlockEnv<'_>, thread: usize, kind: FaultKind) -> Fault {
        let t = &self.threads[thread];
        let pc = self.program.origin[t.pc as usize];
        Fault {
            kernel: self.kernel.entry.clone(),
            block: env.ctaid,
            thread: t.tid,
            pc,
            instruction: self
                .kernel
                .body
                .get(pc)
                .map_or_else(|| "(end of body)".to_owned(), print_instr),
            kind,
        }
    }
}

fn internal(what: &str) -> FaultKind {
    FaultKind::InvalidKernel {
        reason: format!("virtual GPU internal error: {what}"),
    }
}
