//! Task environments (`environment_setup`): the cache of environment directories. A directory is
//! prepared ONCE per cache key (the sandbox that builds it is opened by `super::provision`) by running
//! the task's setup commands in a sandbox WITH network, at `/testbed` on a fresh Base checkout,
//! with the directory writable at `/env`. Every later sandbox of the task (Test agent, gates,
//! grading) mounts it read-only at `/env`, without network (see [`EnvAccess`]).
//!
//! Cache: `<cache>/envs/<key>/` under `$EXECCRITIC_CACHE` (default `~/.cache/execcritic`), with
//! `key = sha256(format version, sandbox identity, cache_key, commands)`. The sandbox identity
//! (`local`, or `docker:<image>`) is part of the key because an environment built by the host's
//! toolchain is not valid inside an image and vice versa. A build happens in a private
//! `.build-<key>-…` directory, under an exclusive `flock` on `<key>.lock` (concurrent workers
//! build it once), and is published by an atomic rename. A failed command leaves no cache entry
//! and is a [`HarnessError::EnvironmentSetup`] naming the instance, the command and the log tail
//! — never a verdict.
//!
//! Workspace changes made by setup (e.g. an `*.egg-info` written by `pip install -e .`) are
//! DISCARDED: setup runs on its own throw-away checkout, so every later `/testbed` is a clean
//! Base (`git status` stays empty for the gates). They are listed in the environment's
//! `manifest.json` (`discarded_workspace_changes`). Editable installs still work because later
//! workspaces live at the same path, `/testbed`.

use super::error::HarnessError;
use crate::task::suite::cache_dir;
use crate::task::{EnvironmentSetup, TaskInstance};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Wall-clock limit of one setup command (harness-semantics §1: setup timeout 600 s).
pub const SETUP_TIMEOUT: Duration = Duration::from_secs(600);
/// Bumped whenever the layout or the meaning of an environment directory changes.
const FORMAT_VERSION: &str = "1";

/// A ready environment directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreparedEnvironment {
    /// Host directory (`<cache>/envs/<key>`), mounted at `/env`.
    pub dir: PathBuf,
    pub key: String,
    /// Whether this call ran the setup commands (`false`: cache hit).
    pub built: bool,
}

/// What an environment directory records about its build (`manifest.json`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub key: String,
    pub instance_id: String,
    pub sandbox: String,
    pub cache_key: String,
    pub commands: Vec<String>,
    /// `git status --porcelain --ignored` of the setup checkout after the commands: these
    /// workspace changes are not part of the environment.
    pub discarded_workspace_changes: Vec<String>,
}

/// `$EXECCRITIC_CACHE/envs` (default `~/.cache/execcritic/envs`).
pub fn envs_dir() -> PathBuf {
    cache_dir().join("envs")
}

/// Cache key of an environment built by `sandbox` (`local` or `docker:<image>`).
pub fn environment_key(setup: &EnvironmentSetup, sandbox: &str) -> String {
    let mut h = Sha256::new();
    for part in [FORMAT_VERSION, sandbox, setup.cache_key.as_str()]
        .into_iter()
        .chain(setup.commands.iter().map(String::as_str))
    {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    hex::encode(h.finalize())
}

/// The environment of `setup` for the sandbox identity `sandbox` (`local`, `docker:<image>`):
/// the cached directory, or a new one built by `build` (given the private build directory,
/// mounted writable at `/env`; returns the workspace changes it discarded) and published
/// atomically. Concurrent callers build it once (exclusive lock per key).
pub async fn prepare_cached<F, Fut>(
    task: &TaskInstance,
    setup: &EnvironmentSetup,
    sandbox: String,
    build_with: F,
) -> Result<PreparedEnvironment, HarnessError>
where
    F: FnOnce(PathBuf) -> Fut,
    Fut: Future<Output = Result<Vec<String>, HarnessError>>,
{
    let key = environment_key(setup, &sandbox);
    let root = envs_dir();
    let dir = root.join(&key);
    if dir.is_dir() {
        return Ok(PreparedEnvironment {
            dir,
            key,
            built: false,
        });
    }
    let lock_path = root.join(format!("{key}.lock"));
    let _lock = tokio::task::spawn_blocking(move || lock_exclusive(&lock_path))
        .await
        .map_err(|e| HarnessError::Other(format!("environment lock task: {e}")))??;
    if dir.is_dir() {
        // Another worker built it while we waited for the lock.
        return Ok(PreparedEnvironment {
            dir,
            key,
            built: false,
        });
    }
    remove_stale_builds(&root, &key)?;
    let build = root.join(format!(
        ".build-{key}-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir_all(&build).map_err(|e| HarnessError::io(&build, e))?;
    let manifest = match build_with(build.clone()).await {
        Ok(changes) => Manifest {
            key: key.clone(),
            instance_id: task.instance_id.clone(),
            sandbox,
            cache_key: setup.cache_key.clone(),
            commands: setup.commands.clone(),
            discarded_workspace_changes: changes,
        },
        Err(e) => {
            let _ = std::fs::remove_dir_all(&build);
            return Err(e);
        }
    };
    let publish = || -> Result<(), HarnessError> {
        let text = serde_json::to_string_pretty(&manifest)
            .map_err(|e| HarnessError::Other(format!("manifest: {e}")))?;
        let path = build.join("manifest.json");
        std::fs::write(&path, text).map_err(|e| HarnessError::io(&path, e))?;
        // SAFETY: plain syscall.
        if unsafe { libc::geteuid() } == 0 {
            // The local setup sandbox ran as an unprivileged uid that later sandboxes may reuse.
            super::sandbox::local::chown_tree(&build, Some(0))?;
        }
        std::fs::rename(&build, &dir).map_err(|e| HarnessError::io(&dir, e))
    };
    if let Err(e) = publish() {
        let _ = std::fs::remove_dir_all(&build);
        return Err(e);
    }
    Ok(PreparedEnvironment {
        dir,
        key,
        built: true,
    })
}

/// Exclusive `flock` on `path` (created), held until the returned file is dropped.
fn lock_exclusive(path: &Path) -> Result<nix::fcntl::Flock<std::fs::File>, HarnessError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| HarnessError::io(parent, e))?;
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| HarnessError::io(path, e))?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| HarnessError::io(path, std::io::Error::from(e)))
}

/// Remove build directories of `key` left by crashed builds (we hold the key's lock).
fn remove_stale_builds(root: &Path, key: &str) -> Result<(), HarnessError> {
    let prefix = format!(".build-{key}-");
    for entry in std::fs::read_dir(root).map_err(|e| HarnessError::io(root, e))? {
        let entry = entry.map_err(|e| HarnessError::io(root, e))?;
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            let p = entry.path();
            std::fs::remove_dir_all(&p).map_err(|e| HarnessError::io(&p, e))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(key: &str, cmds: &[&str]) -> EnvironmentSetup {
        EnvironmentSetup {
            commands: cmds.iter().map(|c| c.to_string()).collect(),
            cache_key: key.into(),
        }
    }

    #[test]
    fn key_depends_on_every_part() {
        let a = environment_key(&setup("k", &["a", "b"]), "local");
        assert_eq!(a, environment_key(&setup("k", &["a", "b"]), "local"));
        assert_eq!(a.len(), 64);
        for other in [
            environment_key(&setup("k2", &["a", "b"]), "local"),
            environment_key(&setup("k", &["a b"]), "local"),
            environment_key(&setup("k", &["ab"]), "local"),
            environment_key(&setup("k", &["a", "b"]), "docker:img"),
        ] {
            assert_ne!(a, other);
        }
    }
}
