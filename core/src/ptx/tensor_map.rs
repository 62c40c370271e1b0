//! Tensor maps: the descriptors Hopper's tensor memory accelerator copies
//! through ([`super::inst::Op::CpAsyncBulkTensor`]). A kernel takes each by
//! value, after its pointers; its launcher encodes it for the buffer it
//! passes as the map's parameter (on a GPU with the driver's
//! `cuTensorMapEncodeTiled`: tiled, not interleaved, L2 promotion of
//! 128 bytes, elements outside the tensor read as zero). The printed kernel
//! states each map in a comment, so that its text says how to launch it.

use std::fmt;

use crate::dtype::DType;

/// The most dimensions a tensor map has.
pub const MAX_RANK: usize = 5;

/// The most elements of a box along one dimension.
pub const MAX_BOX: u32 = 256;

/// How a copy lays a box's rows out in shared memory: as they are, or
/// with each row's 16-byte chunks permuted within spans of 32, 64 or 128
/// bytes (`chunk ^ (row / (128 / span)) % (span / 16)`, the pattern
/// repeating every `8 · span` bytes from an address aligned to that).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Swizzle {
    None,
    B32,
    B64,
    B128,
}

impl Swizzle {
    /// The span the chunks are permuted within (`None`: no permutation).
    pub fn span(self) -> Option<u32> {
        match self {
            Swizzle::None => None,
            Swizzle::B32 => Some(32),
            Swizzle::B64 => Some(64),
            Swizzle::B128 => Some(128),
        }
    }

    /// The swizzle whose span is `bytes`, if there is one.
    pub fn of_span(bytes: u32) -> Option<Swizzle> {
        [Swizzle::B32, Swizzle::B64, Swizzle::B128]
            .into_iter()
            .find(|s| s.span() == Some(bytes))
    }

    /// Where in shared memory a copied byte lands that would land at
    /// `offset` unswizzled: the pattern works on the address's bits, so a
    /// destination aligned to its period gets it from its start.
    pub fn place(self, offset: u32) -> u32 {
        match self.span() {
            None => offset,
            // Bits 4.. of the offset name the 16-byte chunk; those above
            // the span's own bits, the row within the 128-byte line's
            // repeat: XOR them into the chunk's bits within the span.
            Some(span) => {
                let chunks = span / 16;
                let key = (offset / 128) % chunks;
                offset ^ (key << 4)
            }
        }
    }
}

/// One tensor map a kernel takes (see the module comment).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TensorMap {
    /// The kernel parameter (a pointer) whose buffer the map describes.
    pub param: usize,
    pub dtype: DType,
    /// Extents in elements, innermost first.
    pub dims: Vec<u64>,
    /// Byte strides of the dimensions after the first.
    pub strides: Vec<u64>,
    /// The box one copy moves, in elements, innermost first.
    pub boxed: Vec<u32>,
    pub swizzle: Swizzle,
}

impl TensorMap {
    /// Bytes one copy moves: the whole box, zeros for what lies outside
    /// the tensor included.
    pub fn box_bytes(&self) -> u32 {
        self.boxed.iter().product::<u32>() * self.dtype.size()
    }

    /// Checks what the driver requires of an encoding: 1 to 5 dimensions,
    /// extents from 1 to 2^31 - 1 (coordinates are `.s32`), strides
    /// multiples of 16 below 2^40, boxes of 1 to 256 elements a dimension
    /// whose innermost row is a multiple of 16 bytes and, swizzled, the
    /// span exactly (the driver allows narrower rows, whose layout neither
    /// the lowering nor the virtual GPU relies on).
    pub fn check(&self) -> Result<(), String> {
        let rank = self.dims.len();
        if rank == 0 || rank > MAX_RANK {
            return Err(format!(
                "{rank} dimensions; a tensor map has 1 to {MAX_RANK}"
            ));
        }
        if self.strides.len() != rank - 1 || self.boxed.len() != rank {
            return Err(format!(
                "{rank} dimensions with {} strides and a box of {}: expected {} and {rank}",
                self.strides.len(),
                self.boxed.len(),
                rank - 1
            ));
        }
        if let Some(d) = self.dims.iter().find(|d| **d == 0 || **d >= 1 << 31) {
            return Err(format!("extent {d} is outside 1 to 2^31 - 1"));
        }
        if let Some(s) = self
            .strides
            .iter()
            .find(|s| !s.is_multiple_of(16) || **s >= 1 << 40)
        {
            return Err(format!("stride {s} is not a multiple of 16 below 2^40"));
        }
        if let Some(b) = self.boxed.iter().find(|b| **b == 0 || **b > MAX_BOX) {
            return Err(format!("box extent {b} is outside 1 to {MAX_BOX}"));
        }
        let row = self.boxed[0] * self.dtype.size();
        if !row.is_multiple_of(16) {
            return Err(format!(
                "the box's rows are {row} bytes, not a multiple of 16"
            ));
        }
        match self.swizzle.span() {
            Some(span) if row != span => Err(format!(
                "the box's rows are {row} bytes, not the {span}-byte swizzle's span"
            )),
            _ => Ok(()),
        }
    }

    /// The comment line stating map `index` in printed PTX.
    pub(super) fn comment(&self, index: usize) -> String {
        format!("// map_{index}: {self}")
    }

    /// Reads back what [`TensorMap::comment`] printed after `// map_i: `.
    pub(super) fn parse(text: &str) -> Option<TensorMap> {
        let mut fields = text.split(", ");
        let mut field = |name: &str| fields.next()?.strip_prefix(name);
        let param = field("param_")?.parse().ok()?;
        let dtype = DType::from_name(field("")?)?;
        let dims = numbers(field("dims ")?)?;
        let strides = match field("strides")? {
            "" => Vec::new(),
            list => numbers(list.strip_prefix(' ')?)?,
        };
        let boxed = numbers(field("box ")?)?;
        let swizzle = match field("swizzle ")? {
            "none" => Swizzle::None,
            span => Swizzle::of_span(span.strip_suffix('B')?.parse().ok()?)?,
        };
        let map = TensorMap {
            param,
            dtype,
            dims,
            strides,
            boxed,
            swizzle,
        };
        (map.to_string() == text).then_some(map)
    }
}

/// A list printed as `AxBx…` read back.
fn numbers<T: std::str::FromStr>(text: &str) -> Option<Vec<T>> {
    text.split('x').map(|n| n.parse().ok()).collect()
}

impl fmt::Display for TensorMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let join = |values: Vec<String>| values.join("x");
        let strides = join(self.strides.iter().map(u64::to_string).collect());
        write!(
            f,
            "param_{}, {}, dims {}, strides{}{strides}, box {}, swizzle ",
            self.param,
            self.dtype,
            join(self.dims.iter().map(u64::to_string).collect()),
            if strides.is_empty() { "" } else { " " },
            join(self.boxed.iter().map(u32::to_string).collect()),
        )?;
        match self.swizzle.span() {
            None => write!(f, "none"),
            Some(span) => write!(f, "{span}B"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map() -> TensorMap {
        TensorMap {
            param: 1,
            dtype: DType::Bf16,
            dims: vec![4096, 11008],
            strides: vec![8192],
            boxed: vec![64, 128],
            swizzle: Swizzle::B128,
        }
    }

    #[test]
    fn a_map_reads_back_from_its_comment() {
        let one = TensorMap {
            dims: vec![64],
            strides: Vec::new(),
            boxed: vec![64],
            swizzle: Swizzle::None,
            ..map()
        };
        for m in [map(), one] {
            let line = m.comment(3);
            let text = line.strip_prefix("// map_3: ").unwrap();
            assert_eq!(TensorMap::parse(text), Some(m), "{line}");
        }
        assert_eq!(TensorMap::parse("param_1, bf16, dims 4096, box 64"), None);
    }

    #[test]
    fn the_driver_s_rules_are_checked() {
        assert_eq!(map().check(), Ok(()));
        let wide = TensorMap {
            boxed: vec![128, 64],
            ..map()
        };
        assert_eq!(
            wide.check().unwrap_err(),
            "the box's rows are 256 bytes, not the 128-byte swizzle's span"
        );
        let odd = TensorMap {
            strides: vec![8200],
            ..map()
        };
        assert!(odd.check().unwrap_err().contains("stride 8200"));
        let tall = TensorMap {
            boxed: vec![64, 512],
            ..map()
        };
        assert!(tall.check().unwrap_err().contains("box extent 512"));
    }

    /// The 128-byte swizzle permutes the eight chunks of each 128-byte row
    /// by the row's index modulo 8; the 64-byte one the four chunks of
    /// each 64-byte row by the index of its pair of rows modulo 4.
    #[test]
    fn swizzles_permute_chunks_by_row() {
        assert_eq!(Swizzle::B128.place(3 * 128 + 16), 3 * 128 + (1 ^ 3) * 16);
        assert_eq!(Swizzle::B128.place(9 * 128 + 5), 9 * 128 + 16 + 5);
        assert_eq!(Swizzle::B64.place(5 * 64 + 16), 5 * 64 + (1 ^ 2) * 16);
        assert_eq!(Swizzle::B32.place(4 * 32 + 16), 4 * 32);
        assert_eq!(Swizzle::None.place(1234), 1234);
    }
}
