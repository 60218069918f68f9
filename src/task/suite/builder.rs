//! Replaying a suite spec into git repositories with deterministic commits (fixed identity and
//! dates), so every task's `base_commit` is stable, and writing the suite's `tasks.jsonl`.
//!
//! History of a project: the initial tree (or the unpacked upstream sdist), then for each task in
//! order an optional bug-introducing commit (`bug.patch`), whose result is the task's Base, and a
//! fix commit (gold + official tests). The fixes of later tasks are thus in the repository's
//! future, as in SWE-bench, and must be hidden by sanitisation.
//!
//! A bug-introducing commit is written as a *root* commit: its parent would hold every fixed
//! file exactly (gold's post-image is the tree before the bug), one `git show HEAD~1:FILE` away
//! from any agent, and sanitisation rightly refuses such a Base.

use std::path::{Path, PathBuf};

use crate::task::error::TaskError;
use crate::task::git;
use crate::task::instance::{default_image, Candidate, TaskInstance};
use crate::task::load::write_tasks;

use super::spec::{read_toml, ProjectSpec, SuiteSpec, TaskDir};

const DAY: i64 = 86_400;

/// Build every project of the suite at `spec_dir` into `out/repos/<project>.git` and write
/// `out/tasks.jsonl` (with `repo_path`s relative to `out`). `upstream_root` holds unpacked
/// sdists (`<name>-<version>/`) for projects with an `upstream`.
pub fn build_suite(
    spec_dir: &Path,
    upstream_root: Option<&Path>,
    out: &Path,
) -> Result<PathBuf, TaskError> {
    let suite: SuiteSpec = read_toml("?", &spec_dir.join("suite.toml"))?;
    let repos = out.join("repos");
    std::fs::create_dir_all(&repos).map_err(|e| TaskError::io(&repos, e))?;
    let mut tasks = Vec::new();
    for project in &suite.projects {
        let builder = ProjectBuilder::new(&suite.name, spec_dir, project, upstream_root)?;
        tasks.extend(builder.build(&repos.join(format!("{project}.git")))?);
    }
    let path = out.join("tasks.jsonl");
    write_tasks(&path, &tasks)?;
    Ok(path)
}

struct ProjectBuilder<'a> {
    suite: &'a str,
    name: &'a str,
    dir: PathBuf,
    spec: ProjectSpec,
    initial_tree: PathBuf,
}

impl<'a> ProjectBuilder<'a> {
    fn new(
        suite: &'a str,
        spec_dir: &Path,
        name: &'a str,
        upstream_root: Option<&Path>,
    ) -> Result<Self, TaskError> {
        let dir = spec_dir.join(name);
        let spec: ProjectSpec = read_toml(suite, &dir.join("project.toml"))?;
        let initial_tree = match &spec.upstream {
            None => dir.join("tree"),
            Some(up) => {
                let root = upstream_root.ok_or_else(|| TaskError::SuiteNotFetched {
                    suite: suite.to_string(),
                    message: format!("project {name} needs the {}-{} sdist", up.name, up.version),
                })?;
                root.join(format!("{}-{}", up.name, up.version))
            }
        };
        if !initial_tree.is_dir() {
            return Err(TaskError::Suite {
                suite: suite.to_string(),
                message: format!(
                    "project {name}: initial tree {} is missing",
                    initial_tree.display()
                ),
            });
        }
        Ok(ProjectBuilder {
            suite,
            name,
            dir,
            spec,
            initial_tree,
        })
    }

    fn err(&self, message: String) -> TaskError {
        TaskError::Suite {
            suite: self.suite.to_string(),
            message: format!("project {}: {message}", self.name),
        }
    }

    /// Replay the history into a bare repository at `bare` and return the project's tasks.
    fn build(&self, bare: &Path) -> Result<Vec<TaskInstance>, TaskError> {
        let scratch = tempfile::tempdir().map_err(|e| TaskError::io(std::env::temp_dir(), e))?;
        let work = scratch.path().join(self.name);
        copy_tree(&self.initial_tree, &work)?;
        git::run(&work, &["init", "--quiet", "--initial-branch=main"])?;
        git::run(&work, &["config", "core.autocrlf", "false"])?;
        let mut when = self.spec.start_date;
        let initial = self.commit(&work, &self.spec.initial_message, when)?;
        git::run(
            &work,
            &["tag", &format!("v{}", self.spec.version), &initial],
        )?;

        let mut tasks = Vec::new();
        for id in &self.spec.tasks {
            let task = TaskDir::read(self.suite, &self.dir, id)?;
            when += DAY;
            let before_bug = git::run(&work, &["rev-parse", "HEAD"])?;
            if task.has("bug.patch") {
                self.apply(&work, &task, "bug.patch")?;
                let msg = task
                    .spec
                    .bug_message
                    .clone()
                    .unwrap_or_else(|| format!("Refactor ({id})"));
                self.commit_root(&work, &msg, when - DAY / 2)?;
            }
            let base = git::run(&work, &["rev-parse", "HEAD"])?;
            let gold = task.patch("gold.patch")?;
            let test_patch = task.patch("test.patch")?;
            self.apply(&work, &task, "gold.patch")?;
            if task.has("bug.patch") {
                // The gold patch must be exactly the reverse of the bug-introducing patch.
                let left = git::run(&work, &["diff", "--cached", "--name-only", &before_bug])?;
                if !left.is_empty() {
                    return Err(self.err(format!(
                        "{id}: gold.patch does not undo bug.patch in: {left}"
                    )));
                }
            }
            self.apply(&work, &task, "test.patch")?;
            let fix = self.commit(&work, &task.spec.fix_message, when)?;
            // A later task's root commit cuts this fix (and its Base) off the branch; a tag keeps
            // both in the published repository.
            git::run(&work, &["tag", &format!("fix/{id}"), &fix])?;

            let candidates = task
                .spec
                .candidates
                .iter()
                .map(|c| {
                    Ok(Candidate {
                        patch: task.patch(&c.file)?,
                        resolved: c.resolved,
                    })
                })
                .collect::<Result<Vec<_>, TaskError>>()?;
            tasks.push(self.instance(&task, base, initial.clone(), gold, test_patch, candidates));
        }
        git::run(
            &work,
            &["tag", &format!("v{}-dev", self.spec.version), "HEAD"],
        )?;

        let parent = bare.parent().expect("bare repository path has a parent");
        let mut clone = git::command(parent);
        clone
            .args(["clone", "--quiet", "--bare", "--no-local"])
            .arg(&work)
            .arg(bare);
        git::output(clone, parent)?;
        Ok(tasks)
    }

    fn instance(
        &self,
        task: &TaskDir,
        base_commit: String,
        initial: String,
        patch: String,
        test_patch: String,
        candidates: Vec<Candidate>,
    ) -> TaskInstance {
        let runner = self.spec.runner.unwrap_or(crate::task::Runner::Pytest);
        TaskInstance {
            instance_id: task.id.clone(),
            repo: self.spec.repo.clone(),
            base_commit,
            patch,
            test_patch,
            problem_statement: task.spec.problem_statement.clone(),
            hints_text: task.spec.hints_text.clone(),
            created_at: Some(task.spec.created_at.clone()),
            version: Some(self.spec.version.clone()),
            fail_to_pass: task.spec.fail_to_pass.clone(),
            pass_to_pass: task.spec.pass_to_pass.clone(),
            environment_setup_commit: Some(initial),
            difficulty: None,
            repo_path: Some(PathBuf::from("repos").join(format!("{}.git", self.name))),
            environment_setup: None,
            test_cmd: self
                .spec
                .test_cmd
                .clone()
                .unwrap_or_else(|| runner.default_test_cmd().to_string()),
            runner,
            image: self
                .spec
                .image
                .clone()
                .unwrap_or_else(|| default_image(&task.id)),
            candidates,
            official: None,
            extra: Default::default(),
        }
    }

    fn apply(&self, work: &Path, task: &TaskDir, name: &str) -> Result<(), TaskError> {
        let patch = task.dir.join(name);
        let mut cmd = git::command(work);
        cmd.args(["apply", "--index", "--whitespace=nowarn"])
            .arg(&patch);
        git::output(cmd, work)
            .map(|_| ())
            .map_err(|e| self.err(format!("{}: {name} does not apply: {e}", task.id)))
    }

    /// Commit everything with a fixed date; returns the commit id.
    fn commit(&self, work: &Path, message: &str, when: i64) -> Result<String, TaskError> {
        git::run(work, &["add", "--all"])?;
        let mut cmd = dated(work, when);
        cmd.args([
                "commit",
                "--quiet",
                "--allow-empty",
                "--no-verify",
                "-m",
                message,
            ]);
        git::output(cmd, work)?;
        git::run(work, &["rev-parse", "HEAD"])
    }

    /// Commit everything as a parentless commit with a fixed date and move the branch to it;
    /// returns the commit id. The earlier history stays reachable only through tags (removed,
    /// like every ref but HEAD's branch, by sanitisation).
    fn commit_root(&self, work: &Path, message: &str, when: i64) -> Result<String, TaskError> {
        git::run(work, &["add", "--all"])?;
        let tree = git::run(work, &["write-tree"])?;
        let mut cmd = dated(work, when);
        cmd.args(["commit-tree", &tree, "-m", message]);
        let id = String::from_utf8_lossy(&git::output(cmd, work)?.stdout)
            .trim()
            .to_string();
        git::run(work, &["reset", "--quiet", "--soft", &id])?;
        Ok(id)
    }
}

/// A git command whose author and committer dates are `when` (seconds, UTC).
fn dated(work: &Path, when: i64) -> std::process::Command {
    let date = format!("@{when} +0000");
    let mut cmd = git::command(work);
    cmd.env("GIT_AUTHOR_DATE", &date)
        .env("GIT_COMMITTER_DATE", &date);
    cmd
}

/// Copy a directory tree, skipping byte-code caches and VCS metadata; files are written with
/// default permissions so git records them as 100644 regardless of the source's modes.
pub fn copy_tree(from: &Path, to: &Path) -> Result<(), TaskError> {
    for entry in walkdir::WalkDir::new(from).sort_by_file_name() {
        let entry = entry.map_err(|e| TaskError::io(from, e.into()))?;
        let rel = entry
            .path()
            .strip_prefix(from)
            .expect("walkdir stays under its root");
        if rel.components().any(|c| {
            let c = c.as_os_str();
            c == "__pycache__" || c == ".git" || c == ".pytest_cache"
        }) || rel.extension().is_some_and(|e| e == "pyc")
        {
            continue;
        }
        let dest = to.join(rel);
        if entry.file_type().is_dir() {
            std::fs::create_dir_all(&dest).map_err(|e| TaskError::io(&dest, e))?;
        } else if entry.file_type().is_file() {
            let bytes = std::fs::read(entry.path()).map_err(|e| TaskError::io(entry.path(), e))?;
            std::fs::write(&dest, bytes).map_err(|e| TaskError::io(&dest, e))?;
        }
    }
    Ok(())
}
