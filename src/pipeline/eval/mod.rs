//! `execcritic eval`: the paper's generated-test evaluation protocol (Table 9, §A.3) over a whole
//! task file, from the Test and Repair policies to a report.
//!
//! - [`config`]: the budgets (Table 9 defaults, TOML overrides) and the test conditions.
//! - [`policies`]: where each unit's policy comes from (`scripted:DIR` per instance, a shared
//!   HTTP or engine policy behind a slot limit).
//! - [`units`]: the durable units of work (Test generation, qualification, audit, Round 0,
//!   repair run, official grade), each recorded as it completes and reused by a rerun.
//! - [`protocol`]: one instance through the protocol — one Test generation per issue and source,
//!   Round 0 shared by every condition of a run, the same bundle for every run and revision, a
//!   Base-gate failure keeping its Round-0 patch, a fresh official grade of every terminal patch.
//! - [`records`]: the rows of `results.jsonl` and `tests.jsonl`.
//! - [`report`]: the paper's tables from those rows; [`plots`]: the report's SVG figures.
//! - [`outputs`]: everything written to the output directory at the end of a run.

pub mod config;
pub mod outputs;
pub mod plots;
pub mod policies;
pub mod protocol;
pub mod records;
pub mod report;
pub mod units;

pub use config::{Budgets, Condition, EvalConfig};
pub use protocol::{run_eval, EvalRun};
pub use records::{ResultRow, TestRow};
pub use report::Report;

/// Errors of an evaluation as a whole (a failing unit is a row, never one of these).
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("invalid condition {0:?}: expected generated, oracle, none or a bundles directory")]
    BadCondition(String),
    #[error("config {path}: {reason}")]
    Config { path: String, reason: String },
    #[error("policy: {0}")]
    Policy(#[from] crate::policy::PolicyError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    BadRecords { path: String, reason: String },
    #[error("no instances selected")]
    NoInstances,
    #[error("unknown instance {0:?}")]
    UnknownInstance(String),
    /// Every docker host that cannot run the tasks: its missing images, or why it is unreachable.
    #[error("docker image preflight failed (images are never pulled; `docker load` them): {}", hosts.iter().map(|(h, why)| format!("{h}: {why}")).collect::<Vec<_>>().join("; "))]
    MissingImages { hosts: Vec<(String, String)> },
    #[error("docker: {0}")]
    Docker(#[from] crate::harness::HarnessError),
}

impl EvalError {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> EvalError {
        let what = what.into();
        move |source| EvalError::Io { what, source }
    }
}
