//! Sandboxes behind one trait: `local` (bubblewrap) and `docker` (bollard). A sandbox owns a
//! workspace mounted at `/testbed`, runs bash command lines in it under resource limits with a
//! wall-clock timeout that kills every process it started, and captures bounded output.

pub mod allowlist;
pub mod capture;
pub mod cgroup;
pub mod convention;
pub mod docker;
pub mod docker_host;
pub mod docker_ssh;
pub mod git_state;
pub mod local;
pub mod uid;

use super::error::HarnessError;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

pub use convention::ImageConvention;
pub use docker::DockerSandbox;
pub use local::LocalSandbox;

/// The in-sandbox path of the repository under test.
pub const WORKDIR: &str = "/testbed";
/// In-sandbox directory where the harness hands files (patches) to commands.
pub const HANDOFF_DIR: &str = "/tmp/.execcritic";

/// Resource limits applied to every command run in a sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxLimits {
    /// Total memory of the sandbox's process tree: its memory cgroup (local as root where a
    /// writable hierarchy exists; docker always), else each process's address space (RLIMIT_AS).
    pub memory_bytes: u64,
    /// Maximum number of processes/threads.
    pub max_procs: u64,
    /// Largest file a command may write.
    pub max_file_bytes: u64,
    /// Bytes of output kept in memory per command (head + tail).
    pub output_cap: usize,
    /// Bytes of output streamed to the on-disk log per command.
    pub log_cap: u64,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        SandboxLimits {
            memory_bytes: 4 << 30,
            max_procs: 256,
            max_file_bytes: 1 << 30,
            output_cap: 64 * 1024,
            log_cap: 64 << 20,
        }
    }
}

/// Result of one command. A timeout is a result (`timed_out`), not an error.
#[derive(Clone, Debug)]
pub struct ExecOutput {
    /// Exit code; `None` when killed by a signal (e.g. on timeout).
    pub exit_code: Option<i32>,
    /// stdout and stderr interleaved, bounded to `SandboxLimits::output_cap` (head + tail).
    pub output: String,
    pub truncated: bool,
    pub timed_out: bool,
    pub duration: Duration,
    /// Full log on disk (capped at `SandboxLimits::log_cap`), when a log directory was given.
    pub log_path: Option<PathBuf>,
}

impl ExecOutput {
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out
    }
}

/// Boxed future returned by the object-safe `Sandbox` methods.
pub type SandboxFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, HarnessError>> + Send + 'a>>;

/// An isolated execution environment holding one task's repository at `/testbed`.
pub trait Sandbox: Send + Sync {
    /// Run a bash command line with `/testbed` as working directory. The timeout kills the
    /// whole process tree; it is reported as `timed_out`, not as an error. `Err` only for
    /// infrastructure failures.
    fn exec<'a>(&'a self, command: &'a str, timeout: Duration) -> SandboxFuture<'a, ExecOutput>;
    /// Put the working tree back to the clean Base commit (`git reset --hard` + `git clean
    /// -fdx`), recreating the workspace if that fails.
    fn reset(&self) -> SandboxFuture<'_, ()>;
    /// Write a file at an absolute in-sandbox path (used to hand patches to the sandbox).
    fn put_file<'a>(&'a self, path: &'a str, contents: &'a [u8]) -> SandboxFuture<'a, ()>;
    /// Whether [`Sandbox::exec_ephemeral`] is available (otherwise callers reset first).
    fn ephemeral_runs(&self) -> bool {
        false
    }
    /// Run a command on a throw-away copy of the clean Base: it sees `/testbed` exactly as
    /// after [`Sandbox::reset`], an empty `/tmp` with [`HANDOFF_DIR`] (the files given by
    /// `put_file`) read-only, and nothing it writes persists. A reset that cannot be
    /// incomplete, at no cost per run. Only when [`Sandbox::ephemeral_runs`] says so.
    fn exec_ephemeral<'a>(
        &'a self,
        _command: &'a str,
        _timeout: Duration,
    ) -> SandboxFuture<'a, ExecOutput> {
        no_throwaway_runs()
    }
    /// Run a command on a throw-away copy of the workspace *as it is now* (built test binaries,
    /// say): like [`Sandbox::exec_ephemeral`] — an empty `/tmp`, nothing written persists — but
    /// without the reset to Base first. Only when [`Sandbox::ephemeral_runs`] says so.
    fn exec_over_current<'a>(
        &'a self,
        _command: &'a str,
        _timeout: Duration,
    ) -> SandboxFuture<'a, ExecOutput> {
        no_throwaway_runs()
    }
    /// Run a command with `input` on its stdin (the guard's nonce: see `harness::guard`), as
    /// [`Sandbox::exec_ephemeral`] when `ephemeral`, else as [`Sandbox::exec`].
    fn exec_input<'a>(
        &'a self,
        command: &'a str,
        timeout: Duration,
        input: &'a [u8],
        ephemeral: bool,
    ) -> SandboxFuture<'a, ExecOutput>;
    /// Make the guard's files available in the sandbox; returns their in-sandbox directory.
    fn guard_dir(&self) -> SandboxFuture<'_, String>;
    /// What kind of sandbox this is, for caches of what ran in one (`local`, `docker:<image>`).
    fn identity(&self) -> String {
        "local".to_string()
    }
    /// The in-sandbox working directory (`/testbed`).
    fn workdir(&self) -> &str {
        WORKDIR
    }
    /// The Base commit the sandbox resets to.
    fn base_commit(&self) -> &str;
}

/// The answer of a sandbox without ephemeral (throw-away) runs.
fn no_throwaway_runs<'a>() -> SandboxFuture<'a, ExecOutput> {
    Box::pin(async {
        Err(HarnessError::Other(
            "this sandbox has no ephemeral runs".into(),
        ))
    })
}

/// Which sandbox implementation to use.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxKind {
    Local,
    Docker,
}

/// Why a sandbox is opened; decides the workspace's history (see [`Purpose::history`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Purpose {
    TestAgent,
    RepairAgent,
    Gate,
    Grading,
    /// The network-enabled sandbox that builds a task's environment (`environment_setup`): runs
    /// the task's own setup commands, never agent or candidate code.
    EnvironmentSetup,
}

impl Purpose {
    /// The agents see Base and its ancestors (sanitised, verified); gates and grading see Base
    /// alone (a verified depth-1 snapshot). Only environment setup, which runs no agent or
    /// candidate code, gets a plain clone (version tools such as setuptools_scm read tags).
    pub fn history(self) -> crate::task::History {
        use crate::task::History;
        match self {
            Purpose::TestAgent | Purpose::RepairAgent => History::Sanitized,
            Purpose::Gate | Purpose::Grading => History::BaseOnly,
            Purpose::EnvironmentSetup => History::Full,
        }
    }

    /// Whether the workspace's history is restricted (every purpose but environment setup).
    pub fn sanitize_history(self) -> bool {
        self.history() != crate::task::History::Full
    }
}

/// Options shared by both sandbox kinds.
#[derive(Clone, Debug, Default)]
pub struct SandboxConfig {
    pub limits: SandboxLimits,
    /// Where full per-command logs go; `None` keeps them in the sandbox's private directory
    /// (removed with the sandbox).
    pub log_dir: Option<PathBuf>,
    /// Docker image to use instead of the task's `image` (default: `$EXECCRITIC_DOCKER_IMAGE`).
    pub docker_image: Option<String>,
    /// The task's prepared environment at [`ENV_DIR`] (see `harness::environment`).
    pub environment: EnvAccess,
    /// Never use ephemeral runs (see [`Sandbox::exec_ephemeral`]): gates reset with git.
    pub no_ephemeral: bool,
    /// How the image expects its commands to run (docker only: working directory, activation
    /// prelude, environment, user); the default is our own images' plain `/testbed`.
    pub convention: ImageConvention,
}

/// In-sandbox path of a task's prepared environment (`environment_setup`).
pub const ENV_DIR: &str = "/env";

/// How a sandbox sees the task's environment directory at [`ENV_DIR`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum EnvAccess {
    /// The task has no `environment_setup`: no `/env`.
    #[default]
    None,
    /// Every sandbox of a task with a prepared environment (Test agent, gates, grading): the
    /// cached directory mounted read-only, no network.
    ReadOnly(PathBuf),
    /// The setup sandbox only: the environment's build directory mounted writable, and the
    /// network shared with the host (local: no network namespace; docker: host network).
    Setup(PathBuf),
}

impl EnvAccess {
    /// Host directory mounted at [`ENV_DIR`], if any.
    pub fn host_dir(&self) -> Option<&std::path::Path> {
        match self {
            EnvAccess::None => None,
            EnvAccess::ReadOnly(p) | EnvAccess::Setup(p) => Some(p),
        }
    }

    /// Whether the sandbox shares the host's network (only while setting the environment up).
    pub fn network(&self) -> bool {
        matches!(self, EnvAccess::Setup(_))
    }

    /// Environment variables exposing the environment to commands, given the sandbox's base
    /// `PATH`: `/env/venv/bin` and `/env/bin` lead `PATH`, `/env/python` is on `PYTHONPATH`
    /// (for `pip install --target /env/python`), `VIRTUAL_ENV=/env/venv` once a venv exists.
    pub fn variables(&self, base_path: &str) -> Vec<(String, String)> {
        let Some(host) = self.host_dir() else {
            return Vec::new();
        };
        let mut vars = vec![
            ("EXECCRITIC_ENV".to_string(), ENV_DIR.to_string()),
            (
                "PATH".to_string(),
                format!("{ENV_DIR}/venv/bin:{ENV_DIR}/bin:{base_path}"),
            ),
            ("PYTHONPATH".to_string(), format!("{ENV_DIR}/python")),
        ];
        if matches!(self, EnvAccess::ReadOnly(_)) && host.join("venv").is_dir() {
            vars.push(("VIRTUAL_ENV".to_string(), format!("{ENV_DIR}/venv")));
        }
        vars
    }
}

/// Shell-quote one word for bash (single quotes).
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Git configuration a run could have planted outside `.git/` (`$HOME/.gitconfig`,
/// `~/.config/git/config`, the system file) is never read by the harness's own git commands: a
/// smudge filter or `core.fsmonitor` there would run the candidate's code during a reset.
pub const TRUSTED_GIT: &str = "export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1";

/// Reset command run inside a sandbox: back to the Base commit with no untracked files, with
/// [`TRUSTED_GIT`] (the caller restores `.git/` itself first and empties `/tmp`).
pub fn reset_command(base_commit: &str) -> String {
    format!(
        "{TRUSTED_GIT}; git reset -q --hard {b} && git clean -q -fdx",
        b = shell_quote(base_commit)
    )
}
