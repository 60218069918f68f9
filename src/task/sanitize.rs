//! History sanitisation (harness-semantics §8): a workspace where agent or candidate code runs
//! must not reach the fix. Remove remotes and every ref but HEAD's branch, expire the reflog,
//! prune; then verify the post-conditions and record them in a [`SanitizationStatus`] that is
//! persisted per run. [`verify_workspace`] checks the same post-conditions on a workspace made
//! another way (the Base-only snapshot of `super::workspace`). The gold file versions are looked
//! up without ever writing them into the workspace's store (a scratch object directory).

use std::collections::HashSet;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::error::TaskError;
use super::git;

/// What sanitisation left behind, checked after the fact. `verified` is true only when every
/// post-condition holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SanitizationStatus {
    /// HEAD's branch (the only ref allowed to remain).
    pub branch: String,
    /// Commit HEAD resolves to (must be the task's Base).
    pub head: String,
    pub head_is_base: bool,
    /// Remotes left (must be none).
    pub remotes: Vec<String>,
    /// Refs left (must be exactly `refs/heads/<branch>`).
    pub refs: Vec<String>,
    /// Reflog entries left (must be 0).
    pub reflog_entries: usize,
    /// Objects `git fsck --unreachable --no-reflogs` reports (must be 0).
    pub unreachable_objects: usize,
    /// Commit objects in the store vs reachable from HEAD (must be equal).
    pub commits_in_store: usize,
    pub commits_reachable: usize,
    /// Whether `objects/info/alternates` borrows objects from another store (must be false).
    pub alternates: bool,
    /// Post-gold file versions that were looked up in the store.
    pub gold_blobs_checked: usize,
    /// Files whose gold (fixed) version is still present in the store (must be empty).
    pub gold_reachable: Vec<String>,
    /// Whether the gold patch could be checked at all (false → not verified).
    pub gold_checked: bool,
    pub verified: bool,
}

impl SanitizationStatus {
    /// The post-conditions that do not hold, as readable sentences.
    pub fn failures(&self) -> Vec<String> {
        let mut f = Vec::new();
        if !self.head_is_base {
            f.push(format!("HEAD is {} and not the Base commit", self.head));
        }
        if !self.remotes.is_empty() {
            f.push(format!("remotes left: {}", self.remotes.join(", ")));
        }
        if self.refs != [format!("refs/heads/{}", self.branch)] {
            f.push(format!(
                "refs other than HEAD's branch left: {}",
                self.refs.join(", ")
            ));
        }
        if self.reflog_entries != 0 {
            f.push(format!("{} reflog entries left", self.reflog_entries));
        }
        if self.unreachable_objects != 0 {
            f.push(format!(
                "{} unreachable objects left",
                self.unreachable_objects
            ));
        }
        if self.commits_in_store != self.commits_reachable {
            f.push(format!(
                "{} commits in the store but {} reachable from HEAD",
                self.commits_in_store, self.commits_reachable
            ));
        }
        if self.alternates {
            f.push("the object store borrows from alternates".into());
        }
        if !self.gold_checked {
            f.push(
                "the gold patch does not apply at Base, so its absence could not be checked".into(),
            );
        }
        if !self.gold_reachable.is_empty() {
            f.push(format!(
                "the fixed version of {} is in the store",
                self.gold_reachable.join(", ")
            ));
        }
        f
    }
}

/// Sanitise the repository at `repo` (HEAD already at `base_commit` on its branch) and verify.
/// `gold_patch` (may be empty) is the fix whose post-image must not be reachable.
pub fn sanitize(
    repo: &Path,
    base_commit: &str,
    gold_patch: &str,
) -> Result<SanitizationStatus, TaskError> {
    let branch = git::run(repo, &["symbolic-ref", "--short", "HEAD"])?;
    let gold = gold_blobs(repo, gold_patch)?;

    for remote in git::run(repo, &["remote"])?
        .lines()
        .filter(|l| !l.is_empty())
    {
        git::run(repo, &["remote", "remove", remote])?;
    }
    let keep = format!("refs/heads/{branch}");
    for r in git::run(repo, &["for-each-ref", "--format=%(refname)"])?.lines() {
        if !r.is_empty() && r != keep {
            git::run(repo, &["update-ref", "--no-deref", "-d", r])?;
        }
    }
    let git_dir = std::path::PathBuf::from(git::run(repo, &["rev-parse", "--absolute-git-dir"])?);
    own_every_object(repo, &git_dir)?;
    for f in [
        "ORIG_HEAD",
        "FETCH_HEAD",
        "MERGE_HEAD",
        "CHERRY_PICK_HEAD",
        "REVERT_HEAD",
    ] {
        let p = git_dir.join(f);
        if p.exists() {
            std::fs::remove_file(&p).map_err(|e| TaskError::io(&p, e))?;
        }
    }
    git::run(repo, &["worktree", "prune"])?;
    git::expire_reflogs(repo)?;
    git::run(
        repo,
        &["-c", "gc.cruftPacks=false", "gc", "--prune=now", "--quiet"],
    )?;

    verify(repo, &git_dir, &branch, base_commit, gold)
}

/// Make the store prunable and self-contained before the garbage collection, for clones made
/// any way: objects borrowed through `objects/info/alternates` are copied in (`repack -a`, then
/// the alternates file goes), and packs marked `.promisor` lose their marker and the
/// partial-clone setting — git never prunes a promisor pack, so the future would stay in the
/// store. Only when HEAD's whole history is present: a real partial clone (objects missing)
/// is an error, since removing the markers would make its store look corrupt.
fn own_every_object(repo: &Path, git_dir: &Path) -> Result<(), TaskError> {
    let pack_dir = git_dir.join("objects/pack");
    let promisor: Vec<std::path::PathBuf> = match std::fs::read_dir(&pack_dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "promisor"))
            .collect(),
        Err(_) => Vec::new(),
    };
    let partial = git::succeeds(repo, &["config", "--get", "extensions.partialClone"]);
    if !promisor.is_empty() || partial {
        // `--missing=print` lists what HEAD's history lacks without fetching it.
        let missing = git::run(repo, &["rev-list", "--objects", "--missing=print", "HEAD"])?;
        let n = missing.lines().filter(|l| l.starts_with('?')).count();
        if n > 0 {
            return Err(TaskError::Workspace {
                instance: repo.display().to_string(),
                message: format!(
                    "a partial clone: {n} objects of Base's history are missing (fetch them into \
                     the source repository first)"
                ),
            });
        }
        for p in &promisor {
            std::fs::remove_file(p).map_err(|e| TaskError::io(p, e))?;
        }
        if partial {
            git::run(repo, &["config", "--unset-all", "extensions.partialClone"])?;
        }
    }
    let alternates = git_dir.join("objects/info/alternates");
    if alternates.exists() {
        git::run(repo, &["repack", "-a", "-d", "-q"])?;
        std::fs::remove_file(&alternates).map_err(|e| TaskError::io(&alternates, e))?;
    }
    Ok(())
}

/// Verify the post-conditions of a workspace made without [`sanitize`] (HEAD at `base_commit`
/// on its branch). `gold_patch` (may be empty) is the fix whose post-image must be absent.
pub fn verify_workspace(
    repo: &Path,
    base_commit: &str,
    gold_patch: &str,
) -> Result<SanitizationStatus, TaskError> {
    let branch = git::run(repo, &["symbolic-ref", "--short", "HEAD"])?;
    let git_dir = std::path::PathBuf::from(git::run(repo, &["rev-parse", "--absolute-git-dir"])?);
    let gold = gold_blobs(repo, gold_patch)?;
    verify(repo, &git_dir, &branch, base_commit, gold)
}

fn verify(
    repo: &Path,
    git_dir: &Path,
    branch: &str,
    base_commit: &str,
    gold: Option<Vec<(String, String)>>,
) -> Result<SanitizationStatus, TaskError> {
    let head = git::run(repo, &["rev-parse", "HEAD"])?;
    let base =
        git::run(repo, &["rev-parse", &format!("{base_commit}^{{commit}}")]).unwrap_or_default();
    let remotes: Vec<String> = lines(&git::run(repo, &["remote"])?);
    let refs = lines(&git::run(repo, &["for-each-ref", "--format=%(refname)"])?);
    let reflog_entries = count_reflog_entries(&git_dir.join("logs"))?;
    let fsck = git::run(
        repo,
        &["fsck", "--unreachable", "--no-reflogs", "--no-progress"],
    )?;
    let unreachable_objects = fsck
        .lines()
        .filter(|l| l.starts_with("unreachable "))
        .count();
    let all = git::run(
        repo,
        &[
            "cat-file",
            "--batch-all-objects",
            "--batch-check=%(objecttype)",
        ],
    )?;
    let commits_in_store = all.lines().filter(|l| *l == "commit").count();
    let commits_reachable: usize = git::run(repo, &["rev-list", "--count", "HEAD"])?
        .parse()
        .unwrap_or(0);
    let alternates = git_dir.join("objects/info/alternates").exists();

    let (gold_checked, gold_blobs_checked, gold_reachable) = match gold {
        None => (false, 0, Vec::new()),
        Some(blobs) => {
            let reachable: Vec<String> = blobs
                .iter()
                .filter(|(_, blob)| git::succeeds(repo, &["cat-file", "-e", blob]))
                .map(|(path, _)| path.clone())
                .collect();
            (true, blobs.len(), reachable)
        }
    };
    let mut status = SanitizationStatus {
        branch: branch.to_string(),
        head_is_base: !base.is_empty() && head == base,
        head,
        remotes,
        refs,
        reflog_entries,
        unreachable_objects,
        commits_in_store,
        commits_reachable,
        alternates,
        gold_blobs_checked,
        gold_reachable,
        gold_checked,
        verified: false,
    };
    status.verified = status.failures().is_empty();
    Ok(status)
}

/// (path, blob id) of every file version the gold patch creates that Base's tree does not already
/// hold. `None` when the patch does not apply at HEAD. Empty patch → nothing to check.
fn gold_blobs(repo: &Path, gold_patch: &str) -> Result<Option<Vec<(String, String)>>, TaskError> {
    if gold_patch.trim().is_empty() {
        return Ok(Some(Vec::new()));
    }
    // Beside the repository (inside the sandbox's own directory when there is one), so an
    // interrupted run's scratch goes with the workspace instead of lingering in the temp dir.
    let near = repo
        .parent()
        .filter(|p| p.is_dir())
        .map_or_else(std::env::temp_dir, Path::to_path_buf);
    let scratch = tempfile::Builder::new()
        .prefix(".gold-scratch-")
        .tempdir_in(&near)
        .map_err(|e| TaskError::io(&near, e))?;
    let index = scratch.path().join("index");
    let objects = scratch.path().join("objects");
    let repo_objects = git::run(repo, &["rev-parse", "--git-path", "objects"])?;
    let repo_objects = repo.join(repo_objects);
    std::fs::create_dir_all(&objects).map_err(|e| TaskError::io(&objects, e))?;
    // Git commands on a scratch index and a scratch object directory (borrowing the repository's
    // objects), so neither the work tree, the real index nor the store changes: the gold blobs
    // `apply --cached` writes land in the scratch directory.
    let with_index = |args: &[&str]| -> Result<String, TaskError> {
        let mut cmd = git::command(repo);
        cmd.env("GIT_INDEX_FILE", &index)
            .env("GIT_OBJECT_DIRECTORY", &objects)
            .env("GIT_ALTERNATE_OBJECT_DIRECTORIES", &repo_objects)
            .args(args);
        let out = git::output(cmd, repo)?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    with_index(&["read-tree", "HEAD"])?;
    // Patches stored without their final newline are common; git apply rejects them as corrupt.
    let patch_file = scratch.path().join("gold.patch");
    let mut patch = gold_patch.to_string();
    if !patch.ends_with('\n') {
        patch.push('\n');
    }
    std::fs::write(&patch_file, patch).map_err(|e| TaskError::io(&patch_file, e))?;
    let patch_arg = patch_file.to_string_lossy();
    if with_index(&["apply", "--cached", "--whitespace=nowarn", &patch_arg]).is_err() {
        return Ok(None);
    }
    let base_blobs: HashSet<String> =
        git::run(repo, &["ls-tree", "-r", "--format=%(objectname)", "HEAD"])?
            .lines()
            .map(str::to_string)
            .collect();
    // `:old_mode new_mode old_sha new_sha status\tpath`
    let raw = with_index(&[
        "diff-index",
        "--cached",
        "--no-renames",
        "--abbrev=40",
        "HEAD",
    ])?;
    let mut blobs = Vec::new();
    for line in raw.lines() {
        let Some((meta, path)) = line.split_once('\t') else {
            continue;
        };
        let fields: Vec<&str> = meta.split_whitespace().collect();
        if let Some(new) = fields.get(3) {
            if !new.chars().all(|c| c == '0') && !base_blobs.contains(*new) {
                blobs.push((path.to_string(), new.to_string()));
            }
        }
    }
    Ok(Some(blobs))
}

fn lines(s: &str) -> Vec<String> {
    s.lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

fn count_reflog_entries(logs: &Path) -> Result<usize, TaskError> {
    if !logs.exists() {
        return Ok(0);
    }
    let mut n = 0;
    for entry in walkdir::WalkDir::new(logs) {
        let entry = entry.map_err(|e| TaskError::io(logs, e.into()))?;
        if entry.file_type().is_file() {
            let text = std::fs::read_to_string(entry.path())
                .map_err(|e| TaskError::io(entry.path(), e))?;
            n += text.lines().filter(|l| !l.trim().is_empty()).count();
        }
    }
    Ok(n)
}
