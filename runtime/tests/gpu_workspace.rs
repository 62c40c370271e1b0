//! Split-K's workspace on the GPU: zeroed once and reused launch after
//! launch, never by two launches that may run at once. Alone in its test
//! binary because it counts the process's workspace allocations. The
//! kernel is a real split-K matmul, lowered here by ktune-core. GPU-only
//! and ignored without one, as explained in `gpu.rs`, except the check
//! that the kernel is what the GPU test needs.

mod lowered;

use std::sync::{Arc, LazyLock};

use ktune::__private::cudarc::driver::{CudaSlice, CudaStream};
use ktune::__private::{KernelInfo, Variant, launch, workspace_allocations};
use ktune::prelude::*;
use ktune_core::target::SmVersion;

const M: usize = 3;
const N: usize = 40;
const K: usize = 1000;

/// Four slices of `K`, so four blocks add into each output tile.
const SCHEDULE: &str = r#"{"class":"matmul","block_m":16,"block_n":32,"block_k":16,"thread_m":1,"thread_n":2,"vector_a":1,"vector_b":1,"split_k":4}"#;

static KERNEL: KernelInfo = lowered::matmul_info!("f32", 4);

/// The split-K variant, lowered for sm_80 (which every later GPU runs).
static VARIANTS: LazyLock<Vec<Variant>> = LazyLock::new(|| {
    vec![lowered::matmul(
        "f32",
        [M, N, K],
        SCHEDULE,
        SmVersion::Sm80,
        |_| {},
    )]
});

fn variants() -> &'static [Variant] {
    VARIANTS.as_slice()
}

/// Inputs for launch `seed`: small integers, so that every order of
/// summation gives the same f32 result and the check can be exact.
fn inputs(seed: usize) -> (Vec<f32>, Vec<f32>) {
    let value = |i: usize, salt: usize| ((i * 7 + seed * 13 + salt) % 9) as f32 - 4.0;
    let a = (0..M * K).map(|i| value(i, 1)).collect();
    let b = (0..K * N).map(|i| value(i, 5)).collect();
    (a, b)
}

fn reference(a: &[f32], b: &[f32]) -> Vec<f32> {
    let mut c = vec![0.0; M * N];
    for m in 0..M {
        for n in 0..N {
            c[m * N + n] = (0..K).map(|k| a[m * K + k] * b[k * N + n]).sum();
        }
    }
    c
}

/// A launch queued on `stream`, with what its output must hold.
struct Queued {
    out: CudaSlice<f32>,
    expected: Vec<f32>,
    what: String,
}

fn queue(stream: &Arc<CudaStream>, seed: usize, what: String) -> Queued {
    let (a, b) = inputs(seed);
    let a_gpu = stream.clone_htod(&a).unwrap();
    let b_gpu = stream.clone_htod(&b).unwrap();
    let mut out = stream.alloc_zeros::<f32>(M * N).unwrap();
    launch(stream, &KERNEL, variants(), &[&a_gpu, &b_gpu], &mut out).unwrap();
    Queued {
        out,
        expected: reference(&a, &b),
        what,
    }
}

fn check(queued: &Queued, stream: &Arc<CudaStream>) {
    let got = stream.clone_dtoh(&queued.out).unwrap();
    assert_eq!(got, queued.expected, "{}", queued.what);
}

#[test]
fn the_kernel_adds_four_slices_through_a_workspace() {
    let variant = &variants()[0];
    assert!(variant.workspace_bytes > 0, "{variant}: no workspace");
    assert_eq!(variant.grid[1], 4, "{variant}: not four slices of K");
}

#[test]
#[ignore = "needs a GPU: cargo test -p ktune -- --include-ignored"]
fn split_k_workspaces_are_reused_and_never_shared_by_running_launches() {
    let device = Device::cuda(0).unwrap_or_else(|e| panic!("this test needs a GPU: {e}"));
    let stream = device.stream().unwrap();
    let before = workspace_allocations();

    // Launches one after another on one stream share one workspace.
    let queued: Vec<Queued> = (0..16)
        .map(|i| queue(stream, i, format!("launch {i} on one stream")))
        .collect();
    for q in &queued {
        check(q, stream);
    }
    assert_eq!(workspace_allocations() - before, 1);

    // Launches queued on four streams at once, from four threads: each
    // right, and at most four workspaces in all.
    let streams: Vec<Arc<CudaStream>> = (0..4)
        .map(|_| stream.context().new_stream().unwrap())
        .collect();
    std::thread::scope(|scope| {
        for (s, stream) in streams.iter().enumerate() {
            scope.spawn(move || {
                let queued: Vec<Queued> = (0..16)
                    .map(|i| {
                        queue(
                            stream,
                            100 * (s + 1) + i,
                            format!("launch {i} on stream {s}"),
                        )
                    })
                    .collect();
                for q in &queued {
                    check(q, stream);
                }
            });
        }
    });
    let allocated = workspace_allocations() - before;
    assert!(
        (1..=4).contains(&allocated),
        "{allocated} workspaces allocated"
    );

    // And the first stream's workspace still holds zero counters.
    let again = queue(stream, 999, "a launch after the others".to_owned());
    check(&again, stream);
}
