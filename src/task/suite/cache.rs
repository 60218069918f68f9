//! The suite cache: built suites live under `$EXECCRITIC_CACHE` (default `~/.cache/execcritic`)
//! in a directory named by a hash of their content; a build happens in a private temporary
//! directory and is published by an atomic rename, so concurrent first uses are safe.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::task::error::TaskError;

/// Bumped whenever the builder's output for the same input changes.
pub const BUILDER_VERSION: &str = "3";

/// `$EXECCRITIC_CACHE`, else `$HOME/.cache/execcritic`, else a directory under the temp dir.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("EXECCRITIC_CACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        Some(home) => PathBuf::from(home).join(".cache").join("execcritic"),
        None => std::env::temp_dir().join("execcritic-cache"),
    }
}

/// Incremental content hash over (path, bytes) pairs.
pub struct ContentHash(Sha256);

impl ContentHash {
    pub fn new(kind: &str) -> Self {
        let mut h = Sha256::new();
        h.update(BUILDER_VERSION.as_bytes());
        h.update([0]);
        h.update(kind.as_bytes());
        ContentHash(h)
    }

    pub fn add(&mut self, path: &str, bytes: &[u8]) {
        self.0.update((path.len() as u64).to_le_bytes());
        self.0.update(path.as_bytes());
        self.0.update((bytes.len() as u64).to_le_bytes());
        self.0.update(bytes);
    }

    /// Hash every regular file under `dir` (sorted, byte-code caches skipped).
    pub fn add_tree(&mut self, dir: &Path) -> Result<(), TaskError> {
        for entry in walkdir::WalkDir::new(dir).sort_by_file_name() {
            let entry = entry.map_err(|e| TaskError::io(dir, e.into()))?;
            let rel = entry
                .path()
                .strip_prefix(dir)
                .expect("under root")
                .to_string_lossy()
                .into_owned();
            if !entry.file_type().is_file() || rel.contains("__pycache__") || rel.ends_with(".pyc")
            {
                continue;
            }
            let bytes = std::fs::read(entry.path()).map_err(|e| TaskError::io(entry.path(), e))?;
            self.add(&rel, &bytes);
        }
        Ok(())
    }

    pub fn hex16(self) -> String {
        hex::encode(&self.0.finalize()[..8])
    }
}

/// Return `<root>/<key>/tasks.jsonl`, running `build` into a temporary sibling directory and
/// renaming it into place when it does not exist yet. A concurrent builder that wins the rename
/// makes ours redundant: ours is deleted and theirs used.
pub fn get_or_build(
    root: &Path,
    key: &str,
    build: impl FnOnce(&Path) -> Result<PathBuf, TaskError>,
) -> Result<PathBuf, TaskError> {
    let final_dir = root.join(key);
    let tasks = final_dir.join("tasks.jsonl");
    if tasks.is_file() {
        return Ok(tasks);
    }
    std::fs::create_dir_all(root).map_err(|e| TaskError::io(root, e))?;
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".build-{key}-"))
        .tempdir_in(root)
        .map_err(|e| TaskError::io(root, e))?;
    let built = build(tmp.path())?;
    debug_assert_eq!(built, tmp.path().join("tasks.jsonl"));
    let tmp_path = tmp.keep();
    match std::fs::rename(&tmp_path, &final_dir) {
        Ok(()) => Ok(tasks),
        Err(_) if tasks.is_file() => {
            // Another process published first; its content is identical (same key).
            let _ = std::fs::remove_dir_all(&tmp_path);
            Ok(tasks)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp_path);
            Err(TaskError::io(&final_dir, e))
        }
    }
}
