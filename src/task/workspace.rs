//! Workspaces: a host directory holding the task's repository checked out at `base_commit`
//! (clean work tree), cloned from the task's local `repo_path`; optionally sanitised for the
//! Test agent (see [`super::sanitize`]).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::TaskError;
use super::git;
use super::instance::TaskInstance;
use super::sanitize::{sanitize as sanitize_history, SanitizationStatus};

/// A materialised repository. `sanitization` is `Some` (and verified) when history was sanitised.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workspace {
    pub path: PathBuf,
    /// Full id of the checked-out Base commit.
    pub base_commit: String,
    pub sanitization: Option<SanitizationStatus>,
}

/// Materialise `task`'s repository at Base into `dest` (absent or an empty directory; the
/// returned [`Workspace::path`] is its absolute form).
/// With `sanitize`, every path to other commits is removed and the post-conditions verified;
/// a failed verification is an error carrying the status.
pub fn materialize(
    task: &TaskInstance,
    dest: &Path,
    sanitize: bool,
) -> Result<Workspace, TaskError> {
    let id = &task.instance_id;
    let ws_err = |message: String| TaskError::Workspace {
        instance: id.clone(),
        message,
    };
    let source = task.repo_path.as_ref().ok_or_else(|| {
        ws_err("no `repo_path`: a local repository is needed to materialise the workspace".into())
    })?;
    let source = std::fs::canonicalize(source)
        .map_err(|e| ws_err(format!("repo_path {}: {e}", source.display())))?;
    if dest.exists() {
        let mut entries = std::fs::read_dir(dest).map_err(|e| TaskError::io(dest, e))?;
        if entries.next().is_some() {
            return Err(ws_err(format!(
                "destination {} is not empty",
                dest.display()
            )));
        }
    }
    // Work with an absolute destination: git runs in several directories below.
    let name = dest.file_name().ok_or_else(|| {
        ws_err(format!(
            "destination {} has no directory name",
            dest.display()
        ))
    })?;
    let parent = dest
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|e| TaskError::io(parent, e))?;
    let parent = std::fs::canonicalize(parent).map_err(|e| TaskError::io(parent, e))?;
    let dest = parent.join(name);

    // `--no-hardlinks`: the workspace is writable by the agent and gets garbage-collected by
    // sanitisation, so it must share no object file with the source repository (hard links also
    // made concurrent clones of one cached repository fail with "hardlink different from source").
    let mut clone = git::command(&parent);
    clone
        .args(["clone", "--quiet", "--no-checkout", "--no-hardlinks"])
        .arg(&source)
        .arg(&dest);
    git::output(clone, &parent)?;

    let commit_spec = format!("{}^{{commit}}", task.base_commit);
    let base =
        git::run(&dest, &["rev-parse", "--verify", "--quiet", &commit_spec]).map_err(|_| {
            ws_err(format!(
                "base_commit {} is not a commit of {}",
                task.base_commit,
                source.display()
            ))
        })?;
    let branch =
        git::run(&dest, &["symbolic-ref", "--short", "HEAD"]).unwrap_or_else(|_| "main".into());
    git::run(
        &dest,
        &["checkout", "--quiet", "--force", "-B", &branch, &base],
    )?;
    let dirty = git::run(&dest, &["status", "--porcelain", "--untracked-files=all"])?;
    if !dirty.is_empty() {
        return Err(ws_err(format!("checkout of Base is not clean:\n{dirty}")));
    }

    let sanitization = if sanitize {
        let status = sanitize_history(&dest, &base, &task.patch)?;
        if !status.verified {
            return Err(TaskError::Sanitization {
                instance: id.clone(),
                status: Box::new(status),
            });
        }
        Some(status)
    } else {
        None
    };
    Ok(Workspace {
        path: dest,
        base_commit: base,
        sanitization,
    })
}
