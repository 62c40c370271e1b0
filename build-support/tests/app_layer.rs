//! The application's database over a library's: `cargo` builds of
//! `examples/app`, which depends on `examples/lib-kernels` and declares its
//! own database in `.cargo/config.toml` (`[env] KTUNE_APP_DATABASE`).
//!
//! Cargo reads that file only when it runs in `examples/app`, so every
//! build runs there, in this workspace's target dir (nothing is compiled
//! twice). The program prints the schedule the binary ships for
//! `softmax` on the `NVIDIA H200`: the library's fixture record says one
//! schedule, the application's another.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ktune_core::db::Database;

const LIBRARY: &str = r#"{"class":"rows","threads_per_row":128,"rows_per_block":1,"vector":4}"#;
const APPLICATION: &str = r#"{"class":"rows","threads_per_row":64,"rows_per_block":2,"vector":4}"#;

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

/// `cargo <args> --offline` in `examples/app`, with `KTUNE_APP_DATABASE`
/// set to `app_database` in the environment, or, for `None`, left to the
/// configuration.
fn cargo(args: &[&str], app_database: Option<&str>) -> Output {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .args(args)
        .args(["--offline", "--color", "never"])
        .current_dir(examples().join("app"))
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        // These builds are about layers, not the search on a miss.
        .env("KTUNE_DEVICE", "none");
    match app_database {
        Some(value) => command.env("KTUNE_APP_DATABASE", value),
        None => command.env_remove("KTUNE_APP_DATABASE"),
    };
    command.output().expect("cargo runs")
}

/// The schedule the application's binary runs `softmax` with on an H200.
#[track_caller]
fn h200_schedule(app_database: Option<&str>) -> String {
    let out = cargo(&["run", "--quiet"], app_database);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "`cargo run` in examples/app failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("softmax on NVIDIA H200: "))
        .unwrap_or_else(|| panic!("no H200 line in:\n{stdout}"))
        .to_owned()
}

/// Why `cargo build -v` reran `lib-kernels`' build script (Cargo's
/// "Dirty" reason), if it did.
fn library_rerun(app_database: Option<&str>) -> Option<String> {
    let out = cargo(&["build", "-v"], app_database);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    stderr.lines().find_map(|l| {
        let reason = l.trim_start().strip_prefix("Dirty lib-kernels ")?;
        Some(
            reason
                .split_once("): ")
                .map_or(reason, |(_, why)| why)
                .to_owned(),
        )
    })
}

/// Whether a rerun was for the application's database: its variable or
/// its file. (Other reasons, such as an edit to ktune-build, are not this
/// test's business.)
fn for_the_app_database(rerun: &Option<String>) -> bool {
    rerun
        .as_deref()
        .is_some_and(|why| why.contains("KTUNE_APP_DATABASE") || why.contains("ktune.json"))
}

#[test]
fn the_application_database_overrides_the_library_and_reruns_its_build() {
    // The configuration's database: the application's record wins.
    assert_eq!(h200_schedule(None), APPLICATION);
    let rerun = library_rerun(None);
    assert!(!for_the_app_database(&rerun), "{rerun:?}");

    // No application database (an empty value): the library's own record.
    assert_eq!(h200_schedule(Some("")), LIBRARY);

    // Another application database, edited between builds: an edit reruns
    // the library's build script, an unchanged file does not.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ktune.json");
    let committed = std::fs::read_to_string(examples().join("app/tuning/ktune.json")).unwrap();
    let with_threads = |threads: u32| {
        let text = committed.replace(
            "\"threads_per_row\": 64,",
            &format!("\"threads_per_row\": {threads},"),
        );
        assert_ne!(text, committed);
        std::fs::write(&path, text).unwrap();
        APPLICATION.replace(
            "\"threads_per_row\":64,",
            &format!("\"threads_per_row\":{threads},"),
        )
    };
    let env = path.to_str().unwrap();
    let want = with_threads(256);
    assert_eq!(h200_schedule(Some(env)), want);
    let rerun = library_rerun(Some(env));
    assert!(!for_the_app_database(&rerun), "{rerun:?}");
    let want = with_threads(32);
    // (Cargo names the edited file, unless something else changed first.)
    assert!(library_rerun(Some(env)).is_some());
    assert_eq!(h200_schedule(Some(env)), want);

    // A relative path would name each crate's own folder: refused.
    let out = cargo(&["build"], Some("tuning/ktune.json"));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("KTUNE_APP_DATABASE=\"tuning/ktune.json\": expected an absolute path"),
        "{stderr}"
    );
}

#[test]
fn the_example_databases_are_marked_fixtures_in_canonical_form() {
    for crate_dir in ["lib-kernels", "app"] {
        let path = examples().join(crate_dir).join("tuning/ktune.json");
        let text = std::fs::read_to_string(&path).unwrap();
        let db = Database::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(db.to_text(), text, "{} is canonical", path.display());
        assert!(!db.records.is_empty());
        assert!(
            db.records
                .iter()
                .all(|r| r.gpu.driver == "fixture" && r.gpu.cuda == "fixture"),
            "every record of {} is marked as a fixture",
            path.display()
        );
    }
}
