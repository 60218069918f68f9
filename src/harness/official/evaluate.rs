//! Official evaluation of one prediction on a published SWE-bench (4.x or 5.x row) or SWE-bench
//! Pro instance, the way the benchmark's own harness does it, in the instance's image with its
//! conventions (conda activation or exported ENV, `/testbed` or `/app`: see
//! `sandbox::convention`):
//!
//! 1. the model patch goes through our one patch parser and the tamper screen (a forbidden
//!    test-framework change is a behavioural verdict, never run), then is applied at Base;
//! 2. the instance's files (Pro: run script, parser) are placed and the dataset's eval script
//!    runs as it is: test files reset to Base, test patch applied, the test command between the
//!    `>>>>> Start/End Test Output` markers, its exit code recorded;
//! 3. its output is `test_output.txt`; swebench's own reading of it (named log parser, tests
//!    report, resolution) gives `report.json`, byte for byte what `swebench.harness` writes;
//! 4. our verdict is fail-closed on top: a log that swebench would grade but that has no or
//!    misplaced markers, no exit code, or an exit code its report contradicts
//!    ([`read_test_output`]) is an infrastructure failure (`error_kind`), never RESOLVED.
//!
//! SWE-bench Pro: the test files come from the row's test patch instead of the fix commit
//! (which no sandbox holds: see `task::official::pro::test_files_step`), and the instance's
//! `parser.py` reads the run script's two logs in a fresh sandbox of the image, never the one
//! where the candidate ran (it could have rewritten the parser there); our fail-closed reading
//! (markers, exit-code record, no exit status its statuses contradict) applies to Pro as well.
//!
//! Where the script's test command is a Python runner the guard knows, it runs under the runtime
//! guard with canaries, as our own grading's command does ([`super::guarded`]): evidence of
//! tampering makes the grade `tampered`, a run without the runner's authenticated completion is
//! not resolved. Other rows (Pro's run scripts, other languages' runners) run as the benchmark
//! runs them, with the fail-closed reading as the only addition; `OfficialRecord::guard` says
//! which.

use super::grading::{
    eval_tests_report, read_test_output, read_test_output_with, resolution_status, EvalType,
    InfraFailure,
};
use super::guarded;
use super::parsers::{LogParser, ParseError};
use super::report::{eval_report, report_from_statuses, GradingSpec};
use super::status::{OfficialStatus, StatusMap};
use crate::harness::diff::parse_patch;
use crate::harness::error::HarnessError;
use crate::harness::execute::{apply_patch, ApplyOutcome};
use crate::harness::grade::{GradeResult, GRADE_TIMEOUT};
use crate::harness::guard::{self, GuardMode};
use crate::harness::provision::open_sandbox;
use crate::harness::sandbox::{
    shell_quote, ExecOutput, Purpose, Sandbox, SandboxKind, HANDOFF_DIR,
};
use crate::harness::tamper::screen_candidate_in;
use crate::task::official::{self as formats, OfficialSpec};
use crate::task::TaskInstance;
use std::collections::BTreeMap;

use formats::pro::PRO_PARSER;

/// What an official evaluation leaves for the run's log directory.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OfficialRecord {
    /// `report.json` exactly as swebench writes it (`None`: swebench writes none, e.g. its
    /// parser raised, or the model patch was refused before running).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report_json: Option<String>,
    /// swebench's resolution (`RESOLVED_FULL`, `RESOLVED_PARTIAL`, `RESOLVED_NO`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution: Option<String>,
    /// The eval script's whole output (`test_output.txt`); not kept in result lines.
    #[serde(skip)]
    pub test_output: String,
    /// How the test command ran: `guarded` (under the runtime guard, see [`super::guarded`]),
    /// or `unguarded: <why>`; `None` when the tests never ran (the patch was refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guard: Option<String>,
}

fn swebench_eval_type(t: formats::EvalType) -> EvalType {
    match t {
        formats::EvalType::PassAndFail => EvalType::PassAndFail,
        formats::EvalType::FailOnly => EvalType::FailOnly,
    }
}

fn result(task: &TaskInstance) -> GradeResult {
    GradeResult {
        instance_id: task.instance_id.clone(),
        resolved: false,
        tests: BTreeMap::new(),
        error_kind: None,
        completion: None,
        forbidden: None,
        tampered: None,
        official: None,
    }
}

fn not_gradable(task: &TaskInstance, kind: String) -> GradeResult {
    GradeResult {
        error_kind: Some(kind),
        ..result(task)
    }
}

/// Grade `model_patch` on `task` (which carries `spec`) the official way; see the module doc.
pub async fn evaluate(
    task: &TaskInstance,
    spec: &OfficialSpec,
    model_patch: &str,
    kind: SandboxKind,
) -> Result<GradeResult, HarnessError> {
    if kind != SandboxKind::Docker {
        // The instance's environment lives in its image: no other sandbox has it.
        return Ok(not_gradable(task, "official_needs_docker".into()));
    }
    if spec.assets.iter().any(|a| a.bytes.is_none()) {
        // swebench would run the tests without the file (and fail them): a missing input of
        // the instance, not the candidate's doing.
        return Ok(not_gradable(task, "official_infra:image_asset_missing".into()));
    }
    let sb = open_sandbox(kind, task, Purpose::Grading).await?;
    let sb = sb.as_ref();
    sb.reset().await?;
    let mut model_files = Vec::new();
    if !model_patch.trim().is_empty() {
        let Ok(files) = parse_patch(model_patch) else {
            return Ok(not_gradable(task, "patch_apply_failed".into()));
        };
        if let Err(t) = screen_candidate_in(sb, &files).await? {
            return Ok(GradeResult {
                forbidden: Some(t.class.code().to_string()),
                ..result(task)
            });
        }
        if let ApplyOutcome::Failed { .. } = apply_patch(sb, model_patch, "model").await? {
            return Ok(not_gradable(task, "patch_apply_failed".into()));
        }
        model_files = files;
    }
    place_files(sb, spec).await?;
    let plan = match guarded::plan(spec) {
        Ok(g) => g,
        Err(why) => {
            let test_output = run_eval_script(sb, spec).await?;
            let mut r = judge(task, spec, Some(model_patch), test_output).await?;
            if let Some(o) = r.official.as_mut() {
                o.guard = Some(format!("unguarded: {why}"));
            }
            return Ok(r);
        }
    };
    let mut run = guarded::run(sb, task, &plan, GuardMode::Candidate, &model_files).await?;
    if run.guard.needs_reference() {
        // What the guard saw that Base's own run may also show: judged against Base, once per
        // instance and sandbox kind in this process.
        let key = format!(
            "official\0{}\0{}\0{}",
            sb.base_commit(),
            task.instance_id,
            sb.identity()
        );
        let reference = guard::reference_records(key, || async {
            sb.reset().await?;
            place_files(sb, spec).await?;
            let r = guarded::run(sb, task, &plan, GuardMode::Reference, &[]).await?;
            Ok(Ok::<_, ()>(r.guard.records))
        })
        .await?;
        run.guard.judge_with_reference(&reference);
    }
    let mut r = judge(task, spec, Some(model_patch), guarded::test_output(&run)).await?;
    if let Some(o) = r.official.as_mut() {
        o.guard = Some("guarded".into());
    }
    if !run.guard.evidence.is_empty() {
        // Evidence of tampering: never a verdict, whatever the report says.
        r.resolved = false;
        r.tampered = Some(run.guard.evidence_lines());
    } else if r.resolved && !run.guard.authenticated {
        // No completion the runner said with the run's nonce: text that reads like a finished
        // run is not one.
        r.resolved = false;
        r.completion = Some("unauthenticated".into());
    }
    Ok(r)
}

/// Place the instance's files (Pro: run script and parser) and its `image_assets`.
async fn place_files(sb: &dyn Sandbox, spec: &OfficialSpec) -> Result<(), HarnessError> {
    for f in &spec.files {
        sb.put_file(&f.path, f.content.as_bytes()).await?;
    }
    // `image_assets`, where the eval script's restore lines copy them from (every asset has
    // its bytes here: `evaluate` refuses an instance missing one before anything runs).
    for a in &spec.assets {
        if let Some(bytes) = &a.bytes {
            sb.put_file(&a.staged, bytes).await?;
        }
    }
    Ok(())
}

/// Run the instance's eval script as it is (its files placed); returns the whole output.
async fn run_eval_script(sb: &dyn Sandbox, spec: &OfficialSpec) -> Result<String, HarnessError> {
    let script = format!("{HANDOFF_DIR}/eval.sh");
    sb.put_file(&script, spec.eval_script.as_bytes()).await?;
    let out = sb
        // One stream: the order of the markers, the trace and the exit-code record is the
        // order the script wrote them (two pipes merged by docker keep no order between them).
        .exec(&format!("bash {} 2>&1", shell_quote(&script)), GRADE_TIMEOUT)
        .await?;
    if out.timed_out {
        // As swebench's harness records it: the run-level marker voids the run.
        return Ok(format!("{}\n>>>>> Tests Timed Out\n", out.output));
    }
    full_output(out, "the eval script's output")
}

/// swebench's report of `test_output` and our fail-closed verdict on it.
async fn judge(
    task: &TaskInstance,
    spec: &OfficialSpec,
    model_patch: Option<&str>,
    test_output: String,
) -> Result<GradeResult, HarnessError> {
    let text = super::pytext::python_newlines(&test_output).into_owned();
    let eval_type = swebench_eval_type(spec.eval_type);
    let mut record = OfficialRecord {
        test_output: test_output.clone(),
        ..OfficialRecord::default()
    };
    let (status_map, official_resolved) = if spec.log_parser == PRO_PARSER {
        // The instance's parser.py, on the run script's two logs, in a fresh sandbox.
        let Some(map) = run_pro_parser(task, &test_output).await? else {
            return Ok(not_gradable(task, "official_infra:no_parser_output".into()));
        };
        match read_test_output_with(PRO_PARSER, &text, |_| Ok(map)) {
            Ok(run) => {
                let grading = GradingSpec {
                    parser: PRO_PARSER.into(),
                    fail_to_pass: &task.fail_to_pass,
                    pass_to_pass: &task.pass_to_pass,
                    eval_type,
                };
                let report = report_from_statuses(&task.instance_id, &grading, &run.status_map, true);
                record.report_json = super::report::python_json(&report).ok();
                record.resolution = report.resolution.map(|r| r.as_str().to_string());
                (run.status_map, Some(report.report.resolved))
            }
            Err(infra) => return Ok(infra_result(task, record, &infra)),
        }
    } else {
        let parser = LogParser::new(
            &spec.log_parser,
            &task.instance_id,
            task.version.as_deref().unwrap_or(""),
        );
        let grading = GradingSpec {
            parser,
            fail_to_pass: &task.fail_to_pass,
            pass_to_pass: &task.pass_to_pass,
            eval_type,
        };
        match eval_report(&task.instance_id, model_patch, &grading, &text, true) {
            Ok(report) => {
                record.report_json = super::report::python_json(&report).ok();
                record.resolution = report.resolution.map(|r| r.as_str().to_string());
                let resolved = report.report.resolved;
                match read_test_output(parser, &text) {
                    Ok(run) => (run.status_map, Some(resolved)),
                    Err(infra) => return Ok(infra_result(task, record, &infra)),
                }
            }
            Err(e @ ParseError::TooLarge { .. }) => return Ok(infra_result(task, record, &e.into())),
            Err(e) => {
                return Ok(GradeResult {
                    official: Some(record),
                    ..not_gradable(task, format!("official_parser:{e}"))
                })
            }
        }
    };
    let report = eval_tests_report(&task.fail_to_pass, &task.pass_to_pass, &status_map, eval_type);
    let ours = resolution_status(&report).as_str() == "RESOLVED_FULL";
    if task.fail_to_pass.is_empty() && task.pass_to_pass.is_empty() {
        return Ok(not_gradable(task, "no_f2p_p2p_tests".into()));
    }
    let mut tests = BTreeMap::new();
    for id in task.fail_to_pass.iter().chain(&task.pass_to_pass) {
        let st = status_map
            .get(id)
            .map_or("MISSING".to_string(), |s| s.as_str().to_string());
        tests.insert(id.clone(), st);
    }
    // Our reading of the marked section alone must agree with swebench's reading of the whole
    // log; where it does not (a PASSED line outside the markers, say), nothing is resolved.
    let disagree = official_resolved.is_some_and(|r| r != ours);
    // swebench counts XFAIL as a pass. A FAIL_TO_PASS test failed at Base; reported as an
    // expected failure it still fails: code under test that turns its failure into an expected
    // one (`pytest.xfail()` on its way out, however spelled) fixes nothing. PASS_TO_PASS tests
    // keep swebench's reading (a test marked xfail at Base stays one).
    let xfailed = task
        .fail_to_pass
        .iter()
        .any(|id| status_map.get(id) == Some(&OfficialStatus::Xfail));
    let completion = if disagree {
        Some("official_reading_disagrees".to_string())
    } else if ours && xfailed {
        Some("fail_to_pass_xfailed".to_string())
    } else {
        None
    };
    Ok(GradeResult {
        resolved: ours && !disagree && !xfailed,
        tests,
        completion,
        official: Some(record),
        ..result(task)
    })
}

/// The result of a log the fail-closed reading refused: `official_infra:<kind>`.
fn infra_result(task: &TaskInstance, record: OfficialRecord, infra: &InfraFailure) -> GradeResult {
    let kind = serde_json::to_value(infra.kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    GradeResult {
        official: Some(record),
        ..not_gradable(task, format!("official_infra:{kind}"))
    }
}

/// The whole output of `out` (from its full log when the captured output was truncated).
fn full_output(out: ExecOutput, what: &str) -> Result<String, HarnessError> {
    if !out.truncated {
        return Ok(out.output);
    }
    match &out.log_path {
        Some(path) => std::fs::read_to_string(path).map_err(|e| HarnessError::io(path, e)),
        None => Err(HarnessError::Other(format!(
            "{what} was truncated and no full log was kept"
        ))),
    }
}

/// SWE-bench Pro's `parser.py` on the run script's `stdout.log` and `stderr.log`. Neither the
/// parser nor the logs are taken from the sandbox the candidate ran in, where the code under
/// test could have rewritten both (`/workspace` is writable): the logs are rebuilt from the
/// tagged lines of the eval script's output stream (`formats::pro::split_run_output`), and the
/// parser, as the dataset gives it, runs on them in a fresh sandbox of the same image that never
/// ran the candidate. `None`: no readable `output.json`.
async fn run_pro_parser(
    task: &TaskInstance,
    test_output: &str,
) -> Result<Option<StatusMap>, HarnessError> {
    use formats::pro::{
        parser_command, split_run_output, PRO_OUTPUT_PATH, PRO_PARSER_PATH, PRO_STDERR_PATH,
        PRO_STDOUT_PATH,
    };
    let t = std::time::Duration::from_secs(120);
    let (stdout, stderr) = split_run_output(test_output);
    let logs = [(PRO_STDOUT_PATH, stdout), (PRO_STDERR_PATH, stderr)];
    let Some(spec) = &task.official else {
        return Ok(None);
    };
    let Some(parser) = spec.files.iter().find(|f| f.path == PRO_PARSER_PATH) else {
        return Ok(None);
    };
    let fresh = open_sandbox(SandboxKind::Docker, task, Purpose::Grading).await?;
    fresh.put_file(PRO_PARSER_PATH, parser.content.as_bytes()).await?;
    for (path, text) in &logs {
        fresh.put_file(path, text.as_bytes()).await?;
    }
    let run = fresh.exec(&parser_command(), t).await?;
    if !run.success() {
        return Ok(None);
    }
    let json = fresh
        .exec(&format!("cat {}", shell_quote(PRO_OUTPUT_PATH)), t)
        .await?;
    if !json.success() {
        return Ok(None);
    }
    Ok(pro_statuses(&full_output(json, PRO_OUTPUT_PATH)?))
}

/// The statuses in a Pro `output.json` (`{"tests": [{"name": …, "status": …}, …]}`). A name
/// listed more than once keeps its first status other than PASSED: the official grading counts
/// a name as passed when ANY of its entries is PASSED, so a test that fails and then prints
/// (or has its code under test print) a passing line for itself would pass there.
fn pro_statuses(json: &str) -> Option<StatusMap> {
    let v: serde_json::Value = serde_json::from_str(json.trim()).ok()?;
    let mut map = StatusMap::default();
    for t in v.get("tests")?.as_array()? {
        let name = t.get("name")?.as_str()?;
        let status = OfficialStatus::from_token(t.get("status")?.as_str()?);
        if map.get(name).is_none_or(|s| *s == OfficialStatus::Passed) {
            map.insert(name, status);
        }
    }
    Some(map)
}

#[cfg(test)]
mod tests {
    use super::pro_statuses;

    #[test]
    fn pro_output_json_is_read_and_malformed_is_none() {
        let m = pro_statuses(r#"{"tests": [{"name": "a", "status": "PASSED"}, {"name": "b", "status": "FAILED"}]}"#)
            .unwrap();
        assert_eq!(m.get("a").unwrap().as_str(), "PASSED");
        assert_eq!(m.get("b").unwrap().as_str(), "FAILED");
        // A forged PASSED entry after a real failure (either order) does not pass the test.
        let m = pro_statuses(r#"{"tests": [{"name": "a", "status": "FAILED"}, {"name": "a", "status": "PASSED"}, {"name": "b", "status": "PASSED"}, {"name": "b", "status": "ERROR"}, {"name": "b", "status": "FAILED"}]}"#)
            .unwrap();
        assert_eq!(m.get("a").unwrap().as_str(), "FAILED");
        assert_eq!(m.get("b").unwrap().as_str(), "ERROR");
        assert!(pro_statuses("not json").is_none());
        assert!(pro_statuses(r#"{"tests": [{"name": 1}]}"#).is_none());
    }
}
