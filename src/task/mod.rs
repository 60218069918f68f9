//! Task layer: SWE-bench task instances (schema + extensions), bundled suites, repository
//! materialisation and history sanitisation. Knows nothing of models.

pub mod error;
pub mod git;
pub mod instance;
pub mod load;
pub mod official;
pub mod parquet;
pub mod sanitize;
pub mod workspace;

pub use error::TaskError;
pub use instance::{default_image, Candidate, EnvironmentSetup, Runner, TaskInstance};
pub use load::{find_task, load_tasks, parse_tasks, write_tasks};
pub use official::{Activation, EvalType, Family, OfficialFile, OfficialSpec};
pub use sanitize::SanitizationStatus;
pub use workspace::{materialize, materialize_with, History, Workspace};
pub mod suite;
pub use suite::{bundled_suite, crates_suite, easy_suite, pypi_suite};
