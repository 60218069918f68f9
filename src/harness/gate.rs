//! The gates: qualification (validation + Base gate), the offline Gold
//! audit (Base-to-Gold Q), the candidate gate (fresh Base + complete source patch + frozen
//! bundle) with its feedback envelope, balanced accuracy over labelled candidates, and the
//! export of a sandbox's complete Base-relative source diff.

use super::bundle::{Bundle, FrozenBundle};
use super::classify::{base_category, failure_kind, BaseCategory, FailureKind, GateStatus};
use super::diff::{is_test_path, parse_patch};
use super::tamper::{screen_candidate_in, Tamper};
use super::error::HarnessError;
use super::execute::{
    apply_patch, bound_tail, checked_patch_text, run_after, run_tests, runner_guard, ApplyOutcome,
    GuardedCommand, RunPlan, RunRecord, Staged,
};
use super::guard::{self, GuardMode, GuardSpec};
use super::feedback::{render, EnvelopeInput};
use super::logparse::TestStatus;
pub use super::provision::{docker_image, open_sandbox, open_sandbox_with};
use super::sandbox::{reset_command, shell_quote, Purpose, Sandbox, SandboxKind, HANDOFF_DIR};
use super::gate_native as native;
use super::validate::{PlanCommand, Rejection};
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

/// How a gate run of a bundle is guarded: whose code is under suspicion (the candidate's added
/// lines, or the bundle's test files on Base, or nobody in a reference run) and, for a candidate,
/// canaries in the bundle's judged tests.
fn bundle_plan(
    sb: &dyn Sandbox,
    frozen: &FrozenBundle,
    source_patch: &str,
    mode: GuardMode,
) -> Result<RunPlan, HarnessError> {
    let plan = &frozen.plan;
    let PlanCommand::Python(python) = &plan.command else {
        return Err(HarnessError::Other("a native bundle has no Python guarded run".into()));
    };
    let runner = python.runner;
    let command = GuardedCommand::parse(runner, &python.activated, &plan.nodes)?;
    let mut spec = GuardSpec::new(mode, runner, sb.workdir(), HANDOFF_DIR);
    let mut canary_nodes = Vec::new();
    match mode {
        GuardMode::Candidate => {
            if let Ok(files) = parse_patch(source_patch) {
                spec.attribute_patch(&files);
            }
            let py: Vec<String> =
                plan.paths.iter().filter(|p| p.ends_with(".py")).cloned().collect();
            canary_nodes = guard::canary::nodes_of(runner, &plan.nodes, &py);
        }
        GuardMode::Bundle => {
            if let Ok(files) = parse_patch(&frozen.bundle.test_patch) {
                spec.suspect_bundle(&files);
            }
        }
        GuardMode::Reference => {}
    }
    Ok(RunPlan {
        command,
        spec,
        canary_nodes,
        judged: plan.nodes.clone(),
    })
}

/// Run the bundle on the sandbox's current tree: apply the test patch, run the command.
/// `Err(kind)` for a structural failure (test patch does not apply).
async fn run_bundle(
    sb: &dyn Sandbox,
    frozen: &FrozenBundle,
    run: RunPlan,
    timeout: Duration,
) -> Result<Result<RunRecord, (FailureKind, String)>, HarnessError> {
    match apply_patch(sb, &frozen.bundle.test_patch, "test").await? {
        ApplyOutcome::Applied { .. } => {}
        ApplyOutcome::Failed { diagnostics } => {
            return Ok(Err((FailureKind::TestPatchApplyFailure, diagnostics)))
        }
    }
    Ok(Ok(run_tests(sb, run, timeout).await?))
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
    mode: GuardMode,
    timeout: Duration,
) -> Result<Result<RunRecord, (FailureKind, String)>, HarnessError> {
    // Only what the one parser read and checked is applied (see `execute`).
    let test_text = match checked_patch_text(&frozen.bundle.test_patch) {
        Ok(t) => t,
        Err(d) => return Ok(Err((FailureKind::TestPatchApplyFailure, d))),
    };
    let cand = format!("{HANDOFF_DIR}/fast-candidate.patch");
    let test = format!("{HANDOFF_DIR}/fast-test.patch");
    sb.put_file(&test, test_text.as_bytes()).await?;
    let mut patches = test.clone();
    if !source_patch.trim().is_empty() {
        let cand_text = match checked_patch_text(source_patch) {
            Ok(t) => t,
            Err(d) => return Ok(Err((FailureKind::PatchApplyFailure, d))),
        };
        sb.put_file(&cand, cand_text.as_bytes()).await?;
        patches = format!("{cand} {test}");
    }
    let ephemeral = sb.ephemeral_runs();
    let mut steps = Vec::new();
    if !ephemeral {
        steps.push(("reset", reset_command(sb.base_commit())));
    }
    steps.push(("apply", format!("git apply --whitespace=nowarn {patches}")));
    let run = bundle_plan(sb, frozen, source_patch, mode)?;
    steps.push(("guard", runner_guard(run.command.runner, sb.base_commit(), &[])));
    if let Staged::Ran(r) = run_after(sb, &steps, run.clone(), timeout, ephemeral).await? {
        return Ok(Ok(r));
    }
    sb.reset().await?;
    if let ApplyOutcome::Failed { diagnostics } = apply_patch(sb, source_patch, "candidate").await?
    {
        return Ok(Err((FailureKind::PatchApplyFailure, diagnostics)));
    }
    run_bundle(sb, frozen, run, timeout).await
}

/// Finish judging a candidate run whose guard saw events that are evidence only if Base does
/// not do them: run the bundle on Base (no candidate, nothing under suspicion) once per bundle,
/// sandbox kind and Base, and compare.
async fn judge_against_base(
    sb: &dyn Sandbox,
    frozen: &FrozenBundle,
    r: &mut RunRecord,
    timeout: Duration,
) -> Result<(), HarnessError> {
    if !r.guard.needs_reference() {
        return Ok(());
    }
    let key = format!("gate\0{}\0{}\0{}", sb.base_commit(), frozen.hash, sb.identity());
    let reference = guard::reference_records(key, || async {
        sb.reset().await?;
        Ok(prepared_run(sb, frozen, "", GuardMode::Reference, timeout)
            .await?
            .map(|run| run.guard.records))
    })
    .await?;
    r.guard.judge_with_reference(&reference);
    Ok(())
}

/// Base gate on a sandbox (reset to clean Base first).
pub async fn base_gate(
    sb: &dyn Sandbox,
    frozen: &FrozenBundle,
    timeout: Duration,
) -> Result<(BaseCategory, String), HarnessError> {
    let (cat, out, _) = base_run(sb, frozen, timeout).await?;
    Ok((cat, out))
}

/// One Base-gate run of a bundle under the guard (the bundle's tests under suspicion): its
/// category, the bounded tail, and the failing declared nodes.
async fn base_run(
    sb: &dyn Sandbox,
    frozen: &FrozenBundle,
    timeout: Duration,
) -> Result<(BaseCategory, String, Vec<String>), HarnessError> {
    if let PlanCommand::Native(command) = &frozen.plan.command {
        let nodes = &frozen.plan.nodes;
        return Ok(match native::native_run(sb, frozen, command, "", timeout).await? {
            Ok((run, _)) => (
                native::base_category(&run, nodes),
                bound_tail(&native::report(&run, nodes), BASE_TAIL),
                native::failing(&run, nodes),
            ),
            Err((_, diag)) => (
                BaseCategory::HarnessException,
                format!("test.patch does not apply on Base:\n{diag}"),
                Vec::new(),
            ),
        });
    }
    Ok(match prepared_run(sb, frozen, "", GuardMode::Bundle, timeout).await? {
        Ok(r) => {
            let cat = base_category(&r, &frozen.plan.nodes);
            let mut out = r.output.clone();
            if matches!(cat, BaseCategory::ReadsSource | BaseCategory::Tampered) {
                out = format!("{}\n{out}", r.guard.evidence_lines().join("\n"));
            }
            let failing = r
                .node_statuses(&frozen.plan.nodes)
                .into_iter()
                .filter(|(_, s)| *s != Some(TestStatus::Passed))
                .map(|(n, _)| n)
                .collect();
            (cat, bound_tail(&out, BASE_TAIL), failing)
        }
        Err((_, diag)) => (
            BaseCategory::HarnessException,
            format!("test.patch does not apply on Base:\n{diag}"),
            Vec::new(),
        ),
    })
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
    let (category, tail, failing) = base_run(sb, &frozen, TEST_TIMEOUT).await?;
    if !category.accepted() {
        return Ok(Qualification::BaseGateFailed { category, tail });
    }
    // A second run in fresh state must fail the same way: a bundle whose outcome depends on
    // what an earlier run left behind (or on chance) is not a test of the behaviour.
    sb.reset().await?;
    let (again, tail2, failing2) = base_run(sb, &frozen, TEST_TIMEOUT).await?;
    if again != category || failing2 != failing {
        return Ok(Qualification::BaseGateFailed {
            category: BaseCategory::StateDependent,
            tail: bound_tail(
                &format!(
                    "first run on Base: {} ({}); second run: {} ({})\n{tail2}",
                    category.name(),
                    failing.join(", "),
                    again.name(),
                    failing2.join(", ")
                ),
                BASE_TAIL,
            ),
        });
    }
    Ok(Qualification::Accepted(frozen))
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
    /// The test command's own runtime inside the sandbox (`None` when it did not run); for a
    /// native bundle, the guarded run's wall time (build and every test process).
    pub test_duration: Option<Duration>,
    /// The forbidden test modification found in the candidate (its class and path), when
    /// `failure_kind` is `forbidden_test_modification`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forbidden: Option<Tamper>,
    /// The runtime guard's evidence, when `failure_kind` is `tampered`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tampered: Vec<String>,
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
        language: match &plan.command {
            PlanCommand::Python(_) => "python".into(),
            PlanCommand::Native(c) => c.runner.language().into(),
        },
        runner_command: frozen.bundle.test_command.clone(),
        test_filename: plan.paths.first().cloned().unwrap_or_default(),
        n_tests: plan.nodes.len(),
        activated_command: Some(plan.command.activated().to_string()),
        command_sanitized: plan.command_sanitized,
        removed_command_flags: plan.command.removed_flags().to_vec(),
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
                | FailureKind::ForbiddenTestModification
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
            forbidden: None,
            tampered: Vec::new(),
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
    // A candidate that tampers with the test framework (see `tamper`), or touches the bundle's
    // files (or any test path), is not a behavioural verdict.
    if !source_patch.trim().is_empty() {
        match parse_patch(source_patch) {
            Ok(files) => {
                if let Err(t) = screen_candidate_in(sb, &files).await? {
                    env.raw_output = t.to_string();
                    let mut v = verdict(
                        &mut env,
                        FailureKind::ForbiddenTestModification,
                        None,
                        vec![],
                        false,
                        None,
                    );
                    v.forbidden = Some(t);
                    return Ok(v);
                }
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
                let m = format!("{}: {m}", m.class());
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
    if let PlanCommand::Native(command) = &plan.command {
        let (run, took) = match native::native_run(sb, frozen, command, source_patch, timeout).await? {
            Ok(r) => r,
            Err((kind, diag)) => {
                env.raw_output = bound_tail(&diag, 2000);
                return Ok(verdict(&mut env, kind, None, vec![], false, Some(diag)));
            }
        };
        let kind = native::failure_kind(&run, &plan.nodes);
        env.counts = native::counts(&run, &plan.nodes);
        env.raw_output = native::report(&run, &plan.nodes);
        let failed = native::failing(&run, &plan.nodes);
        let mut v = verdict(&mut env, kind, None, failed, kind == FailureKind::Timeout, None);
        v.test_duration = Some(took);
        if let super::guard::libtest_run::GuardedRun::Judged(j) = &run {
            v.tampered = j.violations.clone();
        }
        return Ok(v);
    }
    let run = match prepared_run(sb, frozen, source_patch, GuardMode::Candidate, timeout).await? {
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
    let mut r = match run {
        Ok(r) => r,
        Err((kind, diag)) => {
            env.raw_output = bound_tail(&diag, 2000);
            return Ok(verdict(&mut env, kind, None, vec![], false, Some(diag)));
        }
    };
    judge_against_base(sb, frozen, &mut r, timeout).await?;
    let kind = failure_kind(&r, &plan.nodes);
    let failed: Vec<String> = r
        .node_statuses(&plan.nodes)
        .into_iter()
        .filter(|(_, s)| *s != Some(TestStatus::Passed))
        .map(|(n, _)| n)
        .collect();
    env.counts = serde_json::to_value(&r.parsed.counts).unwrap_or_default();
    env.raw_output = if kind == FailureKind::Tampered {
        format!(
            "the run is not a verdict: the runtime guard found\n{}\n\n{}",
            r.guard.evidence_lines().join("\n"),
            r.output
        )
    } else {
        r.output.clone()
    };
    let mut v = verdict(&mut env, kind, r.rc, failed, r.timed_out, None);
    v.test_duration = r.test_duration;
    v.tampered = r.guard.evidence_lines();
    Ok(v)
}

/// Gold verdict of the offline audit.
#[derive(Clone, Debug, serde::Serialize)]
pub struct AuditRecord {
    pub base_category: String,
    pub gold_status: String,
    pub gold_failure_kind: String,
    /// Base-to-Gold indicator: clean Base failure, valid Gold pass, and no look-alike pass.
    pub q: bool,
    /// The bundle passed one of the harness's look-alike non-fixes (`harness::nonfix`: Base's
    /// behaviour with the fix's text): it tells source text from behaviour, so `q` is false.
    pub lookalike_passed: bool,
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
    // Base, Gold and each candidate in a sandbox of its own: nothing one run leaves (in the
    // workspace, .git, /tmp) can reach another.
    let (cat, _) = {
        let sb = open_sandbox(kind, task, Purpose::Gate).await?;
        base_gate(sb.as_ref(), frozen, TEST_TIMEOUT).await?
    };
    let gold = {
        let sb = open_sandbox(kind, task, Purpose::Gate).await?;
        check_candidate_in(sb.as_ref(), frozen, &task.patch, TEST_TIMEOUT).await?
    };
    // Look-alikes: Base's behaviour with the fix's text, size and mtime (the fix's added lines
    // as comments; the words). Whatever door a bundle's tests use to look at the source
    // instead of running it (a read, a listing, a subprocess, a stat), a look-alike opens it as
    // Gold does; a test of the behaviour fails on it as on Base. Run only when q could be 1.
    let mut verdicts: std::collections::HashMap<String, GateVerdict> = Default::default();
    let mut lookalike_passed = false;
    if cat.accepted() && gold.status == GateStatus::Pass {
        for p in super::nonfix::non_fixes(task) {
            let sb = open_sandbox(kind, task, Purpose::Gate).await?;
            let v = check_candidate_in(sb.as_ref(), frozen, &p, TEST_TIMEOUT).await?;
            lookalike_passed |= v.status == GateStatus::Pass;
            verdicts.insert(p, v);
        }
    }
    let q = cat.accepted() && gold.status == GateStatus::Pass && !lookalike_passed;
    let mut labels = Vec::new();
    let mut candidates = Vec::new();
    let mut infra = false;
    for c in &task.candidates {
        let v = match verdicts.get(&c.patch) {
            Some(v) => v.clone(),
            None => {
                let sb = open_sandbox(kind, task, Purpose::Gate).await?;
                check_candidate_in(sb.as_ref(), frozen, &c.patch, TEST_TIMEOUT).await?
            }
        };
        infra |= v.status == GateStatus::Inconclusive
            && !matches!(
                v.failure_kind,
                FailureKind::HiddenTestPathsDirtied | FailureKind::ForbiddenTestModification
            );
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
        lookalike_passed,
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

/// The largest source diff [`export_source_diff`] returns (10 MiB): a bigger one is the
/// candidate's fault, reported as [`HarnessError::DiffTooLarge`], never truncated.
pub const MAX_SOURCE_DIFF: u64 = 10 << 20;

/// Raw bytes read per command by [`read_sandbox_file`]; base64 keeps each reply (4/3 of it)
/// under the sandboxes' 64 KiB output cap.
const READ_CHUNK: u64 = 45 * 1024;

/// Read a file of `size` bytes from the sandbox in base64 chunks, so no command's output is
/// ever near the output cap, whatever the file's size.
async fn read_sandbox_file(
    sb: &dyn Sandbox,
    path: &str,
    size: u64,
) -> Result<Vec<u8>, HarnessError> {
    let t = Duration::from_secs(120);
    let mut data = Vec::with_capacity(size as usize);
    while (data.len() as u64) < size {
        let cmd = format!(
            "tail -c +{} {} | head -c {READ_CHUNK} | base64 -w0",
            data.len() + 1,
            shell_quote(path)
        );
        let out = sb.exec(&cmd, t).await?;
        if !out.success() || out.truncated {
            return Err(HarnessError::Other(format!(
                "reading {path} at byte {}: {}",
                data.len(),
                bound_tail(&out.output, 500)
            )));
        }
        let chunk = decode_base64(out.output.trim())
            .ok_or_else(|| HarnessError::Other(format!("reading {path}: bad base64")))?;
        if chunk.is_empty() {
            return Err(HarnessError::Other(format!("{path} shrank while being read")));
        }
        data.extend_from_slice(&chunk);
    }
    Ok(data)
}

fn decode_base64(s: &str) -> Option<Vec<u8>> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let bytes = s.as_bytes();
    if bytes.len() % 4 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for q in bytes.chunks(4) {
        let pad = q.iter().rev().take_while(|&&c| c == b'=').count();
        let mut n = 0u32;
        for &c in &q[..4 - pad] {
            n = (n << 6) | val(c)?;
        }
        n <<= 6 * pad as u32;
        let b = n.to_be_bytes();
        out.extend_from_slice(&b[1..4 - pad]);
    }
    Some(out)
}

/// Run `command` (writing to the file `path`) and read the file back; `limit` bounds its size.
async fn command_to_file(
    sb: &dyn Sandbox,
    command: &str,
    path: &str,
    limit: u64,
) -> Result<Vec<u8>, HarnessError> {
    let q = shell_quote(path);
    let out = sb
        .exec(&format!("{command} > {q} && stat -c %s {q}"), Duration::from_secs(120))
        .await?;
    let size = out.output.trim().lines().last().and_then(|l| l.trim().parse::<u64>().ok());
    let Some(size) = size.filter(|_| out.success()) else {
        return Err(HarnessError::Other(format!(
            "`{command}` failed: {}",
            bound_tail(&out.output, 2000)
        )));
    };
    let data = if size > limit {
        Err(HarnessError::DiffTooLarge { bytes: size, limit })
    } else {
        read_sandbox_file(sb, path, size).await
    };
    sb.exec(&format!("rm -f {q}"), Duration::from_secs(60)).await?;
    data
}

/// The complete Base-relative diff of the sandbox's working tree: new files included
/// (intent-to-add), staged edits included, the `exclude` paths (the fixed Test bundle's) left
/// out. Edits of test paths are NOT stripped: they stay in the candidate, where the gate reports
/// them as a forbidden test modification (reward 0) instead of hiding them. Diffs of any size up
/// to [`MAX_SOURCE_DIFF`] are read back in bounded chunks (docs/harness.md).
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
            bound_tail(&add.output, 2000)
        )));
    }
    let nonce: u64 = rand::random();
    let base = shell_quote(base_commit);
    let names = command_to_file(
        sb,
        &format!("git diff --name-only -z --no-renames {base}"),
        &format!("/tmp/.execcritic-names-{nonce:016x}"),
        MAX_SOURCE_DIFF,
    )
    .await?;
    let files: Vec<String> = names
        .split(|&b| b == 0)
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .filter(|p| !p.is_empty() && !exclude.contains(p))
        .collect();
    if files.is_empty() {
        return Ok(String::new());
    }
    let list = format!("{HANDOFF_DIR}/export-paths-{nonce:016x}");
    let mut nul = Vec::new();
    for f in &files {
        nul.extend_from_slice(f.as_bytes());
        nul.push(0);
    }
    sb.put_file(&list, &nul).await?;
    let diff = command_to_file(
        sb,
        &format!(
            "xargs -0 -r git --literal-pathspecs diff --no-color --no-ext-diff --binary --no-renames {base} -- < {}",
            shell_quote(&list)
        ),
        &format!("/tmp/.execcritic-export-{nonce:016x}.diff"),
        MAX_SOURCE_DIFF,
    )
    .await?;
    let mut d = String::from_utf8_lossy(&diff).into_owned();
    if !d.is_empty() && !d.ends_with('\n') {
        d.push('\n');
    }
    Ok(d)
}
