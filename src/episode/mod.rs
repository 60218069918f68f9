//! Episode layer: the Test episode, the Repair controller and the paper's rewards.
//!
//! - [`rewards`]: eq. 5–6 and the GRPO group utilities.
//! - [`sandbox_shell`]: the harness sandbox as the agent's shell.

pub mod rewards;
pub mod sandbox_shell;
