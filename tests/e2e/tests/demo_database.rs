//! The demo's committed tuning database: produced by
//! `KTUNE_DEVICE=vgpu cargo build --release -p demo --features max-autotune`
//! (no GPU was lent when it was made), so every record is marked as the
//! virtual GPU's, current for the demo's kernels, and never embedded as a
//! GPU's variant.

use std::path::{Path, PathBuf};

use ktune_core::db::{Database, MeasuredOn};

fn demo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/demo")
        .canonicalize()
        .expect("the demo exists")
}

#[test]
fn the_demo_database_covers_every_kernel_with_marked_current_records() {
    let dir = demo();
    let path = dir.join("tuning/ktune.json");
    let text = std::fs::read_to_string(&path).expect("the demo ships its database");
    let db = Database::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(
        db.to_text(),
        text,
        "the committed file is in canonical form"
    );

    let kernels = ktune_build::scan::scan(&dir, &[dir.join("src")])
        .expect("the demo scans")
        .kernels;
    assert_eq!(kernels.len(), 4);
    for found in &kernels {
        let k = &found.kernel;
        let checksum = ktune_core::canon::checksum(k);
        let records: Vec<_> = db.records.iter().filter(|r| r.kernel == k.name).collect();
        assert!(!records.is_empty(), "no record of `{}`", k.name);
        for r in records {
            assert_eq!(r.checksum, checksum, "`{}`'s record is stale", k.name);
            assert_eq!(r.provenance.measured_on, MeasuredOn::Vgpu);
            assert!(r.gpu.name.starts_with("ktune-vgpu"), "{}", r.gpu.name);
            assert!(
                r.stats.baseline_us.is_some_and(|b| b >= r.stats.median_us),
                "`{}`: the winner is no slower than the default it was measured beside",
                k.name
            );
        }
    }
    let current: Vec<_> = kernels.iter().map(|f| f.kernel.clone()).collect();
    let problems: Vec<_> = db
        .check()
        .into_iter()
        .chain(db.check_against(&current))
        .collect();
    assert!(problems.is_empty(), "{problems:?}");

    let out = tempfile::tempdir().expect("a temp dir");
    let report = ktune_build::Config::new()
        .manifest_dir(&dir)
        .out_dir(out.path())
        .user_cache(false)
        .cargo_instructions(false)
        .search(false)
        .build()
        .expect("the demo builds");
    for (kernel, variants) in &report.kernels {
        assert!(
            variants.iter().all(|v| v.gpu.is_none()),
            "`{kernel}` embeds a virtual-GPU record as a GPU's variant"
        );
    }
}
