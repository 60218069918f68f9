//! Running the host's `git` for the task layer: a clean, predictable environment (no inherited
//! `GIT_DIR`/`GIT_WORK_TREE`, no user or system config, no signing or hooks surprises) and
//! typed errors carrying the command and its stderr.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use super::error::TaskError;

/// Fixed identity used for every commit the task layer makes (suites, scratch commits).
pub const AUTHOR_NAME: &str = "ExecCritic Suite";
pub const AUTHOR_EMAIL: &str = "suite@execcritic.invalid";

/// Variables that would redirect git away from the directory we name.
const INHERITED_GIT_VARS: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_CEILING_DIRECTORIES",
    "GIT_COMMON_DIR",
];

/// Per-invocation configuration: never sign, never run hooks.
const CONFIG_ARGS: &[&str] = &[
    "-c",
    "commit.gpgsign=false",
    "-c",
    "tag.gpgsign=false",
    "-c",
    "core.hooksPath=/dev/null",
];

/// A git invocation in `dir` with a clean environment.
pub fn command(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.current_dir(dir);
    for v in INHERITED_GIT_VARS {
        cmd.env_remove(v);
    }
    cmd.env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_AUTHOR_NAME", AUTHOR_NAME)
        .env("GIT_AUTHOR_EMAIL", AUTHOR_EMAIL)
        .env("GIT_COMMITTER_NAME", AUTHOR_NAME)
        .env("GIT_COMMITTER_EMAIL", AUTHOR_EMAIL)
        .env("LC_ALL", "C")
        .args(CONFIG_ARGS)
        .stdin(Stdio::null());
    cmd
}

/// Run a prepared git command; non-zero exit → [`TaskError::Git`].
pub fn output(mut cmd: Command, dir: &Path) -> Result<Output, TaskError> {
    let out = cmd.output().map_err(TaskError::GitMissing)?;
    if out.status.success() {
        Ok(out)
    } else {
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .skip(CONFIG_ARGS.len())
            .collect();
        Err(TaskError::Git {
            args: args.join(" "),
            dir: dir.to_path_buf(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// Run `git <args>` in `dir`, returning trimmed stdout.
pub fn run<S: AsRef<OsStr>>(dir: &Path, args: &[S]) -> Result<String, TaskError> {
    let mut cmd = command(dir);
    cmd.args(args);
    let out = output(cmd, dir)?;
    Ok(String::from_utf8_lossy(&out.stdout).trim_end().to_string())
}

/// Whether `git <args>` exits 0 in `dir` (output discarded).
pub fn succeeds(dir: &Path, args: &[&str]) -> bool {
    let mut cmd = command(dir);
    cmd.args(args).stdout(Stdio::null()).stderr(Stdio::null());
    cmd.status().map(|s| s.success()).unwrap_or(false)
}

/// Expire every reflog entry now, so no commit stays reachable through a reflog (history
/// sanitisation: what the workspace shows must be what its refs reach).
pub fn expire_reflogs(dir: &Path) -> Result<(), TaskError> {
    run(
        dir,
        &[
            "reflog",
            "expire",
            "--expire=now",
            "--expire-unreachable=now",
            "--all",
        ],
    )
    .map(|_| ())
}
