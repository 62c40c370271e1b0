//! Tensor maps and Hopper's tensor copies (`cp.async.bulk.tensor`): the
//! addresses a kernel reaches its maps by, the launch's checks of the maps
//! against their buffers, and the reading of a copy's box.
//!
//! A kernel takes its tensor maps by value, after its pointers
//! ([`Kernel::tensor_maps`]). `mov.b64 %rd, map_i` yields map `i`'s
//! address in parameter space, [`PARAM_BASE`]` + 128 i`, and
//! `cvta.param.u64` makes it generic, [`GENERIC_BASE`]` + 128 i`: fake
//! addresses, like the shared window's, below every buffer
//! ([`crate::Memory::base_address`]`(0)` is 2^40, and its lower half
//! reads as just below that buffer) and above the shared and cluster
//! windows, so that one used as the other, or as a pointer, is caught. A
//! copy's map operand must hold exactly a map's generic address.
//!
//! The launch checks each map as the driver's encoding would
//! ([`TensorMap::check`]), that it describes a pointer parameter, and
//! that its farthest element lies in that parameter's buffer; so a copy
//! reads only in-bounds bytes. The copy reads its source when it issues:
//! the box whose first element is at its coordinates (`.s32`, innermost
//! first), row-major, the innermost dimension contiguous, elements
//! outside `[0, dims[d])` along any dimension reading as zero (negative
//! coordinates included). Its bytes' landing is the shared memory's
//! (`shared::mbarrier`).

use ktune_core::ptx::{Kernel, TensorMap};

use crate::fault::FaultKind;
use crate::memory::Memory;

/// Where map 0 is in parameter space; map `i` is [`MAP_BYTES`]` · i` on.
pub(crate) const PARAM_BASE: u64 = 1 << 36;
/// Where map 0's generic address is.
pub(crate) const GENERIC_BASE: u64 = 1 << 37;
/// A tensor map's bytes.
const MAP_BYTES: u64 = 128;

/// `mov.b64 %rd, map_i`: map `index`'s address in parameter space.
pub(crate) fn param_address(index: usize) -> u64 {
    PARAM_BASE + MAP_BYTES * index as u64
}

/// `cvta.param.u64` of `addr` in a kernel of `maps` tensor maps: the
/// generic address of the same byte of the map it lies in, if any.
pub(crate) fn generic(addr: u64, maps: usize) -> Option<u64> {
    let offset = addr.checked_sub(PARAM_BASE)?;
    (offset < MAP_BYTES * maps as u64).then_some(GENERIC_BASE + offset)
}

/// The map whose generic address `addr` is, among `maps`.
pub(crate) fn map_at(addr: u64, maps: usize) -> Option<usize> {
    let offset = addr.checked_sub(GENERIC_BASE)?;
    let index = usize::try_from(offset / MAP_BYTES).ok()?;
    (offset.is_multiple_of(MAP_BYTES) && index < maps).then_some(index)
}

/// Checks each of `kernel`'s tensor maps as the launch must encode it for
/// the buffers of `memory` (one for each pointer parameter).
pub(crate) fn check_maps(kernel: &Kernel, memory: &Memory) -> Result<(), String> {
    for (i, map) in kernel.tensor_maps.iter().enumerate() {
        map.check()
            .map_err(|reason| format!("tensor map map_{i} ({map}): {reason}"))?;
        if map.param >= kernel.param_count {
            return Err(format!(
                "tensor map map_{i} describes param_{}, but the kernel has {} pointer parameters",
                map.param, kernel.param_count
            ));
        }
        let size = u128::from(map.dtype.size());
        let farthest = (u128::from(map.dims[0]) - 1) * size
            + map
                .dims
                .iter()
                .skip(1)
                .zip(&map.strides)
                .map(|(d, s)| (u128::from(*d) - 1) * u128::from(*s))
                .sum::<u128>();
        let len = memory.buffer(map.param).len();
        if farthest + size > len as u128 {
            return Err(format!(
                "tensor map map_{i} ({map}) reaches {} bytes into param_{}, which holds {len}",
                farthest + size,
                map.param
            ));
        }
    }
    Ok(())
}

/// The box of `map` whose first element is at `coords` (one for each
/// dimension), row-major, zeros where it lies outside the tensor; and the
/// bytes read from global memory.
pub(crate) fn read_box(
    memory: &Memory,
    map: &TensorMap,
    coords: &[i32],
) -> Result<(Vec<u8>, u64), FaultKind> {
    let size = map.dtype.size() as usize;
    let boxed: Vec<usize> = map.boxed.iter().map(|b| *b as usize).collect();
    let row_bytes = boxed[0] * size;
    let rows: usize = boxed[1..].iter().product();
    let mut data = vec![0u8; row_bytes * rows];
    let mut read = 0;
    // The inner dimension's elements inside the tensor: `lo..hi` of the
    // row's.
    let first = i64::from(coords[0]);
    let lo = (-first).clamp(0, boxed[0] as i64);
    let hi = (map.dims[0] as i64 - first).clamp(lo, boxed[0] as i64);
    if lo == hi {
        return Ok((data, 0));
    }
    'rows: for row in 0..rows {
        let mut offset = (first + lo) as u64 * size as u64;
        let mut rest = row;
        for d in 1..boxed.len() {
            let at = i64::from(coords[d]) + (rest % boxed[d]) as i64;
            rest /= boxed[d];
            if at < 0 || at as u64 >= map.dims[d] {
                continue 'rows;
            }
            // In range: the launch checked the tensor fits its buffer.
            offset += at as u64 * map.strides[d - 1];
        }
        let len = (hi - lo) as usize * size;
        let addr = Memory::base_address(map.param) + offset;
        let bytes = memory.load_span(addr, len as u32)?;
        let at = row * row_bytes + lo as usize * size;
        data[at..at + len].copy_from_slice(bytes);
        read += len as u64;
    }
    Ok((data, read))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ktune_core::DType;
    use ktune_core::ptx::Swizzle;

    #[test]
    fn map_addresses_are_no_one_else_s() {
        let memory = Memory::new(vec![vec![0; 64]; 2]);
        for addr in [param_address(0), param_address(3), GENERIC_BASE] {
            assert_eq!(memory.locate(addr), None);
        }
        assert_eq!(generic(param_address(2), 3), Some(GENERIC_BASE + 256));
        assert_eq!(generic(param_address(3), 3), None);
        assert_eq!(generic(GENERIC_BASE, 3), None);
        assert_eq!(map_at(GENERIC_BASE + 256, 3), Some(2));
        assert_eq!(map_at(GENERIC_BASE + 260, 3), None);
        assert_eq!(map_at(param_address(0), 3), None);
    }

    /// A 5 × 3 f32 tensor in rows of 32 bytes: a 4 × 2 box hanging over
    /// its first column and its last row.
    #[test]
    fn a_box_over_the_edges_reads_zeros_there() {
        let values: Vec<u8> = (0..5 * 8u32)
            .flat_map(|i| (i as f32).to_le_bytes())
            .collect();
        let memory = Memory::new(vec![values]);
        let map = TensorMap {
            param: 0,
            dtype: DType::F32,
            dims: vec![5, 3],
            strides: vec![32],
            boxed: vec![4, 2],
            swizzle: Swizzle::None,
        };
        let (data, read) = read_box(&memory, &map, &[-1, 2]).expect("in bounds");
        let got: Vec<f32> = data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(got, [0.0, 16.0, 17.0, 18.0, 0.0, 0.0, 0.0, 0.0]);
        assert_eq!(read, 12);
        let (_, read) = read_box(&memory, &map, &[5, 0]).expect("in bounds");
        assert_eq!(read, 0);
    }
}
