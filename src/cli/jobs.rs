//! The batch runner: moved to [`crate::pipeline::jobs`] (shared with `eval`); re-exported here.

pub use crate::pipeline::jobs::*;
