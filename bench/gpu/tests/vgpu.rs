//! The benchmark's kernels, at their tiny shapes, on the virtual GPU: the
//! default schedule and a sample of the space each compute the CPU
//! reference's result (and the unfused baseline's epilogue too).

use ktune_bench::cases::{BIAS_GELU, CASES, parse};
use ktune_core::{SmVersion, lower, space};
use ktune_vgpu::verify::verify;

#[test]
fn tiny_shapes_verify_on_the_virtual_gpu() {
    let target = SmVersion::Sm90;
    for case in CASES {
        let kernel = case.tiny_kernel().expect("parses");
        let default = lower::heuristic(&kernel, target);
        let points = space::candidates(&kernel, target);
        let sample = space::sample(&points, 3, 1);
        for schedule in std::iter::once(&default).chain(&sample) {
            let verified = verify(&kernel, schedule, target, 11)
                .unwrap_or_else(|e| panic!("{}: {e}", case.name));
            assert_eq!(verified.elements as u64, kernel.len_of(&kernel.output));
        }
    }
}

#[test]
fn the_baseline_epilogue_verifies() {
    let kernel = parse(BIAS_GELU, &[("M", 9), ("N", 37)], false).expect("parses");
    let schedule = lower::heuristic(&kernel, SmVersion::Sm90);
    assert_eq!(schedule.class(), "elementwise");
    verify(&kernel, &schedule, SmVersion::Sm90, 3).unwrap_or_else(|e| panic!("{e}"));
}
