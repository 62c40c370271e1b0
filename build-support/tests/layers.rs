//! The build's use of the tuning database: layer precedence, and what it
//! does with records it cannot use (virtual-GPU, stale, invalid, unknown
//! GPU).

use std::collections::BTreeMap;
use std::path::Path;

use ktune_build::layer::{self, Layer, Layers};
use ktune_build::{Config, Source, scan, select};
use ktune_core::DType;
use ktune_core::db::{ComputeCapability, Database, Gpu, MeasuredOn, Provenance, Record, Stats};
use ktune_core::ir::Kernel;
use ktune_core::schedule::Schedule;

const LIB_RS: &str = r#"
use ktune::prelude::*;

#[tuned_kernel(shape(N = 4096))]
pub fn scale(x: Tensor<f32, (N,)>) -> Tensor<f32, (N,)> {
    compute(|n| x[n] * 2.0)
}
"#;

fn kernel(dir: &Path) -> Kernel {
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(dir.join("src/lib.rs"), LIB_RS).unwrap();
    let found = scan::scan(dir, &[dir.join("src")]).expect("the kernel scans");
    found.kernels[0].kernel.clone()
}

fn record(kernel: &Kernel, gpu: &str, cc: (u32, u32), block: u32, median: f64) -> Record {
    Record {
        kernel: kernel.name.clone(),
        checksum: ktune_core::canon::checksum(kernel),
        canonical: String::new(),
        shape: BTreeMap::from([("N".to_owned(), 4096)]),
        dtype: DType::F32,
        gpu: Gpu {
            name: gpu.to_owned(),
            compute_capability: ComputeCapability {
                major: cc.0,
                minor: cc.1,
            },
            sm_count: 0,
            driver: "fixture".to_owned(),
            cuda: "fixture".to_owned(),
            clocks_mhz: None,
        },
        schedule: Schedule::Elementwise {
            block,
            per_thread: 1,
            vector: 1,
        },
        stats: Stats {
            median_us: median,
            low_us: median * 0.99,
            high_us: median * 1.01,
            samples: 50,
            baseline_us: None,
            throughput: None,
        },
        provenance: Provenance {
            ktune_version: "0.1.0".to_owned(),
            generator_version: ktune_core::GENERATOR_VERSION,
            measured_on: MeasuredOn::Gpu,
            date: "2000-01-01T00:00:00Z".to_owned(),
        },
    }
}

fn database(records: Vec<Record>) -> Database {
    let mut db = Database::new();
    db.insert(records);
    db
}

fn block_of(v: &ktune_build::Variant) -> u32 {
    match v.schedule {
        Schedule::Elementwise { block, .. } => block,
        _ => panic!("an elementwise schedule"),
    }
}

#[test]
fn the_first_layer_with_a_winner_decides() {
    let dir = tempfile::tempdir().unwrap();
    let k = kernel(dir.path());
    let mut layers = Layers::new();
    layers.push(
        Layer::Application,
        "app.json".into(),
        database(vec![record(&k, "NVIDIA H200", (9, 0), 256, 5.0)]),
    );
    layers.push(
        Layer::Crate,
        "lib.json".into(),
        database(vec![
            // Faster, but a lower layer: the application's record decides.
            record(&k, "NVIDIA H200", (9, 0), 512, 1.0),
            record(&k, "NVIDIA A10", (8, 6), 128, 3.0),
        ]),
    );
    layers.push(
        Layer::UserCache,
        "cache.json".into(),
        database(vec![record(&k, "NVIDIA A10", (8, 6), 64, 1.0)]),
    );
    let tuned = select::tuned(&k, &layers);
    assert!(tuned.warnings.is_empty(), "{:?}", tuned.warnings);
    let got: Vec<(&str, u32, Source)> = tuned
        .variants
        .iter()
        .map(|v| (v.gpu.as_deref().unwrap(), block_of(v), v.source.clone()))
        .collect();
    assert_eq!(
        got,
        [
            (
                "NVIDIA A10",
                128,
                Source::Database {
                    layer: Layer::Crate
                }
            ),
            (
                "NVIDIA H200",
                256,
                Source::Database {
                    layer: Layer::Application
                }
            ),
        ]
    );
    assert_eq!(tuned.variants[0].target, ktune_core::SmVersion::Sm86);
}

#[test]
fn unusable_records_are_reported_or_ignored_never_embedded() {
    let dir = tempfile::tempdir().unwrap();
    let k = kernel(dir.path());
    let mut vgpu = record(&k, "NVIDIA L4", (8, 9), 128, 1.0);
    vgpu.provenance.measured_on = MeasuredOn::Vgpu;
    let mut stale = record(&k, "NVIDIA H200", (9, 0), 128, 1.0);
    stale.checksum = "0".repeat(32);
    let mut old_generator = record(&k, "NVIDIA H200", (9, 0), 64, 1.0);
    old_generator.provenance.generator_version = ktune_core::GENERATOR_VERSION + 1;
    let invalid = record(&k, "NVIDIA A100-SXM4-80GB", (8, 0), 100, 1.0);
    let unknown = record(&k, "NVIDIA T4", (7, 5), 128, 1.0);
    let mut other_shape = record(&k, "NVIDIA A10", (8, 6), 128, 1.0);
    other_shape.shape.insert("N".to_owned(), 17);
    let db = database(vec![
        vgpu,
        stale,
        old_generator,
        invalid,
        unknown,
        other_shape,
    ]);
    std::fs::create_dir_all(dir.path().join("tuning")).unwrap();
    std::fs::write(dir.path().join("tuning/ktune.json"), db.to_text()).unwrap();
    std::fs::write(
        dir.path().join("Cargo.toml"),
        "[package]\nname = \"scale\"\nversion = \"0.0.0\"\n",
    )
    .unwrap();

    let report = Config::new()
        .manifest_dir(dir.path())
        .out_dir(dir.path().join("out"))
        .user_cache(false)
        .cargo_instructions(false)
        .search(false)
        .build()
        .expect("the build succeeds");
    let (_, variants) = &report.kernels[0];
    assert!(variants.iter().all(|v| v.gpu.is_none()), "{variants:?}");
    assert_eq!(report.warnings.len(), 3, "{:#?}", report.warnings);
    assert_eq!(
        report.warnings[0],
        "kernel `scale`: 2 tuning records are stale (the kernel or ktune's code generator changed since they were tuned); run `cargo ktune db verify`"
    );
    assert!(
        report.warnings[1].starts_with(
            "kernel `scale`: the tuning record for `NVIDIA A100-SXM4-80GB` (measured 2000-01-01T00:00:00Z, crate layer `"
        ) && report.warnings[1].contains("is not used: its schedule is invalid: "),
        "{}",
        report.warnings[1]
    );
    assert!(
        report.warnings[2].contains("`NVIDIA T4`")
            && report.warnings[2]
                .ends_with("is not used: ktune has no target for compute capability 7.5"),
        "{}",
        report.warnings[2]
    );
    assert!(
        report
            .inputs
            .contains(&dir.path().join("tuning/ktune.json"))
    );
}

#[test]
fn the_application_database_goes_on_top_unless_it_is_the_crate_own() {
    let dir = tempfile::tempdir().unwrap();
    let own = dir.path().join("lib/tuning/ktune.json");
    let app = dir.path().join("app/tuning/ktune.json");
    let stack = layer::stack(own.clone(), None);
    assert_eq!(
        layer::under_application(Some(app.clone()), stack.clone()),
        [(Layer::Application, app), (Layer::Crate, own.clone())]
    );
    assert_eq!(layer::under_application(None, stack.clone()), stack);
    // The application's own build: its database is the crate layer, once.
    std::fs::create_dir_all(own.parent().unwrap()).unwrap();
    std::fs::write(&own, Database::new().to_text()).unwrap();
    let same = dir.path().join("lib/../lib/tuning/ktune.json");
    assert_eq!(layer::under_application(Some(same), stack.clone()), stack);
}

/// A crate's database that does not parse fails the build, for someone to
/// fix; a user cache that does not parse is no one's to fix: the tools
/// leave it unread, and a build moves it aside, kept for a look, and goes
/// on with an empty one; unless a newer ktune wrote it.
#[test]
fn an_unreadable_user_cache_is_moved_aside_by_a_build_and_the_build_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let own = dir.path().join("lib/tuning/ktune.json");
    let cache = dir.path().join("cache/ktune/lib/ktune.json");
    std::fs::create_dir_all(cache.parent().unwrap()).unwrap();
    let broken = "{\"version\":1,\"records\":[";
    std::fs::write(&cache, broken).unwrap();
    let stack = vec![
        (Layer::Crate, own.clone()),
        (Layer::UserCache, cache.clone()),
    ];
    let prefix = format!(
        "ktune: the per-user cache `{}` could not be read (",
        cache.display()
    );

    // The tools read; they move nothing.
    let layers = Layers::open(stack.clone()).expect("the cache is no obstacle");
    let [warning] = layers.warnings() else {
        panic!("one warning: {:?}", layers.warnings());
    };
    assert!(warning.starts_with(&prefix), "{warning}");
    assert!(
        warning.ends_with("it is not read, and the next build moves it aside"),
        "{warning}"
    );
    assert_eq!(std::fs::read_to_string(&cache).unwrap(), broken);

    let layers = Layers::open_for_build(stack.clone()).expect("the cache is no obstacle");
    assert_eq!(layers.records().count(), 0);
    let [warning] = layers.warnings() else {
        panic!("one warning: {:?}", layers.warnings());
    };
    assert!(warning.starts_with(&prefix), "{warning}");
    assert!(warning.contains("invalid JSON"), "{warning}");
    let aside: Vec<_> = std::fs::read_dir(cache.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert!(
        warning.ends_with(&format!(
            "moved to `{}` and started afresh",
            aside[0].display()
        )),
        "{warning}"
    );
    assert_eq!(std::fs::read_to_string(&aside[0]).unwrap(), broken);
    assert!(!cache.exists());
    // Opened again: a missing cache, nothing to say.
    assert!(
        Layers::open_for_build(stack.clone())
            .unwrap()
            .warnings()
            .is_empty()
    );
    // Broken again within the same second: another name, the first kept.
    std::fs::write(&cache, broken).unwrap();
    Layers::open_for_build(stack.clone()).unwrap();
    let kept = std::fs::read_dir(cache.parent().unwrap())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("ktune.unreadable-")
        })
        .count();
    assert_eq!(kept, 2);

    // A newer ktune's cache is that ktune's to read: left where it is.
    let newer = "{\"version\": 99, \"records\": []}";
    std::fs::write(&cache, newer).unwrap();
    let layers = Layers::open_for_build(stack).unwrap();
    assert!(
        layers.warnings()[0].ends_with("it is not read: upgrade ktune"),
        "{:?}",
        layers.warnings()
    );
    assert_eq!(std::fs::read_to_string(&cache).unwrap(), newer);

    // The crate's own is an error naming it.
    std::fs::create_dir_all(own.parent().unwrap()).unwrap();
    std::fs::write(&own, broken).unwrap();
    let error = Layers::open([(Layer::Crate, own.clone())]).expect_err("the crate's own");
    assert!(
        error.to_string().starts_with(&own.display().to_string()),
        "{error}"
    );
}

/// An application database in a folder that does not exist is most likely
/// a misspelt path.
#[test]
fn an_application_database_nowhere_to_be_found_is_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let app = dir.path().join("ap/tuning/ktune.json");
    let layers = Layers::open([(Layer::Application, app.clone())]).unwrap();
    assert_eq!(
        layers.warnings(),
        [format!(
            "ktune: KTUNE_APP_DATABASE names `{}`, whose folder does not exist; no application database is read",
            app.display()
        )]
    );
    std::fs::create_dir_all(app.parent().unwrap()).unwrap();
    assert!(
        Layers::open([(Layer::Application, app)])
            .unwrap()
            .warnings()
            .is_empty()
    );
}

#[test]
fn a_relative_application_database_is_refused() {
    let error = layer::app_database_path("tuning/ktune.json".into())
        .expect_err("a relative path is refused");
    assert!(
        error
            .to_string()
            .starts_with("KTUNE_APP_DATABASE=\"tuning/ktune.json\": expected an absolute path"),
        "{error}"
    );
    let absolute = std::env::temp_dir().join("ktune.json");
    assert_eq!(
        layer::app_database_path(absolute.clone()).unwrap(),
        absolute
    );
}

#[test]
fn other_kernels_of_the_same_name_in_the_application_database_are_not_stale() {
    let dir = tempfile::tempdir().unwrap();
    let k = kernel(dir.path());
    let mut other_crates = record(&k, "NVIDIA H200", (9, 0), 128, 1.0);
    other_crates.checksum = "0".repeat(32);
    let mut old_generator = record(&k, "NVIDIA H200", (9, 0), 64, 1.0);
    old_generator.provenance.generator_version = ktune_core::GENERATOR_VERSION + 1;
    let mut layers = Layers::new();
    layers.push(
        Layer::Application,
        "app.json".into(),
        database(vec![other_crates.clone(), old_generator]),
    );
    let tuned = select::tuned(&k, &layers);
    assert!(tuned.variants.is_empty());
    assert_eq!(
        tuned.warnings,
        [
            "kernel `scale`: 1 tuning record is stale (the kernel or ktune's code generator changed since it was tuned); run `cargo ktune db verify`"
        ]
    );

    let mut layers = Layers::new();
    layers.push(
        Layer::Crate,
        "crate.json".into(),
        database(vec![other_crates]),
    );
    assert_eq!(select::tuned(&k, &layers).warnings.len(), 1);
}
