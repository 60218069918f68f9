//! Scoring rollouts for training: what the harness establishes about a finished Test or Repair
//! rollout, in the terms of the paper's rewards (`episode::rewards`, eq. 5–6, App. A.1–A.2).
//!
//! - Test: a qualified bundle is audited offline (Base gate, Gold check, at most eight
//!   deduplicated, class-balanced labelled candidates); the Gold outcome and candidate labels stay
//!   outside the Test trajectory. No qualified bundle: a validated submission that never failed
//!   cleanly on Base scores as "valid, Q = 0"; otherwise "no valid submission".
//! - Repair: the terminal patch's selected-test outcome (the controller's latest gate of exactly
//!   that patch, or a fresh gate when there is none) and the official evaluator's verdict.
//!
//! Operational failures (sandbox errors, inconclusive executions) become `OperationalError`, so
//! the trajectory is masked (zero advantage) instead of being scored as a behavioural failure
//! (harness-semantics §4) — except an inconclusive Gold (or Base) run of the Test audit, which
//! eq. 12 scores as G = 0 (reward 0, not masked). Structural patch problems (does not apply, touches the test's files)
//! are invalid patches (reward 0), as Table 8 says for forbidden test modification; so is a
//! run the runtime guard found tampered with (`tampered`, see `harness::guard`).

use crate::episode::rewards::{select_candidates, CandidateResult, RepairTerminal, TestAudit};
use crate::episode::test_episode::SubmissionVerdict;
use crate::episode::{RepairResult, TerminalReason, TestEpisodeResult, TestOutcome};
use crate::harness::{self, BaseCategory, FailureKind, FrozenBundle, GateStatus, SandboxKind};
use crate::task::TaskInstance;

/// The task with its candidate pool cut to the reward's ≤ 8 deduplicated, balanced candidates,
/// the harness's own non-fixes (`harness::nonfix`: the fix as comments, the words)
/// always among the incorrect ones, so a bundle that reads the source cannot score.
fn with_reward_candidates(task: &TaskInstance) -> TaskInstance {
    let task = harness::nonfix::with_non_fixes(task);
    let labelled: Vec<(&str, bool)> = task.candidates.iter().map(|c| (c.patch.as_str(), c.resolved)).collect();
    let keep = select_candidates(&labelled);
    let mut t = task.clone();
    t.candidates = keep.into_iter().map(|i| task.candidates[i].clone()).collect();
    t
}

/// Audit a finished Test rollout (runs the harness when a bundle qualified).
pub async fn audit_test_rollout(task: &TaskInstance, result: &TestEpisodeResult, kind: SandboxKind) -> TestAudit {
    if let TestOutcome::InfraError { .. } = result.record.outcome {
        return TestAudit::OperationalError;
    }
    let Some(frozen) = &result.bundle else {
        let validated = result.record.submissions.iter().any(|s| matches!(s.verdict, SubmissionVerdict::BaseGateFailed { .. }));
        return if validated {
            TestAudit::Audited { base_clean_fail: false, gold_pass: false, candidates: Vec::new() }
        } else {
            TestAudit::NoValidSubmission
        };
    };
    let rec = match harness::audit(&with_reward_candidates(task), frozen, kind).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(instance = %task.instance_id, "audit failed: {e}");
            return TestAudit::OperationalError;
        }
    };
    // Eq. 12: an operationally invalid Base or Gold run counts as zero (Q = 0, reward 0), it is
    // not masked. Only operational errors among the candidates mask the trajectory, and only
    // when they matter: Q = 1, where the reward depends on the candidates.
    let base_clean_fail = rec.base_category == BaseCategory::AssertionFailureClean.name();
    let gold_pass = rec.gold_status == GateStatus::Pass.as_str();
    if base_clean_fail && gold_pass && rec.candidate_infra_error {
        return TestAudit::OperationalError;
    }
    TestAudit::Audited {
        base_clean_fail,
        gold_pass,
        candidates: rec
            .candidates
            .iter()
            .map(|c| CandidateResult { correct: c.resolved, passed: c.status == GateStatus::Pass.as_str() })
            .collect(),
    }
}

/// Failure kinds that make the terminal patch invalid (reward 0) rather than the execution
/// operationally invalid.
fn invalid_patch_kind(kind: &str) -> bool {
    [
        FailureKind::PatchApplyFailure,
        FailureKind::HiddenTestPathsDirtied,
        FailureKind::ForbiddenTestModification,
        FailureKind::Tampered,
        FailureKind::BundleModified,
    ]
        .iter()
        .any(|k| k.name() == kind)
}

/// Score a finished Repair rollout against its fixed training bundle: selected-test outcome of
/// the terminal patch and the official verdict.
pub async fn score_repair_rollout(
    task: &TaskInstance,
    result: &RepairResult,
    bundle: &FrozenBundle,
    kind: SandboxKind,
) -> RepairTerminal {
    let rec = &result.record;
    if let TerminalReason::InfraError { .. } = rec.terminal {
        return RepairTerminal::OperationalError;
    }
    if rec.terminal_patch.trim().is_empty() {
        return RepairTerminal::InvalidPatch;
    }
    // The selected test on the terminal patch: the controller's gate of exactly this patch, or
    // a fresh gate when the rollout ended before one ran.
    let (status, failure_kind) = match &rec.terminal_gate {
        Some(v) => (v.status.clone(), v.failure_kind.clone()),
        None => match harness::check_candidate(task, bundle, &rec.terminal_patch, kind).await {
            Ok(v) => (v.status.as_str().to_string(), v.failure_kind.name()),
            Err(e) => {
                tracing::warn!(instance = %task.instance_id, "terminal gate failed: {e}");
                return RepairTerminal::OperationalError;
            }
        },
    };
    if invalid_patch_kind(&failure_kind) {
        return RepairTerminal::InvalidPatch;
    }
    if status == GateStatus::Inconclusive.as_str() {
        return RepairTerminal::OperationalError;
    }
    let official = match harness::grade(task, &rec.terminal_patch, kind).await {
        Ok(g)
            if g.forbidden.is_some()
                || g.tampered.is_some()
                || g.error_kind.as_deref() == Some("patch_apply_failed") =>
        {
            return RepairTerminal::InvalidPatch
        }
        Ok(g) if g.error_kind.is_some() => return RepairTerminal::OperationalError,
        Ok(g) => g.resolved,
        Err(e) => {
            tracing::warn!(instance = %task.instance_id, "official grading failed: {e}");
            return RepairTerminal::OperationalError;
        }
    };
    RepairTerminal::Valid {
        selected_test_pass: status == GateStatus::Pass.as_str(),
        official_pass: official,
        round: rec.terminal_round,
    }
}
