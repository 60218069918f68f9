//! The gates: qualification (validation + Base gate), the offline Gold
//! audit (Base-to-Gold Q), the candidate gate (fresh Base + complete source patch + frozen
//! bundle) with its feedback envelope, balanced accuracy over labelled candidates, and the
//! export of a sandbox's complete Base-relative source diff.

use super::bundle::{Bundle, FrozenBundle};
use super::classify::{base_category, failure_kind, BaseCategory, FailureKind, GateStatus};
use super::diff::{is_test_path, parse_patch};
use super::error::HarnessError;
use super::execute::{
    apply_patch, bound_tail, run_after, run_tests, ApplyOutcome, RunRecord, Staged,
};
use super::feedback::{hide_test_source, render, EnvelopeInput};
use super::logparse::TestStatus;
pub use super::provision::{docker_image, open_sandbox, open_sandbox_with};
use super::sandbox::{reset_command, shell_quote, Purpose, Sandbox, SandboxKind, HANDOFF_DIR};
use super::validate::Rejection;
use crate::task::TaskInstance;
use std::time::Duration;

/// Test timeout of a gate run (harness-semantics §1: 240 s).
pub const TEST_TIMEOUT: Duration = Duration::from_secs(240);
/// Bound of the Base-gate feedback tail.
pub const BASE_TAIL: usize = 1500;

/// Outcome of qualification.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum Qualification {
    Accepted(FrozenBundle),
    Rejected(Rejection),
    BaseGateFailed {
        category: BaseCategory,
        tail: String,
    },
}

/// Run the bundle on the sandbox's current tree: apply the test patch, run the command.
/// `Err(kind)` for a structural failure (test patch does not apply).
async fn run_bundle(
    sb: &dyn Sandbox,
    frozen: &FrozenBundle,
    timeout: Duration,
) -> Result<Result<RunRecord, (FailureKind, String)>, HarnessError> {
    match apply_patch(sb, &frozen.bundle.test_patch, "test").await? {
        ApplyOutcome::Applied { .. } => {}
        ApplyOutcome::Failed { diagnostics } => {
            return Ok(Err((FailureKind::TestPatchApplyFailure, diagnostics)))
        }
    }
    let plan = &frozen.plan;
    Ok(Ok(run_tests(
        sb,
        plan.command.runner,
        &plan.command.activated,
        timeout,
    )
    .await?))
}

/// Fresh Base + `source_patch` + the bundle's test patch, then the bundle's command.
/// Fast path: ONE sandboxed command applies both patches with one `git apply` (they touch
/// disjoint files: a candidate touching test paths was refused before) and runs the tests —
/// as an ephemeral run where the sandbox has them (a throw-away copy of the clean Base: no
/// reset needed, none can be incomplete), otherwise after an in-script `git reset --hard` +
/// `git clean -fdx`. When a step fails, the step-by-step path (reset with recreate, the full
/// apply chain per patch, diagnostics) runs.
/// `Err((kind, diagnostics))` for a structural failure (a patch does not apply).
async fn prepared_run(
    sb: &dyn Sandbox,
    frozen: &FrozenBundle,
    source_patch: &str,
    timeout: Duration,
) -> Result<Result<RunRecord, (FailureKind, String)>, HarnessError> {
    let with_nl = |p: &str| {
        if p.ends_with('\n') {
            p.to_string()
        } else {
            format!("{p}\n")
        }
    };
    let cand = format!("{HANDOFF_DIR}/fast-candidate.patch");
    let test = format!("{HANDOFF_DIR}/fast-test.patch");
    sb.put_file(&test, with_nl(&frozen.bundle.test_patch).as_bytes())
        .await?;
    let mut patches = test.clone();
    if !source_patch.trim().is_empty() {
        sb.put_file(&cand, with_nl(source_patch).as_bytes()).await?;
        patches = format!("{cand} {test}");
    }
    let ephemeral = sb.ephemeral_runs();
    let mut steps = Vec::new();
    if !ephemeral {
        steps.push(("reset", reset_command(sb.base_commit())));
    }
    steps.push(("apply", format!("git apply --whitespace=nowarn {patches}")));
    let plan = &frozen.plan;
    if let Staged::Ran(r) = run_after(
        sb,
        &steps,
        plan.command.runner,
        &plan.command.activated,
        timeout,
        ephemeral,
    )
    .await?
    {
        return Ok(Ok(r));
    }
    sb.reset().await?;
    if let ApplyOutcome::Failed { diagnostics } = apply_patch(sb, source_patch, "candidate").await?
    {
        return Ok(Err((FailureKind::PatchApplyFailure, diagnostics)));
    }
    run_bundle(sb, frozen, timeout).await
}

/// Base gate on a sandbox (reset to clean Base first).
pub async fn base_gate(
    sb: &dyn Sandbox,
    frozen: &FrozenBundle,
    timeout: Duration,
) -> Result<(BaseCategory, String), HarnessError> {
    let (cat, out) = match prepared_run(sb, frozen, "", timeout).await? {
        Ok(r) => (base_category(&r, &frozen.plan.nodes), r.output),
        Err((_, diag)) => (
            BaseCategory::HarnessException,
            format!("test.patch does not apply on Base:\n{diag}"),
        ),
    };
    Ok((cat, bound_tail(&out, BASE_TAIL)))
}

/// Validation, then the Base gate. `Accepted` only for a clean assertion failure on Base.
pub async fn qualify(
    task: &TaskInstance,
    bundle: &Bundle,
    kind: SandboxKind,
) -> Result<Qualification, HarnessError> {
    let frozen = match FrozenBundle::freeze(bundle.clone()) {
        Ok(f) => f,
        Err(r) => return Ok(Qualification::Rejected(r)),
    };
    let sb = open_sandbox(kind, task, Purpose::Gate).await?;
    qualify_in(sb.as_ref(), frozen).await
}

/// Base gate of an already frozen bundle in a given sandbox.
pub async fn qualify_in(
    sb: &dyn Sandbox,
    frozen: FrozenBundle,
) -> Result<Qualification, HarnessError> {
    let (category, tail) = base_gate(sb, &frozen, TEST_TIMEOUT).await?;
    Ok(if category.accepted() {
        Qualification::Accepted(frozen)
    } else {
        Qualification::BaseGateFailed { category, tail }
    })
}

/// Verdict of the candidate gate.
#[derive(Clone, Debug, serde::Serialize)]
pub struct GateVerdict {
    pub status: GateStatus,
    pub failure_kind: FailureKind,
    /// The feedback envelope (≤ 6,000 characters).
    pub feedback: String,
    pub rc: Option<i32>,
    pub failed_test_names: Vec<String>,
    pub timeout_detected: bool,
    /// Patch-apply diagnostics (≤ 12,000 characters) when the source patch did not apply.
    pub apply_diagnostics: Option<String>,
    /// The test command's own runtime inside the sandbox (`None` when it did not run).
    pub test_duration: Option<Duration>,
}

/// Candidate gate in a fresh sandbox.
pub async fn check_candidate(
    task: &TaskInstance,
    frozen: &FrozenBundle,
    source_patch: &str,
    kind: SandboxKind,
) -> Result<GateVerdict, HarnessError> {
    let sb = open_sandbox(kind, task, Purpose::Gate).await?;
    check_candidate_in(sb.as_ref(), frozen, source_patch, TEST_TIMEOUT).await
}

/// Candidate gate on a sandbox (reset to clean Base first).
pub async fn check_candidate_in(
    sb: &dyn Sandbox,
    frozen: &FrozenBundle,
    source_patch: &str,
    timeout: Duration,
) -> Result<GateVerdict, HarnessError> {
    let plan = &frozen.plan;
    let mut env = EnvelopeInput {
        runner_command: frozen.bundle.test_command.clone(),
        test_filename: plan.paths.first().cloned().unwrap_or_default(),
        n_tests: plan.nodes.len(),
        activated_command: Some(plan.command.activated.clone()),
        command_sanitized: plan.command_sanitized,
        removed_command_flags: plan.command.removed_flags.clone(),
        counts: serde_json::json!({}),
        ..Default::default()
    };
    let verdict = |env: &mut EnvelopeInput,
                   kind: FailureKind,
                   rc,
                   failed: Vec<String>,
                   timeout_detected,
                   diag: Option<String>| {
        let status = kind.gate_status();
        env.gate_status = status.as_str().into();
        env.gate_reason = kind.name();
        env.passed = status == GateStatus::Pass;
        env.failed_test_names = failed.clone();
        env.inconclusive_infra = status == GateStatus::Inconclusive;
        env.blocked_by_harness = matches!(
            kind,
            FailureKind::HiddenTestPathsDirtied
                | FailureKind::BundleModified
                | FailureKind::PatchApplyFailure
                | FailureKind::TestPatchApplyFailure
                | FailureKind::HarnessException
        );
        env.rc = rc;
        env.timeout_detected = timeout_detected;
        GateVerdict {
            status,
            failure_kind: kind,
            feedback: render(env),
            rc,
            failed_test_names: failed,
            timeout_detected,
            apply_diagnostics: diag,
            test_duration: None,
        }
    };
    if !frozen.intact() {
        env.raw_output = "the frozen bundle's content no longer matches its hash".into();
        return Ok(verdict(
            &mut env,
            FailureKind::BundleModified,
            None,
            vec![],
            false,
            None,
        ));
    }
    // A candidate touching the bundle's files (or any test path) is not a behavioural verdict.
    if !source_patch.trim().is_empty() {
        match parse_patch(source_patch) {
            Ok(files) => {
                let touched: Vec<String> = files
                    .iter()
                    .flat_map(|f| f.paths().map(str::to_string).collect::<Vec<_>>())
                    .filter(|p| plan.paths.contains(p) || is_test_path(p))
                    .collect();
                if !touched.is_empty() {
                    env.raw_output = format!(
                        "the candidate patch touches test paths: {}",
                        touched.join(", ")
                    );
                    return Ok(verdict(
                        &mut env,
                        FailureKind::HiddenTestPathsDirtied,
                        None,
                        vec![],
                        false,
                        None,
                    ));
                }
            }
            Err(m) => {
                env.raw_output = format!("the candidate patch cannot be parsed: {m}");
                return Ok(verdict(
                    &mut env,
                    FailureKind::PatchApplyFailure,
                    None,
                    vec![],
                    false,
                    Some(m),
                ));
            }
        }
    }
    let run = match prepared_run(sb, frozen, source_patch, timeout).await? {
        Err((FailureKind::PatchApplyFailure, diagnostics)) => {
            env.raw_output = bound_tail(&diagnostics, 2000);
            return Ok(verdict(
                &mut env,
                FailureKind::PatchApplyFailure,
                None,
                vec![],
                false,
                Some(diagnostics),
            ));
        }
        other => other,
    };
    let r = match run {
        Ok(r) => r,
        Err((kind, diag)) => {
            env.raw_output = bound_tail(&diag, 2000);
            return Ok(verdict(&mut env, kind, None, vec![], false, Some(diag)));
        }
    };
    let kind = failure_kind(&r, &plan.nodes);
    let failed: Vec<String> = r
        .node_statuses(&plan.nodes)
        .into_iter()
        .filter(|(_, s)| *s != Some(TestStatus::Passed))
        .map(|(n, _)| n)
        .collect();
    env.counts = serde_json::to_value(&r.parsed.counts).unwrap_or_default();
    env.raw_output = hide_test_source(&r.output, &frozen.bundle.test_patch);
    let mut v = verdict(&mut env, kind, r.rc, failed, r.timed_out, None);
    v.test_duration = r.test_duration;
    Ok(v)
}

/// Gold verdict of the offline audit.
#[derive(Clone, Debug, serde::Serialize)]
pub struct AuditRecord {
    pub base_category: String,
    pub gold_status: String,
    pub gold_failure_kind: String,
    /// Base-to-Gold indicator: clean Base failure and valid Gold pass.
    pub q: bool,
    /// Balanced accuracy over labelled candidates, when the task has any.
    pub balanced_accuracy: Option<f64>,
    /// A candidate check was operationally invalid (the BA is then not a clean measurement).
    pub candidate_infra_error: bool,
    /// Every labelled candidate's result, in the task's order.
    pub candidates: Vec<CandidateOutcome>,
}

/// One labelled candidate run against the bundle by the audit.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CandidateOutcome {
    /// The official evaluator resolves the task with this patch (its label).
    pub resolved: bool,
    /// The gate's status on it (`pass`, `hard_fail`, `inconclusive`).
    pub status: String,
    pub failure_kind: String,
}

/// Offline Gold audit: Base gate and Gold check on independently reset states, then the
/// labelled candidates (predicted resolved iff the gate passes).
pub async fn audit(
    task: &TaskInstance,
    frozen: &FrozenBundle,
    kind: SandboxKind,
) -> Result<AuditRecord, HarnessError> {
    let sb = open_sandbox(kind, task, Purpose::Gate).await?;
    let (cat, _) = base_gate(sb.as_ref(), frozen, TEST_TIMEOUT).await?;
    let gold = check_candidate_in(sb.as_ref(), frozen, &task.patch, TEST_TIMEOUT).await?;
    let q = cat.accepted() && gold.status == GateStatus::Pass;
    let mut labels = Vec::new();
    let mut candidates = Vec::new();
    let mut infra = false;
    for c in &task.candidates {
        let v = check_candidate_in(sb.as_ref(), frozen, &c.patch, TEST_TIMEOUT).await?;
        infra |= v.status == GateStatus::Inconclusive
            && v.failure_kind != FailureKind::HiddenTestPathsDirtied;
        labels.push((c.resolved, v.status == GateStatus::Pass));
        candidates.push(CandidateOutcome {
            resolved: c.resolved,
            status: v.status.as_str().into(),
            failure_kind: v.failure_kind.name(),
        });
    }
    Ok(AuditRecord {
        base_category: cat.name(),
        gold_status: gold.status.as_str().into(),
        gold_failure_kind: gold.failure_kind.name(),
        q,
        balanced_accuracy: if labels.is_empty() {
            None
        } else {
            Some(balanced_accuracy(&labels))
        },
        candidate_infra_error: infra,
        candidates,
    })
}

/// BA = ½(TPR + TNR) over (actually resolved, predicted pass) pairs; an absent class has
/// recall 0 (so a single-class pool gives BA ≤ 0.5).
pub fn balanced_accuracy(labels: &[(bool, bool)]) -> f64 {
    let recall = |class: bool| {
        let n = labels.iter().filter(|(y, _)| *y == class).count();
        if n == 0 {
            return 0.0;
        }
        labels
            .iter()
            .filter(|(y, p)| *y == class && *p == class)
            .count() as f64
            / n as f64
    };
    0.5 * (recall(true) + recall(false))
}

/// The complete Base-relative source diff of the sandbox's working tree: new files included
/// (intent-to-add), staged edits included, test paths and `exclude` paths left out.
pub async fn export_source_diff(
    sb: &dyn Sandbox,
    base_commit: &str,
    exclude: &[String],
) -> Result<String, HarnessError> {
    let t = Duration::from_secs(120);
    let add = sb.exec("git add --intent-to-add . 2>&1", t).await?;
    if !add.success() {
        return Err(HarnessError::Other(format!(
            "registering new files: {}",
            add.output
        )));
    }
    let names = sb
        .exec(
            &format!(
                "git diff --name-only --no-renames {}",
                shell_quote(base_commit)
            ),
            t,
        )
        .await?;
    if !names.success() {
        return Err(HarnessError::Other(format!(
            "listing changed files: {}",
            names.output
        )));
    }
    let files: Vec<String> = names
        .output
        .lines()
        .map(str::to_string)
        .filter(|p| !p.is_empty() && !is_test_path(p) && !exclude.contains(p))
        .collect();
    if files.is_empty() {
        return Ok(String::new());
    }
    let args: Vec<String> = files.iter().map(|f| shell_quote(f)).collect();
    let out = sb
        .exec(
            &format!(
                "git diff --no-color --no-ext-diff --binary --no-renames {} -- {}",
                shell_quote(base_commit),
                args.join(" ")
            ),
            t,
        )
        .await?;
    if !out.success() || out.truncated {
        return Err(HarnessError::Other(format!(
            "exporting the diff failed (truncated: {})",
            out.truncated
        )));
    }
    let mut d = out.output;
    if !d.is_empty() && !d.ends_with('\n') {
        d.push('\n');
    }
    Ok(d)
}
