//! Adversarial corpus for classification (issue 11, points 4, 5, 8): words in the output never
//! decide a class, the runner's structured per-node report does; official grading checks
//! completion with the gates' rule; strict XPASS is not a clean failure; ONE multi-node rule;
//! environment prefixes cannot bypass the flag allow-list; selectors accept the node ids the
//! runner reports. Each attack runs on the fixture repository (tests/harness_support) through
//! the Base gate (qualification), the candidate gate or official grading, and where it makes
//! sense it is first shown to work on a plain checkout (its output carries the words a substring
//! classifier keyed on, or the plain runner behaves as the attack wants).

mod harness_support;

use execcritic::harness::gate::{base_gate, check_candidate_in, qualify_in};
use execcritic::harness::{
    grade, open_sandbox, BaseCategory, Bundle, FailureKind, FrozenBundle, GateStatus, Purpose,
    Qualification, RejectionKind, Sandbox, SandboxKind,
};
use harness_support::*;
use std::process::Command;
use std::time::Duration;

const NODE: &str = "tests/test_calc.py::test_add";
const T: Duration = Duration::from_secs(60);

fn frozen_cmd(files: &[(&str, &str)], cmd: &str, nodes: &[&str]) -> FrozenBundle {
    let patch = diff_against_base(files);
    FrozenBundle::freeze(Bundle::from_parts(&patch, cmd, &contract_with_nodes(nodes)).unwrap())
        .unwrap()
}

fn frozen(files: &[(&str, &str)], nodes: &[&str]) -> FrozenBundle {
    let quoted: Vec<String> = nodes
        .iter()
        .map(|n| execcritic::harness::sandbox::shell_quote(n))
        .collect();
    frozen_cmd(
        files,
        &format!("python3 -m pytest {}", quoted.join(" ")),
        nodes,
    )
}

fn official() -> FrozenBundle {
    frozen(&[("tests/test_calc.py", &official_test_file())], &[NODE])
}

/// A source patch replacing `calc/__init__.py`.
fn source(calc: &str) -> String {
    diff_against_base(&[("calc/__init__.py", calc)])
}

async fn gate_sandbox() -> Box<dyn Sandbox> {
    open_sandbox(SandboxKind::Local, &fixture_task(), Purpose::Gate)
        .await
        .unwrap()
}

/// A plain checkout of the fixture at Base with `files` written, outside any harness.
fn plain_checkout(files: &[(&str, &str)]) -> tempfile::TempDir {
    let f = fixture();
    let tmp = tempfile::tempdir().unwrap();
    git(tmp.path(), &["clone", "-q", f.dir.to_str().unwrap(), "r"]);
    let ws = tmp.path().join("r");
    git(&ws, &["checkout", "-q", &f.base]);
    for (p, c) in files {
        std::fs::write(ws.join(p), c).unwrap();
    }
    tmp
}

/// Run pytest on a plain checkout (host interpreter): (exit code, output).
fn plain_pytest(dir: &tempfile::TempDir, env: &[(&str, &str)], args: &[&str]) -> (i32, String) {
    let out = Command::new("python3")
        .args(["-m", "pytest", "-rA", "-p", "no:cacheprovider"])
        .args(args)
        .envs(env.iter().copied())
        .current_dir(dir.path().join("r"))
        .output()
        .expect("python3 runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// Base failures whose output carries the words a substring classifier keyed on
/// (`PermissionError` → sandbox_violation, `ImportError`, `SyntaxError`, `INTERNALERROR>`,
/// `Network is unreachable`): each is a correct behavioural failure, qualifies, and the Gold
/// patch passes the same bundle (Q = 1). Issues about these errors are qualifiable.
#[tokio::test]
async fn base_failures_are_classified_by_the_runners_report_not_words() {
    let cases: &[(&str, &str)] = &[
        (
            "PermissionError raised on Base",
            "    if add(2, 3) != 5:\n        raise PermissionError('add refused: permission denied')",
        ),
        (
            "words printed to stderr",
            "    import sys\n    sys.stderr.write('ImportError: x\\nSyntaxError: y\\nINTERNALERROR> z\\nNetwork is unreachable\\nRead-only file system\\n')\n    assert add(2, 3) == 5",
        ),
        (
            "assert the right exception (ImportError issue)",
            "    import pytest\n    with pytest.raises(ImportError):\n        if add(2, 3) != 5:\n            return\n        raise ImportError('the fixed code raises')",
        ),
        (
            "network error message in the assertion",
            "    msg = 'ConnectionRefusedError: Temporary failure in name resolution'\n    assert add(2, 3) == 5, msg",
        ),
    ];
    let sb = gate_sandbox().await;
    let sb = sb.as_ref();
    for (name, body) in cases {
        let file = test_file_with(body);
        // On a plain checkout the run fails and its output carries the trigger words.
        let plain = plain_checkout(&[("tests/test_calc.py", &file)]);
        let (rc, out) = plain_pytest(&plain, &[], &[NODE]);
        assert_eq!(rc, 1, "{name}: {out}");
        assert!(
            [
                "PermissionError",
                "ImportError",
                "Network",
                "ConnectionRefused",
                "DID NOT RAISE"
            ]
            .iter()
            .any(|w| out.contains(w)),
            "{name}: {out}"
        );
        let f = frozen(&[("tests/test_calc.py", &file)], &[NODE]);
        let (cat, tail) = base_gate(sb, &f, T).await.unwrap();
        assert_eq!(cat, BaseCategory::AssertionFailureClean, "{name}: {tail}");
        let gold = check_candidate_in(sb, &f, &fixture().gold_patch, T)
            .await
            .unwrap();
        assert_eq!(gold.status, GateStatus::Pass, "{name}: {}", gold.feedback);
    }
}

/// Not clean failures: strict XPASS, xfail, skip, set-up errors, the test's own broken
/// import, an unfinished run, a forged report. And the ONE multi-node rule: a declared node
/// failing beside a passing one is a clean failure (the paper's z = FAIL: not every bound node
/// passes); beside a skipped or erroring one it is not.
#[tokio::test]
async fn not_clean_failures_and_the_one_multi_node_rule() {
    let xps = "    pass\n\n\nimport pytest\n\n\n@pytest.mark.xfail(strict=True, reason='known bug')\ndef test_x():\n    assert add(2, 3) == -1";
    let file = test_file_with(xps);
    // On a plain checkout a strict XPASS makes pytest exit 1 with a FAILED line (what a naive
    // reading takes for a clean failure).
    let plain = plain_checkout(&[("tests/test_calc.py", &file)]);
    let (rc, out) = plain_pytest(&plain, &[], &["tests/test_calc.py::test_x"]);
    assert!(
        rc == 1 && out.contains("FAILED tests/test_calc.py::test_x"),
        "{out}"
    );
    let sb = gate_sandbox().await;
    let sb = sb.as_ref();
    let x = "tests/test_calc.py::test_x";
    let two = |extra: &str| format!("{}\n\nimport pytest\n\n\n{extra}\n", official_test_file());
    let cases: Vec<(&str, String, Vec<&str>, BaseCategory)> = vec![
        ("xpass strict", file.clone(), vec![NODE, x], BaseCategory::Xpass),
        (
            "xpass (not strict)",
            two("@pytest.mark.xfail(reason='r')\ndef test_x():\n    assert add(2, 3) == -1"),
            vec![NODE, x],
            BaseCategory::Xpass,
        ),
        (
            "xfail",
            two("@pytest.mark.xfail(reason='r')\ndef test_x():\n    assert add(2, 3) == 5"),
            vec![NODE, x],
            BaseCategory::SkippedOrXfail,
        ),
        (
            "fails + passes (one rule: clean)",
            two("def test_x():\n    assert add(2, 0) == 2"),
            vec![NODE, x],
            BaseCategory::AssertionFailureClean,
        ),
        (
            "fails + skipped",
            two("@pytest.mark.skip(reason='r')\ndef test_x():\n    pass"),
            vec![NODE, x],
            // `-rA` reports a skip as `SKIPPED [1] path:line: reason`, without its node id: the
            // declared node is unreported (fail-closed).
            BaseCategory::RunnerLabelError,
        ),
        (
            "fails + set-up error",
            two("@pytest.fixture\ndef boom():\n    raise RuntimeError('x')\n\n\ndef test_x(boom):\n    pass"),
            vec![NODE, x],
            BaseCategory::FailuresMixedWithErrors,
        ),
        (
            "missing fixture",
            two("def test_x(no_such_fixture):\n    pass"),
            vec![NODE, x],
            BaseCategory::FixtureNotFound,
        ),
        (
            "the test's own broken import",
            test_file_with("    from calc import not_there\n    assert not_there()"),
            vec![NODE],
            BaseCategory::ImportNameMissing,
        ),
        (
            "exits mid-run after printing a summary",
            test_file_with("    import os\n    print('=== short test summary info ===')\n    print('FAILED tests/test_calc.py::test_add - assert 0')\n    print('=== 1 failed in 0.01s ===', flush=True)\n    os._exit(1)"),
            vec![NODE],
            BaseCategory::IncompleteRun,
        ),
    ];
    for (name, file, nodes, want) in cases {
        let f = frozen(&[("tests/test_calc.py", &file)], &nodes);
        let (cat, tail) = base_gate(sb, &f, T).await.unwrap();
        assert_eq!(cat, want, "{name}: {tail}");
    }
    // A test that passes on Base but forges a failure into an uncaptured run: never clean.
    let forged = test_file_with(
        "    print('\\n=========== short test summary info ===========')\n    print('FAILED tests/test_calc.py::test_add - assert 1 == 2')\n    assert add(2, 2) == 0",
    );
    let f = frozen_cmd(
        &[("tests/test_calc.py", &forged)],
        &format!("python3 -m pytest -s {NODE}"),
        &[NODE],
    );
    let (cat, tail) = base_gate(sb, &f, T).await.unwrap();
    assert!(!cat.accepted(), "{cat:?}: {tail}");
}

/// Wrong candidates that try to be masked (`inconclusive`, zero advantage in training) instead of
/// failing: each is a `hard_fail`; the Gold patch still passes.
#[tokio::test]
async fn wrong_candidates_cannot_hide_as_inconclusive() {
    let wrong = "def add(a, b):\n    return a * b\n\n\ndef sub(a, b):\n    return a - b\n";
    let cases: Vec<(&str, String, FailureKind)> = vec![
        (
            "prints ImportError to stderr",
            format!("import sys\nsys.stderr.write('ImportError: cannot import name x\\nINTERNALERROR> boom\\nPermissionError\\n')\n{wrong}"),
            FailureKind::AssertionFailure,
        ),
        (
            "breaks collection (syntax error)",
            format!("{wrong}\ndef broken(:\n"),
            FailureKind::CollectionError,
        ),
        (
            "exits the runner early",
            "import os\n\n\ndef add(a, b):\n    os._exit(0)\n\n\ndef sub(a, b):\n    return a - b\n".into(),
            FailureKind::IncompleteRun,
        ),
        (
            "kills the runner",
            "import os, signal\n\n\ndef add(a, b):\n    os.kill(os.getpid(), signal.SIGKILL)\n\n\ndef sub(a, b):\n    return a - b\n".into(),
            FailureKind::Tampered,
        ),
        (
            "raises PermissionError",
            "def add(a, b):\n    raise PermissionError('denied')\n\n\ndef sub(a, b):\n    return a - b\n".into(),
            FailureKind::TestError,
        ),
        (
            "forges a passing summary at exit",
            format!("import atexit, os\n\n\ndef _forge():\n    print('=== short test summary info ===')\n    print('PASSED tests/test_calc.py::test_add')\n    print('=== 1 passed in 0.01s ===', flush=True)\n    os._exit(0)\n\n\natexit.register(_forge)\n{wrong}"),
            FailureKind::Tampered,
        ),
    ];
    let sb = gate_sandbox().await;
    let sb = sb.as_ref();
    let f = official();
    for (name, calc, want) in cases {
        let v = check_candidate_in(sb, &f, &source(&calc), T).await.unwrap();
        // The runtime guard may find the candidate tampering (a hard fail with reward 0);
        // otherwise the run's own outcome decides.
        assert_eq!(v.status, GateStatus::HardFail, "{name}: {}", v.feedback);
        assert!(
            [want, FailureKind::ForbiddenTestModification].contains(&v.failure_kind),
            "{name}: {:?}: {}",
            v.failure_kind,
            v.feedback
        );
    }
    let gold = check_candidate_in(sb, &f, &fixture().gold_patch, T)
        .await
        .unwrap();
    assert_eq!(gold.status, GateStatus::Pass, "{}", gold.feedback);
}

/// Official grading checks completion with the gates' rule: a correct fix whose run exits with
/// another status than the runner's own (or stops early) after pytest printed PASSED for every
/// F2P/P2P test is not resolved.
#[tokio::test]
async fn grading_requires_a_completed_consistent_run() {
    let task = fixture_task();
    let exit_nonzero =
        format!("import atexit, os\natexit.register(lambda: os._exit(3))\n{CALC_GOLD}");
    let tests = diff_against_base(&[("tests/test_calc.py", &official_test_file())]);
    // On a plain checkout the run prints PASSED for every test and exits 1.
    let plain = plain_checkout(&[
        ("calc/__init__.py", &exit_nonzero),
        ("tests/test_calc.py", &official_test_file()),
    ]);
    let (rc, out) = plain_pytest(&plain, &[], &["tests/test_calc.py"]);
    assert!(
        rc == 3 && out.contains(&format!("PASSED {NODE}")),
        "{rc}: {out}"
    );
    assert!(!out.contains("FAILED"), "{out}");
    let _ = tests;
    let g = grade(&task, &source(&exit_nonzero), SandboxKind::Local)
        .await
        .unwrap();
    assert!(!g.resolved, "{g:?}");
    assert!(
        g.error_kind.is_none(),
        "a verdict, not a masked error: {g:?}"
    );
    // The runner's own status (1: the canaries failed) is not the process's (3).
    assert!(
        g.tampered.as_ref().is_some_and(|t| t.iter().any(|e| e.starts_with("exit_status:"))),
        "{g:?}"
    );
    // Stopping inside the run: not resolved either.
    let stop = format!(
        "import os\n{}",
        CALC_GOLD.replace("    return a + b", "    os._exit(0)")
    );
    let g = grade(&task, &source(&stop), SandboxKind::Local)
        .await
        .unwrap();
    assert!(!g.resolved && (g.completion.is_some() || g.tampered.is_some()), "{g:?}");
    // The gold patch still resolves.
    let g = grade(&task, &task.patch, SandboxKind::Local).await.unwrap();
    assert!(g.resolved && g.completion.is_none(), "{g:?}");
}

/// Environment assignments before the runner would bypass the flag allow-list: on a plain
/// checkout `PYTEST_ADDOPTS` deselects the declared node (nothing runs); the harness rejects the
/// bundle before anything runs.
#[tokio::test]
async fn env_prefixes_are_rejected_before_running() {
    let file = official_test_file();
    let plain = plain_checkout(&[("tests/test_calc.py", &file)]);
    let (rc, out) = plain_pytest(&plain, &[("PYTEST_ADDOPTS", "-k not_this")], &[NODE]);
    assert_eq!(
        rc, 5,
        "the attack deselects the node on a plain checkout: {out}"
    );
    let patch = diff_against_base(&[("tests/test_calc.py", &file)]);
    for cmd in [
        format!("PYTEST_ADDOPTS='-k not_this' python3 -m pytest {NODE}"),
        format!("PYTEST_PLUGINS=calc python3 -m pytest {NODE}"),
        format!("PYTHONPATH=/tmp python3 -m pytest {NODE}"),
        format!("env PYTEST_ADDOPTS=-x python3 -m pytest {NODE}"),
    ] {
        let b = Bundle::from_parts(&patch, &cmd, &contract_with_nodes(&[NODE])).unwrap();
        let r = FrozenBundle::freeze(b).unwrap_err();
        assert!(
            matches!(
                r.kind,
                RejectionKind::EnvironmentPrefix | RejectionKind::UnknownRunner
            ),
            "{cmd}: {r}"
        );
    }
}

/// Node ids exactly as pytest reports them qualify: a unittest-style class not named `Test*`,
/// parameter ids with spaces, brackets and ` - `.
#[tokio::test]
async fn selectors_accept_the_ids_the_runner_reports() {
    let file = format!(
        "{}\n\nimport unittest\nimport pytest\n\n\nclass AdditionChecks(unittest.TestCase):\n    def test_add_method(self):\n        self.assertEqual(add(2, 3), 5)\n\n\n@pytest.mark.parametrize('s', ['a b', 'c]d', 'e - f'])\ndef test_param(s):\n    assert add(len(s), 1) == len(s) + 1\n",
        official_test_file()
    );
    let nodes = [
        "tests/test_calc.py::test_add",
        "tests/test_calc.py::AdditionChecks::test_add_method",
        "tests/test_calc.py::test_param[a b]",
        "tests/test_calc.py::test_param[c]d]",
        "tests/test_calc.py::test_param[e - f]",
    ];
    // The ids are the ones pytest itself reports on a plain checkout.
    let plain = plain_checkout(&[("tests/test_calc.py", &file)]);
    let (_, out) = plain_pytest(&plain, &[], &["tests/test_calc.py"]);
    for n in nodes {
        assert!(out.contains(&format!("FAILED {n}")), "{n}: {out}");
    }
    // `-q` (which hides the closing counts line) is removed and reported, like `--no-header`.
    let quoted: Vec<String> = nodes
        .iter()
        .map(|n| execcritic::harness::sandbox::shell_quote(n))
        .collect();
    let f = frozen_cmd(
        &[("tests/test_calc.py", &file)],
        &format!("python3 -m pytest -q {}", quoted.join(" ")),
        &nodes,
    );
    assert_eq!(f.plan.command.removed_flags(), vec!["-q"]);
    let sb = gate_sandbox().await;
    match qualify_in(sb.as_ref(), f.clone()).await.unwrap() {
        Qualification::Accepted(q) => assert_eq!(q.plan.nodes.len(), nodes.len()),
        other => panic!("{other:?}"),
    }
    let gold = check_candidate_in(sb.as_ref(), &f, &fixture().gold_patch, T)
        .await
        .unwrap();
    assert_eq!(gold.status, GateStatus::Pass, "{}", gold.feedback);
}

/// `gold` with `line` appended to the first source file it changes, as a Base-relative diff
/// (built in a plain clone of the task's repository).
fn gold_plus(t: &execcritic::task::TaskInstance, line: &str) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let repo = t
        .repo_path
        .as_ref()
        .expect("bundled tasks have a repo_path");
    git(tmp.path(), &["clone", "-q", repo.to_str().unwrap(), "r"]);
    let ws = tmp.path().join("r");
    git(&ws, &["checkout", "-q", &t.base_commit]);
    let p = ws.join("gold.patch");
    std::fs::write(&p, &t.patch).unwrap();
    git(&ws, &["apply", "gold.patch"]);
    std::fs::remove_file(&p).unwrap();
    let file = execcritic::harness::diff::parse_patch(&t.patch).unwrap()[0]
        .new_path
        .clone()
        .unwrap();
    let mut text = std::fs::read_to_string(ws.join(&file)).unwrap();
    text.push_str(line);
    std::fs::write(ws.join(&file), text).unwrap();
    git(&ws, &["diff"]) + "\n"
}

/// On the bundled suite (a pytest task and a Django/unittest task): the gold fix plus an exit
/// hook that makes the process exit 0 — the status of a run where nothing failed, while the
/// canaries must fail — is neither a pass of the candidate gate (with the task's Oracle bundle)
/// nor RESOLVED by official grading; the plain gold fix is both.
#[tokio::test]
async fn bundled_suite_completion_attacks() {
    use execcritic::episode::oracle::oracle_bundle;
    use execcritic::task::{bundled_suite, load_tasks, Runner};
    let tasks = load_tasks(&bundled_suite().expect("bundled suite builds")).unwrap();
    for runner in [Runner::Pytest, Runner::Django] {
        let t = tasks.iter().find(|t| t.runner == runner).unwrap();
        let frozen = FrozenBundle::freeze(oracle_bundle(t).unwrap()).unwrap();
        let attack = gold_plus(
            t,
            "\nimport atexit as _ax, os as _os\n_ax.register(lambda: _os._exit(0))\n",
        );
        let sb = open_sandbox(SandboxKind::Local, t, Purpose::Gate)
            .await
            .unwrap();
        let v = check_candidate_in(sb.as_ref(), &frozen, &attack, T)
            .await
            .unwrap();
        assert_eq!(v.status, GateStatus::HardFail, "{}: {}", t.instance_id, v.feedback);
        assert!(
            [FailureKind::Tampered, FailureKind::IncompleteRun, FailureKind::NonzeroExit]
                .contains(&v.failure_kind),
            "{}: {:?}: {}",
            t.instance_id,
            v.failure_kind,
            v.feedback
        );
        let gold = check_candidate_in(sb.as_ref(), &frozen, &t.patch, T)
            .await
            .unwrap();
        assert_eq!(
            gold.status,
            GateStatus::Pass,
            "{}: {}",
            t.instance_id,
            gold.feedback
        );
        let g = grade(t, &attack, SandboxKind::Local).await.unwrap();
        assert!(!g.resolved && g.error_kind.is_none(), "{g:?}");
        assert!(
            g.tampered.is_some() || g.completion.as_deref() == Some("incomplete"),
            "{g:?}"
        );
        let g = grade(t, &t.patch, SandboxKind::Local).await.unwrap();
        assert!(g.resolved, "{g:?}");
    }
}
