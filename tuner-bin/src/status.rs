//! `cargo ktune status`: the kernels of a crate and of the dependencies
//! whose build scripts tune theirs, with the schedule each variant uses and
//! the database layer it came from.
//!
//! The layers are those the build reads ([`ktune_build::layer`]): the
//! application's database, declared in `KTUNE_APP_DATABASE` (Cargo's
//! configuration `[env]`, or the environment), over each crate's own, over
//! the user cache. A build script learns the variable from Cargo; this
//! command reads Cargo's configuration files the way Cargo does, from the
//! current folder up, then `$CARGO_HOME/config.toml`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use cargo_metadata::{DependencyKind, Metadata, Package, PackageId};
use ktune_build::layer::{self, APP_DATABASE_ENV, Layers};
use ktune_build::select;
use ktune_core::SmVersion;
use ktune_core::db::MeasuredOn;
use ktune_core::ir::Kernel;
use ktune_core::schedule::Schedule;
use serde::Serialize;

use crate::{Crate, CrateArgs, crate_of, selected};

/// What `status` reports, as printed or as JSON.
#[derive(Serialize)]
struct Status {
    application_database: Option<PathBuf>,
    /// Where the application database was declared.
    declared_in: Option<String>,
    crates: Vec<CrateStatus>,
}

#[derive(Serialize)]
struct CrateStatus {
    name: String,
    root: PathBuf,
    dependency_of: Option<String>,
    targets: Vec<&'static str>,
    layers: Vec<LayerStatus>,
    kernels: Vec<KernelStatus>,
}

#[derive(Serialize)]
struct LayerStatus {
    layer: String,
    path: PathBuf,
    records: usize,
}

#[derive(Serialize)]
struct KernelStatus {
    name: String,
    location: String,
    shape: Vec<(String, u32)>,
    output: String,
    variants: Vec<VariantStatus>,
    /// Declared targets no GPU was tuned for.
    untuned_targets: Vec<&'static str>,
    /// Records of this kernel measured on the virtual GPU: estimates, never
    /// chosen for a GPU.
    virtual_records: usize,
    warnings: Vec<String>,
}

#[derive(Serialize)]
struct VariantStatus {
    target: &'static str,
    /// The GPU model it was tuned for; none for a target's default.
    gpu: Option<String>,
    /// Where its schedule came from: heuristic, or a database layer.
    source: String,
    schedule: Schedule,
}

pub(crate) fn status(args: &CrateArgs, json: bool) -> Result<()> {
    let (krate, dependencies) = load_with_dependencies(args)?;
    let app = app_database(&std::env::current_dir()?)?;
    let mut crates = vec![crate_status(&krate, None, app.as_ref())?];
    for dependency in &dependencies {
        crates.push(crate_status(dependency, Some(&krate.name), app.as_ref())?);
    }
    let status = Status {
        application_database: app.as_ref().map(|a| a.path.clone()),
        declared_in: app.map(|a| a.from),
        crates,
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&status)?);
    } else {
        print(&status);
    }
    Ok(())
}

fn print(status: &Status) {
    match (&status.application_database, &status.declared_in) {
        (Some(path), Some(from)) => println!(
            "application database: {} ({APP_DATABASE_ENV}, from {from})",
            path.display()
        ),
        _ => println!("application database: none ({APP_DATABASE_ENV} is unset or empty)"),
    }
    for krate in &status.crates {
        let role = match &krate.dependency_of {
            Some(name) => format!(", a dependency of `{name}`"),
            None => String::new(),
        };
        println!(
            "\ncrate `{}` ({}{role}): {}, targets {}",
            krate.name,
            krate.root.display(),
            ktune_build::counted(krate.kernels.len(), "kernel"),
            krate.targets.join(", ")
        );
        for layer in &krate.layers {
            println!(
                "  {} database: {} ({})",
                layer.layer,
                layer.path.display(),
                ktune_build::counted(layer.records, "record")
            );
        }
        for k in &krate.kernels {
            let shape: Vec<String> = k.shape.iter().map(|(n, s)| format!("{n}={s}")).collect();
            println!(
                "\n{}  ({})\n  shape: {}  output: {}",
                k.name,
                k.location,
                shape.join(", "),
                k.output
            );
            for v in &k.variants {
                println!(
                    "  {:<6} {:<24} {:<22} {}",
                    v.target,
                    v.gpu.as_deref().unwrap_or("default"),
                    v.source,
                    v.schedule.to_json()
                );
            }
            if !k.untuned_targets.is_empty() {
                println!("  not tuned for a GPU of: {}", k.untuned_targets.join(", "));
            }
            if k.virtual_records > 0 {
                println!(
                    "  measured on the virtual GPU: {} (estimates, never chosen for a GPU)",
                    ktune_build::counted(k.virtual_records, "record")
                );
            }
            for warning in &k.warnings {
                println!("  warning: {warning}");
            }
        }
    }
}

/// The crate `args` names, and the crates it links that tune kernels in
/// their build scripts, by name: those an application's database may
/// hold records for.
pub(crate) fn load_with_dependencies(args: &CrateArgs) -> Result<(Crate, Vec<Crate>)> {
    let mut cmd = cargo_metadata::MetadataCommand::new();
    if let Some(path) = &args.manifest_path {
        cmd.manifest_path(path);
    }
    let meta = cmd.exec().context("cannot read the crate's metadata")?;
    let package = selected(&meta, args)?;
    let dependencies = kernel_dependencies(&meta, &package.id)?
        .into_iter()
        .map(crate_of)
        .collect::<Result<_>>()?;
    Ok((crate_of(package)?, dependencies))
}

/// The kernels of the crate `args` names and of the dependencies that tune
/// theirs: those its database may hold records for.
pub(crate) fn linked_kernels(args: &CrateArgs) -> Result<Vec<Kernel>> {
    let (krate, dependencies) = load_with_dependencies(args)?;
    Ok(std::iter::once(krate)
        .chain(dependencies)
        .flat_map(|c| c.kernels)
        .map(|f| f.kernel)
        .collect())
}

/// The packages `root` links (following normal dependencies) with a
/// build-dependency on `ktune-build`, by name.
fn kernel_dependencies<'a>(meta: &'a Metadata, root: &PackageId) -> Result<Vec<&'a Package>> {
    let resolve = meta
        .resolve
        .as_ref()
        .context("cargo metadata gave no dependency graph")?;
    let mut seen = BTreeSet::from([root]);
    let mut next = vec![root];
    while let Some(id) = next.pop() {
        let Some(node) = resolve.nodes.iter().find(|n| &n.id == id) else {
            continue;
        };
        for dep in &node.deps {
            let linked = dep
                .dep_kinds
                .iter()
                .any(|k| k.kind == DependencyKind::Normal);
            if linked && seen.insert(&dep.pkg) {
                next.push(&dep.pkg);
            }
        }
    }
    let mut found: Vec<&Package> = meta
        .packages
        .iter()
        .filter(|p| &p.id != root && seen.contains(&p.id))
        .filter(|p| {
            p.dependencies
                .iter()
                .any(|d| d.name == "ktune-build" && d.kind == DependencyKind::Build)
        })
        .collect();
    found.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(found)
}

fn crate_status(
    krate: &Crate,
    dependency_of: Option<&str>,
    app: Option<&Declared>,
) -> Result<CrateStatus> {
    let targets = select::targets(&krate.metadata.targets);
    let stack = layer::under_application(
        app.map(|a| a.path.clone()),
        layer::stack(
            krate.root.join(ktune_build::db::DEFAULT_PATH),
            Some(&krate.name),
        ),
    );
    let layers = Layers::open(stack)?;
    for warning in layers.warnings() {
        eprintln!("{warning}");
    }
    let kernels = krate
        .kernels
        .iter()
        .map(|found| {
            let k = &found.kernel;
            let mut variants = select::variants(k, &found.location, &targets)?;
            let tuned = select::tuned(k, &layers);
            variants.extend(tuned.variants);
            let tuned_targets: Vec<SmVersion> = variants
                .iter()
                .filter(|v| v.gpu.is_some())
                .map(|v| v.target)
                .collect();
            Ok(KernelStatus {
                name: k.name.clone(),
                location: found.location.to_string(),
                shape: k.shape().collect(),
                output: k.output.dtype.to_string(),
                variants: variants
                    .into_iter()
                    .map(|v| VariantStatus {
                        target: v.target.name(),
                        gpu: v.gpu,
                        source: v.source.to_string(),
                        schedule: v.schedule,
                    })
                    .collect(),
                untuned_targets: targets
                    .iter()
                    .filter(|t| !tuned_targets.contains(t))
                    .map(|t| t.name())
                    .collect(),
                virtual_records: {
                    let checksum = ktune_core::canon::checksum(k);
                    layers
                        .records()
                        .filter(|(_, r)| {
                            r.checksum == checksum && r.provenance.measured_on == MeasuredOn::Vgpu
                        })
                        .count()
                },
                warnings: tuned.warnings.iter().map(ToString::to_string).collect(),
            })
        })
        .collect::<Result<_>>()?;
    Ok(CrateStatus {
        name: krate.name.clone(),
        root: krate.root.clone(),
        dependency_of: dependency_of.map(str::to_owned),
        targets: targets.iter().map(|t| t.name()).collect(),
        layers: layers
            .iter()
            .map(|opened| LayerStatus {
                layer: opened.layer.to_string(),
                path: opened.path.clone(),
                records: opened.database.records.len(),
            })
            .collect(),
        kernels,
    })
}

/// The application's database and where it was declared.
struct Declared {
    path: PathBuf,
    from: String,
}

/// The value a build started in `cwd` gives `KTUNE_APP_DATABASE`: the
/// environment's, unless a configuration file forces its own, else the
/// nearest configuration file's `[env]` entry. Cargo's rules: files from
/// `cwd` up, the deepest first, then `$CARGO_HOME/config.toml`; in a
/// `.cargo` folder, `config` before `config.toml`; `relative = true` joins
/// the value to the folder holding `.cargo`.
fn app_database(cwd: &Path) -> Result<Option<Declared>> {
    let configured = config_files(cwd)
        .into_iter()
        .find_map(|file| env_entry(&file).transpose())
        .transpose()?;
    let environment = std::env::var_os(APP_DATABASE_ENV);
    let (value, from) = match (configured, environment) {
        (Some(entry), Some(value)) if !entry.force => (value.into(), "the environment".to_owned()),
        (Some(entry), _) => (entry.value, entry.file.display().to_string()),
        (None, Some(value)) => (value.into(), "the environment".to_owned()),
        (None, None) => return Ok(None),
    };
    if value.as_os_str().is_empty() {
        return Ok(None);
    }
    let path = layer::app_database_path(value).with_context(|| format!("declared in {from}"))?;
    Ok(Some(Declared { path, from }))
}

/// Cargo's configuration files for a command run in `cwd`, highest
/// precedence first.
fn config_files(cwd: &Path) -> Vec<PathBuf> {
    let in_dot_cargo = |dot_cargo: &Path| {
        ["config", "config.toml"]
            .iter()
            .map(|name| dot_cargo.join(name))
            .find(|file| file.is_file())
    };
    let mut files: Vec<PathBuf> = cwd
        .ancestors()
        .filter_map(|dir| in_dot_cargo(&dir.join(".cargo")))
        .collect();
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| dirs::home_dir().map(|home| home.join(".cargo")));
    if let Some(file) = cargo_home.as_deref().and_then(in_dot_cargo)
        && !files.contains(&file)
    {
        files.push(file);
    }
    files
}

/// One configuration file's `[env]` entry for the variable.
struct Entry {
    file: PathBuf,
    value: PathBuf,
    force: bool,
}

fn env_entry(file: &Path) -> Result<Option<Entry>> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let config: toml::Table = text
        .parse()
        .with_context(|| format!("{} is not valid TOML", file.display()))?;
    let Some(entry) = config.get("env").and_then(|env| env.get(APP_DATABASE_ENV)) else {
        return Ok(None);
    };
    let invalid = || {
        anyhow::anyhow!(
            "{}: [env] {APP_DATABASE_ENV} must be a string or {{ value = \"…\", relative = true }}",
            file.display()
        )
    };
    let (value, force, relative) = match entry {
        toml::Value::String(value) => (value.as_str(), false, false),
        toml::Value::Table(table) => (
            table
                .get("value")
                .and_then(toml::Value::as_str)
                .ok_or_else(invalid)?,
            table
                .get("force")
                .and_then(toml::Value::as_bool)
                .unwrap_or(false),
            table
                .get("relative")
                .and_then(toml::Value::as_bool)
                .unwrap_or(false),
        ),
        _ => return Err(invalid()),
    };
    let value = match file.parent().and_then(Path::parent) {
        Some(base) if relative => base.join(value),
        _ => PathBuf::from(value),
    };
    Ok(Some(Entry {
        file: file.to_owned(),
        value,
        force,
    }))
}
