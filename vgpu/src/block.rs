//! Blocks and their synchronisation: runs every thread of a block to its
//! next `bar.sync` or `shfl.sync`, then completes the barriers and
//! shuffles that can complete (a named barrier's phase completes at its
//! last arrival, [`crate::order`]; its waiting threads are released here),
//! until every thread has exited.

pub(crate) mod warpgroup;

use ktune_core::lower::Launch;
use ktune_core::ptx::Kernel;
use ktune_core::ptx::inst::{Instr, MmaKind, Op, ShflMode};

use crate::async_copy::AsyncCopies;
use crate::cluster::{self, Target};
use crate::decode::{Exec, Program, Slot};
use crate::exec::{self, BlockEnv, Cell, Reach, State, Thread};
use crate::fault::{ClusterProblem, Fault, FaultKind, LaneState, MbarrierProblem, NamedProblem};
use crate::fragment::{self, WARP};
use crate::memory::Memory;
use crate::numeric::shfl_source;
use crate::shared::{MessageKind, Shared, Writer};
use crate::{BlockOrder, Config, Stats};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

/// `%tid` of the thread with linear index `linear` in a block of `ntid`.
pub(crate) fn thread_coords(linear: u32, ntid: [u32; 3]) -> [u32; 3] {
    [
        linear % ntid[0],
        (linear / ntid[0]) % ntid[1],
        linear / (ntid[0] * ntid[1]),
    ]
}

/// Runs a whole grid, one block after another, or where the kernel
/// declares clusters, one cluster after another, its blocks together.
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
    let cluster_blocks = kernel.cluster_blocks.max(1);
    let mut blocks: Vec<Block<'_>> = (0..cluster_blocks)
        .map(|_| Block::new(kernel, &program, launch))
        .collect();
    // A persistent grid holds whole clusters, as the GPU runs them.
    let resident = (config.resident_blocks / cluster_blocks * cluster_blocks).max(cluster_blocks);
    let grid = launch.grid_for(resident);
    let mut serial = 0u32;
    memory.begin_launch(grid);
    for origin in block_order(grid, cluster_blocks, config.block_order) {
        let mut envs = Vec::with_capacity(blocks.len());
        for (rank, block) in (0..).zip(&mut blocks) {
            serial = match serial.checked_add(1) {
                Some(s) => s,
                None => {
                    block.regs.fill(Cell::default());
                    1
                }
            };
            envs.push(BlockEnv {
                program: &program,
                serial,
                step_limit: config.step_limit,
                ctaid: [origin[0] + rank, origin[1], origin[2]],
                nctaid: grid,
                ntid,
                cluster_blocks,
            });
            block.begin();
        }
        if serial < cluster_blocks {
            // The serial numbers wrapped within this cluster: registers
            // written under the numbers now reused must read as unwritten.
            for block in &mut blocks {
                block.regs.fill(Cell::default());
            }
        }
        run_cluster(&mut blocks, &envs, memory, &mut stats)?;
        stats.blocks += u64::from(cluster_blocks);
        stats.threads += threads as u64 * u64::from(cluster_blocks);
    }
    Ok(stats)
}

/// How far [`Block::advance`] got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Progress {
    /// Every thread has exited.
    Exited,
    /// Every live thread waits for the cluster: at the cluster's barrier,
    /// or at a load of another block's shared memory.
    Waiting,
}

/// Runs the blocks of one cluster (one block, for a kernel without
/// clusters) together: each as far as it gets on its own, then what they
/// sent each other (arrivals at memory barriers, multicast tensor copies)
/// and the loads of each other's shared memory, then the waits at the
/// cluster's barrier that can end, until every thread has exited.
fn run_cluster(
    blocks: &mut [Block<'_>],
    envs: &[BlockEnv<'_>],
    memory: &mut Memory,
    stats: &mut Stats,
) -> Result<(), Fault> {
    let mut exited = vec![false; blocks.len()];
    // Cluster barriers every thread has arrived at.
    let mut complete = 0;
    loop {
        for (k, block) in blocks.iter_mut().enumerate() {
            if exited[k] {
                continue;
            }
            memory.enter_block(envs[k].ctaid);
            if block.advance(&envs[k], memory, stats)? == Progress::Exited {
                exited[k] = true;
                if let Some(reader) = block.shared.read_at_exit() {
                    let kind = cluster_fault(ClusterProblem::ExitWhileRead { reader });
                    return Err(block.fault(&envs[k], block.last_exited(), kind));
                }
                if let Some((rank, thread)) = block.shared.arrival_at_exit() {
                    let kind = cluster_fault(ClusterProblem::ExitBeforeArrival { rank, thread });
                    return Err(block.fault(&envs[k], block.last_exited(), kind));
                }
            }
        }
        let delivered = deliver(blocks, envs, &exited, stats)?;
        if remote_loads(blocks, envs, &exited, stats)? | delivered {
            continue;
        }
        if exited.iter().all(|e| *e) {
            return Ok(());
        }
        cluster_waits(blocks, envs, &mut complete, stats)?;
    }
}

/// Delivers what each block's threads sent to other blocks of the
/// cluster, in the order they sent it; whether there was any. A fault in
/// a delivery is the sending thread's, at the instruction that sent it.
fn deliver(
    blocks: &mut [Block<'_>],
    envs: &[BlockEnv<'_>],
    exited: &[bool],
    stats: &mut Stats,
) -> Result<bool, Fault> {
    let mut any = false;
    for k in 0..blocks.len() {
        let rank = k as u32;
        for message in std::mem::take(&mut blocks[k].shared.outbox) {
            any = true;
            let to = message.to as usize;
            let writer = Writer::Remote {
                thread: message.thread,
                view: &message.view,
                waited: message.waited,
            };
            let landed = if exited[to] {
                Err(cluster_fault(ClusterProblem::SendAfterExit {
                    rank: message.to,
                }))
            } else {
                let shared = &mut blocks[to].shared;
                match &message.kind {
                    MessageKind::Arrive { addr, join } => {
                        shared.mbarrier_arrive_remote(writer, rank, join, *addr)
                    }
                    MessageKind::Tensor {
                        dst,
                        barrier,
                        swizzle,
                        data,
                    } => {
                        shared.tensor_copy_by(writer, message.pc, (*dst, *barrier), *swizzle, data)
                    }
                }
            };
            match landed {
                Ok(bytes) => stats.shared_store_bytes += bytes,
                Err(mut kind) => {
                    if let FaultKind::Cluster {
                        problem: ClusterProblem::RemoteRace { rank, .. },
                    } = &mut kind
                    {
                        *rank = message.to;
                    }
                    let mut fault = blocks[k].fault(&envs[k], message.thread as usize, kind);
                    fault.pc = message.pc as usize;
                    fault.instruction = print_instr(&blocks[k].kernel.body[fault.pc]);
                    return Err(fault);
                }
            }
        }
    }
    Ok(any)
}

/// Completes every thread's pending load of the cluster's shared memory;
/// whether there was any.
fn remote_loads(
    blocks: &mut [Block<'_>],
    envs: &[BlockEnv<'_>],
    exited: &[bool],
    stats: &mut Stats,
) -> Result<bool, Fault> {
    let mut any = false;
    for k in 0..blocks.len() {
        for i in 0..blocks[k].threads.len() {
            let State::Remote { addr } = blocks[k].threads[i].state else {
                continue;
            };
            let (env, reader) = (&envs[k], blocks[k].threads[i].id);
            let pc = blocks[k].threads[i].pc as usize;
            let Exec::Ld { elem, n, dsts, .. } = blocks[k].program.insts[pc].exec else {
                let kind = internal("a thread waits for the cluster at no load");
                return Err(blocks[k].fault(env, i, kind));
            };
            let size = u32::from(elem) * u32::from(n);
            let own = k as u32;
            // The block's own shared memory, reached either way, is
            // ordered by its own barriers.
            let target = cluster::target(addr, env.cluster_blocks).map(|t| match t {
                Target::Block { rank, addr } if rank == own => Target::Own(addr),
                other => other,
            });
            let mut bytes = [0u8; 16];
            let read = match target {
                None => Err(cluster_fault(ClusterProblem::Address { addr })),
                Some(Target::Own(addr)) => blocks[k]
                    .shared
                    .load(reader, addr, size)
                    .map(|b| bytes[..b.len()].copy_from_slice(b)),
                Some(Target::Block { rank, .. }) if exited[rank as usize] => {
                    Err(cluster_fault(ClusterProblem::ReadAfterExit { rank }))
                }
                Some(Target::Block { rank, addr }) => {
                    let (arrived, waited) = blocks[k].shared.cluster_counts(reader);
                    let owner = &mut blocks[rank as usize].shared;
                    owner
                        .remote_load((own, arrived, waited), rank, addr, size)
                        .map(|b| bytes[..b.len()].copy_from_slice(b))
                }
            };
            if let Err(kind) = read {
                return Err(blocks[k].fault(env, i, kind));
            }
            stats.shared_load_bytes += u64::from(size);
            let elem = usize::from(elem);
            for (j, dst) in dsts[..usize::from(n)].iter().enumerate() {
                let value = bytes[j * elem..(j + 1) * elem]
                    .iter()
                    .rev()
                    .fold(0u64, |v, b| v << 8 | u64::from(*b));
                blocks[k].set(env, i, *dst, value);
            }
            let t = &mut blocks[k].threads[i];
            t.pc += 1;
            t.state = State::Ready;
            any = true;
        }
    }
    Ok(any)
}

/// Ends the waits at the cluster's barrier that every thread of the
/// cluster (those that exited included) has arrived at; `complete` counts
/// the barriers every thread has arrived at so far. Every live thread
/// waits at one; when none can end, the cluster is deadlocked.
fn cluster_waits(
    blocks: &mut [Block<'_>],
    envs: &[BlockEnv<'_>],
    complete: &mut u32,
    stats: &mut Stats,
) -> Result<(), Fault> {
    let reached = blocks
        .iter()
        .flat_map(|b| b.threads.iter().map(|t| b.shared.cluster_counts(t.id).0))
        .min()
        .unwrap_or(0);
    let mut released = false;
    for block in blocks.iter_mut() {
        for t in &mut block.threads {
            if t.state == State::ClusterWait && block.shared.cluster_counts(t.id).1 < reached {
                block.shared.waited_at_cluster(t.id);
                t.pc += 1;
                t.state = State::Ready;
                released = true;
            }
        }
    }
    if reached > *complete {
        *complete = reached;
        for block in blocks.iter_mut() {
            block.shared.barrier();
            stats.barriers += 1;
        }
    }
    if released {
        return Ok(());
    }
    // The waiter whose barrier comes first, and a thread that never
    // arrives there.
    let waiter = blocks
        .iter()
        .enumerate()
        .flat_map(|(k, b)| {
            b.threads
                .iter()
                .enumerate()
                .filter(|(_, t)| t.state == State::ClusterWait)
                .map(move |(i, t)| (b.shared.cluster_counts(t.id).1 + 1, k, i))
        })
        .min();
    let Some((barrier, k, i)) = waiter else {
        // The blocks wait for each other at memory barriers that no one
        // is left to complete.
        for (block, env) in blocks.iter().zip(envs) {
            let stuck = block
                .threads
                .iter()
                .position(|t| matches!(t.state, State::MbarrierWait { .. }));
            if let Some(i) = stuck {
                return Err(block.fault(env, i, block.deadlock(i)));
            }
        }
        let kind = internal("the cluster waits, but at no barrier");
        return Err(blocks[0].fault(&envs[0], 0, kind));
    };
    let absent = (0..).zip(blocks.iter()).find_map(|(rank, block)| {
        let t = block
            .threads
            .iter()
            .find(|t| block.shared.cluster_counts(t.id).0 < barrier)?;
        let other_pc = match t.state {
            State::Barrier | State::NamedWait { .. } | State::MbarrierWait { .. } => {
                Some(block.program.origin[t.pc as usize] as u32)
            }
            _ => None,
        };
        Some(ClusterProblem::Deadlock {
            rank,
            other_thread: t.tid,
            other_pc,
        })
    });
    let kind = match absent {
        Some(problem) => cluster_fault(problem),
        None => internal("a wait at the cluster's barrier that every thread reached"),
    };
    Err(blocks[k].fault(&envs[k], i, kind))
}

fn cluster_fault(problem: ClusterProblem) -> FaultKind {
    FaultKind::Cluster { problem }
}

/// The first block of every cluster of `cluster` blocks along `x` in
/// `grid` (every block, for clusters of one), in the order they run.
fn block_order(grid: [u32; 3], cluster: u32, order: BlockOrder) -> Vec<[u32; 3]> {
    let mut blocks: Vec<[u32; 3]> = (0..grid[2])
        .flat_map(|z| {
            (0..grid[1]).flat_map(move |y| {
                (0..grid[0])
                    .step_by(cluster as usize)
                    .map(move |x| [x, y, z])
            })
        })
        .collect();
    if let BlockOrder::Shuffled(seed) = order {
        blocks.shuffle(&mut StdRng::seed_from_u64(seed));
    }
    blocks
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
    if kernel.cluster_blocks > 1 && !launch.grid[0].is_multiple_of(kernel.cluster_blocks) {
        return Err(format!(
            "a grid of {} blocks along x, but the kernel's clusters are {} blocks",
            launch.grid[0], kernel.cluster_blocks
        ));
    }
    if launch.registers > 255 || u64::from(launch.registers) * threads > 65536 {
        return Err(format!(
            "{} registers for each of {threads} threads: a thread has at most 255, an SM 65536",
            launch.registers
        ));
    }
    if launch.dynamic_shared_bytes < kernel.dynamic_shared_bytes {
        return Err(format!(
            "{} bytes of dynamic shared memory, but the kernel uses {}",
            launch.dynamic_shared_bytes, kernel.dynamic_shared_bytes
        ));
    }
    // As the driver's encoding would refuse them.
    crate::tensor_copy::check_maps(kernel, memory)
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
        tensor_maps: Vec::new(),
        dynamic_shared_bytes: 0,
        block_threads: 1,
        min_blocks_per_sm: 0,
        cluster_blocks: 0,
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
    copies: AsyncCopies,
    warpgroups: warpgroup::Warpgroups,
    /// Registers each thread gets at launch (0: unknown).
    registers: u32,
}

impl<'a> Block<'a> {
    fn new(kernel: &'a Kernel, program: &'a Program, launch: &Launch) -> Block<'a> {
        let ntid = launch.block;
        let threads = ntid.iter().product::<u32>();
        Block {
            kernel,
            program,
            threads: (0..threads)
                .map(|id| Thread {
                    pc: 0,
                    state: State::Ready,
                    steps: 0,
                    id,
                    tid: thread_coords(id, ntid),
                    gave_up: None,
                })
                .collect(),
            regs: vec![Cell::default(); threads as usize * program.slots as usize],
            shared: Shared::new(
                kernel.dynamic_shared_bytes,
                ntid,
                program.named_barriers || program.mbarriers,
            ),
            copies: AsyncCopies::new(threads as usize),
            warpgroups: warpgroup::Warpgroups::default(),
            registers: launch.registers,
        }
    }

    /// Readies every thread to run a new block from the start.
    fn begin(&mut self) {
        for t in &mut self.threads {
            t.pc = 0;
            t.state = State::Ready;
            t.steps = 0;
            t.gave_up = None;
        }
        self.copies.begin_block(&mut self.shared);
        self.shared.begin_block();
        if self.program.warpgroups {
            self.warpgroups
                .begin_block(self.threads.len(), self.registers);
        }
    }

    /// The index of a thread that has exited (the block's faults at its
    /// exit name one).
    fn last_exited(&self) -> usize {
        self.threads
            .iter()
            .rposition(|t| t.state == State::Exited)
            .unwrap_or(0)
    }

    /// Runs the block's threads, completing its warp collectives and
    /// barriers, until every thread has exited or waits for the cluster.
    fn advance(
        &mut self,
        env: &BlockEnv<'_>,
        memory: &mut Memory,
        stats: &mut Stats,
    ) -> Result<Progress, Fault> {
        let slots = self.program.slots as usize;
        loop {
            for i in 0..self.threads.len() {
                if self.threads[i].state != State::Ready {
                    continue;
                }
                let mut reach = Reach {
                    global: memory,
                    shared: &mut self.shared,
                    copies: &mut self.copies,
                    stats,
                };
                let range = i * slots..(i + 1) * slots;
                let t = &mut self.threads[i];
                match exec::run_thread(env, &mut reach, t, &mut self.regs[range]) {
                    Ok(()) => {}
                    Err(FaultKind::UninitializedShared { offset, .. }) => {
                        t.state = State::Parked { offset };
                    }
                    Err(FaultKind::UninitializedRegister { reg })
                        if self.warpgroups.holds(i, &reg, |s| self.program.reg_name(s)) =>
                    {
                        return Err(self.fault(env, i, FaultKind::WgmmaPending { reg }));
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
            // Waits that can end first: a warp's lanes parked at a memory
            // barrier its last lanes completed then meet at what follows.
            if self.program.mbarriers && self.release_mbarrier_waits() {
                continue;
            }
            let warp = self.collectives(env, stats)?;
            if warp | (self.program.warpgroups && self.warpgroup_collectives(env, stats)?) {
                continue;
            }
            if self.program.named_barriers && self.release_named() {
                continue;
            }
            if self
                .threads
                .iter()
                .any(|t| matches!(t.state, State::Remote { .. }))
            {
                return Ok(Progress::Waiting);
            }
            // Threads at the cluster's barrier run on once the cluster's
            // other blocks arrive; until none does, a raise may still be met.
            if self.program.warpgroups
                && !self.threads.iter().any(|t| t.state == State::ClusterWait)
            {
                self.register_deadlock(env)?;
            }
            if !self.barrier(env, stats)? {
                if self.threads.iter().any(|t| self.waits_for_cluster(env, t)) {
                    return Ok(Progress::Waiting);
                }
                if let Some((first, groups)) = self.warpgroups.unfinished() {
                    let kind = FaultKind::WgmmaInFlightAtExit { groups };
                    return Err(self.fault(env, first, kind));
                }
                return Ok(Progress::Exited);
            }
        }
    }

    /// Completes every warp-collective instruction (`shfl.sync`,
    /// `ldmatrix`, `mma`) a whole warp waits at; whether any did. A warp
    /// at a warpgroup-collective one is left to
    /// [`Block::warpgroup_collectives`].
    fn collectives(&mut self, env: &BlockEnv<'_>, stats: &mut Stats) -> Result<bool, Fault> {
        let mut any = false;
        for warp in 0..self.threads.len().div_ceil(WARP) {
            let lanes = warp * WARP..(warp * WARP + WARP).min(self.threads.len());
            let Some(first) = lanes.clone().find(|&i| {
                matches!(
                    self.threads[i].state,
                    State::Shuffle { .. } | State::Collective
                )
            }) else {
                continue;
            };
            // A lane's load of the cluster's shared memory completes first,
            // and a lane's wait at a memory barrier (not `.aligned`: other
            // warps may complete the phase, and a wait no one ends is
            // reported as the deadlock it is).
            if self.threads[lanes.clone()]
                .iter()
                .any(|t| matches!(t.state, State::Remote { .. } | State::MbarrierWait { .. }))
            {
                continue;
            }
            self.converged(env, first, lanes.clone())?;
            let pc = self.threads[first].pc;
            if self.program.insts[pc as usize].exec.is_warpgroup() {
                continue;
            }
            match self.program.insts[pc as usize].exec {
                Exec::Shfl {
                    mode, dst, clamp, ..
                } => {
                    self.shuffle(env, lanes.start, mode, dst, clamp);
                    stats.shuffles += 1;
                }
                Exec::Ldmatrix {
                    trans,
                    n,
                    dsts,
                    base,
                    offset,
                } => {
                    let (rows, wavefronts) =
                        self.matrix_rows(env, lanes.start, usize::from(n), base, offset)?;
                    stats.shared_load_bytes += 16 * 8 * u64::from(n);
                    stats.ldmatrix_wavefronts += wavefronts;
                    stats.ldmatrix_matrices += u64::from(n);
                    let frags = fragment::ldmatrix(usize::from(n), trans, &rows);
                    for (lane, regs) in frags.iter().enumerate() {
                        for (dst, v) in dsts.iter().zip(regs).take(usize::from(n)) {
                            self.set(env, lanes.start + lane, *dst, u64::from(*v));
                        }
                    }
                }
                Exec::Mma { kind, d, a, b, c } => {
                    let a = self.fragment(env, lanes.start, a)?;
                    let b = self.fragment(env, lanes.start, b)?;
                    let c = self.fragment(env, lanes.start, c)?;
                    let out = fragment::mma(kind, &a, &b, &c);
                    let flops = 2 * 16 * 8 * u64::from(kind.k());
                    stats.mma_flops += flops;
                    if kind == MmaKind::Tf32 {
                        stats.tf32_flops += flops;
                    }
                    for (lane, regs) in out.iter().enumerate() {
                        for (dst, v) in d.iter().zip(regs) {
                            self.set(env, lanes.start + lane, *dst, u64::from(*v));
                        }
                    }
                }
                _ => return Err(self.fault(env, first, internal("a warp stopped elsewhere"))),
            }
            for t in &mut self.threads[lanes] {
                t.pc += 1;
                t.state = State::Ready;
            }
            any = true;
        }
        Ok(any)
    }

    /// Checks that every lane of the warp `lanes` waits at the instruction
    /// lane `first` waits at.
    fn converged(
        &self,
        env: &BlockEnv<'_>,
        first: usize,
        lanes: std::ops::Range<usize>,
    ) -> Result<(), Fault> {
        let shuffle = matches!(self.threads[first].state, State::Shuffle { .. });
        let divergence = |lane: u32, other_thread, other| {
            if shuffle {
                FaultKind::ShuffleDivergence {
                    lane,
                    other_thread,
                    other,
                }
            } else {
                FaultKind::CollectiveDivergence {
                    lane,
                    other_thread,
                    other,
                }
            }
        };
        if lanes.len() < WARP {
            let kind = divergence(lanes.len() as u32, [0; 3], LaneState::Missing);
            return Err(self.fault(env, first, kind));
        }
        let pc = self.threads[first].pc;
        for (lane, i) in lanes.enumerate() {
            let t = self.threads[i];
            let other = match t.state {
                State::Shuffle { .. } | State::Collective if t.pc == pc => continue,
                State::Shuffle { .. } => LaneState::AtShuffle {
                    pc: self.program.origin[t.pc as usize],
                },
                State::Collective => LaneState::AtCollective {
                    pc: self.program.origin[t.pc as usize],
                },
                // No thread is ready or parked after the run phase, and
                // warps with a lane at a cluster load or a memory barrier
                // wait for it.
                State::Exited
                | State::Ready
                | State::Parked { .. }
                | State::Remote { .. }
                | State::MbarrierWait { .. } => LaneState::Exited,
                State::Barrier | State::NamedWait { .. } | State::ClusterWait => {
                    let kind = FaultKind::BarrierDeadlock {
                        other_thread: t.tid,
                        other_pc: self.program.origin[t.pc as usize],
                    };
                    return Err(self.fault(env, first, kind));
                }
            };
            return Err(self.fault(env, first, divergence(lane as u32, t.tid, other)));
        }
        Ok(())
    }

    /// Completes a `shfl.sync` of the warp starting at thread `warp`, with
    /// the operands each lane read when it arrived.
    fn shuffle(&mut self, env: &BlockEnv<'_>, warp: usize, mode: ShflMode, dst: Slot, clamp: u32) {
        let mut a = [0u32; WARP];
        let mut b = [0u32; WARP];
        for lane in 0..WARP {
            if let State::Shuffle { a: va, b: vb } = self.threads[warp + lane].state {
                a[lane] = va;
                b[lane] = vb;
            }
        }
        for (lane, b) in b.iter().enumerate() {
            let j = shfl_source(mode, lane as u32, *b, clamp) as usize;
            self.set(env, warp + lane, dst, u64::from(a[j]));
        }
    }

    /// The rows an `ldmatrix` of `n` matrices reads (lane `l < 8n` of the
    /// warp starting at thread `warp` addresses row `l`, 16 aligned bytes),
    /// and the shared-memory wavefronts they take (see
    /// [`Stats::ldmatrix_wavefronts`]).
    fn matrix_rows(
        &mut self,
        env: &BlockEnv<'_>,
        warp: usize,
        n: usize,
        base: Slot,
        offset: i64,
    ) -> Result<([[u16; 8]; WARP], u64), Fault> {
        let mut rows = [[0u16; 8]; WARP];
        let mut addresses = [0u64; WARP];
        for (lane, row) in rows.iter_mut().enumerate().take(8 * n) {
            let i = warp + lane;
            let addr = self.get(env, i, base)?.wrapping_add(offset as u64);
            addresses[lane] = addr;
            match self.shared.load(i as u32, addr, 16) {
                Ok(bytes) => {
                    for (v, pair) in row.iter_mut().zip(bytes.chunks_exact(2)) {
                        *v = u16::from_le_bytes([pair[0], pair[1]]);
                    }
                }
                Err(kind) => return Err(self.fault(env, i, kind)),
            }
        }
        let wavefronts = addresses[..8 * n]
            .chunks_exact(8)
            .map(|matrix| {
                let mut distinct = matrix.to_vec();
                distinct.sort_unstable();
                distinct.dedup();
                let mut per_group = [0u64; 8];
                for addr in distinct {
                    per_group[(addr / 16 % 8) as usize] += 1;
                }
                per_group.into_iter().max().unwrap_or(1)
            })
            .sum();
        Ok((rows, wavefronts))
    }

    /// Register `slots` of every lane of the warp starting at thread `warp`.
    fn fragment<const N: usize>(
        &self,
        env: &BlockEnv<'_>,
        warp: usize,
        slots: [Slot; N],
    ) -> Result<[[u32; N]; WARP], Fault> {
        let mut out = [[0u32; N]; WARP];
        for (lane, regs) in out.iter_mut().enumerate() {
            for (v, slot) in regs.iter_mut().zip(slots) {
                *v = self.get(env, warp + lane, slot)? as u32;
            }
        }
        Ok(out)
    }

    /// Thread `i`'s register `slot`, which must have been written.
    fn get(&self, env: &BlockEnv<'_>, i: usize, slot: Slot) -> Result<u64, Fault> {
        let cell = self.regs[i * self.program.slots as usize + slot as usize];
        if cell.block != env.serial {
            let kind = FaultKind::UninitializedRegister {
                reg: self.program.reg_name(slot),
            };
            return Err(self.fault(env, i, kind));
        }
        Ok(cell.value)
    }

    fn set(&mut self, env: &BlockEnv<'_>, i: usize, slot: Slot, value: u64) {
        self.regs[i * self.program.slots as usize + slot as usize] = Cell {
            value,
            block: env.serial,
        };
    }

    /// Releases the threads waiting at named barriers whose phase has
    /// completed; whether any.
    fn release_named(&mut self) -> bool {
        let mut any = false;
        for t in &mut self.threads {
            if let State::NamedWait { id, phase } = t.state
                && self.shared.order.completed(id) > phase
            {
                t.pc += 1;
                t.state = State::Ready;
                any = true;
            }
        }
        any
    }

    /// Readies the threads parked at a memory barrier that has completed
    /// a phase since, to try their wait again; whether any.
    fn release_mbarrier_waits(&mut self) -> bool {
        let mut any = false;
        for t in &mut self.threads {
            if let State::MbarrierWait { offset, completed } = t.state
                && self.shared.mbarrier_completed(offset) > completed
            {
                t.state = State::Ready;
                any = true;
            }
        }
        any
    }

    /// Completes the `bar.sync 0` every live thread waits at; false when
    /// every thread has exited, or waits for the cluster. A thread still at
    /// a named barrier then never gets past it.
    fn barrier(&mut self, env: &BlockEnv<'_>, stats: &mut Stats) -> Result<bool, Fault> {
        let stuck = self.threads.iter().position(|t| {
            matches!(
                t.state,
                State::NamedWait { .. } | State::MbarrierWait { .. }
            )
        });
        if let Some(i) = stuck {
            if self.threads.iter().any(|t| self.waits_for_cluster(env, t)) {
                return Ok(false);
            }
            return Err(self.fault(env, i, self.deadlock(i)));
        }
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
        // Threads waiting at the cluster's barrier meanwhile: those at the
        // bar.sync must have arrived there, or neither barrier ever ends;
        // if they have, the cluster's ends first.
        let waiting = self.threads.iter().enumerate().find_map(|(i, t)| {
            (t.state == State::ClusterWait).then(|| (i, self.shared.cluster_counts(t.id).1 + 1))
        });
        if let Some((other, barrier)) = waiting {
            let late = self.threads.iter().find(|t| {
                t.state == State::Barrier && self.shared.cluster_counts(t.id).0 < barrier
            });
            if let Some(late) = late {
                let problem = ClusterProblem::Deadlock {
                    rank: env.ctaid[0] % env.cluster_blocks,
                    other_thread: late.tid,
                    other_pc: Some(self.program.origin[pc as usize] as u32),
                };
                return Err(self.fault(env, other, cluster_fault(problem)));
            }
            return Ok(false);
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

    /// Whether thread `t` waits for another block of the cluster: at the
    /// cluster's barrier, or, in a cluster of several blocks, at a memory
    /// barrier (their threads may arrive there, or their copies land).
    fn waits_for_cluster(&self, env: &BlockEnv<'_>, t: &Thread) -> bool {
        match t.state {
            State::ClusterWait => true,
            State::MbarrierWait { .. } => env.cluster_blocks > 1,
            _ => false,
        }
    }

    /// The deadlock of thread `i`, waiting at a named or memory barrier
    /// that no thread is left to complete.
    fn deadlock(&self, i: usize) -> FaultKind {
        match self.threads[i].state {
            State::NamedWait { id, .. } => {
                let (threads, arrived) = self.shared.order.pending(id);
                let problem = NamedProblem::Deadlock {
                    threads,
                    arrived: arrived as u32,
                };
                FaultKind::NamedBarrier { id, problem }
            }
            State::MbarrierWait { offset, completed } => {
                let (expected, pending, transactions) = self.shared.mbarrier_pending(offset);
                let problem = MbarrierProblem::Deadlock {
                    parity: completed & 1,
                    completed,
                    expected,
                    pending,
                    transactions,
                };
                FaultKind::Mbarrier { offset, problem }
            }
            _ => internal("a deadlock of a thread at no barrier"),
        }
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
