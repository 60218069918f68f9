//! Episode layer: the Test episode, the Repair controller and the paper's rewards.
//!
//! - [`test_episode`]: Learn to Test (§3.1, B.3.1) — the Test agent writes a bundle, the harness
//!   qualifies it; at most five submissions.
//! - [`repair`]: Test to Improve (§3.2, B.1, B.3.2) — Round 0, the gate, revision rounds, CHECK /
//!   FINAL-SUBMIT, forced checks, recovery, force-submission.
//! - [`rewards`]: eq. 5–6 and the GRPO group utilities.
//! - [`oracle`]: Oracle bundles (official F2P tests) for the benchmark and Repair training.
//! - [`bench`]: the revision-loop benchmark (time split per round).
//! - [`sandbox_shell`]: a harness sandbox as the agent's shell.

pub mod bench;
pub mod oracle;
pub mod repair;
pub mod rewards;
pub mod sandbox_shell;
pub mod test_episode;

pub use repair::{
    run_repair, RepairConfig, RepairInputs, RepairRecord, RepairResult, TerminalReason,
};
pub use test_episode::{
    run_test_episode, TestEpisodeConfig, TestEpisodeRecord, TestEpisodeResult, TestOutcome,
};
