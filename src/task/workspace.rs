//! Workspaces: a host directory holding the task's repository checked out at `base_commit`
//! (clean work tree), made from the task's local `repo_path` with one of three [`History`]
//! policies. Every workspace where agent or candidate code runs uses a policy under which no
//! commit, object or ref after Base is reachable, verified after the fact (see
//! [`super::sanitize`]): the agents get Base's ancestors ([`History::Sanitized`]: a fetch of Base
//! with its history into a fresh repository), gates and grading get Base alone
//! ([`History::BaseOnly`]: the same at depth 1). Both fetch by commit id, so they work on any
//! clone (promisor packs, alternates, shallow, worktrees): see [`fetch_base`].
//! [`History::Full`] (a plain clone) is for the harness's own inspection of a task, never for a
//! sandbox.

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

/// What of the repository's history a workspace holds.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum History {
    /// A plain clone: every ref and object of the source (never for a sandbox).
    Full,
    /// Base and its ancestors only (fetched by id into a fresh repository, then sanitised:
    /// one branch, no remote, no reflog, nothing unreachable), verified.
    Sanitized,
    /// Base alone: a shallow (depth 1) repository whose store holds Base's commit, tree and
    /// blobs only, verified.
    BaseOnly,
}

/// Materialise `task`'s repository at Base into `dest` (absent or an empty directory; the
/// returned [`Workspace::path`] is its absolute form).
/// With `sanitize`, every path to other commits is removed and the post-conditions verified;
/// a failed verification is an error carrying the status. Without it, a plain clone
/// ([`History::Full`]). See [`materialize_with`].
pub fn materialize(
    task: &TaskInstance,
    dest: &Path,
    sanitize: bool,
) -> Result<Workspace, TaskError> {
    let history = if sanitize {
        History::Sanitized
    } else {
        History::Full
    };
    materialize_with(task, dest, history)
}

/// Materialise `task`'s repository at Base into `dest` with the given history policy.
/// [`History::Sanitized`] and [`History::BaseOnly`] workspaces are verified (no ref but HEAD's
/// branch, no remote, no reflog, every commit in the store reachable from HEAD, no gold file
/// version in the store); a failed verification is an error carrying the status.
pub fn materialize_with(
    task: &TaskInstance,
    dest: &Path,
    history: History,
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

    if history == History::Full {
        return full_clone(task, &source, &dest);
    }
    let depth = (history == History::BaseOnly).then_some(1);
    let base = fetch_base(task, &source, &dest, depth)?;
    let status = if history == History::Sanitized {
        sanitize_history(&dest, &base, &task.patch)?
    } else {
        git::expire_reflogs(&dest)?;
        super::sanitize::verify_workspace(&dest, &base, &task.patch)?
    };
    if !status.verified {
        return Err(TaskError::Sanitization {
            instance: id.clone(),
            status: Box::new(status),
        });
    }
    Ok(Workspace {
        path: dest,
        base_commit: base,
        sanitization: Some(status),
    })
}

/// [`History::Full`]: a plain clone of `source` checked out at Base on the source's HEAD branch.
fn full_clone(task: &TaskInstance, source: &Path, dest: &Path) -> Result<Workspace, TaskError> {
    let id = &task.instance_id;
    let ws_err = |message: String| TaskError::Workspace {
        instance: id.clone(),
        message,
    };
    let parent = dest.parent().unwrap_or(Path::new("."));
    // `--no-hardlinks`: the workspace is writable by its user, so it shares no object file with
    // the source repository (hard links also made concurrent clones of one cached repository
    // fail with "hardlink different from source").
    let mut clone = git::command(parent);
    clone
        .args(["clone", "--quiet", "--no-checkout", "--no-hardlinks"])
        .arg(source)
        .arg(dest);
    git::output(clone, parent)?;

    let commit_spec = format!("{}^{{commit}}", task.base_commit);
    let base =
        git::run(dest, &["rev-parse", "--verify", "--quiet", &commit_spec]).map_err(|_| {
            ws_err(format!(
                "base_commit {} is not a commit of {}",
                task.base_commit,
                source.display()
            ))
        })?;
    let branch =
        git::run(dest, &["symbolic-ref", "--short", "HEAD"]).unwrap_or_else(|_| "main".into());
    git::run(
        dest,
        &["checkout", "--quiet", "--force", "-B", &branch, &base],
    )?;
    let dirty = git::run(dest, &["status", "--porcelain", "--untracked-files=all"])?;
    if !dirty.is_empty() {
        return Err(ws_err(format!("checkout of Base is not clean:\n{dirty}")));
    }
    Ok(Workspace {
        path: dest.to_path_buf(),
        base_commit: base,
        sanitization: None,
    })
}

/// A fresh repository at `dest` holding what `source` serves for Base alone (`depth` 1) or for
/// Base and its ancestors (`depth` None), checked out on the source's HEAD branch name, with no
/// FETCH_HEAD and no remote. Returns Base's full id.
///
/// Fetching by id instead of cloning and pruning is what makes this work on any clone a user
/// has: the source's upload-pack sends only objects reachable from Base, so nothing of the
/// future is ever copied — whatever the source's store looks like (packs with `.promisor`
/// markers, which git never prunes; objects borrowed through `alternates`; a shallow clone;
/// packed refs; a linked worktree). A partial clone that lacks objects of Base's history cannot
/// serve them (upload-pack does not fetch lazily) and fails with git's error.
fn fetch_base(
    task: &TaskInstance,
    source: &Path,
    dest: &Path,
    depth: Option<u32>,
) -> Result<String, TaskError> {
    let id = &task.instance_id;
    let ws_err = |message: String| TaskError::Workspace {
        instance: id.clone(),
        message,
    };
    let commit_spec = format!("{}^{{commit}}", task.base_commit);
    let base =
        git::run(source, &["rev-parse", "--verify", "--quiet", &commit_spec]).map_err(|_| {
            ws_err(format!(
                "base_commit {} is not a commit of {}",
                task.base_commit,
                source.display()
            ))
        })?;
    let branch = git::run(source, &["symbolic-ref", "--short", "HEAD"])
        .ok()
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| "main".into());
    std::fs::create_dir_all(dest).map_err(|e| TaskError::io(dest, e))?;
    git::run(dest, &["init", "--quiet"])?;
    let mut url = std::ffi::OsString::from("file://");
    url.push(source.as_os_str());
    // Fetch by id: the source's upload-pack is told to serve a commit that no ref names.
    let mut fetch = git::command(dest);
    fetch.args([
        "fetch",
        "--quiet",
        "--no-tags",
        "--no-write-fetch-head",
        "--upload-pack=git -c uploadpack.allowAnySHA1InWant=true upload-pack",
    ]);
    if let Some(d) = depth {
        fetch.arg(format!("--depth={d}"));
    }
    fetch.arg(&url).arg(&base);
    git::output(fetch, dest).map_err(|e| {
        ws_err(format!(
            "fetching Base{} from {} failed: {e}",
            if depth.is_some() {
                ""
            } else {
                " and its history"
            },
            source.display()
        ))
    })?;
    git::run(
        dest,
        &["checkout", "--quiet", "--force", "-B", &branch, &base],
    )?;
    let dirty = git::run(dest, &["status", "--porcelain", "--untracked-files=all"])?;
    if !dirty.is_empty() {
        return Err(ws_err(format!("checkout of Base is not clean:\n{dirty}")));
    }
    Ok(base)
}
