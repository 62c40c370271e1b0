//! `cargo ktune status` in an application: the kernels of its dependencies
//! that tune their own (`examples/lib-kernels`), and the layer each choice
//! came from, with the application's database (`examples/app`, declared in
//! its `.cargo/config.toml`) over the library's.

use std::path::{Path, PathBuf};
use std::process::Command;

const LIBRARY: &str = r#"{"class":"rows","threads_per_row":128,"rows_per_block":1,"vector":4}"#;
const APPLICATION: &str = r#"{"class":"rows","threads_per_row":64,"rows_per_block":2,"vector":4}"#;

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .canonicalize()
        .expect("the examples exist")
}

/// `cargo ktune status <args>` run in `dir`, with `KTUNE_APP_DATABASE` set
/// to `app_database` in the environment, or, for `None`, left to Cargo's
/// configuration.
fn status(dir: &Path, args: &[&str], app_database: Option<&str>) -> String {
    let mut command = Command::new(env!("CARGO_BIN_EXE_cargo-ktune"));
    command
        .args(["ktune", "status"])
        .args(args)
        .current_dir(dir);
    match app_database {
        Some(value) => command.env("KTUNE_APP_DATABASE", value),
        None => command.env_remove("KTUNE_APP_DATABASE"),
    };
    let out = command.output().expect("cargo-ktune runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The line of `softmax`'s H200 variant: its source and schedule.
fn h200_line(text: &str) -> (String, String) {
    let softmax = text
        .split("\nsoftmax  (")
        .nth(1)
        .unwrap_or_else(|| panic!("no softmax in:\n{text}"));
    let line = softmax
        .lines()
        .find(|l| l.contains("NVIDIA H200"))
        .unwrap_or_else(|| panic!("no H200 variant in:\n{text}"));
    let source = line
        .split_whitespace()
        .skip(3)
        .take(2)
        .collect::<Vec<_>>()
        .join(" ");
    let schedule = line
        .split_whitespace()
        .last()
        .expect("a schedule")
        .to_owned();
    (source, schedule)
}

#[test]
fn status_in_the_application_shows_the_dependency_kernel_from_the_application_layer() {
    let app = examples().join("app");
    let text = status(&app, &[], None);
    let declared = app.join("tuning/ktune.json");
    assert!(
        text.starts_with(&format!(
            "application database: {} (KTUNE_APP_DATABASE, from {})",
            declared.display(),
            app.join(".cargo/config.toml").display()
        )),
        "{text}"
    );
    let library = examples().join("lib-kernels");
    assert!(
        text.contains(&format!(
            "crate `lib-kernels` ({}, a dependency of `example-app`): 2 kernels, targets sm_80, sm_90\n  application database: {} (1 record)\n  crate database: {} (1 record)\n",
            library.display(),
            declared.display(),
            library.join("tuning/ktune.json").display()
        )),
        "{text}"
    );
    // The application's own database is its crate layer, not a second one.
    assert!(
        text.contains(&format!(
            "crate `example-app` ({}): 0 kernels, targets sm_80\n  crate database: {} (1 record)\n",
            app.display(),
            declared.display()
        )),
        "{text}"
    );
    assert!(text.contains("\naxpy  (src/lib.rs:"), "{text}");
    assert_eq!(
        h200_line(&text),
        ("database (application)".to_owned(), APPLICATION.to_owned())
    );
}

#[test]
fn without_the_application_database_the_library_record_decides() {
    let app = examples().join("app");
    let text = status(&app, &[], Some(""));
    assert!(
        text.starts_with("application database: none (KTUNE_APP_DATABASE is unset or empty)"),
        "{text}"
    );
    assert_eq!(
        h200_line(&text),
        ("database (crate)".to_owned(), LIBRARY.to_owned())
    );
    // Like `cargo build --manifest-path`, run elsewhere the application's
    // `.cargo/config.toml` is not read.
    let manifest = app.join("Cargo.toml");
    let text = status(
        &examples().join(".."),
        &["--manifest-path", manifest.to_str().unwrap()],
        None,
    );
    assert_eq!(
        h200_line(&text),
        ("database (crate)".to_owned(), LIBRARY.to_owned())
    );
}

#[test]
fn db_verify_in_the_application_checks_its_records_against_dependency_kernels() {
    let app = examples().join("app");
    let out = Command::new(env!("CARGO_BIN_EXE_cargo-ktune"))
        .args(["ktune", "db", "verify"])
        .current_dir(&app)
        .output()
        .expect("cargo-ktune runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!(
            "{}: 1 record, all valid",
            app.join("tuning/ktune.json").display()
        )),
        "{stdout}"
    );
}
