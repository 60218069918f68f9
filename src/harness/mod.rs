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
pub mod selector;
pub mod validate;

pub use bundle::{Bundle, BundleError, FrozenBundle, TestContract};
pub use validate::{Rejection, RejectionKind, TestPlan};
