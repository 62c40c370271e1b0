//! Tuning databases stacked in order of precedence.
//!
//! A kernel is compiled by the build script of the crate that defines it,
//! so its build looks it up in the databases that can speak for it, highest
//! first:
//!
//! 1. the **application**'s database, when the application declares one in
//!    [`APP_DATABASE_ENV`] and it is not the crate's own: the application
//!    overrides the choices of the libraries it depends on;
//! 2. the **crate**'s own, committed database (`tuning/ktune.json`), which
//!    a library ships with its kernels;
//! 3. the per-user **cache** (`<cache dir>/ktune/<crate>/ktune.json`),
//!    results not yet committed.
//!
//! [`Layers`] holds them in that order, and for each key the first layer
//! holding a [winner](ktune_core::db::Database::winner) decides: a layer's
//! records never compete with another layer's, so an application overrides
//! a library's choice, and a crate the cache's, by recording its own.
//!
//! A dependency's build script cannot see the application's manifest, and
//! a build script cannot run `cargo metadata` (cargo inside cargo); what
//! Cargo does give every build script of a build is its configuration's
//! `[env]`. So the application declares its database there, in its
//! `.cargo/config.toml`:
//!
//! ```toml
//! [env]
//! KTUNE_APP_DATABASE = { value = "tuning/ktune.json", relative = true }
//! ```
//!
//! `relative = true` makes Cargo pass an absolute path (relative paths are
//! refused: each build script runs in its own crate's folder). Cargo reads
//! that file only when it runs in the application's folder or below it
//! (`--manifest-path` does not change that); the variable may also be set
//! in the environment, which overrides the file. The application's records
//! of other crates' kernels are simply not matched: records are keyed by
//! the kernel's checksum and shape.

use std::fmt;
use std::path::{Path, PathBuf};

use ktune_core::db::{Database, Key, ParseError, Record};

use crate::error::Error;

/// Which database a record comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Layer {
    /// The database the application declares for every crate of its build.
    Application,
    /// The crate's own, committed database.
    Crate,
    /// The per-user cache of results not yet committed.
    UserCache,
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Layer::Application => f.write_str("application"),
            Layer::Crate => f.write_str("crate"),
            Layer::UserCache => f.write_str("user cache"),
        }
    }
}

/// One opened database and where it lives.
#[derive(Debug, Clone)]
pub struct Opened {
    pub layer: Layer,
    pub path: PathBuf,
    pub database: Database,
}

/// Databases in order of precedence, highest first.
#[derive(Debug, Clone, Default)]
pub struct Layers {
    layers: Vec<Opened>,
    warnings: Vec<String>,
}

impl Layers {
    /// No database: every choice is a heuristic default.
    pub fn new() -> Layers {
        Layers::default()
    }

    /// Opens each `(layer, path)` in order of precedence, highest first. A
    /// missing file is an empty layer; one that does not parse is an error
    /// naming it, except the user cache's: a cache is no one's to fix, so
    /// it is not read, with a warning ([`Layers::warnings`]). An
    /// application database whose folder does not exist is likely a
    /// misspelt path: a warning too. Reads only; a build opens them with
    /// [`Layers::open_for_build`].
    pub fn open(stack: impl IntoIterator<Item = (Layer, PathBuf)>) -> Result<Layers, Error> {
        Layers::open_with(stack, false)
    }

    /// [`Layers::open`] for a build, which also moves an unreadable user
    /// cache aside, kept for a look, to start a new one; unless a newer
    /// ktune wrote it, which that ktune reads.
    pub fn open_for_build(
        stack: impl IntoIterator<Item = (Layer, PathBuf)>,
    ) -> Result<Layers, Error> {
        Layers::open_with(stack, true)
    }

    fn open_with(
        stack: impl IntoIterator<Item = (Layer, PathBuf)>,
        repair: bool,
    ) -> Result<Layers, Error> {
        let mut layers = Layers::new();
        for (layer, path) in stack {
            let database = match (layer, crate::db::open(&path)) {
                (Layer::UserCache, Err(Error::Database { error, .. })) => {
                    layers
                        .warnings
                        .push(unreadable_cache(&path, &error, repair));
                    Database::new()
                }
                (_, opened) => opened?,
            };
            if layer == Layer::Application && path.parent().is_some_and(|dir| !dir.is_dir()) {
                layers.warnings.push(format!(
                    "ktune: {APP_DATABASE_ENV} names `{}`, whose folder does not exist; no application database is read",
                    path.display()
                ));
            }
            layers.push(layer, path, database);
        }
        Ok(layers)
    }

    /// What opening the layers had to say: a user cache moved aside, an
    /// application database nowhere to be found.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Adds a layer below the others.
    pub fn push(&mut self, layer: Layer, path: PathBuf, database: Database) {
        self.layers.push(Opened {
            layer,
            path,
            database,
        });
    }

    /// The layers, highest precedence first.
    pub fn iter(&self) -> impl Iterator<Item = &Opened> {
        self.layers.iter()
    }

    /// Every record of every layer, with its layer.
    pub fn records(&self) -> impl Iterator<Item = (&Opened, &Record)> {
        self.layers
            .iter()
            .flat_map(|l| l.database.records.iter().map(move |r| (l, r)))
    }

    /// The record chosen for `key`: the winner of the first layer that has
    /// one.
    pub fn winner(&self, key: &Key) -> Option<(&Opened, &Record)> {
        self.layers
            .iter()
            .find_map(|l| l.database.winner(key).map(|r| (l, r)))
    }
}

/// What becomes of the user cache at `path`, which does not parse
/// (`error`): with `repair`, moved aside ([`crate::db::move_aside`]), unless
/// a newer ktune wrote it; else left as it is, unread.
fn unreadable_cache(path: &Path, error: &ParseError, repair: bool) -> String {
    let what = format!(
        "ktune: the per-user cache `{}` could not be read ({error})",
        path.display()
    );
    if error.newer {
        return format!("{what}; it is not read: upgrade ktune");
    }
    if !repair {
        return format!("{what}; it is not read, and the next build moves it aside");
    }
    match crate::db::move_aside(path) {
        Ok(Some(aside)) => format!("{what}; moved to `{}` and started afresh", aside.display()),
        Ok(None) => format!("{what}; another build replaced it meanwhile"),
        Err(e) => format!("{what}, nor moved aside ({e}); delete it"),
    }
}

/// The layers a build reads: the crate's database at `database`, over
/// the user cache of crate `name` when given.
pub fn stack(database: PathBuf, user_cache_of: Option<&str>) -> Vec<(Layer, PathBuf)> {
    let mut stack = vec![(Layer::Crate, database)];
    if let Some(path) = user_cache_of.and_then(user_cache_path) {
        stack.push((Layer::UserCache, path));
    }
    stack
}

/// The variable that names the application's database, an absolute path,
/// for the build scripts of every crate in the build.
pub const APP_DATABASE_ENV: &str = "KTUNE_APP_DATABASE";

/// The application's database, from [`APP_DATABASE_ENV`]: `None` when the
/// variable is unset or empty, an error when it is not an absolute path.
pub fn app_database() -> Result<Option<PathBuf>, Error> {
    std::env::var_os(APP_DATABASE_ENV)
        .filter(|value| !value.is_empty())
        .map(|value| app_database_path(PathBuf::from(value)))
        .transpose()
}

/// Checks that a declared application database is an absolute path.
pub fn app_database_path(path: PathBuf) -> Result<PathBuf, Error> {
    if path.is_absolute() {
        Ok(path)
    } else {
        Err(Error::Setting {
            name: APP_DATABASE_ENV,
            value: path.display().to_string(),
            expected: "an absolute path; in .cargo/config.toml write `KTUNE_APP_DATABASE = { value = \"tuning/ktune.json\", relative = true }`",
        })
    }
}

/// `stack` under the application's database `app`, unless `app` is one of
/// its files (the application's own build, where it is the crate layer).
pub fn under_application(
    app: Option<PathBuf>,
    stack: Vec<(Layer, PathBuf)>,
) -> Vec<(Layer, PathBuf)> {
    let Some(app) = app else {
        return stack;
    };
    if stack.iter().any(|(_, path)| same_file(path, &app)) {
        return stack;
    }
    let mut layers = vec![(Layer::Application, app)];
    layers.extend(stack);
    layers
}

/// Whether two paths name one file: equal once canonical, or, for files
/// that do not exist yet, equal as written.
fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// The environment variables `dirs::cache_dir` reads on this platform: a
/// change to one moves the user cache, so the build must rerun.
pub const USER_CACHE_ENV: &[&str] = if cfg!(windows) {
    &["LOCALAPPDATA"]
} else if cfg!(target_os = "macos") {
    &["HOME"]
} else {
    &["XDG_CACHE_HOME", "HOME"]
};

/// The per-user cache database of crate `name`:
/// `<cache dir>/ktune/<name>/ktune.json`, if the platform has a cache dir.
pub fn user_cache_path(name: &str) -> Option<PathBuf> {
    dirs::cache_dir().map(|dir| dir.join("ktune").join(name).join("ktune.json"))
}

/// What a build script watches for the database of `layer` at `path`: the
/// file, or, while it does not exist, its folder, so that creating the file
/// (a search, `cargo ktune tune`, a `git pull` that brings the first one)
/// reruns the build. The folder of the crate's database and of the user
/// cache is created when missing (an empty `tuning/` in the crate); an
/// application's database is the application's to place, so when its
/// folder is missing, or cannot be created, nothing is watched: Cargo
/// would rerun the build script on every build for a path that does not
/// exist.
pub fn watched(layer: Layer, path: &Path) -> Option<&Path> {
    if path.exists() {
        return Some(path);
    }
    let dir = path.parent().filter(|dir| !dir.as_os_str().is_empty())?;
    if !dir.is_dir() && layer != Layer::Application && std::fs::create_dir_all(dir).is_ok() {
        backdate(dir);
    }
    dir.is_dir().then_some(dir)
}

/// Dates a database this build script's run wrote, and read back, to just
/// before the run `started`: Cargo reruns a build script whose watched
/// paths changed after its last run began, and this change the run took
/// in itself. Best effort.
pub fn date_before(path: &Path, started: std::time::SystemTime) {
    if let (Ok(file), Some(then)) = (
        std::fs::File::options().write(true).open(path),
        started.checked_sub(std::time::Duration::from_secs(1)),
    ) {
        let _ = file.set_modified(then);
    }
}

/// Dates a folder created during this build script's run a day back:
/// Cargo reruns a build script whose watched paths changed after its last
/// run began, and the new, empty folder is no change. A file created in it
/// later dates it now again. Best effort, and only where a folder can be
/// opened as a file (Unix); elsewhere the first build after its creation
/// reruns the script once.
fn backdate(dir: &Path) {
    #[cfg(unix)]
    if let (Ok(folder), Some(then)) = (
        std::fs::File::open(dir),
        std::time::SystemTime::now().checked_sub(std::time::Duration::from_secs(24 * 3600)),
    ) {
        let _ = folder.set_modified(then);
    }
    #[cfg(not(unix))]
    let _ = dir;
}
