//! Agent layer: the bash-tool turn loop, tool-call and marker parsing, prompts.
//!
//! - [`tool`]: the single `bash` tool's schema; [`action`]: one call per response, parsed from
//!   Qwen3.5 XML (fallback: one fenced bash block); [`observation`]: head+tail truncation;
//! - [`marker`]: submission / CHECK markers; [`guard`]: the Test agent's gold-free guard;
//! - [`prompts`]: the paper's prompts and controller messages (App. B.3);
//! - [`run`]: the turn loop ([`Agent`]); [`shell`]: what it runs commands in;
//! - [`trajectory`]: JSONL trajectories and seed conversion.

pub mod action;
pub mod guard;
pub mod marker;
pub mod observation;
pub mod prompts;
pub mod run;
pub mod shell;
pub mod tool;
pub mod trajectory;

pub use marker::Marker;
pub use run::{Agent, AgentError, AgentLimits, AgentStats, Stop, TurnOutcome};
pub use shell::{Shell, ShellError, ShellOutput};
pub use trajectory::{Entry, Trajectory};
