//! A crate whose database covers all of its 50 kernels: the build embeds the
//! tuned variant of every kernel, and a second build rewrites no file.
//! (Its timing is `benches/build_script.rs`.)

#[path = "covered/mod.rs"]
mod covered;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use ktune_build::layer::Layer;
use ktune_build::{Config, Source};

fn config(dir: &Path, out: &Path) -> Config {
    Config::new()
        .manifest_dir(dir)
        .out_dir(out)
        .cargo_instructions(false)
        .search(false)
        .user_cache(false)
}

fn outputs(out: &Path) -> BTreeMap<PathBuf, (Vec<u8>, SystemTime)> {
    std::fs::read_dir(out.join("ktune"))
        .unwrap()
        .map(|e| {
            let path = e.unwrap().path();
            let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
            (path.clone(), (std::fs::read(&path).unwrap(), modified))
        })
        .collect()
}

#[test]
fn every_kernel_is_a_hit_and_a_second_build_rewrites_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let generated = covered::write(dir.path());

    let report = config(dir.path(), out.path()).build().expect("the build");
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    let names: Vec<&str> = report.kernels.iter().map(|(n, _)| n.as_str()).collect();
    let expected: Vec<&str> = generated.kernels.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(names, expected);
    assert_eq!(names.len(), covered::KERNELS);
    for (name, variants) in &report.kernels {
        let tuned: Vec<_> = variants
            .iter()
            .filter(|v| v.gpu.as_deref() == Some(covered::GPU))
            .collect();
        assert_eq!(tuned.len(), 1, "`{name}`: one variant for the H200");
        let v = tuned[0];
        assert_eq!(
            v.source,
            Source::Database {
                layer: Layer::Crate
            },
            "`{name}`"
        );
        assert_eq!(v.target, covered::TARGET, "`{name}`");
        assert_eq!(
            v.schedule, generated.tuned[name],
            "`{name}`: the recorded schedule"
        );
        let default = variants
            .iter()
            .find(|d| d.gpu.is_none() && d.target == covered::TARGET)
            .expect("the sm_90 default");
        assert_ne!(v.schedule, default.schedule, "`{name}`: not the default");
    }

    // Back-date every output, so that a rewrite shows in its mtime even on
    // a file system with coarse timestamps.
    let past = SystemTime::now() - Duration::from_secs(3600);
    for path in outputs(out.path()).keys() {
        std::fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(past)
            .unwrap();
    }
    let before = outputs(out.path());
    // 50 tables, and per kernel the sm_80 and sm_90 defaults and the H200's PTX.
    assert_eq!(before.len(), covered::KERNELS * 4);

    let again = config(dir.path(), out.path())
        .build()
        .expect("the second build");
    assert_eq!(again.kernels.len(), covered::KERNELS);
    let after = outputs(out.path());
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>()
    );
    for (path, (bytes, modified)) in &before {
        let (bytes_after, modified_after) = &after[path];
        assert!(bytes == bytes_after, "{} changed", path.display());
        assert_eq!(modified, modified_after, "{} was rewritten", path.display());
    }
}
