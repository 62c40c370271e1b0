//! Hopper's warpgroup matrix instructions (`wgmma.mma_async` and its
//! fences, commits and waits) on kernels built here: one warpgroup copies
//! operand tiles, laid out in shared memory as the PTX ISA's canonical
//! layouts say, multiplies them in several k-steps and stores its
//! accumulators. Every layout (K- and MN-major, each swizzle), every
//! operand type and several N against products computed here; kernels with
//! one synchronisation step missing, each stopped with its own fault; and
//! every kernel printed, parsed back and assembled by ptxas for sm_90a.

mod common;

use common::arith;

use half::{bf16, f16};
use ktune_core::SmVersion;
use ktune_core::lower::Launch;
use ktune_core::ptx::inst::{
    Addr, ArithOp, Cmp, MmaKind, Op, Operand, Reg, RegClass, Space, Special, Ty,
};
use ktune_core::ptx::{Builder, Kernel, parse, print};
use ktune_vgpu::FaultKind;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Major {
    K,
    Mn,
}

/// A canonical layout: which dimension is contiguous, and the swizzle's
/// width in bytes (0 for none).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Layout {
    major: Major,
    swizzle: u64,
}

impl Layout {
    fn mode(self) -> u64 {
        match self.swizzle {
            0 => 0,
            128 => 1,
            64 => 2,
            _ => 3,
        }
    }
}

/// One operand tile (`rows` of M or N by `k` of K) in shared memory.
#[derive(Debug, Clone, Copy)]
struct Tile {
    layout: Layout,
    rows: u64,
    k: u64,
    elem: u64,
}

impl Tile {
    /// The leading and stride byte offsets of the image [`Tile::offset`]
    /// lays out: core matrices (8 by 16 bytes) or swizzle atoms (8 rows of
    /// the swizzle's width) side by side along K, then along M or N.
    fn offsets(self) -> (u64, u64) {
        let w = self.layout.swizzle;
        match self.layout.major {
            Major::K if w == 0 => (128, 128 * self.k / (16 / self.elem)),
            Major::K => (16, 8 * w),
            Major::Mn if w == 0 => (128, 128 * self.k / 8),
            Major::Mn => (8 * w * self.k / 8, 8 * w),
        }
    }

    /// Where element `(mn, k)` goes in the image, in the layout's
    /// shape : stride form (`T` elements in 16 bytes).
    fn offset(self, mn: u64, k: u64) -> u64 {
        let (e, w) = (self.elem, self.layout.swizzle);
        let t = 16 / e;
        let (leading, stride) = self.offsets();
        let plain = match self.layout.major {
            // ((8, m), (T, 2k)) : ((1T, SBO), (1, LBO))
            Major::K if w == 0 => {
                (mn % 8) * 16 + (mn / 8) * stride + (k % t) * e + (k / t) * leading
            }
            // ((8, m), (T, 2k)) : ((W/16 T, SBO), (1, T))
            Major::K => (mn % 8) * w + (mn / 8) * stride + k * e,
            // ((T, 1, m), (8, k)) : ((1, T, SBO), (1T, LBO))
            Major::Mn if w == 0 => {
                (mn % t) * e + (mn / t) * stride + (k % 8) * 16 + (k / 8) * leading
            }
            // ((T, W/16, m), (8, k)) : ((1, T, LBO), (W/16 T, SBO))
            Major::Mn => {
                (mn % t) * e
                    + ((mn / t) % (w / 16)) * 16
                    + (mn / (w / e)) * leading
                    + (k % 8) * w
                    + (k / 8) * stride
            }
        };
        if w == 0 {
            plain
        } else {
            plain ^ (((plain >> 7) & (w / 16 - 1)) << 4)
        }
    }

    /// Bytes the image spans, rounded up to whole 2048-byte copies (16
    /// bytes for each of the 128 threads).
    fn bytes(self) -> u64 {
        let last = (0..self.rows)
            .flat_map(|mn| (0..self.k).map(move |k| (mn, k)))
            .map(|(mn, k)| self.offset(mn, k))
            .max()
            .unwrap_or(0);
        (last + self.elem).div_ceil(2048) * 2048
    }

    /// How far the descriptor's start moves for the k-step `step` (`kk`
    /// elements of K a step).
    fn advance(self, step: u64, kk: u64) -> u64 {
        let (leading, stride) = self.offsets();
        let t = 16 / self.elem;
        match self.layout.major {
            Major::K if self.layout.swizzle == 0 => step * (kk / t) * leading,
            Major::K => step * kk * self.elem,
            Major::Mn if self.layout.swizzle == 0 => step * (kk / 8) * leading,
            Major::Mn => step * (kk / 8) * stride,
        }
    }

    /// The image of `values` (`rows × k`, row-major by `mn`).
    fn image(self, values: &[u32]) -> Vec<u8> {
        let mut out = vec![0u8; self.bytes() as usize];
        for mn in 0..self.rows {
            for k in 0..self.k {
                let at = self.offset(mn, k) as usize;
                let v = values[(mn * self.k + k) as usize];
                out[at..at + self.elem as usize]
                    .copy_from_slice(&v.to_le_bytes()[..self.elem as usize]);
            }
        }
        out
    }
}

/// One test kernel: `D (64 × n) = A · B` over `steps` k-steps.
#[derive(Debug, Clone, Copy)]
struct Case {
    kind: MmaKind,
    n: u64,
    layout: Layout,
    steps: u64,
}

impl Case {
    fn elem(self) -> u64 {
        if self.kind == MmaKind::Tf32 { 4 } else { 2 }
    }

    fn k(self) -> u64 {
        self.steps * u64::from(self.kind.k())
    }

    fn a(self) -> Tile {
        Tile {
            layout: self.layout,
            rows: 64,
            k: self.k(),
            elem: self.elem(),
        }
    }

    fn b(self) -> Tile {
        Tile {
            rows: self.n,
            ..self.a()
        }
    }
}

/// What a broken kernel leaves out or does wrong.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Bug {
    NoProxyFence,
    NoBarrier,
    NoWgmmaFence,
    /// Stores the accumulators before waiting for them.
    NoWait,
    /// Overwrites A's first bytes while the products are in flight.
    OverwriteInFlight,
    /// Waits for nothing and exits.
    ExitInFlight,
    /// Each thread's A descriptor moves by its thread index.
    DivergentDescriptor,
    /// The accumulators are zeroed by plain moves after the fence.
    WriteAfterFence,
}

/// Copies `tile_bytes` from global `src` to shared `smem + at`, 16 bytes a
/// thread at a time.
fn copy_tile(b: &mut Builder, tid: Reg, src: Reg, smem: Reg, at: u64, tile_bytes: u64) {
    for round in 0..tile_bytes / 2048 {
        let chunk = arith(b, ArithOp::Add, Ty::U32, tid, (128 * round) as u32);
        let from = b.global_addr(src, chunk, 16);
        let words: Vec<Reg> = (0..4).map(|_| b.reg(RegClass::B32)).collect();
        b.push(Op::Ld {
            space: Space::GlobalReadOnly,
            ty: Ty::U32,
            dsts: words.clone(),
            addr: Addr {
                base: from,
                offset: 0,
            },
        });
        let to = arith(b, ArithOp::Shl, Ty::B32, chunk, 4u32);
        let to = arith(b, ArithOp::Add, Ty::U32, to, smem);
        b.push(Op::St {
            space: Space::Shared,
            ty: Ty::U32,
            addr: Addr {
                base: to,
                offset: at as i64,
            },
            srcs: words.into_iter().map(Operand::Reg).collect(),
        });
    }
}

/// The descriptor of `tile` starting `at` bytes into the window.
fn descriptor(b: &mut Builder, smem: Reg, at: Operand, tile: Tile) -> Reg {
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
    let (leading, stride) = tile.offsets();
    let high = (leading >> 4) << 16 | (stride >> 4) << 32 | tile.layout.mode() << 62;
    arith(b, ArithOp::Or, Ty::B64, wide, Operand::Int(high as i64))
}

fn kernel(case: Case, bug: Option<Bug>) -> Kernel {
    let mut b = Builder::new();
    let (a_tile, b_tile) = (case.a(), case.b());
    let b_at = a_tile.bytes();
    let shared = b_at + b_tile.bytes();
    let a_ptr = b.param_ptr(0);
    let b_ptr = b.param_ptr(1);
    let d_ptr = b.param_ptr(2);
    let smem = b.shared_base();
    let tid = b.special(Special::TidX);
    copy_tile(&mut b, tid, a_ptr, smem, 0, a_tile.bytes());
    copy_tile(&mut b, tid, b_ptr, smem, b_at, b_tile.bytes());
    if bug != Some(Bug::NoProxyFence) {
        b.push(Op::FenceProxyAsync);
    }
    if bug != Some(Bug::NoBarrier) {
        b.push(Op::BarSync);
    }
    let d: Vec<Reg> = (0..case.n / 2).map(|_| b.reg(RegClass::F32)).collect();
    if bug != Some(Bug::NoWgmmaFence) {
        b.push(Op::WgmmaFence);
    }
    if bug == Some(Bug::WriteAfterFence) {
        for r in &d {
            b.push(Op::Mov {
                ty: Ty::F32,
                dst: *r,
                src: Operand::F32(0.0),
            });
        }
    }
    let first = b.setp(Cmp::Ne, Ty::U32, tid, tid);
    let rest = b.setp(Cmp::Eq, Ty::U32, tid, tid);
    let kk = u64::from(case.kind.k());
    for step in 0..case.steps {
        let a_at = if bug == Some(Bug::DivergentDescriptor) {
            let moved = arith(&mut b, ArithOp::Shl, Ty::B32, tid, 4u32);
            Operand::Reg(arith(
                &mut b,
                ArithOp::Add,
                Ty::U32,
                moved,
                a_tile.advance(step, kk) as u32,
            ))
        } else {
            Operand::Int(a_tile.advance(step, kk) as i64)
        };
        let a_desc = descriptor(&mut b, smem, a_at, a_tile);
        let b_desc = descriptor(
            &mut b,
            smem,
            Operand::Int((b_at + b_tile.advance(step, kk)) as i64),
            b_tile,
        );
        b.push(Op::Wgmma {
            kind: case.kind,
            d: d.clone(),
            a: a_desc,
            b: b_desc,
            scale_d: if step == 0 { first } else { rest },
            trans_a: case.layout.major == Major::Mn,
            trans_b: case.layout.major == Major::Mn,
        });
    }
    b.push(Op::WgmmaCommit);
    if bug == Some(Bug::OverwriteInFlight) {
        b.push(Op::St {
            space: Space::Shared,
            ty: Ty::U32,
            addr: Addr {
                base: smem,
                offset: 0,
            },
            srcs: vec![Operand::Int(0)],
        });
    }
    if bug == Some(Bug::ExitInFlight) {
        return b.finish("wgmma_tile".into(), 3, 128, shared as u32);
    }
    if bug != Some(Bug::NoWait) {
        b.push(Op::WgmmaWait { pending: 0 });
    }
    // Thread t holds rows 16 (t / 32) + (t % 32) / 4 (+ 8) and columns
    // 2 (t % 4) (+ 1, + 8 j) of D.
    let warp = arith(&mut b, ArithOp::Shr, Ty::U32, tid, 5u32);
    let lane = arith(&mut b, ArithOp::And, Ty::B32, tid, 31u32);
    let group = arith(&mut b, ArithOp::Shr, Ty::U32, lane, 2u32);
    let row = b.u32_mad(warp, 16u32, group);
    let quad = arith(&mut b, ArithOp::And, Ty::B32, lane, 3u32);
    let col = arith(&mut b, ArithOp::Shl, Ty::B32, quad, 1u32);
    let at = b.u32_mad(row, case.n as u32, col);
    let base = b.global_addr(d_ptr, at, 4);
    for (i, r) in d.iter().enumerate() {
        let i = i as u64;
        let offset = 8 * case.n * ((i / 2) % 2) + 8 * (i / 4) + i % 2;
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
    b.finish("wgmma_tile".into(), 3, 128, shared as u32)
}

/// Deterministic pseudo-random operand values of `kind`, as stored (the
/// low bits of each word) and as exact f32.
fn operand(kind: MmaKind, count: u64, seed: u64) -> (Vec<u32>, Vec<f32>) {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..count)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let x = ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0;
            match kind {
                MmaKind::F16 => {
                    let h = f16::from_f32(x);
                    (u32::from(h.to_bits()), h.to_f32())
                }
                MmaKind::Bf16 => {
                    let h = bf16::from_f32(x);
                    (u32::from(h.to_bits()), h.to_f32())
                }
                MmaKind::Tf32 => {
                    let t = f32::from_bits(x.to_bits() & !0x1fff);
                    (t.to_bits(), t)
                }
            }
        })
        .unzip()
}

fn launch(kernel: &Kernel, threads: u32) -> Launch {
    Launch {
        grid: [1, 1, 1],
        block: [threads, 1, 1],
        dynamic_shared_bytes: kernel.dynamic_shared_bytes,
        workspace_bytes: 0,
        persistent: false,
        registers: 0,
    }
}

/// The kernel as ktune prints it for sm_90 and parses back.
fn printed(kernel: &Kernel) -> (String, Kernel) {
    let text = print(kernel, SmVersion::Sm90);
    let (parsed, target) = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(target, SmVersion::Sm90);
    assert_eq!(&parsed, kernel);
    (text, parsed)
}

/// Runs `case` (with `bug`) on `threads` threads; the output and a
/// reference product.
fn run(
    case: Case,
    bug: Option<Bug>,
    threads: u32,
) -> (Result<Vec<f32>, ktune_vgpu::Fault>, Vec<f32>) {
    let (_, kernel) = printed(&kernel(case, bug));
    let (a_words, a) = operand(case.kind, 64 * case.k(), 1 + case.n);
    let (b_words, b) = operand(case.kind, case.n * case.k(), 2 + case.n);
    let mut buffers = vec![
        case.a().image(&a_words),
        case.b().image(&b_words),
        vec![0xa5; (64 * case.n * 4) as usize],
    ];
    let result = ktune_vgpu::run(&kernel, &launch(&kernel, threads), &mut buffers).map(|_| {
        buffers[2]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    });
    let k = case.k() as usize;
    let n = case.n as usize;
    let want = (0..64 * n)
        .map(|i| {
            let (row, col) = (i / n, i % n);
            (0..k)
                .map(|kk| f64::from(a[row * k + kk]) * f64::from(b[col * k + kk]))
                .sum::<f64>() as f32
        })
        .collect();
    (result, want)
}

fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for kind in [MmaKind::Bf16, MmaKind::F16, MmaKind::Tf32] {
        for major in [Major::K, Major::Mn] {
            if kind == MmaKind::Tf32 && major == Major::Mn {
                continue;
            }
            for swizzle in [0, 32, 64, 128] {
                let layout = Layout { major, swizzle };
                // A K-major swizzled row holds the swizzle's width of K.
                let k = if major == Major::K && swizzle > 0 {
                    swizzle / if kind == MmaKind::Tf32 { 4 } else { 2 }
                } else {
                    32
                };
                let steps = (k / u64::from(kind.k())).max(1);
                for n in [8, 64, 256] {
                    cases.push(Case {
                        kind,
                        n,
                        layout,
                        steps,
                    });
                }
            }
        }
    }
    cases
}

#[test]
fn products_in_every_layout_match_the_reference() {
    for case in cases() {
        let (got, want) = run(case, None, 128);
        let got = got.unwrap_or_else(|f| panic!("{case:?}: {f}"));
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            // Exact products, f32 sums of at most 64 terms below 4 each.
            assert!(
                (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
                "{case:?}: D[{}][{}] = {g}, want {w}",
                i / case.n as usize,
                i % case.n as usize
            );
        }
    }
}

/// The tensor-core path's common case: bf16, K-major rows of 128 bytes.
fn bf16_swizzled() -> Case {
    Case {
        kind: MmaKind::Bf16,
        n: 64,
        layout: Layout {
            major: Major::K,
            swizzle: 128,
        },
        steps: 4,
    }
}

#[test]
fn a_wrong_layout_is_a_wrong_product() {
    // The same image read with the other major-ness: the test above would
    // fail if the layouts were confused.
    let case = bf16_swizzled();
    let (_, kernel) = printed(&kernel(case, None));
    let (a_words, _) = operand(case.kind, 64 * case.k(), 1);
    let (b_words, _) = operand(case.kind, case.n * case.k(), 2);
    let swapped = Case {
        layout: Layout {
            major: Major::Mn,
            swizzle: 128,
        },
        ..case
    };
    let mut right = vec![
        case.a().image(&a_words),
        case.b().image(&b_words),
        vec![0; 64 * 64 * 4],
    ];
    let mut wrong = vec![
        swapped.a().image(&a_words),
        swapped.b().image(&b_words),
        vec![0; 64 * 64 * 4],
    ];
    wrong[0].resize(right[0].len(), 0);
    wrong[1].resize(right[1].len(), 0);
    ktune_vgpu::run(&kernel, &launch(&kernel, 128), &mut right).unwrap();
    ktune_vgpu::run(&kernel, &launch(&kernel, 128), &mut wrong).unwrap();
    assert_ne!(right[2], wrong[2]);
}

/// Whether `kind` is the fault `bug` must cause.
fn caught(bug: Bug, kind: &FaultKind) -> bool {
    match bug {
        Bug::NoProxyFence => matches!(kind, FaultKind::AsyncProxyUnfenced { .. }),
        Bug::NoBarrier => matches!(kind, FaultKind::SharedRace { .. }),
        Bug::NoWgmmaFence => matches!(kind, FaultKind::WgmmaUnfenced { .. }),
        Bug::NoWait => matches!(kind, FaultKind::WgmmaPending { .. }),
        Bug::OverwriteInFlight => matches!(kind, FaultKind::WgmmaOverwrite { .. }),
        Bug::ExitInFlight => matches!(kind, FaultKind::WgmmaInFlightAtExit { groups: 1 }),
        Bug::DivergentDescriptor => matches!(kind, FaultKind::WgmmaOperands { .. }),
        Bug::WriteAfterFence => matches!(kind, FaultKind::WgmmaUnfenced { .. }),
    }
}

#[test]
fn each_missing_step_is_its_own_fault() {
    let case = bf16_swizzled();
    let bugs = [
        Bug::NoProxyFence,
        Bug::NoBarrier,
        Bug::NoWgmmaFence,
        Bug::NoWait,
        Bug::OverwriteInFlight,
        Bug::ExitInFlight,
        Bug::DivergentDescriptor,
        Bug::WriteAfterFence,
    ];
    for bug in bugs {
        let (got, _) = run(case, Some(bug), 128);
        match got {
            Err(fault) => assert!(caught(bug, &fault.kind), "{bug:?}: {fault}"),
            Ok(_) => panic!("{bug:?}: ran without a fault"),
        }
    }
}

#[test]
fn a_partial_warpgroup_faults() {
    let case = cases()[0];
    let (got, _) = run(case, None, 96);
    let fault = got.expect_err("96 threads ran a warpgroup instruction");
    assert!(
        matches!(fault.kind, FaultKind::WarpgroupDivergence { lane: 96, .. }),
        "{fault}"
    );
}

#[test]
fn kernels_assemble_for_sm90a() {
    let Some(ptxas) = ktune_build::ptxas::find() else {
        eprintln!(
            "ptxas not found: the wgmma kernels are not assembled (run `cargo xtask test`, which installs ptxas, or set {})",
            ktune_build::ptxas::PTXAS_ENV
        );
        return;
    };
    for case in cases() {
        let (text, _) = printed(&kernel(case, None));
        assert!(text.contains(".target sm_90a"), "{text}");
        if let Err(e) = ktune_build::ptxas::assemble(&ptxas, &text, SmVersion::Sm90) {
            panic!("{case:?}: {e}");
        }
    }
}
