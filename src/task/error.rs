//! Errors of the task layer: one typed error for task files, workspaces, git and suites.

use std::path::PathBuf;

use super::sanitize::SanitizationStatus;

/// Everything that can go wrong while loading tasks, materialising a workspace or building a
/// bundled suite. Messages name the file, instance and field involved.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("cannot access {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: unreadable Parquet file: {message}")]
    Parquet { path: PathBuf, message: String },
    #[error("{path}: invalid JSON at line {line}, column {column}: {message}")]
    Json {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{path}: record {index} is not a JSON object")]
    NotAnObject { path: PathBuf, index: usize },
    #[error("instance {instance}: field `{field}`: {message}")]
    Field {
        instance: String,
        field: String,
        message: String,
    },
    #[error("{path}: duplicate instance_id {instance}")]
    Duplicate { path: PathBuf, instance: String },
    #[error("instance {id} not found among {available} task instances")]
    NotFound { id: String, available: usize },
    #[error("instance {instance}: {message}")]
    Workspace { instance: String, message: String },
    #[error("`git {args}` failed in {dir}: {stderr}")]
    Git {
        args: String,
        dir: PathBuf,
        stderr: String,
    },
    #[error("cannot run git: {0} (install git)")]
    GitMissing(#[source] std::io::Error),
    #[error("instance {instance}: history sanitisation not verified: {}", .status.failures().join("; "))]
    Sanitization {
        instance: String,
        status: Box<SanitizationStatus>,
    },
    #[error("suite {suite}: {message}")]
    Suite { suite: String, message: String },
    #[error("suite {suite} is not available: {message}")]
    SuiteNotFetched { suite: String, message: String },
}

impl TaskError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        TaskError::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn field(instance: &str, field: &str, message: impl Into<String>) -> Self {
        TaskError::Field {
            instance: instance.to_string(),
            field: field.to_string(),
            message: message.into(),
        }
    }
}
