//! The verification suite ([`ktune_vgpu::suite`]) on the virtual GPU: every
//! run checked against the CPU evaluation of the IR. It prints each
//! failure in full, how many runs each family had, and ends with the line
//! `verified <K> kernels, <P> schedule points, <S> shapes: <M> mismatches`.

use std::time::Instant;

use ktune_core::lower::{Constraint, heuristic};
use ktune_core::schedule::Class;
use ktune_core::space::{Rejection, Space};
use ktune_core::target::SmVersion;
use ktune_vgpu::suite::{self, Entry, catalogue, staged};
use ktune_vgpu::verify::with_shape;

fn entry<'a>(catalogue: &'a [Entry], name: &str) -> &'a Entry {
    catalogue
        .iter()
        .find(|e| e.kernel.name == name)
        .unwrap_or_else(|| panic!("{name} is in the catalogue"))
}

#[test]
fn every_kernel_class_and_dtype_over_many_points_and_shapes() {
    let started = Instant::now();
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let report = suite::run(&catalogue(), workers, |run| {
        run.reference.check(run.schedule, run.target).map(drop)
    });
    for f in &report.failures {
        println!("{f}");
    }
    println!("verification suite ran in {:.1?}", started.elapsed());
    println!("{report}");
    assert_eq!(report.failures.len(), 0, "{}", report.failures[0]);
    assert!(
        report.points >= 500,
        "only {} schedule points ran",
        report.points
    );
    assert!(
        report.tensor >= 200,
        "only {} tensor-core points ran",
        report.tensor
    );
    assert!(
        report.prefetched >= 100,
        "only {} tensor-core points loaded fragments ahead",
        report.prefetched
    );
    let [warpgroup, warpgroup_split, fed] = report.warpgroup;
    assert!(
        warpgroup >= 40 && warpgroup_split >= 10 && fed >= 50,
        "only {warpgroup} tensor-core points ran on warpgroups (wgmma), {warpgroup_split} split along K, {fed} beside a producer"
    );
    let [simt_grouped, tensor_grouped] = report.grouped;
    assert!(
        simt_grouped >= 50 && tensor_grouped >= 20,
        "only {simt_grouped} SIMT and {tensor_grouped} tensor-core grouped points ran"
    );
    assert!(
        report.one_pass >= 300,
        "only {} one-pass rows points ran",
        report.one_pass
    );
    assert!(
        report.shared_row >= 300,
        "only {} rows points kept the row in shared memory",
        report.shared_row
    );
    assert!(
        report.shared_tree >= 300,
        "only {} shared-tree rows points ran",
        report.shared_tree
    );
    assert!(
        report.online >= 100,
        "only {} points ran two reductions in one pass",
        report.online
    );
    assert!(
        report.staged >= 200,
        "only {} pipelined SIMT points ran",
        report.staged
    );
    let [simt_split, tensor_split] = report.split;
    assert!(
        simt_split >= 100 && tensor_split >= 50,
        "only {simt_split} SIMT and {tensor_split} tensor-core split-K points ran"
    );
}

/// SIMT points above one stage copy tiles unchanged with `cp.async`: where
/// staging widens a 16-bit operand they stay in the space, every one
/// rejected by the operands constraint, and the default keeps one stage.
#[test]
fn pipelined_simt_points_of_16_bit_operands_are_rejected_by_name() {
    let catalogue = catalogue();
    for name in ["mm_bf16_bf16", "mm_bt_f16_f32", "bmm_bf16"] {
        let kernel = &entry(&catalogue, name).kernel;
        let target = SmVersion::BASELINE;
        let space = Space::of(kernel, target);
        let family = space.family(Class::Matmul).expect("a SIMT family");
        let mut rejected = 0;
        for i in 0..family.size() {
            let point = family.point(i);
            if !staged(&point) {
                continue;
            }
            let (why, reason) = space
                .reject(kernel, &point, target)
                .unwrap_or_else(|| panic!("{name}: {point:?} is valid"));
            if why == Rejection::Constraint(Constraint::Operands) {
                rejected += 1;
                assert!(reason.contains("cp.async"), "{reason}");
            }
        }
        assert!(rejected > 0, "{name}: no operands rejection");
        assert!(!staged(&heuristic(kernel, target)));
    }
}

/// Where 16-byte copies cannot reach the operands aligned, the tensor-core
/// family stays in the space and every point of it is rejected, the
/// in-range ones by the alignment constraint.
#[test]
fn tensor_core_points_of_unaligned_shapes_are_rejected_by_name() {
    let unaligned = [
        ("mma_bf16", vec![("M", 7), ("N", 8), ("K", 20)]),
        ("mma_bt_f16", vec![("M", 7), ("N", 7), ("K", 20)]),
        ("mma_f16", vec![("M", 33), ("N", 7), ("K", 16)]),
        ("mma_tf32", vec![("M", 7), ("N", 7), ("K", 20)]),
        ("mma_bt_tf32", vec![("M", 3), ("N", 5), ("K", 127)]),
    ];
    let catalogue = catalogue();
    for (name, shape) in unaligned {
        let entry = entry(&catalogue, name);
        let kernel = with_shape(&entry.kernel, &shape).unwrap_or_else(|err| panic!("{err}"));
        let target = SmVersion::BASELINE;
        let space = Space::of(&kernel, target);
        let family = space.family(Class::Mma).expect("a tensor-core family");
        let mut aligned = 0;
        for i in 0..family.size() {
            let point = family.point(i);
            let (why, reason) = space
                .reject(&kernel, &point, target)
                .unwrap_or_else(|| panic!("{name} {shape:?}: {point:?} is valid"));
            if why == Rejection::Constraint(Constraint::Alignment) {
                aligned += 1;
                assert!(reason.contains("16-byte"), "{reason}");
            }
        }
        assert!(aligned > 0, "{name} {shape:?}: no alignment rejection");
        assert_ne!(heuristic(&kernel, target).kind(), Class::Mma);
    }
}
