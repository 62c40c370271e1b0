//! A machine-wide lock per GPU, held while timing, so that build scripts
//! running in parallel do not disturb each other's timings.

use std::fs::{File, OpenOptions};
use std::path::PathBuf;

use fs4::fs_std::FileExt;

/// An exclusive lock on one GPU, released when dropped.
#[derive(Debug)]
pub(crate) struct GpuLock {
    file: File,
}

/// The lock file for a GPU: in the temporary directory, named by the GPU's
/// UUID (the same GPU whatever `CUDA_VISIBLE_DEVICES` makes its ordinal), or
/// by its ordinal when the UUID is unknown.
pub(crate) fn lock_path(uuid: Option<&str>, ordinal: usize) -> PathBuf {
    let key = match uuid {
        Some(uuid) => uuid
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect(),
        None => format!("ordinal-{ordinal}"),
    };
    std::env::temp_dir().join(format!("ktune-measure-{key}.lock"))
}

impl GpuLock {
    /// Waits for the lock at `path`.
    pub(crate) fn acquire(path: &PathBuf) -> Result<GpuLock, String> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(|e| format!("opening the GPU lock {}: {e}", path.display()))?;
        FileExt::lock_exclusive(&file)
            .map_err(|e| format!("locking the GPU lock {}: {e}", path.display()))?;
        Ok(GpuLock { file })
    }
}

impl Drop for GpuLock {
    fn drop(&mut self) {
        // Closing the file releases the lock as well; this says when.
        let _ = FileExt::unlock(&self.file);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_keyed_by_uuid_or_ordinal() {
        let by_uuid = lock_path(Some("GPU-12ab/../x"), 0);
        let name = by_uuid.file_name().and_then(|n| n.to_str()).unwrap_or("");
        assert_eq!(name, "ktune-measure-GPU-12ab----x.lock");
        assert_ne!(lock_path(None, 0), lock_path(None, 1));
    }

    #[test]
    fn the_lock_is_taken_and_released() {
        let path =
            std::env::temp_dir().join(format!("ktune-measure-test-{}.lock", std::process::id()));
        let first = GpuLock::acquire(&path).expect("first lock");
        let other = File::open(&path).expect("lock file exists");
        assert!(!FileExt::try_lock_exclusive(&other).unwrap_or(false));
        drop(first);
        assert!(FileExt::try_lock_exclusive(&other).unwrap_or(false));
        let _ = std::fs::remove_file(&path);
    }
}
