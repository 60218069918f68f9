//! The runtime guard carried into a published instance's evaluation.
//!
//! A SWE-bench row's eval script is the dataset's command: run as it is, its verdict rests on the
//! runner's own output and exit status, which code under test shapes from inside an in-process
//! runner (a source module that rebinds pytest's reporting when the tests import it prints a
//! consistent `PASSED` summary and exits 0). Where the script's test command is a Python runner
//! the guard knows (pytest, Django's `tests/runtests.py`, sympy's `bin/test`, unittest), the
//! script is run in two parts in one shell instead:
//!
//! 1. everything before `: '>>>>> Start Test Output'`, as it is (environment activation, the
//!    row's own set-up lines, test files reset to Base, the test patch applied), its output
//!    discarded and its status ignored, as swebench's `set -uxo pipefail` script ignores it;
//! 2. the test command, exactly as our own grading runs its command (`execute::run_after`): the
//!    guard first on `PYTHONPATH`, canaries planted in the FAIL_TO_PASS tests and the first
//!    PASS_TO_PASS ones after the test patch is applied, the runner `exec`ed with the run's nonce
//!    on its stdin, its exit status the sandbox's own.
//!
//! The runner's output — canaries taken out, the judged tests under their own names — is put back
//! between the markers with the exit status the sandbox observed ([`test_output`]), and swebench's
//! parser reads it as it reads the script's log. Evidence of tampering (the guard's records, a
//! canary that came out wrong) makes the grade `tampered`; a run without the runner's
//! authenticated completion is not resolved. Anything else (SWE-bench Pro's run scripts, a
//! JavaScript or Go command, a test command that is not one plain runner line) runs unguarded,
//! as the benchmark runs it, and the record says so ([`plan`]'s reason).

use crate::harness::diff::{parse_patch, FileChange};
use crate::harness::error::HarnessError;
use crate::harness::execute::{run_after, GuardedCommand, RunPlan, RunRecord, Staged};
use crate::harness::grade::{judged_ids, python_test_files, GRADE_TIMEOUT};
use crate::harness::guard::{self, GuardMode, GuardSpec};
use crate::harness::sandbox::{Sandbox, HANDOFF_DIR};
use crate::harness::selector::{check_shell_syntax, runner_prefix, split_env, CommandRunner};
use crate::task::official::pro::PRO_PARSER;
use crate::task::official::swebench::{
    END_TEST_OUTPUT, START_TEST_OUTPUT, TEST_EXIT_CODE, TEST_EXIT_CODE_VAR,
};
use crate::task::official::OfficialSpec;
use crate::task::TaskInstance;

/// A row's eval script as a guarded run executes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuardedEval {
    /// The script's lines before the start marker (the shebang dropped).
    pub prelude: String,
    /// The test command between the markers.
    pub command: GuardedCommand,
}

/// Split `spec`'s eval script (swebench 5.x's run form) for a guarded run; `Err` says why the
/// row runs unguarded.
pub fn plan(spec: &OfficialSpec) -> Result<GuardedEval, String> {
    if spec.log_parser == PRO_PARSER {
        return Err("SWE-bench Pro: the test command is the instance's own run script".into());
    }
    let lines: Vec<&str> = spec.eval_script.lines().collect();
    let start_line = format!(": '{START_TEST_OUTPUT}'");
    let starts: Vec<usize> = (0..lines.len()).filter(|&i| lines[i].trim() == start_line).collect();
    let [start] = starts[..] else {
        return Err(format!("the eval script has {} start markers", starts.len()));
    };
    let exit_line = format!("{TEST_EXIT_CODE_VAR}=$?");
    let Some(end) = lines[start + 1..].iter().position(|l| l.trim() == exit_line) else {
        return Err("the eval script records no exit status after its test command".into());
    };
    let body: Vec<&str> = lines[start + 1..start + 1 + end]
        .iter()
        .copied()
        .filter(|l| !l.trim().is_empty())
        .collect();
    let [cmd] = body[..] else {
        return Err(format!(
            "the test section holds {} command lines, not one",
            body.len()
        ));
    };
    if let Err(r) = check_shell_syntax(cmd) {
        return Err(format!("the test command is not one plain command: {}", r.message));
    }
    let words = shlex::split(cmd).ok_or("the test command cannot be split into words")?;
    let (_, rest) = split_env(&words);
    let Some((runner, prog)) = runner_prefix(rest) else {
        return Err(format!(
            "`{}` is not a runner the guard knows",
            rest.first().map(String::as_str).unwrap_or("")
        ));
    };
    let command = GuardedCommand::parse(runner, cmd, &[]).map_err(|e| e.to_string())?;
    if selects_below_module(runner, &rest[prog..]) {
        // Canaries live beside the judged tests in their files and classes: a command that
        // selects single tests would not run them. Not met in the published rows (they select
        // files or modules); refused rather than guarded without canaries.
        return Err("the test command selects single tests, where canaries would not run".into());
    }
    let prelude = lines[..start]
        .iter()
        .filter(|l| !l.starts_with("#!"))
        .copied()
        .collect::<Vec<_>>()
        .join("\n");
    Ok(GuardedEval { prelude, command })
}

/// Whether a runner's arguments select something narrower than a file or module (pytest
/// `path::name`, a `-k` expression, a Django/unittest label naming a class or a test).
fn selects_below_module(runner: CommandRunner, args: &[String]) -> bool {
    args.iter().any(|a| {
        a == "-k"
            || a.starts_with("-k=")
            || match runner {
                CommandRunner::Pytest => a.contains("::"),
                CommandRunner::Django | CommandRunner::Unittest => {
                    !a.starts_with('-')
                        && a.split('.').any(|seg| seg.starts_with(|c: char| c.is_ascii_uppercase()))
                }
                CommandRunner::Sympy => false,
            }
    })
}

/// Run `g` in `sb` (the model patch, if any, already applied at Base) under the guard: in
/// `Candidate` mode with `model` attributed and canaries planted, in `Reference` mode plain.
pub async fn run(
    sb: &dyn Sandbox,
    task: &TaskInstance,
    g: &GuardedEval,
    mode: GuardMode,
    model: &[FileChange],
) -> Result<RunRecord, HarnessError> {
    let runner = g.command.runner;
    let mut spec = GuardSpec::new(mode, runner, sb.workdir(), HANDOFF_DIR);
    let mut canary_nodes = Vec::new();
    if mode == GuardMode::Candidate {
        spec.attribute_patch(model);
        let test_files = python_test_files(&parse_patch(&task.test_patch).unwrap_or_default());
        canary_nodes = guard::canary::nodes_of(runner, &judged_ids(task), &test_files);
    }
    let plan = RunPlan {
        command: g.command.clone(),
        spec,
        canary_nodes,
        judged: task.fail_to_pass.iter().chain(&task.pass_to_pass).cloned().collect(),
    };
    // The row's lines run as swebench runs them (status ignored, their `set -ux` undone so no
    // trace of ours reaches the runner's output); the start-up variables the guard needs unset.
    let prelude = format!("{}\nset +xu\ntrue", g.prelude);
    let clean = "unset PYTHONSTARTUP PYTHONINSPECT PYTEST_PLUGINS".to_string();
    let steps = [("prelude", prelude), ("environment", clean)];
    match run_after(sb, &steps, plan, GRADE_TIMEOUT, false).await? {
        Staged::Ran(r) => Ok(r),
        Staged::StepFailed(step) => Err(HarnessError::Other(format!(
            "{}: the guarded evaluation's step `{step}` failed",
            task.instance_id
        ))),
    }
}

/// The guarded run in the eval script's output form: the runner's output (canaries taken out)
/// between the markers as `bash -x` traces them, the exit status the sandbox observed recorded
/// after the end marker (none when it observed none), the run-level marker on a timeout.
pub fn test_output(r: &RunRecord) -> String {
    let mut out = format!("+ : '{START_TEST_OUTPUT}'\n{}", r.output);
    if !out.ends_with('\n') {
        out.push('\n');
    }
    if r.timed_out {
        out.push_str(">>>>> Tests Timed Out\n");
        return out;
    }
    match runner_status(r) {
        Some(rc) => out.push_str(&format!(
            "+ {TEST_EXIT_CODE_VAR}={rc}\n+ : '{END_TEST_OUTPUT}'\n{TEST_EXIT_CODE}: {rc}\n"
        )),
        None => out.push_str(&format!("+ : '{END_TEST_OUTPUT}'\n")),
    }
    out
}

/// The runner's exit status as the script would have recorded it without the canaries: the
/// must-fail control makes every runner here exit 1 ("some test failed"), so a 1 whose only
/// failures are canaries is a 0. Any other status is the sandbox's own.
fn runner_status(r: &RunRecord) -> Option<i32> {
    use crate::harness::logparse::TestStatus;
    let rc = r.rc.filter(|_| r.exit_observed)?;
    let real_failure = r
        .parsed
        .statuses
        .values()
        .any(|s| matches!(s, TestStatus::Failed | TestStatus::Error));
    let canary_failure = r
        .guard
        .canary_statuses
        .values()
        .any(|s| matches!(s, TestStatus::Failed | TestStatus::Error));
    Some(if rc == 1 && r.guard.canary.is_some() && canary_failure && !real_failure { 0 } else { rc })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::official::swebench::run_form;

    fn spec(script: &str, parser: &str) -> OfficialSpec {
        use crate::task::official::{Activation, EvalType, Family, Source};
        OfficialSpec {
            family: Family::Swebench5,
            image: "img".into(),
            workdir: "/testbed".into(),
            activation: Activation::Conda { env: "testbed".into() },
            eval_script: run_form(script),
            log_parser: parser.into(),
            eval_type: EvalType::PassAndFail,
            image_assets: None,
            assets: Vec::new(),
            files: Vec::new(),
            test_cmd: None,
            scratch_dirs: Vec::new(),
            source: Source::Swebench5 { eval_script: script.into() },
        }
    }

    fn record(output: &str, rc: Option<i32>) -> RunRecord {
        RunRecord {
            rc,
            exit_observed: rc.is_some(),
            timed_out: false,
            output: output.to_string(),
            parsed: Default::default(),
            runner: CommandRunner::Pytest,
            command: String::new(),
            duration: std::time::Duration::ZERO,
            test_duration: None,
            log_path: None,
            guard: Default::default(),
        }
    }

    #[test]
    fn a_plain_runner_line_is_split_at_the_markers() {
        let script = "#!/bin/bash\nset -uxo pipefail\nsource /opt/miniconda3/bin/activate\nconda activate testbed\ncd /testbed\ngit apply -v - <<'EOF_1'\nx\nEOF_1\n: '>>>>> Start Test Output'\nPYTHONWARNINGS='ignore::UserWarning' pytest --no-header -rA --tb=no -p no:cacheprovider tests/test_a.py\n: '>>>>> End Test Output'\ngit checkout abc tests/test_a.py\n";
        let g = plan(&spec(script, "parse_log_pytest")).unwrap();
        assert_eq!(g.command.runner, CommandRunner::Pytest);
        assert_eq!(g.command.env, vec!["PYTHONWARNINGS=ignore::UserWarning".to_string()]);
        assert_eq!(g.command.words[0].0, "pytest");
        assert!(g.prelude.starts_with("set -uxo pipefail\nsource"), "{}", g.prelude);
        assert!(g.prelude.ends_with("EOF_1"), "{}", g.prelude);
        assert!(!g.prelude.contains("Start Test Output"));
        let django = "cd /testbed\n: '>>>>> Start Test Output'\n./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 proxy_models.tests\n: '>>>>> End Test Output'\n";
        assert_eq!(plan(&spec(django, "parse_log_django")).unwrap().command.runner, CommandRunner::Django);
        let sympy = "cd /testbed\n: '>>>>> Start Test Output'\nPYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose sympy/core/tests/test_basic.py\n: '>>>>> End Test Output'\n";
        assert_eq!(plan(&spec(sympy, "parse_log_sympy")).unwrap().command.runner, CommandRunner::Sympy);
    }

    #[test]
    fn what_the_guard_cannot_run_says_why() {
        let cases = [
            ("cd /x\n: '>>>>> Start Test Output'\nnpx jest a.test.js\n: '>>>>> End Test Output'\n", "parse_log_jest", "not a runner the guard knows"),
            ("cd /x\n: '>>>>> Start Test Output'\ntox -epy39 -v -- tests/a.py\n: '>>>>> End Test Output'\n", "parse_log_sphinx", "not a runner the guard knows"),
            ("cd /x\n: '>>>>> Start Test Output'\npytest a.py; pytest b.py\n: '>>>>> End Test Output'\n", "parse_log_pytest", "not one plain command"),
            ("cd /x\n: '>>>>> Start Test Output'\npytest a.py\npytest b.py\n: '>>>>> End Test Output'\n", "parse_log_pytest", "2 command lines"),
            ("cd /x\npytest a.py\n", "parse_log_pytest", "0 start markers"),
            ("cd /x\n: '>>>>> Start Test Output'\npytest a.py::test_x\n: '>>>>> End Test Output'\n", "parse_log_pytest", "selects single tests"),
            ("cd /x\n: '>>>>> Start Test Output'\n./tests/runtests.py a.tests.ATests\n: '>>>>> End Test Output'\n", "parse_log_django", "selects single tests"),
            ("cd /x\n: '>>>>> Start Test Output'\nbash /workspace/run_script.sh\n: '>>>>> End Test Output'\n", PRO_PARSER, "SWE-bench Pro"),
        ];
        for (script, parser, why) in cases {
            let e = plan(&spec(script, parser)).unwrap_err();
            assert!(e.contains(why), "{script}: {e}");
        }
    }

    #[test]
    fn the_run_goes_back_between_the_markers_with_the_observed_status() {
        let mut r = record("PASSED a.py::t\n", Some(0));
        let text = test_output(&r);
        assert_eq!(
            text,
            "+ : '>>>>> Start Test Output'\nPASSED a.py::t\n+ SWEBENCH_TEST_EXIT_CODE=0\n+ : '>>>>> End Test Output'\n>>>>> Test Exit Code: 0\n"
        );
        let run = crate::harness::official::read_test_output(
            crate::harness::official::parsers::LogParser::new("parse_log_pytest", "x", ""),
            &text,
        )
        .unwrap();
        assert_eq!(run.exit_code, 0);
        r.rc = None;
        r.exit_observed = false;
        assert!(!test_output(&r).contains(TEST_EXIT_CODE));
        r.timed_out = true;
        assert!(test_output(&r).ends_with(">>>>> Tests Timed Out\n"));
    }

    #[test]
    fn the_must_fail_control_does_not_become_the_runners_status() {
        use crate::harness::logparse::TestStatus;
        let mut r = record("PASSED a.py::t\n", Some(1));
        r.parsed.statuses.insert("a.py::t".into(), TestStatus::Passed);
        r.guard.canary = crate::harness::guard::CanaryMap::parse(
            r#"{"groups": [], "controls": [{"path": "a.py", "cls": null, "name": "test_cf", "expect": "fail"}]}"#,
        );
        r.guard.canary_statuses.insert("a.py::test_cf".into(), TestStatus::Failed);
        assert!(test_output(&r).ends_with(">>>>> Test Exit Code: 0\n"));
        // A real failure keeps the status; so does any status but 1, and a run without canaries.
        r.parsed.statuses.insert("a.py::u".into(), TestStatus::Failed);
        assert!(test_output(&r).ends_with(">>>>> Test Exit Code: 1\n"));
        r.parsed.statuses.remove("a.py::u");
        r.rc = Some(2);
        assert!(test_output(&r).ends_with(">>>>> Test Exit Code: 2\n"));
        r.rc = Some(1);
        r.guard.canary = None;
        assert!(test_output(&r).ends_with(">>>>> Test Exit Code: 1\n"));
    }
}
