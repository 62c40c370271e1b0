//! Hopper's shared-memory matrix descriptors, which `wgmma.mma_async`
//! reads its operands through, and the canonical layouts they describe
//! (PTX ISA, "Matrix Descriptor Format" and "Shared Memory Matrix Layout").
//!
//! A descriptor is 64 bits: the start address (bits 0–13), the leading
//! dimension byte offset LBO (16–29) and the stride dimension byte offset
//! SBO (32–45), each in units of 16 bytes; the matrix base offset (49–51)
//! and the swizzle mode (62–63: none, 128-, 64- or 32-byte). With `T` the
//! elements in 16 bytes and `W` the swizzle's width in bytes, an operand
//! element at `(mn, k)` (row `m` of A or column `n` of B, and `k`) lies at
//! these byte offsets from the start:
//!
//! | major | swizzle | offset |
//! |---|---|---|
//! | K | none | `16 (mn % 8) + SBO (mn / 8) + e (k % T) + LBO (k / T)` |
//! | K | `W` | `W (mn % 8) + SBO (mn / 8) + e k` |
//! | MN | none | `e (mn % T) + SBO (mn / T) + 16 (k % 8) + LBO (k / 8)` |
//! | MN | `W` | `e (mn % (W / e)) + LBO (mn / (W / e)) + W (k % 8) + SBO (k / 8)` |
//!
//! where `e` is the element's size in bytes; the swizzle then XORs the
//! address's 16-byte chunk bits (from bit 4) with the bits from bit 7, as
//! many as `W / 16` has: a 1024-byte period for `W = 128`, which is why a
//! kernel using these instructions aligns its shared window to 1024 bytes.

use crate::shared::SHARED_BASE;

/// How the rows of a descriptor's layout are swizzled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Swizzle {
    None,
    /// Width in bytes: 32, 64 or 128.
    Bytes(u64),
}

/// A decoded matrix descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Descriptor {
    /// The start's address in the shared window, as `mov.u32 %r,
    /// ktune_smem` gives it.
    pub start: u64,
    pub leading: u64,
    pub stride: u64,
    pub swizzle: Swizzle,
}

/// Bits no field of a descriptor uses.
const UNUSED: u64 = 0b11 << 14 | 0b11 << 30 | 0b111 << 46 | 0x3ff << 52;

impl Descriptor {
    /// Decodes a descriptor; an error names what ktune never sets (unused
    /// bits, a matrix base offset).
    pub(crate) fn decode(bits: u64) -> Result<Descriptor, String> {
        if bits & UNUSED != 0 {
            return Err(format!(
                "matrix descriptor {bits:#018x} sets bits no field uses ({:#018x})",
                bits & UNUSED
            ));
        }
        let base_offset = (bits >> 49) & 0b111;
        if base_offset != 0 {
            return Err(format!(
                "matrix descriptor {bits:#018x} has a base offset of {base_offset}; the virtual GPU models only 0 (tiles aligned to the swizzle's period)"
            ));
        }
        let field = |shift: u32| ((bits >> shift) & 0x3fff) << 4;
        let swizzle = match bits >> 62 {
            0 => Swizzle::None,
            1 => Swizzle::Bytes(128),
            2 => Swizzle::Bytes(64),
            _ => Swizzle::Bytes(32),
        };
        // The field holds an 18-bit shared address; the virtual window's
        // base has its low 18 bits zero.
        Ok(Descriptor {
            start: u64::from(SHARED_BASE) | field(0),
            leading: field(16),
            stride: field(32),
            swizzle,
        })
    }

    /// The shared address of the element at `(mn, k)` of `elem` bytes, in
    /// the MN-major layout if `mn_major`, else the K-major one.
    pub(crate) fn address(&self, mn: u64, k: u64, elem: u64, mn_major: bool) -> u64 {
        let t = 16 / elem;
        let offset = match (mn_major, self.swizzle) {
            (false, Swizzle::None) => {
                16 * (mn % 8) + self.stride * (mn / 8) + elem * (k % t) + self.leading * (k / t)
            }
            (false, Swizzle::Bytes(w)) => w * (mn % 8) + self.stride * (mn / 8) + elem * k,
            (true, Swizzle::None) => {
                elem * (mn % t) + self.stride * (mn / t) + 16 * (k % 8) + self.leading * (k / 8)
            }
            (true, Swizzle::Bytes(w)) => {
                let row = w / elem;
                elem * (mn % row) + self.leading * (mn / row) + w * (k % 8) + self.stride * (k / 8)
            }
        };
        let addr = self.start + offset;
        match self.swizzle {
            Swizzle::None => addr,
            Swizzle::Bytes(w) => addr ^ (((addr >> 7) & (w / 16 - 1)) << 4),
        }
    }
}

/// `(row, column)` of the accumulator element in register `reg` of
/// thread `thread` (0 to 127) of a warpgroup: each warp holds 16 rows, and
/// every 8 columns are laid out as `mma.sync`'s m16n8 accumulator.
pub(crate) fn accumulator(thread: usize, reg: usize) -> (usize, usize) {
    let (warp, lane) = (thread / 32, thread % 32);
    let row = 16 * warp + lane / 4 + 8 * ((reg / 2) % 2);
    let col = 8 * (reg / 4) + 2 * (lane % 4) + reg % 2;
    (row, col)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bits(start: u64, leading: u64, stride: u64, mode: u64) -> u64 {
        (start >> 4) | (leading >> 4) << 16 | (stride >> 4) << 32 | mode << 62
    }

    #[test]
    fn fields_decode_in_bytes() {
        let d = Descriptor::decode(bits(0x2400, 16, 1024, 1)).unwrap();
        assert_eq!(d.start, u64::from(SHARED_BASE) + 0x2400);
        assert_eq!((d.leading, d.stride), (16, 1024));
        assert_eq!(d.swizzle, Swizzle::Bytes(128));
        assert!(
            Descriptor::decode(1 << 49)
                .unwrap_err()
                .contains("base offset")
        );
        assert!(
            Descriptor::decode(1 << 15)
                .unwrap_err()
                .contains("no field")
        );
    }

    /// A 128-byte-swizzled K-major bf16 tile of 64 rows of 64 elements,
    /// 1024 bytes per 8 rows: each row's 16-byte chunks are permuted by the
    /// row's index within its 8, and every byte of the tile is used once.
    #[test]
    fn swizzled_rows_permute_their_chunks() {
        let d = Descriptor::decode(bits(0, 16, 1024, 1)).unwrap();
        let mut seen = vec![false; 64 * 128];
        for m in 0..64 {
            for k in 0..64 {
                // Each k16 step starts 32 bytes further into the rows.
                let step = Descriptor {
                    start: d.start + 32 * (k / 16),
                    ..d
                };
                let offset = (step.address(m, k % 16, 2, false) - u64::from(SHARED_BASE)) as usize;
                let chunk = (k / 8) ^ (m % 8);
                assert_eq!(
                    offset,
                    128 * m as usize + 16 * chunk as usize + 2 * (k % 8) as usize
                );
                assert!(!std::mem::replace(&mut seen[offset], true));
            }
        }
    }

    #[test]
    fn unswizzled_layouts_are_core_matrices() {
        // K-major: 8 rows of 16 bytes, then K's next 8 at LBO, rows' next 8 at SBO.
        let d = Descriptor::decode(bits(0, 128, 256, 0)).unwrap();
        let at = |mn, k| d.address(mn, k, 2, false) - u64::from(SHARED_BASE);
        assert_eq!(at(0, 0), 0);
        assert_eq!(at(1, 0), 16);
        assert_eq!(at(0, 7), 14);
        assert_eq!(at(0, 8), 128);
        assert_eq!(at(8, 0), 256);
        // MN-major: 8 k-rows of 8 consecutive mn, next mn at SBO, next k at LBO.
        let at = |mn, k| d.address(mn, k, 2, true) - u64::from(SHARED_BASE);
        assert_eq!(at(1, 0), 2);
        assert_eq!(at(0, 1), 16);
        assert_eq!(at(8, 0), 256);
        assert_eq!(at(0, 8), 128);
    }

    #[test]
    fn each_accumulator_element_has_one_place() {
        for n in [8, 64, 256] {
            let mut seen = vec![0; 64 * n];
            for thread in 0..128 {
                for reg in 0..n / 2 {
                    let (row, col) = accumulator(thread, reg);
                    seen[row * n + col] += 1;
                }
            }
            assert!(seen.iter().all(|c| *c == 1), "N = {n}");
        }
    }
}
