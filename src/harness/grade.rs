//! Official grading (SWE-bench semantics, v5 hardening): fresh sandbox, model patch, files
//! touched by the official test patch reset to Base, test patch applied, the repository's test
//! command run on the test files; resolved iff every FAIL_TO_PASS and PASS_TO_PASS test passes
//! (a skipped F2P test fails). Completion is checked with the gates' rule
//! ([`super::classify::completion`]): a timeout or a missing exit code is an `error_kind` (not a
//! verdict); a run that did not finish, whose exit code contradicts its report (a non-zero exit
//! with only PASSED lines), or that ended at the runner level (pytest exit 2–5) is NOT resolved,
//! whatever PASSED lines it printed, and says so in `completion`. Predictions are read and
//! results written in SWE-bench format.

use super::classify::{completion, Completion};
use super::diff::{is_test_path_in, parse_patch, FileChange, TestLayout};
use super::error::HarnessError;
use super::execute::{apply_patch, run_tests_keeping, ApplyOutcome, GuardedCommand, RunPlan, RunRecord};
use super::guard::{self, GuardMode, GuardSpec};
use super::tamper::screen_candidate_in;
use super::logparse::TestStatus;
use super::provision::open_sandbox;
use super::sandbox::{shell_quote, Purpose, Sandbox, SandboxKind, HANDOFF_DIR};
use super::selector::{canonical_label, CommandRunner};
use crate::task::{Runner, TaskInstance};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// Timeout of an official test run.
pub const GRADE_TIMEOUT: Duration = Duration::from_secs(1800);

/// One prediction (SWE-bench format).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prediction {
    pub instance_id: String,
    #[serde(default)]
    pub model_name_or_path: String,
    #[serde(default)]
    pub model_patch: Option<String>,
}

/// Result of grading one instance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GradeResult {
    pub instance_id: String,
    pub resolved: bool,
    /// Outcome of every F2P/P2P test (`PASSED`, `FAILED`, …, `MISSING`).
    pub tests: BTreeMap<String, String>,
    /// Set when the instance could not be graded (never a behavioural verdict).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<String>,
    /// Set when the run did not count (see the module doc): `incomplete` or `runner_exit_<rc>`.
    /// Such a run is never resolved; it is a verdict on the patch, not an `error_kind`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion: Option<String>,
    /// Set when the model patch is a forbidden test modification (`tamper` class, e.g.
    /// `runner_config`): not resolved, a behavioural verdict (reward 0), never run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forbidden: Option<String>,
    /// Set when the run carries evidence of tampering (the runtime guard, the canaries; see
    /// `harness::guard`): not resolved, reward 0, whatever the tests reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tampered: Option<Vec<String>>,
    /// Set for a published benchmark instance (`task.official`): swebench's own report and
    /// the eval script's output (see `harness::official::evaluate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub official: Option<super::official::evaluate::OfficialRecord>,
}

/// Read predictions from a JSON list or JSONL file.
pub fn load_predictions(path: &Path) -> Result<Vec<Prediction>, HarnessError> {
    let text = std::fs::read_to_string(path).map_err(|e| HarnessError::io(path, e))?;
    let bad = |m: String| HarnessError::Other(format!("{}: {m}", path.display()));
    if text.trim_start().starts_with('[') {
        return serde_json::from_str(&text)
            .map_err(|e| bad(format!("invalid predictions JSON: {e}")));
    }
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).map_err(|e| bad(format!("line {}: {e}", i + 1))))
        .collect()
}

/// The Python runner of a task (a native task is graded by [`super::grade_native`]).
fn runner_of(task: &TaskInstance) -> Result<CommandRunner, HarnessError> {
    match task.runner {
        Runner::Pytest => Ok(CommandRunner::Pytest),
        Runner::Django => Ok(CommandRunner::Django),
        Runner::Sympy => Ok(CommandRunner::Sympy),
        Runner::Cargo | Runner::Go => Err(HarnessError::Other(format!(
            "{}: a {} task has no Python official run",
            task.instance_id,
            task.runner.as_str()
        ))),
    }
}

fn canon(runner: CommandRunner, id: &str) -> String {
    match runner {
        CommandRunner::Django | CommandRunner::Unittest => canonical_label(id),
        _ => id.to_string(),
    }
}

/// The official command: `test_cmd` + the test files (Django: dotted labels).
pub fn official_command(task: &TaskInstance, test_files: &[String]) -> String {
    let targets: Vec<String> = test_files
        .iter()
        .map(|f| match task.runner {
            Runner::Django => f
                .trim_start_matches("tests/")
                .trim_end_matches(".py")
                .replace('/', "."),
            _ => f.clone(),
        })
        .map(|t| shell_quote(&t))
        .collect();
    format!("{} {}", task.test_cmd, targets.join(" "))
}

fn error(task: &TaskInstance, kind: &str) -> GradeResult {
    GradeResult {
        instance_id: task.instance_id.clone(),
        resolved: false,
        tests: BTreeMap::new(),
        error_kind: Some(kind.into()),
        completion: None,
        forbidden: None,
        tampered: None,
        official: None,
    }
}

/// P2P tests that also get mutants in grading, besides every F2P test: enough to catch a
/// candidate that breaks a passing test and forges its pass, bounded so grading stays cheap.
const P2P_CANARIES: usize = 4;

/// The judged tests that carry canaries in a grading run: every FAIL_TO_PASS test and the
/// first [`P2P_CANARIES`] PASS_TO_PASS tests (a stable choice, so the Base reference matches).
/// The Python files an official test patch leaves (the files the canaries are planted in).
pub(crate) fn python_test_files(official: &[FileChange]) -> Vec<String> {
    official
        .iter()
        .filter_map(|f| f.new_path.clone())
        .filter(|p| p.ends_with(".py"))
        .collect()
}

pub(crate) fn judged_ids(task: &TaskInstance) -> Vec<String> {
    task.fail_to_pass
        .iter()
        .chain(task.pass_to_pass.iter().take(P2P_CANARIES))
        .cloned()
        .collect()
}

/// Paths a model patch touches that are tests or the runner's own entry points: taken from
/// Base before the official tests are applied, as the gate refuses them.
fn reset_paths(task: &TaskInstance, model: &[FileChange], official: &[FileChange], script: Option<&str>) -> Vec<String> {
    let layout = TestLayout::for_task(task);
    let mut out: Vec<String> = official
        .iter()
        .flat_map(|f| f.paths().map(str::to_string).collect::<Vec<_>>())
        .collect();
    for p in model.iter().flat_map(|f| f.paths().map(str::to_string).collect::<Vec<_>>()) {
        let entry = script.is_some_and(|s| s == p);
        if (entry || is_test_path_in(&p, &layout)) && !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

/// A test's outcome as a grade result names it (`PASSED`, `FAILED`, …; `MISSING` when the run
/// did not report it).
pub(crate) fn status_name(st: Option<TestStatus>) -> String {
    match st {
        Some(s) => serde_json::to_value(s)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        None => "MISSING".into(),
    }
}

/// Reset `paths` to Base in the sandbox (checked out, or removed when Base lacks them).
async fn reset_to_base(sb: &dyn Sandbox, paths: &[String]) -> Result<(), HarnessError> {
    if paths.is_empty() {
        return Ok(());
    }
    let base = shell_quote(sb.base_commit());
    let reset: Vec<String> = paths
        .iter()
        .map(|p| {
            let q = shell_quote(p);
            format!("if git cat-file -e {base}:{q} 2>/dev/null; then git checkout -q {base} -- {q}; else rm -rf -- {q}; fi")
        })
        .collect();
    let out = sb.exec(&reset.join(" && "), Duration::from_secs(120)).await?;
    if !out.success() {
        return Err(HarnessError::Other(format!(
            "resetting test files: {}",
            out.output
        )));
    }
    Ok(())
}

/// Grade one model patch. A published benchmark instance (`task.official`) is graded the
/// benchmark's way instead: see `harness::official::evaluate`.
pub async fn grade(
    task: &TaskInstance,
    model_patch: &str,
    kind: SandboxKind,
) -> Result<GradeResult, HarnessError> {
    if let Some(spec) = &task.official {
        return super::official::evaluate::evaluate(task, spec, model_patch, kind).await;
    }
    let files = match parse_patch(&task.test_patch) {
        Ok(f) => f,
        Err(_) => return Ok(error(task, "test_patch_unparseable")),
    };
    let sb = open_sandbox(kind, task, Purpose::Grading).await?;
    let sb = sb.as_ref();
    sb.reset().await?;
    if !model_patch.trim().is_empty() {
        // The model patch is screened for test-framework tampering exactly as at the gate.
        let model_files = match parse_patch(model_patch) {
            Ok(f) => f,
            Err(_) => {
                return Ok(GradeResult {
                    error_kind: Some("patch_apply_failed".into()),
                    ..error(task, "")
                })
            }
        };
        if let Err(t) = screen_candidate_in(sb, &model_files).await? {
            return Ok(GradeResult {
                error_kind: None,
                forbidden: Some(t.class.code().to_string()),
                ..error(task, "")
            });
        }
        if let ApplyOutcome::Failed { .. } = apply_patch(sb, model_patch, "model").await? {
            return Ok(GradeResult {
                error_kind: Some("patch_apply_failed".into()),
                ..error(task, "")
            });
        }
    }
    let model_files = if model_patch.trim().is_empty() {
        Vec::new()
    } else {
        parse_patch(model_patch).unwrap_or_default()
    };
    if matches!(task.runner, Runner::Cargo | Runner::Go) {
        reset_to_base(sb, &reset_paths(task, &model_files, &files, None)).await?;
        return super::grade_native::grade_native(task, sb).await;
    }
    let r = match official_run(task, sb, &files, &model_files, GuardMode::Candidate).await? {
        Ok(r) => r,
        Err(kind) => return Ok(error(task, kind)),
    };
    let mut r = r;
    if r.guard.needs_reference() {
        let key = format!(
            "grade\0{}\0{}\0{}\0{}",
            sb.base_commit(),
            task.instance_id,
            {
                use sha2::Digest;
                hex::encode(&sha2::Sha256::digest(task.test_patch.as_bytes())[..12])
            },
            sb.identity()
        );
        let reference = guard::reference_records(key, || async {
            sb.reset().await?;
            Ok(official_run(task, sb, &files, &[], GuardMode::Reference)
                .await?
                .map(|run| run.guard.records))
        })
        .await?;
        r.guard.judge_with_reference(&reference);
    }
    if !r.guard.evidence.is_empty() {
        return Ok(GradeResult {
            error_kind: None,
            tampered: Some(r.guard.evidence_lines()),
            ..error(task, "")
        });
    }
    let runner = runner_of(task)?;
    let done = match completion(&r) {
        Completion::TimedOut => return Ok(error(task, "timeout")),
        Completion::NoExitCode => return Ok(error(task, "no_exit_code")),
        Completion::Complete => None,
        Completion::RunnerExit(rc) => Some(format!("runner_exit_{rc}")),
        Completion::Incomplete => Some("incomplete".to_string()),
    };
    let statuses: BTreeMap<String, TestStatus> = r
        .parsed
        .statuses
        .iter()
        .map(|(k, v)| (canon(runner, k), *v))
        .collect();
    let mut tests = BTreeMap::new();
    let mut resolved = done.is_none();
    for id in task.fail_to_pass.iter().chain(task.pass_to_pass.iter()) {
        let st = statuses.get(&canon(runner, id)).copied();
        resolved &= st == Some(TestStatus::Passed);
        tests.insert(id.clone(), status_name(st));
    }
    if task.fail_to_pass.is_empty() && task.pass_to_pass.is_empty() {
        return Ok(error(task, "no_f2p_p2p_tests"));
    }
    Ok(GradeResult {
        instance_id: task.instance_id.clone(),
        resolved,
        tests,
        error_kind: None,
        completion: done,
        forbidden: None,
        tampered: None,
        official: None,
    })
}

/// The official run on the sandbox's tree (the model patch already applied, or Base): test
/// paths and runner entry points reset to Base, the official test patch applied, the official
/// command run under the guard with canaries in the FAIL_TO_PASS tests. `Err(kind)`: not
/// gradable.
async fn official_run(
    task: &TaskInstance,
    sb: &dyn Sandbox,
    official: &[FileChange],
    model: &[FileChange],
    mode: GuardMode,
) -> Result<Result<RunRecord, &'static str>, HarnessError> {
    let runner = runner_of(task)?;
    let test_files = python_test_files(official);
    let cmd = official_command(task, &test_files);
    let command = GuardedCommand::parse(runner, &cmd, &[])?;
    let script = command.script();
    reset_to_base(sb, &reset_paths(task, model, official, script.as_deref())).await?;
    if let ApplyOutcome::Failed { .. } = apply_patch(sb, &task.test_patch, "official-tests").await?
    {
        return Ok(Err("test_patch_apply_failed"));
    }
    let mut spec = GuardSpec::new(mode, runner, sb.workdir(), HANDOFF_DIR);
    let mut canary_nodes = Vec::new();
    if mode == GuardMode::Candidate {
        spec.attribute_patch(model);
        canary_nodes = guard::canary::nodes_of(runner, &judged_ids(task), &test_files);
    }
    // The runner starts with the Base configuration, as the official test patch left it.
    let official_paths: Vec<String> = official
        .iter()
        .flat_map(|f| f.paths().map(str::to_string).collect::<Vec<_>>())
        .collect();
    let plan = RunPlan {
        command,
        spec,
        canary_nodes,
        judged: task.fail_to_pass.iter().chain(&task.pass_to_pass).cloned().collect(),
    };
    Ok(Ok(run_tests_keeping(sb, plan, GRADE_TIMEOUT, &official_paths).await?))
}
