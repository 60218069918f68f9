//! Durable, resumable result files: moved to [`crate::pipeline::durable`] (shared with `eval`);
//! re-exported here for the CLI commands.

pub use crate::pipeline::durable::*;
