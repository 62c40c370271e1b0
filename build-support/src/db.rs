//! The tuning database's file: reading it, and inserting records safely.
//!
//! [`insert`] (and [`update`], for any other change) takes an exclusive
//! lock on a sibling `<file>.lock` (across processes), re-reads the file
//! under it, merges, and replaces the file atomically (a temporary file in the same folder, renamed over it), so
//! that parallel build scripts and tuners lose nothing. A file that does
//! not parse is never written over: its records could not be kept.
//!
//! The format and the merge are [`ktune_core::db`]'s.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use fs4::fs_std::FileExt;
use ktune_core::db::{Database, Record};

use crate::error::Error;

/// Where a crate's database lives, relative to its root.
pub const DEFAULT_PATH: &str = "tuning/ktune.json";

/// Reads a database; a missing file, or an empty one (`touch`ed), is an
/// empty database.
pub fn open(path: &Path) -> Result<Database, Error> {
    match read(path)? {
        Some(text) => parse(path, &text),
        None => Ok(Database::new()),
    }
}

/// Adds records to the database at `path` (created if missing), keeping
/// every other record.
pub fn insert(path: &Path, records: impl IntoIterator<Item = Record>) -> Result<(), Error> {
    update(path, |db| db.insert(records))
}

/// Banks searches' winners: [`insert`], less each winner whose key already
/// chooses its schedule (a search that found the incumbent again). That
/// adds nothing but a twin of the incumbent, and leaves the file's bytes
/// as they were, so that nothing rebuilds.
pub fn bank(path: &Path, winners: impl IntoIterator<Item = Record>) -> Result<(), Error> {
    update(path, |db| {
        let chosen = db.winners();
        let new: Vec<Record> = winners
            .into_iter()
            .filter(|r| {
                // An incumbent of another code generator is stale: the
                // build neither uses nor counts it, so a search that finds
                // its schedule again must record it anew.
                chosen
                    .get(&(r.key(), r.provenance.measured_on))
                    .is_none_or(|incumbent| {
                        incumbent.schedule != r.schedule
                            || incumbent.provenance.generator_version
                                != r.provenance.generator_version
                    })
            })
            .collect();
        db.insert(new);
    })
}

/// Changes the database at `path` (created if missing) under its lock:
/// reads it, lets `change` edit it, and replaces the file atomically if its
/// text changed. A file that does not parse is an error and is left
/// untouched; `change` is not called.
pub fn update<T>(path: &Path, change: impl FnOnce(&mut Database) -> T) -> Result<T, Error> {
    let dir = folder_of(path)?;
    locked(path, || update_locked(path, dir, change))
}

/// Moves the database at `path` aside, under its lock, if it still does not
/// parse there (another process may have moved or replaced it meanwhile),
/// to a name beside it no file has: `ktune.unreadable-<seconds>[-n].json`.
/// Where it went; `None` when it was readable or gone by then.
pub fn move_aside(path: &Path) -> Result<Option<PathBuf>, Error> {
    let dir = folder_of(path)?;
    locked(path, || {
        let Some(text) = read(path)? else {
            return Ok(None);
        };
        if parse(path, &text).is_ok() {
            return Ok(None);
        }
        let seconds = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let aside = (0..)
            .map(|n| match n {
                0 => dir.join(format!("ktune.unreadable-{seconds}.json")),
                n => dir.join(format!("ktune.unreadable-{seconds}-{n}.json")),
            })
            .find(|p| !p.exists())
            .expect("an unused name");
        std::fs::rename(path, &aside).map_err(|source| Error::Write {
            path: path.to_owned(),
            source,
        })?;
        Ok(Some(aside))
    })
}

/// The folder of the database at `path`, created if missing.
fn folder_of(path: &Path) -> Result<&Path, Error> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir).map_err(|source| Error::Write {
        path: dir.to_owned(),
        source,
    })?;
    Ok(dir)
}

/// Runs `work` holding the exclusive lock of the database at `path`.
fn locked<T>(path: &Path, work: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
    let lock = lock_path(path);
    let lock_file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock)
        .map_err(|source| Error::Lock {
            path: lock.clone(),
            source,
        })?;
    FileExt::lock_exclusive(&lock_file).map_err(|source| Error::Lock {
        path: lock.clone(),
        source,
    })?;
    let result = work();
    // Closing the file releases the lock too; unlocking first says when.
    let _ = FileExt::unlock(&lock_file);
    result
}

fn update_locked<T>(
    path: &Path,
    dir: &Path,
    change: impl FnOnce(&mut Database) -> T,
) -> Result<T, Error> {
    let old = read(path)?;
    let mut db = match &old {
        Some(text) => parse(path, text)?,
        None => Database::new(),
    };
    let result = change(&mut db);
    let text = db.to_text();
    if old.as_deref() == Some(text.as_str()) {
        return Ok(result);
    }
    let write_error = |source| Error::Write {
        path: path.to_owned(),
        source,
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".ktune-db-")
        .tempfile_in(dir)
        .map_err(write_error)?;
    tmp.write_all(text.as_bytes()).map_err(write_error)?;
    tmp.as_file().sync_all().map_err(write_error)?;
    tmp.persist(path).map_err(|e| write_error(e.error))?;
    Ok(result)
}

/// The lock file beside a database: `ktune.json.lock` for `ktune.json`.
pub fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(".lock");
    path.with_file_name(name)
}

fn read(path: &Path) -> Result<Option<String>, Error> {
    match std::fs::read_to_string(path) {
        Ok(text) if text.trim().is_empty() => Ok(None),
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(Error::Read {
            path: path.to_owned(),
            source,
        }),
    }
}

fn parse(path: &Path, text: &str) -> Result<Database, Error> {
    Database::parse(text).map_err(|error| Error::Database {
        path: path.to_owned(),
        error,
    })
}
