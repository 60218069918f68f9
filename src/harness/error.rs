//! Errors of the harness layer. `HarnessError` is an infrastructure failure (never a verdict);
//! bundle problems are `Rejection`s (see `validate`), not errors.

use std::path::PathBuf;

/// An infrastructure failure: the harness could not produce a valid execution. Callers must
/// never turn one of these into a behavioural verdict.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    #[error(
        "bubblewrap (`bwrap`) is not installed or not on PATH; the local sandbox refuses to run \
         unsandboxed. Install it with `apt-get install bubblewrap` (Debian/Ubuntu) or \
         `dnf install bubblewrap` (Fedora), or use `--sandbox docker`"
    )]
    BubblewrapMissing,
    #[error("sandbox start failed: {0}")]
    SandboxStart(String),
    #[error("sandbox I/O error at {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("sandbox reset failed: {0}")]
    Reset(String),
    #[error("docker: {0}")]
    Docker(String),
    /// A task's `environment_setup` command failed (no cache entry was written).
    #[error(
        "environment setup of {instance} failed: command `{command}` {status}; log tail:\n{tail}"
    )]
    EnvironmentSetup {
        instance: String,
        command: String,
        /// e.g. "exited with code 1", "timed out after 600 s".
        status: String,
        tail: String,
    },
    /// A sandbox exceeded a resource limit enforced on its whole process tree (e.g. its memory
    /// cgroup's OOM killer ended a process): an infrastructure/resource signal, never a verdict.
    #[error("sandbox resource limit exceeded: {resource} (limit {limit} bytes): {detail}")]
    ResourceLimit {
        /// `memory`.
        resource: String,
        limit: u64,
        detail: String,
    },
    /// A source diff larger than [`crate::harness::gate::MAX_SOURCE_DIFF`]: the candidate, not
    /// the infrastructure, is at fault (see docs/harness.md, "Large diffs").
    #[error("the source diff is {bytes} bytes, over the limit of {limit} bytes")]
    DiffTooLarge { bytes: u64, limit: u64 },
    #[error("task preparation failed: {0}")]
    Task(String),
    #[error("{0}")]
    Other(String),
}

impl HarnessError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        HarnessError::Io {
            path: path.into(),
            source,
        }
    }
}
