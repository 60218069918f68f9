//! Harness layer: sandboxes, bundle validation, selectors, execution, log parsing,
//! classification, gates, feedback envelope and official grading. Knows nothing of models.
//!
//! Everything here is fail-closed: a bundle is validated before anything runs, infrastructure
//! failures are `HarnessError`s or `inconclusive` verdicts, never behavioural ones.

pub mod error;
pub mod sandbox;

pub use error::HarnessError;
pub use sandbox::{ExecOutput, Purpose, Sandbox, SandboxConfig, SandboxKind, SandboxLimits};
pub mod bundle;
pub mod diff;
pub mod environment;
pub mod runners;
pub mod selector;
pub mod tamper;
pub mod tamper_native;
pub mod validate;

pub use bundle::{Bundle, BundleError, FrozenBundle, TestContract};
pub use validate::{Rejection, RejectionKind, TestPlan};
pub mod classify;
pub mod execute;
pub mod feedback;
pub mod gate;
pub mod gate_native;
pub mod grade;
pub mod grade_native;
pub mod guard;
pub mod nonfix;
pub mod logparse;
pub mod official;
pub mod provision;
pub mod orphans;

pub use classify::{BaseCategory, FailureKind, GateStatus};
pub use environment::{environment_key, PreparedEnvironment};
pub use gate::{
    audit, balanced_accuracy, check_candidate, check_candidate_in, export_source_diff, qualify,
    AuditRecord, CandidateOutcome, GateVerdict, Qualification,
};
pub use grade::{grade, load_predictions, GradeResult, Prediction};
pub use logparse::TestStatus;
pub use provision::{open_sandbox, open_sandbox_with, prepare_environment};
