//! The rows an evaluation writes: `results.jsonl` (one per instance × condition × run) and
//! `tests.jsonl` (one per instance and Test source). Gate outcomes (the local, advisory test) are
//! fields apart from the official outcome, which alone decides resolution.

use super::EvalError;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// One instance × condition × run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResultRow {
    pub instance_id: String,
    pub condition: String,
    /// 1-based run number.
    pub run: usize,
    /// The condition had a qualified bundle for this instance (`None` for the no-test condition).
    pub test_qualified: Option<bool>,
    /// Feedback-guided repair ran (a qualified bundle and a usable Round 0).
    pub entered_repair: bool,
    /// Official verdict of the Round-0 patch.
    pub round0_resolved: bool,
    /// Official verdict of the terminal patch (the Round-0 patch when repair did not run).
    pub final_resolved: bool,
    /// Why the run ended (`no_test`, `no_qualified_bundle`, `pass_at_round0`, `pass`,
    /// `exhausted`, `final_submit`, `wall_time`, `patch_too_large`, `infra_error`).
    pub terminal_reason: String,
    /// Round of the terminal patch (0: the Round-0 patch).
    pub terminal_round: usize,
    /// Revision rounds run after Round 0.
    pub revision_rounds: usize,
    /// Gated CHECKs run (unchanged candidates excluded).
    pub checks: usize,
    /// The local gate's status on the terminal patch (`pass`, `hard_fail`, `inconclusive`), when
    /// one ran: advice to the agent, recorded apart from the official verdict.
    pub terminal_gate: Option<String>,
    pub round0_turns: usize,
    /// Repair-agent turns added by revision (0 when repair did not run).
    pub revision_turns: usize,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Wall time of this run's Round 0 and repair episode, milliseconds.
    pub wall_ms: u64,
    pub round0_patch_sha256: String,
    pub final_patch_sha256: String,
    /// An infrastructure failure (sandbox, harness, policy, crash) anywhere in this row's units:
    /// the row counts as unresolved and is reported separately.
    pub infra_error: Option<String>,
    /// The docker host this run of the evaluation scheduled the instance on (`--docker-host`),
    /// when hosts were given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docker_host: Option<String>,
    /// The instance's language (`harness::official::language_of`); empty in rows written
    /// before it was recorded.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub language: String,
}

/// One instance and Test source: the single generation (or given bundle) and its audit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TestRow {
    pub instance_id: String,
    pub source: String,
    pub qualified: bool,
    /// Why no bundle qualified (`base_gate_failure`, `no_submission`, a rejection kind,
    /// `no_bundle`, `infra_error`), `None` when one did.
    pub rejection: Option<String>,
    /// Base-to-Gold (clean Base failure and Gold pass) from the offline audit; `None` when no
    /// bundle qualified or the audit could not run.
    pub base_to_gold: Option<bool>,
    pub gold_status: Option<String>,
    /// Test-agent turns and tokens of the generation (0 for given bundles).
    pub turns: usize,
    pub completion_tokens: u64,
    pub bundle_sha256: Option<String>,
    pub infra_error: Option<String>,
    /// The instance's language, as in [`ResultRow::language`].
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub language: String,
}

/// Read a JSONL file of rows.
pub fn read_rows<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Vec<T>, EvalError> {
    let text = std::fs::read_to_string(path).map_err(EvalError::io(format!("reading {}", path.display())))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| EvalError::BadRecords {
                path: path.display().to_string(),
                reason: format!("line {}: {e}", i + 1),
            })
        })
        .collect()
}

/// Rows as JSONL text.
pub fn to_jsonl<T: Serialize>(rows: &[T]) -> String {
    rows.iter()
        .map(|r| serde_json::to_string(r).expect("rows serialize") + "\n")
        .collect()
}
