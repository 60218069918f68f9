//! The shell the agent's bash tool runs in. The agent layer needs only "run this command line in
//! /testbed with a timeout"; the episode layer provides it from a harness sandbox.

use crate::policy::BoxFuture;
use std::time::Duration;

/// Result of one command. A timeout is a result (`timed_out`), not an error.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShellOutput {
    pub exit_code: Option<i32>,
    /// stdout and stderr interleaved, bounded by the sandbox.
    pub output: String,
    /// The sandbox dropped part of the output.
    pub truncated: bool,
    pub timed_out: bool,
    pub duration: Duration,
}

/// An infrastructure failure of the shell (sandbox gone, spawn failed): never a model failure.
#[derive(Debug, Clone, thiserror::Error)]
#[error("shell infrastructure failure: {0}")]
pub struct ShellError(pub String);

/// Something that runs bash command lines.
pub trait Shell: Send + Sync {
    fn run<'a>(
        &'a self,
        command: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<ShellOutput, ShellError>>;
}
