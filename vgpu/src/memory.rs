//! The global state space: one buffer per kernel parameter, each at its own
//! fake base address.

use ktune_core::ptx::inst::Space;

use crate::fault::{Access, FaultKind, FenceSide};

/// Address bits that select a buffer: parameter `i` lives at `(i + 1) << 40`.
const BUFFER_SHIFT: u32 = 40;
const OFFSET_MASK: u64 = (1 << BUFFER_SHIFT) - 1;

/// Global memory as a kernel sees it: the buffers its pointer parameters
/// point to.
///
/// Parameter `i` is a 64-bit pointer to byte 0 of buffer `i`, at the fake
/// address [`Memory::base_address`]`(i)`, so `ld.param` and
/// `cvta.to.global` produce real-looking pointers. Every global access is
/// resolved back to a (buffer, offset) pair and checked against that
/// buffer's length and for natural alignment.
///
/// During a launch it also remembers which block last stored each byte, so
/// that a block changing a byte another block stored (a race on a GPU: the
/// result depends on the order the blocks run in) is a
/// [`FaultKind::GlobalRace`]. Atomics are exempt.
///
/// A block that loads a byte another block stored in this launch must be
/// ordered after that store, as split-K's last block is after the others'
/// partial sums: the storing block ran a fence after its store (release),
/// and the loading block ran one after its last atomic (acquire: the
/// atomic through which it learnt the others had finished). Fences are
/// counted per block, not per thread. A load without either is a
/// [`FaultKind::UnorderedLoad`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Memory {
    buffers: Vec<Vec<u8>>,
    /// Per buffer and byte: 1 + the linear index of the block that stored
    /// it in this launch, or 0.
    writers: Vec<Vec<u32>>,
    /// Per buffer and byte: how many fences its storing block had run
    /// when it stored it.
    stored_after: Vec<Vec<u32>>,
    /// Per buffer: whether any block stored to it in this launch.
    stored: Vec<bool>,
    /// Per block not running, by linear index: how many fences it has
    /// run, and `fences` when it last ran an atomic.
    fenced: Vec<u32>,
    atomics: Vec<Option<u32>>,
    grid: [u32; 3],
    /// 1 + the linear index of the running block.
    block: u32,
    /// Fences the running block has run.
    fences: u32,
    /// `fences` when the running block last ran an atomic.
    atomic_after: Option<u32>,
}

impl Memory {
    pub fn new(buffers: Vec<Vec<u8>>) -> Memory {
        Memory {
            buffers,
            ..Memory::default()
        }
    }

    /// Starts a launch of `grid`: no byte has been stored by any block.
    pub(crate) fn begin_launch(&mut self, grid: [u32; 3]) {
        self.grid = grid;
        self.writers = self.buffers.iter().map(|b| vec![0; b.len()]).collect();
        self.stored_after = self.writers.clone();
        self.stored = vec![false; self.buffers.len()];
        let blocks = grid.iter().map(|&g| g as usize).product();
        self.fenced = vec![0; blocks];
        self.atomics = vec![None; blocks];
        self.block = 0;
    }

    /// The block `ctaid` runs next, from where it stopped (the blocks of a
    /// cluster take turns).
    pub(crate) fn enter_block(&mut self, ctaid: [u32; 3]) {
        if let Some(left) = self.block.checked_sub(1) {
            self.fenced[left as usize] = self.fences;
            self.atomics[left as usize] = self.atomic_after;
        }
        let index = ctaid[0] + self.grid[0] * (ctaid[1] + self.grid[1] * ctaid[2]);
        self.block = 1 + index;
        self.fences = self.fenced[index as usize];
        self.atomic_after = self.atomics[index as usize];
    }

    /// The running block runs a fence.
    pub(crate) fn fence(&mut self) {
        self.fences += 1;
    }

    /// The address parameter `param` holds: `(param + 1) << 40`.
    pub fn base_address(param: usize) -> u64 {
        (param as u64 + 1) << BUFFER_SHIFT
    }

    /// The parameter buffer an address points into (or just before) and
    /// the signed byte offset from its start; `None` for an address that is
    /// near no parameter.
    pub fn locate(&self, addr: u64) -> Option<(usize, i64)> {
        let slot = addr >> BUFFER_SHIFT;
        let offset = addr & OFFSET_MASK;
        // The top half of each 2^40 range is "just below" the next buffer,
        // so a negative offset is reported against the buffer it came from.
        let (slot, offset) = if offset >= 1 << (BUFFER_SHIFT - 1) {
            (slot + 1, offset as i64 - (1i64 << BUFFER_SHIFT))
        } else {
            (slot, offset as i64)
        };
        let param = usize::try_from(slot.checked_sub(1)?).ok()?;
        (param < self.buffers.len()).then_some((param, offset))
    }

    pub fn buffers(&self) -> &[Vec<u8>] {
        &self.buffers
    }

    pub fn buffer(&self, param: usize) -> &[u8] {
        &self.buffers[param]
    }

    pub fn buffer_mut(&mut self, param: usize) -> &mut Vec<u8> {
        &mut self.buffers[param]
    }

    pub fn into_buffers(self) -> Vec<Vec<u8>> {
        self.buffers
    }

    /// The byte range an access covers, after the alignment and bounds
    /// checks. `size` is a power of two.
    fn range(&self, addr: u64, size: u32, access: Access) -> Result<(usize, usize), FaultKind> {
        aligned(addr, size, access)?;
        self.bounds(addr, size, access)
    }

    /// The (buffer, offset) of an access of `size` bytes that must lie
    /// inside one buffer.
    fn bounds(&self, addr: u64, size: u32, access: Access) -> Result<(usize, usize), FaultKind> {
        let located = self.locate(addr);
        if let Some((param, offset)) = located {
            let len = self.buffers[param].len();
            if offset >= 0 && offset as u64 + u64::from(size) <= len as u64 {
                return Ok((param, offset as usize));
            }
        }
        Err(FaultKind::OutOfBounds {
            space: Space::Global,
            access,
            addr,
            size,
            param: located.map(|(p, _)| p as u32),
            offset: located.map_or(0, |(_, o)| o),
            limit: located.map_or(0, |(p, _)| self.buffers[p].len() as u64),
        })
    }

    /// What a `cp.async` of `size` bytes from `addr` (aligned to `size`)
    /// copies when only the first `read` bytes come from memory: those
    /// bytes, then zeros. Only the bytes read must be in bounds.
    pub(crate) fn load_zero_filled(
        &self,
        addr: u64,
        size: u32,
        read: u32,
    ) -> Result<[u8; 16], FaultKind> {
        aligned(addr, size, Access::Load)?;
        let mut data = [0u8; 16];
        if read > 0 {
            let (param, start) = self.bounds(addr, read, Access::Load)?;
            self.ordered(param, start..start + read as usize)?;
            data[..read as usize]
                .copy_from_slice(&self.buffers[param][start..start + read as usize]);
        }
        Ok(data)
    }

    /// The `len` bytes from `addr` a tensor copy reads (any length, no
    /// alignment: the map's rules place its elements).
    pub(crate) fn load_span(&self, addr: u64, len: u32) -> Result<&[u8], FaultKind> {
        let (param, start) = self.bounds(addr, len, Access::Load)?;
        self.ordered(param, start..start + len as usize)?;
        Ok(&self.buffers[param][start..start + len as usize])
    }

    /// The `size` bytes a load reads.
    pub(crate) fn load(&self, addr: u64, size: u32) -> Result<&[u8], FaultKind> {
        let (param, start) = self.range(addr, size, Access::Load)?;
        self.ordered(param, start..start + size as usize)?;
        Ok(&self.buffers[param][start..start + size as usize])
    }

    /// Checks that the running block's load of `range` of buffer `param`
    /// is ordered after every other block's store to it.
    fn ordered(&self, param: usize, range: std::ops::Range<usize>) -> Result<(), FaultKind> {
        // Most loads read inputs, which no block stores to.
        let Some(writers) = self.writers.get(param).filter(|_| self.stored[param]) else {
            return Ok(());
        };
        for offset in range {
            let writer = writers[offset];
            if writer == 0 || writer == self.block {
                continue;
            }
            let released = self.fenced[writer as usize - 1] > self.stored_after[param][offset];
            let acquired = self.atomic_after.is_some_and(|at| self.fences > at);
            if !(released && acquired) {
                let other = writer - 1;
                let [gx, gy, _] = self.grid;
                return Err(FaultKind::UnorderedLoad {
                    param: param as u32,
                    offset: offset as u64,
                    other: [other % gx, (other / gx) % gy, other / (gx * gy)],
                    missing: if released {
                        FenceSide::Acquire
                    } else {
                        FenceSide::Release
                    },
                });
            }
        }
        Ok(())
    }

    /// Stores `data`; changing a byte another block of this launch stored
    /// is a race (storing the value it holds is not: the result does not
    /// depend on which block runs last).
    pub(crate) fn store(&mut self, addr: u64, data: &[u8]) -> Result<(), FaultKind> {
        let (param, start) = self.range(addr, data.len() as u32, Access::Store)?;
        let range = start..start + data.len();
        let held = &self.buffers[param][range.clone()];
        if let Some(writers) = self.writers.get_mut(param) {
            for (i, w) in writers[range.clone()].iter_mut().enumerate() {
                if *w != 0 && *w != self.block && held[i] != data[i] {
                    let other = *w - 1;
                    let [gx, gy, _] = self.grid;
                    return Err(FaultKind::GlobalRace {
                        param: param as u32,
                        offset: (start + i) as u64,
                        other: [other % gx, (other / gx) % gy, other / (gx * gy)],
                    });
                }
                *w = self.block;
            }
            self.stored_after[param][range.clone()].fill(self.fences);
            self.stored[param] = true;
        }
        self.buffers[param][range].copy_from_slice(data);
        Ok(())
    }

    /// The `size` bytes an atomic reads and writes (atomics never race).
    pub(crate) fn atomic(&mut self, addr: u64, size: u32) -> Result<&mut [u8], FaultKind> {
        let (param, start) = self.range(addr, size, Access::Store)?;
        self.atomic_after = Some(self.fences);
        Ok(&mut self.buffers[param][start..start + size as usize])
    }
}

/// Checks that a global address is a multiple of `size` (a power of two).
fn aligned(addr: u64, size: u32, access: Access) -> Result<(), FaultKind> {
    if addr & (u64::from(size) - 1) != 0 {
        return Err(FaultKind::MisalignedAccess {
            space: Space::Global,
            access,
            addr,
            size,
        });
    }
    Ok(())
}

impl From<Vec<Vec<u8>>> for Memory {
    fn from(buffers: Vec<Vec<u8>>) -> Memory {
        Memory::new(buffers)
    }
}
