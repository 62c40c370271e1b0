//! Tuning databases stacked in order of precedence.
//!
//! A build looks a kernel up in several databases: the crate's own
//! (committed, `tuning/ktune.json`), those shipped by its dependency
//! crates, and the per-user cache (`<cache dir>/ktune/<crate>/ktune.json`,
//! results not yet committed). [`Layers`] holds them in that order, and for
//! each key the first layer holding a [winner](ktune_core::db::Database::winner)
//! decides: a layer's records never compete with another layer's, so a
//! crate overrides a dependency's choice, or the cache's, by recording its
//! own.
//!
//! The build script stacks the crate's database over the user cache.
//! Dependency layers need the dependency graph, which `cargo ktune`
//! reads with `cargo metadata`; a build script cannot do that safely (it
//! would run cargo inside cargo), so the build does not read them yet.

use std::fmt;
use std::path::{Path, PathBuf};

use ktune_core::db::{Database, Key, Record};

use crate::error::Error;

/// Which database a record comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Layer {
    /// The crate's own, committed database.
    Crate,
    /// The database shipped by a dependency crate (by its name).
    Dependency(String),
    /// The per-user cache of results not yet committed.
    UserCache,
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Layer::Crate => f.write_str("crate"),
            Layer::Dependency(name) => write!(f, "dependency `{name}`"),
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
}

impl Layers {
    /// No database: every choice is a heuristic default.
    pub fn new() -> Layers {
        Layers::default()
    }

    /// Opens each `(layer, path)` in order of precedence, highest first. A
    /// missing file is an empty layer; one that does not parse is an error
    /// naming it.
    pub fn open(stack: impl IntoIterator<Item = (Layer, PathBuf)>) -> Result<Layers, Error> {
        let mut layers = Layers::new();
        for (layer, path) in stack {
            let database = crate::db::open(&path)?;
            layers.push(layer, path, database);
        }
        Ok(layers)
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

/// The layers a build reads: the crate's database at `database`, over
/// the user cache of crate `name` when given.
pub fn stack(database: PathBuf, user_cache_of: Option<&str>) -> Vec<(Layer, PathBuf)> {
    let mut stack = vec![(Layer::Crate, database)];
    if let Some(path) = user_cache_of.and_then(user_cache_path) {
        stack.push((Layer::UserCache, path));
    }
    stack
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

/// What a build script watches for a database at `path`: the file, or,
/// while it does not exist, its folder (so that creating the file reruns
/// the build). Cargo reruns on every build for a path that does not exist,
/// so when the folder is missing too, nothing is watched.
pub fn watched(path: &Path) -> Option<&Path> {
    if path.exists() {
        return Some(path);
    }
    path.parent().filter(|dir| dir.is_dir())
}
