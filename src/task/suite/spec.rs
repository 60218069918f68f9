//! The on-disk description of a task suite: `suite.toml` (projects in order), per project
//! `project.toml` (repository name, runner, history order, optional PyPI upstream) with its
//! initial `tree/`, and per task `task.toml` with the patches beside it.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::task::error::TaskError;
use crate::task::instance::Runner;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuiteSpec {
    pub name: String,
    pub projects: Vec<String>,
}

/// A released upstream source distribution the project starts from (instead of `tree/`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Upstream {
    pub name: String,
    pub version: String,
    /// sha256 of the upstream archive (a PyPI sdist, a crates.io `.crate`, a Debian `.deb`), hex.
    pub sha256: String,
    /// Archives of the same registry the fetch script unpacks into the project's tree as its
    /// dependencies (a Go library's `vendor/`): each verified like the project's own.
    #[serde(default)]
    pub deps: Vec<Dependency>,
}

/// One dependency archive of an [`Upstream`] (name, version, sha256 as there).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dependency {
    pub name: String,
    pub version: String,
    pub sha256: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectSpec {
    /// `owner/name` as in SWE-bench's `repo` field.
    pub repo: String,
    pub version: String,
    pub runner: Option<Runner>,
    pub test_cmd: Option<String>,
    pub image: Option<String>,
    /// Unix time of the initial commit; later commits are one day apart.
    pub start_date: i64,
    pub initial_message: String,
    /// Task ids in history order: each task's Base is the previous task's fix commit.
    pub tasks: Vec<String>,
    pub upstream: Option<Upstream>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CandidateSpec {
    /// Patch file relative to the task directory.
    pub file: String,
    pub resolved: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskSpec {
    pub problem_statement: String,
    #[serde(default)]
    pub hints_text: String,
    pub created_at: String,
    /// Commit message of the fix commit (gold + tests) in the project's history.
    pub fix_message: String,
    /// Commit message of the bug-introducing commit (only with `bug.patch`).
    pub bug_message: Option<String>,
    #[serde(rename = "FAIL_TO_PASS")]
    pub fail_to_pass: Vec<String>,
    #[serde(rename = "PASS_TO_PASS")]
    pub pass_to_pass: Vec<String>,
    #[serde(default)]
    pub candidates: Vec<CandidateSpec>,
}

/// A task directory: its spec and patches (`gold.patch`, `test.patch`, optional `bug.patch`).
pub struct TaskDir {
    pub id: String,
    pub dir: PathBuf,
    pub spec: TaskSpec,
}

impl TaskDir {
    pub fn read(suite: &str, project_dir: &Path, id: &str) -> Result<TaskDir, TaskError> {
        let dir = project_dir.join("tasks").join(id);
        let spec = read_toml(suite, &dir.join("task.toml"))?;
        Ok(TaskDir {
            id: id.to_string(),
            dir,
            spec,
        })
    }

    pub fn patch(&self, name: &str) -> Result<String, TaskError> {
        let p = self.dir.join(name);
        std::fs::read_to_string(&p).map_err(|e| TaskError::io(p, e))
    }

    pub fn has(&self, name: &str) -> bool {
        self.dir.join(name).exists()
    }
}

pub fn read_toml<T: serde::de::DeserializeOwned>(suite: &str, path: &Path) -> Result<T, TaskError> {
    let text = std::fs::read_to_string(path).map_err(|e| TaskError::io(path, e))?;
    toml::from_str(&text).map_err(|e| TaskError::Suite {
        suite: suite.to_string(),
        message: format!("{}: {e}", path.display()),
    })
}
