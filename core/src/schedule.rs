//! Schedules: how a kernel's computation is mapped onto threads and blocks.
//!
//! A schedule is a point in a kernel's schedule space: typed knobs, one
//! variant per op class. The database stores schedules (never PTX), so they
//! serialize to a stable JSON form.

use serde::{Deserialize, Serialize};

/// One point of a kernel's schedule space.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "class", rename_all = "snake_case", deny_unknown_fields)]
pub enum Schedule {
    /// One thread per output element; reductions as sequential loops. Valid
    /// for every kernel; the fallback for computations no other class fits.
    Generic { block: u32 },
    /// Elementwise and broadcast kernels: each thread handles `per_thread`
    /// groups of `vector` consecutive output elements, with vector loads of
    /// the inputs read along the output's innermost dimension and one
    /// vector store. Valid when `block` is a multiple of the warp size up to
    /// the target's limit, `1 ≤ per_thread ≤ 16`, `vector` is 1, 2 or 4 and
    /// divides the output's innermost extent, or its element count: then a
    /// group may straddle rows, and only the output and inputs laid out as
    /// it is are read a group at a time, the others one element at a time.
    Elementwise {
        block: u32,
        per_thread: u32,
        vector: u32,
    },
    /// Row reductions and normalizations: `threads_per_row` threads
    /// cooperate on one row, `rows_per_block` rows per block; reductions
    /// read `vector` consecutive elements per access, and so do the row's
    /// outputs when the output's innermost dimension lies within the row
    /// and `vector` divides it. Valid when `threads_per_row` is a power of
    /// two (below the warp size, groups share a warp), `threads_per_row ·
    /// rows_per_block` is a multiple of the warp size up to the target's
    /// limit, and `vector` is 1, 2 or 4 and divides every reduced extent,
    /// or the row is read once per pass (`cache = 0`) and peeled: each
    /// row's chunks start at its first aligned position, its leftover
    /// positions at either end are read one value at a time.
    ///
    /// `cache` (0, 1 or 2): with 1, each thread loads the row elements it
    /// owns once into registers and every pass over the row reads them
    /// there (one pass over global memory; valid while they fit the
    /// registers); with 2, the block copies the row into shared memory
    /// once and the passes read it there (valid while the block's rows fit
    /// the target's shared memory); with 0, each pass reads the row again.
    /// `tree` (0 or 1): how a row spanning several warps combines its
    /// partial results: 0, butterfly shuffles within each warp then one
    /// slot per warp in shared memory; 1, a shared-memory tree over all
    /// the row's threads (valid only for rows of more than one warp).
    /// `online` (0 or 1): with 1, a maximum and a later sum of `exp` of the
    /// same value minus it (softmax's) are computed in one pass, the sum
    /// rescaled as the maximum grows, and so are a mean and a later sum or
    /// mean of squared differences from it (valid only where such a pair
    /// exists, with `cache = 0`). All three default to 0, and are left out of the
    /// JSON form when 0, so that schedules written before them keep their
    /// meaning and their text.
    /// `cluster` (1, 2, 4 or 8; sm_90 only): the blocks of a thread-block
    /// cluster a row is spread over. Thread `t` of block `k` of the cluster
    /// is the row's thread `k · threads_per_row + t`, and every reduction,
    /// combined within each block, is then combined across the cluster
    /// through distributed shared memory; with `cache = 2` each block keeps
    /// only its share of the row. Defaults to 1 (no cluster), left out of
    /// the JSON form when 1. See [`crate::lower`]'s rows module.
    Rows {
        threads_per_row: u32,
        rows_per_block: u32,
        vector: u32,
        #[serde(default, skip_serializing_if = "is_zero")]
        cache: u32,
        #[serde(default, skip_serializing_if = "is_zero")]
        tree: u32,
        #[serde(default, skip_serializing_if = "is_zero")]
        online: u32,
        #[serde(default = "one", skip_serializing_if = "is_one")]
        cluster: u32,
    },
    /// Contractions: a `block_m × block_n` output tile per block, staged
    /// through shared memory `block_k` deep, `thread_m × thread_n` outputs per
    /// thread held in registers; global loads of A and B move `vector_a` and
    /// `vector_b` elements at once (up to 16 bytes); blocks walk the tiles
    /// in groups of `group_m` block rows (1: row by row); with `stages`
    /// above 1, tiles travel by `cp.async` through a ring of `stages`
    /// shared-memory buffers (1: loads and stores through registers, one
    /// buffer). With `split_k` above 1, the `K` tiles are cut into
    /// `split_k` contiguous slices of equal count (the last may reach past
    /// `K`, staged as zeros; none may lie wholly past it), each computed by
    /// its own block (`ctaid.y`); each block stores its partial tile to a
    /// global workspace ([`crate::lower::Launch::workspace_bytes`]) and the
    /// last of a tile's blocks to arrive adds the slices up in slice order
    /// and runs the epilogue, so the result does not depend on which
    /// arrives last. See [`crate::lower::matmul`].
    Matmul(Tiles),
    /// Contractions of f16 or bf16 operands on tensor cores: a `block_m ×
    /// block_n` output tile per block, `warp_m × warp_n` per warp computed
    /// with `mma.sync` m16n8k16 (f32 accumulators) on fragments read by
    /// `ldmatrix`; operand tiles `block_k` deep travel by 16-byte
    /// `cp.async` through a ring of `stages` shared-memory buffers; blocks
    /// walk the tiles in groups of `group_m` block rows, and `split_k`
    /// slices of `K` are added up through a workspace, as for
    /// [`Schedule::Matmul`]. See [`crate::lower::matmul::mma`].
    Mma(MmaTiles),
}

/// The knobs of [`Schedule::Matmul`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tiles {
    pub block_m: u32,
    pub block_n: u32,
    pub block_k: u32,
    pub thread_m: u32,
    pub thread_n: u32,
    /// Elements per global load of A (1, 2, 4, or 8 for 16-bit types).
    pub vector_a: u32,
    /// Elements per global load of B.
    pub vector_b: u32,
    /// Block rows per group of the grid's walk. Absent from the JSON form
    /// when 1, as in schedules written before the knob existed.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub group_m: u32,
    /// Shared-memory buffers the tiles travel through (1: through
    /// registers; more: by `cp.async`). Absent from the JSON form when 1,
    /// likewise.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub stages: u32,
    /// Slices of `K`, each its own block, added up by the last to arrive.
    /// Absent from the JSON form when 1, likewise.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub split_k: u32,
}

/// The knobs of [`Schedule::Mma`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MmaTiles {
    pub block_m: u32,
    pub block_n: u32,
    pub block_k: u32,
    pub warp_m: u32,
    pub warp_n: u32,
    /// Shared-memory buffers in the ring (1: no overlap).
    pub stages: u32,
    /// Block rows per group of the grid's walk (absent from the JSON form
    /// when 1).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub group_m: u32,
    /// Slices of `K`, added up by the last block to arrive (absent from the
    /// JSON form when 1).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub split_k: u32,
    /// Blocks per SM ptxas is told to leave room for (`.minnctapersm`):
    /// 0, ptxas chooses the registers a thread gets (it aims at several
    /// blocks an SM); 1, it may give a thread as many as it likes, which
    /// lets it keep more `ldmatrix` fragments in flight. Absent from the
    /// JSON form when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub min_blocks: u32,
    /// How 16-bit operand tiles lie in shared memory: 0, each row padded
    /// by 16 bytes; 1, rows unpadded with their 16-byte chunks permuted by
    /// an XOR of the row, so that rows start on 128-byte lines. Either way
    /// `ldmatrix` reads are free of bank conflicts. Absent from the JSON
    /// form when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub swizzle: u32,
    /// When a warp loads its `mma` fragments: 0, each k-step's just
    /// before its `mma`s, in the tile's slot; 1, one k-step ahead, the
    /// next tile's first k-step's across the ring's barrier, before the
    /// tile's last `mma`s, so that the loads' latency overlaps the tensor
    /// cores' work (needs `stages` of 2 or more). Absent from the JSON
    /// form when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub prefetch: u32,
    /// Which tensor-core instructions multiply: 0, each warp's `mma.sync`
    /// on fragments it loads with `ldmatrix`; 1 (sm_90, 16-bit operands),
    /// Hopper's `wgmma.mma_async`, a warpgroup's four warps multiplying
    /// operands the tensor cores read from shared memory themselves.
    /// `warp_m × warp_n` is then a warpgroup's tile. Absent from the JSON
    /// form when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub wgmma: u32,
    /// Ways the output tiles of the grid's last, partial wave over the
    /// target's SMs are split along `K` (1: none). The tiles before them
    /// are computed whole; the last ones' slices are added up as split-K's
    /// are, so that the last wave takes a slice's time instead of a whole
    /// tile's. Only with `split_k` 1. Absent from the JSON form when 1.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub tail_split: u32,
    /// How blocks take their output tiles (`wgmma = 1`): 0, a block per
    /// tile; 1, as many blocks as the GPU holds at once, each walking the
    /// tiles `ctaid.x, ctaid.x + nctaid.x, …` in a loop, the next tile's
    /// first copies issued before the current tile's epilogue, so that
    /// the ring fills while the epilogue computes and stores. Only with
    /// `split_k` and `tail_split` 1. Absent from the JSON form when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub persistent: u32,
    /// Who copies the operand tiles (`wgmma = 1`): 0, every thread, in
    /// turn with its `wgmma`s; 1, a warpgroup of its own (a producer,
    /// beside the block's `warp_m × warp_n` ones), which keeps the ring
    /// full while the others multiply, each slot handed over by memory
    /// barriers, and gives its registers to them (`setmaxnreg`); 2, the
    /// same producer beside two such sets of warpgroups that take the
    /// block's tiles in turn (ping-pong, persistent blocks only): one's
    /// epilogue runs while the other multiplies. Absent from the JSON form
    /// when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub producer: u32,
    /// How a producer copies (`producer` 1 or 2): 0, its 128 threads'
    /// 16-byte `cp.async`s; 1, one thread's copies of whole tiles by the
    /// tensor memory accelerator (TMA: `cp.async.bulk.tensor` through
    /// tensor maps the launcher encodes), which lays them out swizzled
    /// as `wgmma` reads them and counts their bytes at the slot's memory
    /// barrier. Absent from the JSON form when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tma: u32,
    /// Blocks a thread-block cluster holds along `M` (`tma = 1`): 1, each
    /// block copies its own tiles; 2, two blocks computing vertically
    /// adjacent tiles of the same columns, which share B's tiles: each
    /// copies half of each and the tensor memory accelerator multicasts
    /// it to both, so that B is read from L2 once for the two. Absent
    /// from the JSON form when 1.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub cluster_m: u32,
}

fn one() -> u32 {
    1
}

fn is_one(value: &u32) -> bool {
    *value == 1
}

fn is_zero(value: &u32) -> bool {
    *value == 0
}

/// A schedule class: which lowering a point selects, and its knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Class {
    Generic,
    Elementwise,
    Rows,
    Matmul,
    Mma,
}

impl Class {
    /// The class name, as in the JSON form.
    pub fn name(self) -> &'static str {
        match self {
            Class::Generic => "generic",
            Class::Elementwise => "elementwise",
            Class::Rows => "rows",
            Class::Matmul => "matmul",
            Class::Mma => "mma",
        }
    }

    /// The class's knob names, in the order of [`Schedule::knob_values`].
    pub fn knobs(self) -> &'static [&'static str] {
        match self {
            Class::Generic => &["block"],
            Class::Elementwise => &["block", "per_thread", "vector"],
            Class::Rows => &[
                "threads_per_row",
                "rows_per_block",
                "vector",
                "cache",
                "tree",
                "online",
                "cluster",
            ],
            Class::Matmul => &[
                "block_m", "block_n", "block_k", "thread_m", "thread_n", "vector_a", "vector_b",
                "group_m", "stages", "split_k",
            ],
            Class::Mma => &[
                "block_m",
                "block_n",
                "block_k",
                "warp_m",
                "warp_n",
                "stages",
                "group_m",
                "split_k",
                "min_blocks",
                "swizzle",
                "prefetch",
                "wgmma",
                "tail_split",
                "persistent",
                "producer",
                "tma",
                "cluster_m",
            ],
        }
    }

    /// The knobs among [`Class::knobs`] that count a block's threads.
    pub fn thread_knobs(self) -> &'static [&'static str] {
        match self {
            Class::Generic | Class::Elementwise => &["block"],
            Class::Rows => &["threads_per_row"],
            Class::Matmul | Class::Mma => &[],
        }
    }

    /// The point of this class with `values` for its knobs, in order; `None`
    /// when the count is wrong.
    pub fn schedule(self, values: &[u32]) -> Option<Schedule> {
        Some(match (self, values) {
            (Class::Generic, &[block]) => Schedule::Generic { block },
            (Class::Elementwise, &[block, per_thread, vector]) => Schedule::Elementwise {
                block,
                per_thread,
                vector,
            },
            (
                Class::Rows,
                &[
                    threads_per_row,
                    rows_per_block,
                    vector,
                    cache,
                    tree,
                    online,
                    cluster,
                ],
            ) => Schedule::Rows {
                threads_per_row,
                rows_per_block,
                vector,
                cache,
                tree,
                online,
                cluster,
            },
            (
                Class::Matmul,
                &[
                    block_m,
                    block_n,
                    block_k,
                    thread_m,
                    thread_n,
                    vector_a,
                    vector_b,
                    group_m,
                    stages,
                    split_k,
                ],
            ) => Schedule::Matmul(Tiles {
                block_m,
                block_n,
                block_k,
                thread_m,
                thread_n,
                vector_a,
                vector_b,
                group_m,
                stages,
                split_k,
            }),
            (
                Class::Mma,
                &[
                    block_m,
                    block_n,
                    block_k,
                    warp_m,
                    warp_n,
                    stages,
                    group_m,
                    split_k,
                    min_blocks,
                    swizzle,
                    prefetch,
                    wgmma,
                    tail_split,
                    persistent,
                    producer,
                    tma,
                    cluster_m,
                ],
            ) => Schedule::Mma(MmaTiles {
                block_m,
                block_n,
                block_k,
                warp_m,
                warp_n,
                stages,
                group_m,
                split_k,
                min_blocks,
                swizzle,
                prefetch,
                wgmma,
                tail_split,
                persistent,
                producer,
                tma,
                cluster_m,
            }),
            _ => return None,
        })
    }
}

impl Schedule {
    /// The schedule's class.
    pub fn kind(&self) -> Class {
        match self {
            Schedule::Generic { .. } => Class::Generic,
            Schedule::Elementwise { .. } => Class::Elementwise,
            Schedule::Rows { .. } => Class::Rows,
            Schedule::Matmul(_) => Class::Matmul,
            Schedule::Mma(_) => Class::Mma,
        }
    }

    /// The knob values, in the order of [`Class::knobs`].
    pub fn knob_values(&self) -> Vec<u32> {
        match *self {
            Schedule::Generic { block } => vec![block],
            Schedule::Elementwise {
                block,
                per_thread,
                vector,
            } => vec![block, per_thread, vector],
            Schedule::Rows {
                threads_per_row,
                rows_per_block,
                vector,
                cache,
                tree,
                online,
                cluster,
            } => vec![
                threads_per_row,
                rows_per_block,
                vector,
                cache,
                tree,
                online,
                cluster,
            ],
            Schedule::Matmul(Tiles {
                block_m,
                block_n,
                block_k,
                thread_m,
                thread_n,
                vector_a,
                vector_b,
                group_m,
                stages,
                split_k,
            }) => vec![
                block_m, block_n, block_k, thread_m, thread_n, vector_a, vector_b, group_m, stages,
                split_k,
            ],
            Schedule::Mma(MmaTiles {
                block_m,
                block_n,
                block_k,
                warp_m,
                warp_n,
                stages,
                group_m,
                split_k,
                min_blocks,
                swizzle,
                prefetch,
                wgmma,
                tail_split,
                persistent,
                producer,
                tma,
                cluster_m,
            }) => vec![
                block_m, block_n, block_k, warp_m, warp_n, stages, group_m, split_k, min_blocks,
                swizzle, prefetch, wgmma, tail_split, persistent, producer, tma, cluster_m,
            ],
        }
    }

    /// The same point with knob `name` set to `value`; `None` when its
    /// class has no such knob.
    pub fn with_knob(&self, name: &str, value: u32) -> Option<Schedule> {
        let kind = self.kind();
        let at = kind.knobs().iter().position(|k| *k == name)?;
        let mut values = self.knob_values();
        values[at] = value;
        kind.schedule(&values)
    }

    /// The class name, as in the JSON form.
    pub fn class(&self) -> &'static str {
        self.kind().name()
    }

    /// The compact JSON form stored in databases and shown to people.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    pub fn from_json(json: &str) -> Result<Schedule, serde_json::Error> {
        serde_json::from_str(json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_knobs_are_knobs_of_their_class() {
        for class in [
            Class::Generic,
            Class::Elementwise,
            Class::Rows,
            Class::Matmul,
            Class::Mma,
        ] {
            for knob in class.thread_knobs() {
                assert!(class.knobs().contains(knob), "{class:?}: {knob}");
            }
        }
        assert_eq!(Class::Rows.thread_knobs(), ["threads_per_row"]);
    }

    #[test]
    fn group_m_defaults_to_one_and_is_written_only_when_set() {
        let old = r#"{"class":"mma","block_m":64,"block_n":64,"block_k":32,"warp_m":32,"warp_n":32,"stages":3}"#;
        let parsed = Schedule::from_json(old).expect("a schedule written before group_m");
        assert_eq!(parsed.knob_values()[6], 1);
        assert_eq!(parsed.to_json(), old);
        let grouped = Class::Matmul
            .schedule(&[64, 64, 16, 4, 4, 4, 4, 8, 1, 1])
            .expect("ten knobs");
        let json = grouped.to_json();
        assert!(json.ends_with(r#","group_m":8}"#), "{json}");
        assert_eq!(Schedule::from_json(&json).expect("round trip"), grouped);
    }

    #[test]
    fn rows_knobs_added_later_default_to_zero_and_stay_out_of_the_json() {
        let old = r#"{"class":"rows","threads_per_row":64,"rows_per_block":2,"vector":4}"#;
        let s = Schedule::from_json(old).expect("parses");
        assert_eq!(
            s,
            Schedule::Rows {
                threads_per_row: 64,
                rows_per_block: 2,
                vector: 4,
                cache: 0,
                tree: 0,
                online: 0,
                cluster: 1,
            }
        );
        assert_eq!(s.to_json(), old);
        let one_pass = Class::Rows
            .schedule(&[64, 2, 4, 1, 1, 0, 1])
            .expect("seven knobs");
        let json = one_pass.to_json();
        assert_eq!(
            json,
            r#"{"class":"rows","threads_per_row":64,"rows_per_block":2,"vector":4,"cache":1,"tree":1}"#
        );
        assert_eq!(Schedule::from_json(&json).expect("parses"), one_pass);
        assert_eq!(one_pass.knob_values(), [64, 2, 4, 1, 1, 0, 1]);
        let online = Class::Rows
            .schedule(&[64, 2, 4, 0, 0, 1, 1])
            .expect("seven knobs");
        let json = online.to_json();
        assert_eq!(
            json,
            r#"{"class":"rows","threads_per_row":64,"rows_per_block":2,"vector":4,"online":1}"#
        );
        assert_eq!(Schedule::from_json(&json).expect("parses"), online);
        // `cluster` defaults to 1, a row in one block, and is written
        // only when above.
        let spread = Class::Rows
            .schedule(&[1024, 1, 4, 2, 0, 0, 4])
            .expect("seven knobs");
        let json = spread.to_json();
        assert_eq!(
            json,
            r#"{"class":"rows","threads_per_row":1024,"rows_per_block":1,"vector":4,"cache":2,"cluster":4}"#
        );
        assert_eq!(Schedule::from_json(&json).expect("parses"), spread);
        assert_eq!(
            one_pass.with_knob("cluster", 4).map(|s| s.knob_values()),
            Some(vec![64, 2, 4, 1, 1, 0, 4])
        );
        assert_eq!(one_pass.with_knob("block_m", 4), None);
    }

    #[test]
    fn simt_stages_default_to_one_and_are_written_only_when_set() {
        let old = r#"{"class":"matmul","block_m":64,"block_n":64,"block_k":16,"thread_m":4,"thread_n":4,"vector_a":4,"vector_b":4}"#;
        let parsed = Schedule::from_json(old).expect("a schedule written before stages");
        assert_eq!(parsed.knob_values()[8], 1);
        assert_eq!(parsed.to_json(), old);
        let staged = Class::Matmul
            .schedule(&[64, 64, 16, 4, 4, 4, 4, 1, 3, 1])
            .expect("ten knobs");
        let json = staged.to_json();
        assert!(json.ends_with(r#","vector_b":4,"stages":3}"#), "{json}");
        assert_eq!(Schedule::from_json(&json).expect("round trip"), staged);
    }

    #[test]
    fn mma_split_k_defaults_to_one_and_is_written_only_when_set() {
        let old = r#"{"class":"mma","block_m":64,"block_n":64,"block_k":32,"warp_m":32,"warp_n":32,"stages":3,"group_m":8}"#;
        let parsed = Schedule::from_json(old).expect("a schedule written before split_k");
        assert_eq!(
            parsed.knob_values(),
            [64, 64, 32, 32, 32, 3, 8, 1, 0, 0, 0, 0, 1, 0, 0, 0, 1]
        );
        assert_eq!(parsed.to_json(), old);
        let split = Class::Mma
            .schedule(&[64, 64, 32, 32, 32, 3, 1, 4, 0, 0, 0, 0, 1, 0, 0, 0, 1])
            .expect("seventeen knobs");
        let json = split.to_json();
        assert!(json.ends_with(r#","stages":3,"split_k":4}"#), "{json}");
        assert_eq!(Schedule::from_json(&json).expect("round trip"), split);
    }

    /// `min_blocks`, `swizzle`, `prefetch`, `wgmma`, `persistent`, `producer`
    /// and `tma` default to 0 in schedules written before them, `tail_split` to 1, and each is
    /// written only when set.
    #[test]
    fn register_and_layout_knobs_default_to_zero_and_are_written_only_when_set() {
        let cases = [
            (
                r#"{"class":"mma","block_m":128,"block_n":128,"block_k":32,"warp_m":64,"warp_n":64,"stages":3,"split_k":2}"#,
                [128, 128, 32, 64, 64, 3, 1, 2, 0, 0, 0, 0, 1, 0, 0, 0, 1],
                [128, 128, 32, 64, 64, 3, 1, 1, 1, 0, 0, 0, 1, 0, 0, 0, 1],
                r#","stages":3,"min_blocks":1}"#,
            ),
            (
                r#"{"class":"mma","block_m":128,"block_n":128,"block_k":32,"warp_m":64,"warp_n":64,"stages":3,"min_blocks":1}"#,
                [128, 128, 32, 64, 64, 3, 1, 1, 1, 0, 0, 0, 1, 0, 0, 0, 1],
                [128, 128, 32, 64, 64, 3, 1, 1, 0, 1, 0, 0, 1, 0, 0, 0, 1],
                r#","stages":3,"swizzle":1}"#,
            ),
            (
                r#"{"class":"mma","block_m":128,"block_n":128,"block_k":32,"warp_m":64,"warp_n":64,"stages":3,"swizzle":1}"#,
                [128, 128, 32, 64, 64, 3, 1, 1, 0, 1, 0, 0, 1, 0, 0, 0, 1],
                [128, 128, 32, 64, 64, 3, 1, 1, 0, 1, 1, 0, 1, 0, 0, 0, 1],
                r#","stages":3,"swizzle":1,"prefetch":1}"#,
            ),
            (
                r#"{"class":"mma","block_m":128,"block_n":128,"block_k":64,"warp_m":64,"warp_n":128,"stages":3,"swizzle":1}"#,
                [128, 128, 64, 64, 128, 3, 1, 1, 0, 1, 0, 0, 1, 0, 0, 0, 1],
                [128, 128, 64, 64, 128, 3, 1, 1, 0, 1, 0, 1, 1, 0, 0, 0, 1],
                r#","stages":3,"swizzle":1,"wgmma":1}"#,
            ),
            (
                r#"{"class":"mma","block_m":128,"block_n":128,"block_k":64,"warp_m":64,"warp_n":128,"stages":3,"swizzle":1,"wgmma":1}"#,
                [128, 128, 64, 64, 128, 3, 1, 1, 0, 1, 0, 1, 1, 0, 0, 0, 1],
                [128, 128, 64, 64, 128, 3, 1, 1, 0, 1, 0, 1, 2, 0, 0, 0, 1],
                r#","swizzle":1,"wgmma":1,"tail_split":2}"#,
            ),
            (
                r#"{"class":"mma","block_m":128,"block_n":128,"block_k":64,"warp_m":64,"warp_n":128,"stages":3,"swizzle":1,"wgmma":1}"#,
                [128, 128, 64, 64, 128, 3, 1, 1, 0, 1, 0, 1, 1, 0, 0, 0, 1],
                [128, 128, 64, 64, 128, 3, 1, 1, 0, 1, 0, 1, 1, 1, 0, 0, 1],
                r#","swizzle":1,"wgmma":1,"persistent":1}"#,
            ),
            (
                r#"{"class":"mma","block_m":128,"block_n":256,"block_k":64,"warp_m":64,"warp_n":256,"stages":4,"swizzle":1,"wgmma":1,"persistent":1}"#,
                [128, 256, 64, 64, 256, 4, 1, 1, 0, 1, 0, 1, 1, 1, 0, 0, 1],
                [128, 256, 64, 64, 256, 4, 1, 1, 0, 1, 0, 1, 1, 1, 1, 0, 1],
                r#","wgmma":1,"persistent":1,"producer":1}"#,
            ),
            (
                r#"{"class":"mma","block_m":128,"block_n":256,"block_k":64,"warp_m":64,"warp_n":256,"stages":4,"min_blocks":1,"swizzle":1,"wgmma":1,"producer":1}"#,
                [128, 256, 64, 64, 256, 4, 1, 1, 1, 1, 0, 1, 1, 0, 1, 0, 1],
                [128, 256, 64, 64, 256, 4, 1, 1, 1, 1, 0, 1, 1, 0, 1, 1, 1],
                r#","wgmma":1,"producer":1,"tma":1}"#,
            ),
        ];
        for (old, knobs, set, suffix) in cases {
            let parsed = Schedule::from_json(old).expect("a schedule written before the knob");
            assert_eq!(parsed.knob_values(), knobs);
            assert_eq!(parsed.to_json(), old);
            let with = Class::Mma.schedule(&set).expect("seventeen knobs");
            let json = with.to_json();
            assert!(json.ends_with(suffix), "{json}");
            assert_eq!(Schedule::from_json(&json).expect("round trip"), with);
        }
    }

    #[test]
    fn split_k_defaults_to_one_and_is_written_only_when_set() {
        let old = r#"{"class":"matmul","block_m":64,"block_n":64,"block_k":16,"thread_m":4,"thread_n":4,"vector_a":4,"vector_b":4,"group_m":8,"stages":2}"#;
        let parsed = Schedule::from_json(old).expect("a schedule written before split_k");
        assert_eq!(parsed.knob_values().last(), Some(&1));
        assert_eq!(parsed.to_json(), old);
        let split = Class::Matmul
            .schedule(&[64, 64, 16, 4, 4, 4, 4, 1, 1, 4])
            .expect("ten knobs");
        let json = split.to_json();
        assert!(json.ends_with(r#","vector_b":4,"split_k":4}"#), "{json}");
        assert_eq!(Schedule::from_json(&json).expect("round trip"), split);
        assert_eq!(split.knob_values().last(), Some(&4));
    }
}
